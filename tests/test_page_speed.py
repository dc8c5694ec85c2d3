"""What keeps a phone's main thread free while a chapter loads (issue 49,
Lighthouse mobile 90+): the theme's back-to-top button reads the header's box
on the first scroll, not as its script runs (which forced the whole page's
first layout into it), and the frame script reads every box before it moves
or marks one."""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

from shardbook.book import pages, theme_assets

# found, not imported: importing the theme (Sphinx with it) takes some 0.3 s on every worker that collects this file
THEME_BOOTSTRAP = (
    Path(importlib.util.find_spec("pydata_sphinx_theme").origin).parent
    / "theme"
    / "pydata_sphinx_theme"
    / "static"
    / "scripts"
    / "bootstrap.js"
)


def _site_with(tmp_path, text):
    scripts = tmp_path / "_static" / "scripts"
    scripts.mkdir(parents=True)
    (scripts / "bootstrap.js").write_text(text)
    return SimpleNamespace(outdir=str(tmp_path)), scripts / "bootstrap.js"


def test_the_themes_back_to_top_reads_the_header_on_the_first_scroll(tmp_path):
    app, script = _site_with(tmp_path, THEME_BOOTSTRAP.read_text())
    assert theme_assets.lazy_back_to_top(app)
    text = script.read_text()
    assert theme_assets.THEME_BACK_TO_TOP not in text
    assert text.count(theme_assets.THEME_BACK_TO_TOP_LAZY) == 1
    # no read of the header's box left outside the scroll handler
    assert text.count('getElementsByClassName("bd-header")[0].getBoundingClientRect()') == 1
    assert theme_assets.lazy_back_to_top(app) and script.read_text() == text  # a second build leaves it


def test_a_theme_without_that_code_is_left_alone(tmp_path):
    app, script = _site_with(tmp_path, "window.bootstrap = {};")
    assert theme_assets.lazy_back_to_top(app) is False
    assert script.read_text() == "window.bootstrap = {};"


def test_the_frame_script_reads_every_box_before_it_moves_one():
    source = pages.FRAME_SOURCE
    # the boxes are found (style reads) in one pass, then framed (DOM writes) in another
    assert source.index("getComputedStyle(c)") < source.index("c.before(frame)")
    assert "boxes.push(c)" in source.split("c.before(frame)")[0]
    # the observer measures every frame it is given before it marks any
    observer = source.split("new ResizeObserver(")[1].split("});")[0]
    assert observer.index("measure(") < observer.index("apply(")
