"""The errata log (errata/*.toml) and its appendix: every committed entry
valid, one clear line per bad file, the appendix generated from the log
newest first with places linked and sources cited."""

import re
import subprocess
import sys

import pytest

from conftest import ROOT
from shardbook.book import errata

GOOD = dict(
    date="2026-12-01",
    chapter="07_choosing_a_mesh",
    section="Checked against published runs",
    said="The book said this.",
    says="It says that now.",
    why="Because the source says so.",
    source="dubey2024llama3",
    review="ch7-9 W1",
    values=["07_choosing_a_mesh:mesh_alpha"],
)


def test_the_committed_log_is_valid():
    entries, problems = errata.read(ROOT / errata.ERRATA_DIR, ROOT)
    assert not problems, "\n".join(problems)
    assert entries, "the errata log is empty"


def test_the_committed_log_lists_the_earlier_review():
    """Issue 13's corrections are seeded, each dated from its commit."""
    entries = errata.load(ROOT / errata.ERRATA_DIR, ROOT)
    earlier = [e for e in entries if e.review.startswith("issue 13")]
    assert len(earlier) >= 20
    assert {e.date for e in earlier} == {"2026-11-29"}


def _write(folder, name, text):
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text)


def _good_text(**changes):
    return errata.entry_text(**{**GOOD, **changes})


BAD = [
    ("not toml", "2026-12-01-a.toml", "date = 2026-12-01-\n", "not valid TOML"),
    (
        "missing field",
        "2026-12-01-a.toml",
        _good_text().replace('why = "Because the source says so."\n', ""),
        "missing field why",
    ),
    ("unknown field", "2026-12-01-a.toml", _good_text() + 'where = "x"\n', "unknown field where"),
    (
        "values not a list",
        "2026-12-01-a.toml",
        _good_text().replace('values = ["07_choosing_a_mesh:mesh_alpha"]', 'values = "x"'),
        "values: must be a list",
    ),
    (
        "section not a string",
        "2026-12-01-a.toml",
        _good_text().replace('section = "Checked against published runs"', "section = 7"),
        "section: must be a string",
    ),
    ("empty said", "2026-12-01-a.toml", _good_text(said="  "), "said: must not be empty"),
    ("no such date", "2026-12-01-a.toml", _good_text(date="2026-02-30"), "date: must be a date YYYY-MM-DD"),
    (
        "date and name differ",
        "2026-12-01-a.toml",
        _good_text(date="2026-11-30"),
        "differs from the date the file name starts with",
    ),
    ("bad file name", "fix-ch7.toml", _good_text(), "the file name must be YYYY-MM-DD-slug.toml"),
    (
        "unknown chapter",
        "2026-12-01-a.toml",
        _good_text(chapter="07_choosing"),
        "chapter: '07_choosing' is not a chapter file stem",
    ),
    (
        "value without chapter",
        "2026-12-01-a.toml",
        _good_text(values=["mesh_alpha"]),
        "must name a ledger value as 'chapter:name'",
    ),
    ("value of no chapter", "2026-12-01-a.toml", _good_text(values=["99_nothing:x"]), "names chapter '99_nothing'"),
    (
        "value twice",
        "2026-12-01-a.toml",
        _good_text(values=["07_choosing_a_mesh:a", "07_choosing_a_mesh:a"]),
        "names a ledger value twice",
    ),
    (
        "unknown source",
        "2026-12-01-a.toml",
        _good_text(source="dubey2024llama3, nosuchkey"),
        "source: 'nosuchkey' is not a key of references.bib",
    ),
    ("not a toml file", "2026-12-01-a.txt", "x", "not an errata entry"),
]


@pytest.mark.parametrize("label,name,text,message", BAD, ids=[b[0] for b in BAD])
def test_a_bad_file_is_one_line_naming_it(tmp_path, label, name, text, message):
    folder = tmp_path / "errata"
    _write(folder, name, text)
    _write(folder, "2026-12-01-good.toml", _good_text())
    entries, problems = errata.read(folder, ROOT)
    assert [e.file for e in entries] == ["2026-12-01-good.toml"]
    assert len(problems) == 1 and problems[0].startswith(f"{folder / name}: "), problems
    assert message in problems[0], problems[0]
    with pytest.raises(ValueError, match=re.escape(message)):
        errata.load(folder, ROOT)


def test_every_bad_file_gets_its_own_line(tmp_path):
    folder = tmp_path / "errata"
    for i, (_, name, text, _) in enumerate(b for b in BAD if b[1].startswith("2026-12-01-a")):
        _write(folder, name.replace("-a.", f"-a{i}."), text)
    _, problems = errata.read(folder, ROOT)
    assert len(problems) == len([b for b in BAD if b[1].startswith("2026-12-01-a")])


