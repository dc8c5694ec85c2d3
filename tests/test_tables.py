"""The book's HTML tables (shardbook.book.tables): the planner's candidates
lead with what a reader decides on, every cell carries its column's name for
the phone layout, and each number is recorded in the ledger."""

import re
from pathlib import Path

import pytest

from shardbook import explorer, ledger
from shardbook.book import diagrams, tables

CSS = Path(__file__).resolve().parents[1] / "code" / "shardbook" / "book" / "static" / "shardbook.css"


@pytest.fixture
def shown(monkeypatch):
    calls = []
    monkeypatch.setattr(tables, "_display", lambda markup, name, entries: calls.append((markup, name, entries)))
    return calls


def test_cells_carry_their_column_and_numbers_are_recorded(shown):
    tables.html_table("t", ["Mesh", "Step (s)"], [["fsdp 8", ledger.cell(1.234, digits=2)], ["a<b", "–"]])
    markup, name, entries = shown[0]
    assert name == "t"
    assert '<th scope="row" data-label="Mesh">fsdp 8</th>' in markup
    assert '<td class="num" data-label="Step (s)">1.23</td>' in markup
    assert "a&lt;b" in markup and "a<b" not in markup  # text is escaped
    assert 'class="shardbook-stack"' in markup
    assert [(e["name"], e["value"], e["text"]) for e in entries] == [("t__fsdp_8__step_s", 1.234, "1.23")]


def test_a_long_identifier_may_break_after_an_underscore(shown):
    # a remat policy such as save_dot_except_mlpwi is one word: without a break opportunity it
    # sets its column's least width and pushed chapter 97's runs table past the text column
    tables.html_table("t", ["Run", "Recomputation"], [["a_b", "save_dot_except_mlpwi"]])
    markup, _, entries = shown[0]
    assert '<td data-label="Recomputation">save_<wbr>dot_<wbr>except_<wbr>mlpwi</td>' in markup
    assert '<th scope="row" data-label="Run">a_<wbr>b</th>' in markup
    assert entries == []


def test_a_row_of_the_wrong_length_is_refused(shown):
    with pytest.raises(ValueError, match=r"rows\[0\]: has 1 cells, the header has 2"):
        tables.html_table("t", ["a", "b"], [["x"]])
    with pytest.raises(ValueError, match="name:"):
        tables.html_table("Bad Name", ["a"], [["x"]])
    assert not shown


def test_the_candidates_table_leads_with_the_decision(shown):
    found = explorer.explore("LLaMA-3 8B", "MI355X", 8, 2**20)
    tables.candidates("c", found, limit=3)
    markup, _, entries = shown[0]
    heads = re.findall(r'<th scope="col">([^<]*)</th>', markup)
    assert heads[:4] == ["Mesh", "Fits", "Memory per device (GB)", "Expected step (s)"]
    assert heads[4:] == ["Expected MFU (%)", "Bound MFU (%)"]
    assert markup.count("<tr>") == 1 + 3
    first = found[0]
    by_name = {e["name"]: e["value"] for e in entries}
    label = re.sub(r"[^a-z0-9]+", "_", first.label.lower()).strip("_")
    assert by_name[f"c__{label}__expected_step_s"] == pytest.approx(first.expected_step_s)
    assert by_name[f"c__{label}__memory_per_device_gb"] == pytest.approx(first.memory_bytes_per_device)
    assert f"of {first.hbm_bytes / 1e9:,.0f}" in markup  # memory is shown against the device's HBM
    with pytest.raises(TypeError, match="found:"):
        tables.candidate_rows(["fsdp 8"])


def test_the_stylesheet_stacks_the_table_on_a_phone_and_prints_it_whole():
    css = CSS.read_text()
    block = css[css.index("ch7 helper") :]
    assert "@media screen and (max-width: 40em)" in block
    assert "content: attr(data-label)" in block
    assert re.search(r"@media print \{\s*\.cell_output table\.shardbook-stack \{ display: table !important", block)


ALT = "Bars of two meshes' expected step times with their bounds as ticks."


def test_step_bars_keep_both_times_and_refuse_mismatched_lists():
    fig = diagrams.step_bars(["a", "b"], [2.0, 3.0], [1.0, 1.5], "s", "title", ALT, highlight=("a",))
    assert fig.numbers == {"expected": {"a": 2.0, "b": 3.0}, "bound": {"a": 1.0, "b": 1.5}}
    with pytest.raises(ValueError, match="expected, bound"):
        diagrams.step_bars(["a"], [1.0, 2.0], [1.0], "s", "t", ALT)
