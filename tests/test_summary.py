"""The one-page summary (chapters/89_summary.md): every section links to the
chapter that teaches it, and its numbers are glued from cells, not typed."""

import re
from pathlib import Path

from shardbook.book import prose_lint

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "chapters" / "89_summary.md"
PAGE = ROOT / "_build" / "html" / "chapters" / "89_summary.html"


def test_the_summary_types_no_number_and_links_every_formula_section():
    text = SOURCE.read_text()
    assert prose_lint.lint(text) == []
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert len(sections) >= 10
    for section in sections:
        title = section.splitlines()[0]
        if title.startswith(("The machine", "The α thresholds")):
            continue  # the first links the topology chapter in its prose; the table evaluates the sections above
        assert "{ref}`" in section, f"section {title!r} links to no chapter section"
    # every value in prose comes from the ledger: a glue role for each, shown by a cell of this page
    # a key shown as an f-string (f"sum_state_{scheme}_gb") stands for every key it can spell
    shown = [
        re.sub(r"\\\{[a-z_]+\\\}", "[a-z0-9]+", re.escape(k))
        for k in re.findall(r'ledger\.show(?:_phrase)?\(f?"([a-z0-9_{}]+)"', text)
    ]
    used = set(re.findall(r"\{glue:text\}`([a-z0-9_]+)`", text))
    assert used
    assert [k for k in used if not any(re.fullmatch(pattern, k) for pattern in shown)] == []
    assert all(pattern.startswith("sum_") for pattern in shown)


def test_the_built_summary_links_resolve_to_the_chapters(built_book):
    html = PAGE.read_text()
    targets = set(re.findall(r'href="(0[0-9]_[a-z_]+\.html|99_planner\.html|97_validation\.html)(?:#[^"]*)?"', html))
    # every numbered chapter that teaches a formula here, the planner and the validation appendix
    for stem in (
        "01_topology",
        "02_sharding",
        "03_data_parallel",
        "04_tensor_parallel",
        "05_expert_parallel",
        "06_pipeline",
        "07_choosing_a_mesh",
        "99_planner",
        "97_validation",
    ):
        assert f"{stem}.html" in targets, stem
        assert (PAGE.parent / f"{stem}.html").exists()
    assert len(re.findall(r"glue-key-sum_", html)) >= 30