def test_the_command_says_one_line_per_bad_file(tmp_path):
    folder = tmp_path / "errata"
    _write(folder, "2026-12-01-a.toml", _good_text(chapter="nowhere"))
    _write(folder, "2026-12-01-b.toml", "not = [toml")
    done = subprocess.run(
        [sys.executable, "-m", "shardbook.book.errata", "check", "--root", str(ROOT), "--errata", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("errata: ") for line in lines), done.stderr


@pytest.mark.parametrize("where", [["--root", "/nonexistent"], ["--errata", "/nonexistent"], ["--root", "README.md"]])
def test_the_command_refuses_a_folder_that_is_not_there(where):
    """It called a missing folder's log 'all valid' (0 entries)."""
    done = subprocess.run(
        [sys.executable, "-m", "shardbook.book.errata", "check", *where],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 2 and "all valid" not in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"errata: {where[0]}: "), done.stderr


def test_the_list_stops_quietly_when_its_reader_closes_the_pipe():
    """`... errata list | head -1` ended in a BrokenPipeError traceback."""
    listing = subprocess.Popen(
        [sys.executable, "-m", "shardbook.book.errata", "list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    listing.stdout.readline()
    listing.stdout.close()  # the reader has what it wanted (the listing is far above a pipe's buffer)
    _, err = listing.communicate(timeout=60)
    assert b"Traceback" not in err and not err.strip(), err.decode()[-2000:]


def test_write_entry_round_trips_and_never_overwrites(tmp_path):
    folder = tmp_path / "errata"
    fields = {**GOOD, "said": 'It said "2.5×" \\ and\nmore.'}
    first = errata.write_entry(folder, ROOT, **fields)
    second = errata.write_entry(folder, ROOT, **fields)
    assert first != second and first.name.startswith("2026-12-01-because-the-source-says-so")
    (entry, _) = errata.load(folder, ROOT)
    assert entry.said == fields["said"].strip() and entry.values == tuple(GOOD["values"])
    with pytest.raises(ValueError, match="chapter: 'nowhere'"):
        errata.write_entry(folder, ROOT, **{**GOOD, "chapter": "nowhere"})


def test_the_appendix_is_newest_first_with_places_linked_and_sources_cited(tmp_path):
    folder = tmp_path / "errata"
    _write(
        folder,
        "2026-11-29-old.toml",
        _good_text(date="2026-11-29", chapter="01_topology", section="No such heading", values=[]),
    )
    _write(folder, "2026-12-01-new.toml", _good_text())
    _write(folder, "2026-12-01-pkg.toml", _good_text(chapter="package", section="", source="", review="", values=[]))
    text = errata.markdown(errata.load(folder, ROOT), ROOT)
    assert text.index("## 1 December 2026") < text.index("## 29 November 2026")
    # the chapter's section has a target: linked; one that has none is quoted, the chapter linked
    assert "{ref}`ch-topology`, “No such heading”" in text
    assert "{cite:p}`dubey2024llama3`" in text
    assert ": **Said:** The book said this." in text and "**Says now:** It says that now." in text
    assert "Review item ch7-9 W1; ledger value `07_choosing_a_mesh:mesh_alpha`" in text
    assert text.index("ch-choosing-a-mesh") < text.index("The `shardbook` package")  # chapters before the package


def test_past_the_newest_entries_each_earlier_one_is_a_line_naming_its_file(tmp_path):
    # the page's first visit reached 955 KB of its 1 MB budget with 246 entries in full: the newest
    # `full` stay whole, the earlier ones are a line each (date, place, why in brief, sources, file)
    folder = tmp_path / "errata"
    long_why = "The first sentence of why it was wrong, " + "with words " * 30 + "ending here. A second sentence."
    for day in (1, 2, 3):
        _write(folder, f"2026-12-0{day}-e{day}.toml", _good_text(date=f"2026-12-0{day}", why=long_why))
    text = errata.markdown(errata.load(folder, ROOT), ROOT, full=1)
    whole, brief = text.split("## Earlier corrections")
    assert "2026-12-03-e3.toml" in whole and "**Said:**" in whole and "A second sentence." in whole
    assert "2026-12-02-e2.toml" not in whole and "2026-12-01-e1.toml" not in whole
    lines = [line for line in brief.splitlines() if line.startswith("- ")]
    assert [line.split(",")[0] for line in lines] == ["- 2 December 2026", "- 1 December 2026"]
    for line, name in zip(lines, ("2026-12-02-e2.toml", "2026-12-01-e1.toml"), strict=True):
        assert line.endswith(f"(`errata/{name}`)") and "{cite:p}" not in line, line  # the file names the source
        assert "The first sentence of why it was wrong" in line and "…" in line and "A second" not in line
        assert "**Said:**" not in line
    assert "The 2 corrections before these" in brief
    # every entry in full when they fit
    assert "Earlier corrections" not in errata.markdown(errata.load(folder, ROOT), ROOT, full=3)
    with pytest.raises(ValueError, match="full: must be >= 1"):
        errata.markdown(errata.load(folder, ROOT), ROOT, full=0)


def test_a_brief_why_never_cuts_inside_a_code_span_or_a_role():
    why = "word " * 28 + "see {ref}`the long target <sec-x>` and " + "more " * 20  # the role straddles the cut
    brief = errata._brief(why)
    assert brief.endswith("…") and brief.count("`") % 2 == 0 and "{ref}" not in brief, brief
    assert errata._brief("Short. Then more.") == "Short."


def test_a_section_with_a_target_is_linked(tmp_path):
    folder = tmp_path / "errata"
    _write(folder, "2026-12-01-new.toml", _good_text(chapter="07_choosing_a_mesh", section="LLaMA-3 70B on a v5p pod"))
    text = errata.markdown(errata.load(folder, ROOT), ROOT)
    assert "{ref}`ch-choosing-a-mesh`, {ref}`LLaMA-3 70B on a v5p pod <sec-mesh-v5p>`" in text
    # a heading with inline code: its backticks inside the role broke the link, and the nitpicky build with it
    code = "Left to the partitioner: which dimension keeps `expert`"
    _write(folder, "2026-12-02-code.toml", _good_text(date="2026-12-02", chapter="05_expert_parallel", section=code))
    text = errata.markdown(errata.load(folder, ROOT), ROOT)
    assert "{ref}`Left to the partitioner: which dimension keeps expert <sec-ep-constraint>`" in text


def test_the_appendix_is_in_the_table_of_contents_among_the_appendices():
    toc = (ROOT / "_toc.yml").read_text()
    appendices = toc[toc.index("caption: Appendices") :]
    assert "file: chapters/98_errata" in appendices


def test_the_built_appendix_lists_every_entry_with_links_and_citations(built_book):
    page = (built_book / "html" / "chapters" / "98_errata.html").read_text()
    entries = errata.load(ROOT / errata.ERRATA_DIR, ROOT)
    missing = [e.file for e in entries if e.file not in page]
    assert not missing, f"entries not on the built page: {missing}"
    # each date where the page sets it: the full entries' headings, then the earlier corrections' lines
    # (an entry's text may name another date, so its first mention anywhere proves nothing)
    headings = [h for h in re.findall(r'<h2 class="rubric"[^>]*>([^<]*)</h2>', page) if h != "Earlier corrections"]
    lines = re.findall(r"<li><p>(\d{1,2} [A-Z][a-z]+ \d{4}),", page)
    shown = list(dict.fromkeys(headings + lines))
    dates = [errata._long_date(d) for d in sorted({e.date for e in entries}, reverse=True)]
    assert headings and shown == dates, f"dates are not newest first: {shown}"
    assert len(headings) == len(set(headings)), "a date heads two sections"
    assert [dates.index(d) for d in lines] == sorted(dates.index(d) for d in lines), "earlier lines out of order"
    assert 'href="01_topology.html#sec-topo-achieved"' in page  # a section linked by its target
    assert 'href="90_presets.html#id' in page or "90_presets.html#" in page  # a citation into the bibliography


def test_a_changed_errata_log_re_executes_the_appendix():
    # the appendix executes over errata/*.toml, which jupyter-cache does not see: the Makefile's
    # cache stamp must depend on the log (files and folder), or an incremental `make book` shows
    # a stale appendix while the fingerprint check calls the build current
    out = subprocess.run(
        ["make", "--no-print-directory", "-s", "print-CACHE_INPUTS"], cwd=ROOT, capture_output=True, text=True
    )
    inputs = out.stdout.split()
    assert out.returncode == 0, out.stderr
    assert "errata" in inputs
    assert {str(p.relative_to(ROOT)) for p in (ROOT / "errata").glob("*.toml")} <= set(inputs)


def test_a_long_list_of_blessed_values_shows_its_first_few_and_a_count(tmp_path):
    # the page's first visit grew past 870 KB, most of it lists of 70 values that one bless moved; the
    # page shows three and says how many more the entry holds; authored text stays whole
    folder = tmp_path / "errata"
    names = [f"mesh_v{i}" for i in range(12)]
    said = "; ".join(f"{n} printed “{i}”" for i, n in enumerate(names)) + "."
    says = "; ".join(f"{n} prints “{i + 1}”" for i, n in enumerate(names)) + "."
    values = [f"07_choosing_a_mesh:{n}" for n in names]
    _write(folder, "2026-12-01-long.toml", _good_text(said=said, says=says, values=values))
    long_prose = "; ".join(["a clause of an authored correction"] * 12) + "."
    _write(folder, "2026-12-01-prose.toml", _good_text(said=long_prose))
    text = errata.markdown(errata.load(folder, ROOT), ROOT)
    assert (
        "mesh_v0 printed “0”; mesh_v1 printed “1”; mesh_v2 printed “2”; and 9 more (entry `2026-12-01-long.toml`)."
        in text
    )
    assert "mesh_v3 printed" not in text and "`07_choosing_a_mesh:mesh_v0`" not in text
    assert "12 ledger values, listed in the entry" in text
    assert long_prose in text
