"""Every chapter is a MyST notebook with one H1, a (ch-...)= label, the
device cell first, and no computed number typed into its prose."""

import re

import pytest

from conftest import CHAPTERS, EXECUTED
from shardbook.book import expected, prose_lint

HEADER_KEYS = ("jupytext:", "text_representation:", "format_name: myst", "kernelspec:")


def _front_matter(text):
    m = re.match(r"\A---\n(.*?)\n---\n", text, re.S)
    return m.group(1) if m else ""


def _outside_code(text):
    return re.sub(r"^(`{3,}|:{3,})[^\n]*\n.*?^\1\s*$", "", text, flags=re.S | re.M)


def test_there_are_chapters():
    assert CHAPTERS, "no chapters/NN_*.md found"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_jupytext_header(path):
    front = _front_matter(path.read_text())
    for key in HEADER_KEYS:
        assert key in front, f"{path.name}: jupytext header lacks {key!r}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_one_h1_and_a_label(path):
    body = _outside_code(path.read_text())
    h1 = re.findall(r"^# \S", body, re.M)
    assert len(h1) == 1, f"{path.name}: {len(h1)} H1 headings"
    label = re.search(r"^\((ch-[a-z0-9-]+)\)=\s*\n# ", body, re.M)
    assert label, f"{path.name}: no (ch-...)= label directly above the H1"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_device_cell_comes_first(path):
    cells = re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```", path.read_text(), re.S | re.M)
    assert cells, f"{path.name}: no code cells"
    assert "use_cpu_devices(8)" in cells[0], f"{path.name}: the first code cell must call use_cpu_devices(8)"


def _glued_texts(chapter):
    return [e["text"] for e in expected.collect(EXECUTED) if e["chapter"] == chapter]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_computed_number_typed_in_prose(path, built_book):
    findings = prose_lint.lint(path.read_text(), _glued_texts(path.stem))
    report = "\n".join(f"  {path.name}:{line}: {number} ({why})" for line, number, why in findings)
    assert not findings, (
        "numbers typed into prose; glue them with shardbook.ledger.show, or mark a fact with "
        "<!-- typed-number: reason -->:\n" + report
    )


def test_lint_catches_typed_numbers():
    text = "---\na: 1\n---\n# T\nIt takes 18.35 ms and 8 devices.\n\nIt is 2.5 here, and 72 there.\n"
    found = prose_lint.lint(text, ["2.5 ms", "72 GPUs", "8"])
    assert [(n, why.split()[0]) for _, n, why in found] == [("18.35", "three"), ("2.5", "equals"), ("72", "equals")]
    assert prose_lint.lint("Year 2026 <!-- typed-number: a year -->\n") == []
    assert prose_lint.lint("$x = 12345$ and `123456` and {glue:text}`abc_123`\n") == []


@pytest.mark.parametrize(
    "typed,number",
    [
        ("It takes 18.35ms here.", "18.35"),
        ("It has 4,321GB/s of egress.", "4,321"),
        ("It is _4,321_ bytes.", "4,321"),
        ("It moved by -4,321 bytes.", "4,321"),
        ("It is 123x faster.", "123"),
        ("It does 4.321e12 FLOPs.", "4.321e12"),
        ("A share of .4321 is left.", ".4321"),
    ],
)
def test_lint_catches_numbers_glued_to_units_and_signs(typed, number):
    """Numbers stuck to a unit, an emphasis mark, a sign, an exponent or a
    leading point are still numbers a reader reads as computed."""
    assert [n for _, n, _ in prose_lint.lint(typed + "\n")] == [number]


def test_lint_leaves_names_with_digits_alone():
    text = "H100, MI355X, GB200 NVL72, TPU v5p, Llama 3.1 405B, Mixtral 8x22B, bf16, x86, 1F1B and a 16M-token batch are names.\n"
    assert prose_lint.lint(text) == []


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_download_buttons_offer_ipynb_and_md(path, built_book):
    page = (built_book / "html" / "chapters" / f"{path.stem}.html").read_text()
    for suffix in (".ipynb", ".md"):
        assert f'href="../_sources/chapters/{path.stem}{suffix}"' in page, suffix
    import nbformat

    nb = nbformat.read(built_book / "html" / "_sources" / "chapters" / f"{path.stem}.ipynb", as_version=4)
    nbformat.validate(nb)
    assert "use_cpu_devices(8)" in next(c.source for c in nb.cells if c.cell_type == "code")
