"""The ledger's command line (python -m shardbook.book.expected) and bless on a
small book of its own, no build needed: every bad input the reliability
audit tried (findings 1-6: corrupt or hand-edited expected files, inf and
NaN, a stale or partial build, a failed write) gets one line and a non-zero
exit, never a traceback or a silent pass; bless keeps what is within
tolerance, lists what it rewrites, and refuses a changed printed text that
the errata log does not cover."""

import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from shardbook import ledger
from shardbook.book import errata, expected

CHAPTER = "06_pipeline"
OTHER = "93_worked_problems"


def _record(name, value, text, **kw):
    return ledger.record(name, value, text=text, **kw)


def _notebook(records):
    """An executed notebook whose one output carries ledger `records` as a
    chapter's ledger.show/table leaves them."""
    return {
        "cells": [
            {
                "cell_type": "code",
                "outputs": [{"output_type": "display_data", "data": {}, "metadata": {ledger.META_KEY: records}}],
            }
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


class Book:
    """A book folder with _toc.yml, two chapters, references.bib, a finished
    build of them and its committed expected values."""

    def __init__(self, root):
        self.root = root
        self.executed = root / "_build" / "jupyter_execute"
        self.expected = root / "tests" / "expected_numbers.json"
        self.errata = root / "errata"
        (root / "chapters").mkdir(parents=True)
        (root / "tests").mkdir()
        self.executed.mkdir(parents=True)
        (root / "_toc.yml").write_text(
            f"format: jb-book\nroot: chapters/{CHAPTER}\nparts:\n  - caption: A\n    chapters:\n"
            f"      - file: chapters/{OTHER}\n"
        )
        (root / "references.bib").write_text("@misc{llama3,\n  title = {The Llama 3 herd},\n}\n")
        for stem, title in ((CHAPTER, "Pipeline"), (OTHER, "Worked problems")):
            (root / "chapters" / f"{stem}.md").write_text(
                f"(ch-{stem[3:].replace('_', '-')})=\n# {title}\n\n(sec-{stem[:2]}-tail)=\n## The flush tail\n"
            )
        self.records = {
            CHAPTER: [
                _record("pp_bubble", 0.25, "25 %"),
                _record("pp_tail_ms", 1.63, "1.63 ms", rel_tol=1e-3),
                _record("pp_step_s", 0.2, "200 ms", measured=True),
            ],
            OTHER: [_record("wp_ratio", 1.13, "1.13")],
        }
        self.build()
        expected.write(self.expected, expected.collect(self.executed))

    def build(self, **changes):
        """Write the executed notebooks, with `changes` {name: (value, text)}
        applied, and the fingerprint of a finished build."""
        for stem, records in self.records.items():
            out = []
            for r in records:
                r = dict(r)
                if r["name"] in changes:
                    r["value"], r["text"] = changes[r["name"]]
                out.append(r)
            (self.executed / f"{stem}.ipynb").write_text(json.dumps(_notebook(out)))
        self.stamp()

    def stamp(self):
        (self.root / "_build" / expected.FINGERPRINT_FILE).write_text(expected.source_fingerprint(self.root) + "\n")

    def run(self, *args):
        return expected.main(
            [
                *args[:1],
                "--root",
                str(self.root),
                "--executed",
                str(self.executed),
                "--expected",
                str(self.expected),
                *args[1:],
            ]
        )

    def values(self):
        return {v["name"]: v for v in json.loads(self.expected.read_text())["values"]}


@pytest.fixture
def book(tmp_path):
    return Book(tmp_path / "book")


def _one_line(capsys):
    err = capsys.readouterr().err.strip()
    assert err.startswith("ledger: "), err
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


def test_the_small_book_checks_clean(book, capsys):
    assert book.run("check") == 0
    assert "all 4 values match" in capsys.readouterr().out


# --- finding 1: inf and NaN ----------------------------------------------------


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 1e308 * 10, 2**2000])
def test_show_refuses_a_value_that_is_not_finite_naming_the_key(value):
    """The audit's probe: ledger.show("pp_probe_inf", 1e308 * 10) printed
    "inf" and bricked the ledger; now the cell fails naming the key."""
    with pytest.raises(ValueError, match=r"value \(pp_probe_inf\): must be a finite number"):
        ledger.show("pp_probe_inf", value)
    with pytest.raises(ValueError, match=r"value \(t__row__col\): must be a finite number"):
        ledger.table("t", ["row", "col"], [["row", (value, "x")]])


@pytest.mark.parametrize("stored", ["inf", "nan", "Infinity", math.inf, math.nan])
def test_a_value_that_becomes_inf_is_moved_and_never_blessed(book, capsys, stored):
    """The kernel's JSON cleaning stores inf as the string "inf": check
    crashed ('str' and 'float'); now it is a moved value, and bless refuses
    to write it, naming it, and leaves the file as it was."""
    book.build(pp_tail_ms=(stored, "inf"))
    before = book.expected.read_text()
    assert book.run("check") == 1
    out = capsys.readouterr().out
    assert "pp_tail_ms" in out and "moved" in out and "not finite" in out
    assert book.run("bless") == 2
    err = _one_line(capsys)
    assert f"{CHAPTER}:pp_tail_ms" in err and "not a finite number" in err
    assert book.expected.read_text() == before


def test_a_new_value_that_is_inf_is_not_blessed(book, capsys):
    book.records[CHAPTER].append({**_record("pp_probe_inf", 1.0, "inf"), "value": "inf"})
    book.build()
    assert book.run("check") == 1
    assert "pp_probe_inf" in capsys.readouterr().out
    assert book.run("bless") == 2
    assert "pp_probe_inf" in _one_line(capsys)
    assert "pp_probe_inf" not in book.values()


def test_write_never_puts_a_non_finite_value_in_the_file(book):
    values = expected.load(book.expected)
    with pytest.raises(ValueError, match=f"{CHAPTER}:pp_bubble: not a finite number"):
        expected.write(book.expected, [dict(values[0], value=math.inf)] + values[1:])
    assert "Infinity" not in book.expected.read_text() and "inf" not in book.expected.read_text()


# --- finding 6: corrupt or hand-edited expected files (and the audit's other CLI inputs) ---


def _edit(field, value, index=0):
    def apply(doc):
        doc["values"][index][field] = value
        return doc

    return apply


def _drop_field(field):
    def apply(doc):
        del doc["values"][0][field]
        return doc

    return apply


def _duplicate(doc):
    doc["values"].append(dict(doc["values"][0], text="other"))
    return doc


# Each: (label, how the expected file is spoiled, what the one line says).
# The text forms are written as-is (json accepts NaN and Infinity tokens).
HAND_EDITS = [
    ("nan value", "NaN", "value: must be a finite number"),
    ("inf value", "Infinity", "value: must be a finite number"),
    ("-inf value", "-Infinity", "value: must be a finite number"),
    ("string inf value", '"inf"', "value: must be a finite number"),
    ("string value", '"1.0"', "value: must be a finite number"),
    ("bool value", "true", "value: must be a finite number"),
    ("null value", "null", "value: must be a finite number"),
    ("list value", "[1.0]", "value: must be a finite number"),
]
TOLERANCES = [
    ("nan rel_tol", "NaN", "rel_tol: must be a finite number in [0, 1)"),
    ("inf rel_tol", "Infinity", "rel_tol: must be a finite number in [0, 1)"),
    ("absurd rel_tol", "1e9", "rel_tol: must be a finite number in [0, 1)"),
    ("rel_tol of one", "1.0", "rel_tol: must be a finite number in [0, 1)"),
    ("negative rel_tol", "-0.1", "rel_tol: must be a finite number in [0, 1)"),
    ("string rel_tol", '"1e-9"', "rel_tol: must be a finite number in [0, 1)"),
]
FIELDS = [
    ("integer chapter", _edit("chapter", 6), "chapter: must be a chapter file stem"),
    ("odd chapter", _edit("chapter", "pipeline"), "chapter: must be a chapter file stem"),
    ("list name", _edit("name", ["pp_bubble"]), "name: must be lower-case letters"),
    ("name with capitals", _edit("name", "PP Bubble"), "name: must be lower-case letters"),
    ("numeric text", _edit("text", 25), "text: must be a string"),
    ("numeric unit", _edit("unit", 1), "unit: must be a string"),
    ("measured as a word", _edit("measured", "yes"), "measured: must be true"),
    ("missing unit", _drop_field("unit"), "missing unit"),
    ("unknown field", _edit("rel_tool", 0.1), "unknown field 'rel_tool'"),
    ("duplicated key", _duplicate, "a second entry for this value"),
]
FILES = [
    ("values an object", '{"values": {"a": 1}}', "not an expected-values file"),
    ("a list at the top", "[1, 2]", "not an expected-values file"),
    ("a record that is a string", '{"values": ["pp_bubble"]}', "not an expected-values file"),
    ("empty file", "", "not valid JSON"),
    ("truncated JSON", '{"about": "x", "values": [{"chapter": "06_pi', "not valid JSON"),
    ("not JSON", "{bad", "not valid JSON"),
]


def _spoil_text(book, field, token):
    doc = json.loads(book.expected.read_text())
    doc["values"][0][field] = "@@TOKEN@@"
    book.expected.write_text(json.dumps(doc, indent=1).replace('"@@TOKEN@@"', token))


@pytest.mark.parametrize("command", ["check", "bless"])
@pytest.mark.parametrize("label,token,message", HAND_EDITS, ids=[c[0] for c in HAND_EDITS])
def test_a_bad_value_is_one_line_naming_the_entry(book, capsys, command, label, token, message):
    _spoil_text(book, "value", token)
    before = book.expected.read_text()
    assert book.run(command) == 2
    err = _one_line(capsys)
    assert f"values[0] ({CHAPTER}:pp_bubble): {message}" in err
    assert book.expected.read_text() == before


@pytest.mark.parametrize("command", ["check", "bless"])
@pytest.mark.parametrize("label,token,message", TOLERANCES, ids=[c[0] for c in TOLERANCES])
def test_a_bad_tolerance_is_one_line_naming_the_entry(book, capsys, command, label, token, message):
    """A NaN, infinite or 1e9 tolerance passed silently ("all values
    match"): that entry was no longer checked."""
    _spoil_text(book, "rel_tol", token)
    assert book.run(command) == 2
    assert f"({CHAPTER}:pp_bubble): {message}" in _one_line(capsys)


@pytest.mark.parametrize("command", ["check", "bless"])
@pytest.mark.parametrize("label,spoil,message", FIELDS, ids=[c[0] for c in FIELDS])
def test_a_wrong_field_is_one_line_naming_the_entry(book, capsys, command, label, spoil, message):
    book.expected.write_text(json.dumps(spoil(json.loads(book.expected.read_text())), indent=1))
    assert book.run(command) == 2
    err = _one_line(capsys)
    assert message in err and "values[" in err


@pytest.mark.parametrize("label,content,message", FILES, ids=[c[0] for c in FILES])
def test_a_spoiled_file_is_one_line(book, capsys, label, content, message):
    book.expected.write_text(content)
    assert book.run("check") == 2
    assert message in _one_line(capsys)


def test_bless_to_a_place_it_cannot_write_is_one_line(book, capsys):
    """`bless --expected /proc/x.json` was a FileNotFoundError traceback."""
    target = book.root / "no such folder" / "x.json"
    assert (
        expected.main(["bless", "--root", str(book.root), "--executed", str(book.executed), "--expected", str(target)])
        == 2
    )
    err = _one_line(capsys)
    assert f"{target}: cannot be written (No such file or directory)" in err
    if Path("/proc/self").exists():  # the audit's own: a folder where no file can be made
        assert (
            expected.main(
                ["bless", "--root", str(book.root), "--executed", str(book.executed), "--expected", "/proc/x.json"]
            )
            == 2
        )
        assert "/proc/x.json: cannot be written" in _one_line(capsys)


def test_a_root_that_is_not_the_book_is_named(book, capsys):
    """`--root /nonexistent` was reported as "the build is older than the sources"."""
    assert expected.main(["check", "--root", str(book.root / "nonexistent"), "--executed", str(book.executed)]) == 2
    err = _one_line(capsys)
    assert "no _toc.yml there" in err and "older than the sources" not in err


def test_drop_of_a_name_that_is_not_missing_is_refused(book, capsys):
    """`--drop nosuchname` was accepted silently."""
    before = book.expected.read_text()
    assert book.run("bless", "--drop", "nosuchname") == 2
    assert "--drop nosuchname: no expected value of that name is missing" in _one_line(capsys)
    assert book.expected.read_text() == before


def test_drop_and_reason_go_with_bless_only(book, capsys):
    assert book.run("check", "--drop", "pp_bubble") == 2
    _one_line(capsys)
    assert book.run("bless", "--reason", "  ") == 2
    assert "--reason: must say why" in _one_line(capsys)


def test_a_stale_build_is_refused(book, capsys):
    (book.root / "chapters" / f"{CHAPTER}.md").write_text("(ch-pipeline)=\n# Pipeline, edited\n")
    for command in ("check", "bless"):
        assert book.run(command) == 2
        assert "older than the sources" in _one_line(capsys)


def test_a_corrupt_notebook_or_record_is_one_line(book, capsys):
    (book.executed / f"{CHAPTER}.ipynb").write_text(json.dumps(_notebook([{"name": "x"}])))
    assert book.run("check") == 2
    assert "a ledger record without value, unit, text, rel_tol" in _one_line(capsys)
    (book.executed / f"{CHAPTER}.ipynb").write_text("{not json")
    assert book.run("check") == 2
    assert "cannot be read as JSON" in _one_line(capsys)


def test_the_command_never_prints_a_traceback(book):
    """The audit's worst two in a process of their own: a hand-edited NaN
    tolerance (a silent pass) and a string value (a traceback)."""
    for token, field in (("NaN", "rel_tol"), ('"x"', "value")):
        _spoil_text(book, field, token)
        env = dict(os.environ, PYTHONPATH=str(Path(expected.__file__).resolve().parents[2]))
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "shardbook.book.expected",
                "check",
                "--root",
                str(book.root),
                "--executed",
                str(book.executed),
                "--expected",
                str(book.expected),
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert done.returncode == 2, done
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr


# --- finding 3: a chapter removed from _toc.yml ----------------------------------


def test_a_chapter_left_out_of_the_toc_no_longer_counts(book, capsys):
    """Its executed outputs stay in the build folder; check read them and
    its 35 values still "matched". Now only _toc.yml's chapters count: its
    values are missing, as a clean build (CI's) would find."""
    toc = book.root / "_toc.yml"
    toc.write_text(toc.read_text().replace(f"      - file: chapters/{OTHER}\n", ""))
    book.stamp()
    assert book.run("check") == 1
    out = capsys.readouterr().out
    assert "wp_ratio" in out and "missing" in out
    assert [g["chapter"] for g in expected.collect(book.executed, expected.toc_chapters(book.root))] == [CHAPTER] * 3


# --- finding 4: no silent drift ----------------------------------------------------


def test_bless_keeps_a_value_within_tolerance_as_stored(book, capsys):
    """After a rebuild with nothing edited, bless said "0 changed" but
    rewrote 48 values within their tolerance (one_loss_last crept from
    0.19188915 to 0.19189005): a reference could creep by rel_tol each
    time. Now the stored entry stays, byte for byte, and is reported kept."""
    before = book.expected.read_text()
    book.build(pp_tail_ms=(1.63 * (1 + 5e-4), "1.63 ms"))  # within rel_tol 1e-3, same text
    assert book.run("check") == 0
    capsys.readouterr()
    assert book.run("bless") == 0
    out = capsys.readouterr().out
    assert "0 rewritten, 4 kept as stored" in out
    assert book.expected.read_text() == before


def test_bless_lists_every_entry_it_rewrites(book, capsys):
    book.records[OTHER].append(_record("wp_new", 2.0, "2"))
    book.build(pp_bubble=(0.26, "25 %"), pp_step_s=(0.9, "900 ms"))
    book.records[CHAPTER][1] = _record("pp_tail_ms", 1.63, "1.63 ms", rel_tol=1e-2)
    book.build(pp_bubble=(0.26, "25 %"), pp_step_s=(0.9, "900 ms"))
    assert book.run("bless") == 0
    out = capsys.readouterr().out
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith(("06_", "93_"))}
    assert set(rows) == {"pp_bubble", "pp_tail_ms", "wp_new"}, out
    assert "moved" in rows["pp_bubble"] and "+4.000%" in rows["pp_bubble"]
    assert "tolerance changed" in rows["pp_tail_ms"]
    assert "new" in rows["wp_new"]
    assert "3 rewritten, 2 kept as stored" in out
    # the measured step time is never compared: its stored entry stays
    assert book.values()["pp_step_s"]["value"] == 0.2
    assert book.values()["pp_bubble"]["value"] == 0.26


# --- the errata gate --------------------------------------------------------------


def test_a_changed_text_without_an_errata_entry_is_refused_in_one_line(book, capsys):
    """The planted change of issue 30: a value's printed text changes and
    nothing covers it: bless refuses in one line naming the value."""
    book.build(wp_ratio=(1.2, "1.20"))
    before = book.expected.read_text()
    assert book.run("bless") == 2
    err = _one_line(capsys)
    assert f"{OTHER}:wp_ratio" in err and "“1.13” to “1.20”" in err and "--reason" in err
    assert book.expected.read_text() == before
    assert not book.errata.exists()


def test_an_errata_entry_listing_the_value_covers_it(book, capsys):
    book.build(wp_ratio=(1.2, "1.20"))
    book.errata.mkdir()
    (book.errata / "2026-12-01-ratio.toml").write_text(
        errata.entry_text(
            date="2026-12-01",
            chapter=OTHER,
            section="The flush tail",
            said="1.13",
            says="1.20",
            why="The ratio used the wrong link.",
            source="llama3",
            review="",
            values=[f"{OTHER}:wp_ratio"],
        )
    )
    book.stamp()  # the log is a source of the build
    assert book.run("bless") == 0
    assert book.values()["wp_ratio"]["text"] == "1.20"
    assert "wp_ratio" in capsys.readouterr().out


def test_an_entry_for_another_value_does_not_cover(book, capsys):
    book.build(wp_ratio=(1.2, "1.20"))
    book.errata.mkdir()
    (book.errata / "2026-12-01-other.toml").write_text(
        errata.entry_text(
            date="2026-12-01", chapter=OTHER, section="", said="a", says="b", why="c", values=[f"{CHAPTER}:pp_bubble"]
        )
    )
    book.stamp()
    assert book.run("bless") == 2
    assert f"{OTHER}:wp_ratio" in _one_line(capsys)


def test_a_reason_on_the_command_line_is_recorded_as_an_entry(book, capsys):
    book.build(wp_ratio=(1.2, "1.20"), pp_bubble=(0.3, "30 %"))
    assert book.run("bless", "--reason", "The planner now counts the flush tail.") == 0
    out = capsys.readouterr().out
    written = sorted(book.errata.glob("*.toml"))
    assert len(written) == 2 and all(str(p) in out for p in written)
    entries = errata.load(book.errata, book.root)
    assert {e.chapter: e.values for e in entries} == {CHAPTER: (f"{CHAPTER}:pp_bubble",), OTHER: (f"{OTHER}:wp_ratio",)}
    ratio = next(e for e in entries if e.chapter == OTHER)
    assert ratio.why == "The planner now counts the flush tail."
    assert "“1.13”" in ratio.said and "“1.20”" in ratio.says
    assert book.values()["wp_ratio"]["text"] == "1.20"


def test_new_values_drops_and_measured_texts_need_no_entry(book, capsys):
    book.records[OTHER] = [_record("wp_other", 3.0, "3")]
    book.build(pp_step_s=(0.9, "900 ms"))
    assert book.run("bless", "--drop", "wp_ratio") == 0
    assert set(book.values()) == {"pp_bubble", "pp_tail_ms", "pp_step_s", "wp_other"}
    assert not book.errata.exists()


def test_a_bad_errata_file_stops_bless(book, capsys):
    book.errata.mkdir()
    (book.errata / "2026-12-01-broken.toml").write_text('date = "2026-12-01"\n')
    book.stamp()
    assert book.run("bless") == 2
    err = _one_line(capsys)
    assert "2026-12-01-broken.toml: missing fields chapter" in err


# --- finding 5: temporary files and the file's mode -----------------------------


def test_an_interrupted_write_leaves_no_temporary_file(book, monkeypatch):
    """300 kill -9 left 27 truncated `.ledger-*.json` files in tests/ that
    `git add tests` staged. A write stopped by an exception now removes its
    temporary file."""

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(expected.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        expected.write(book.expected, expected.load(book.expected))
    assert sorted(p.name for p in book.expected.parent.iterdir()) == ["expected_numbers.json"]


def test_a_killed_write_leaves_only_what_git_ignores():
    """A kill -9 cannot be cleaned up after: the temporary file's name is
    one that .gitignore covers."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    name = "tests/.expected_numbers.json.0123abcd.tmp"
    done = subprocess.run(["git", "-C", str(root), "check-ignore", "--no-index", "-q", name], check=False)
    assert done.returncode == 0, f"{name} is not ignored by git"


@pytest.mark.parametrize("mode", [0o644, 0o664, 0o600])
def test_bless_keeps_the_file_mode(book, mode):
    """mkstemp made the ledger -rw------- after every bless."""
    os.chmod(book.expected, mode)
    book.build(pp_bubble=(0.3, "25 %"))
    assert book.run("bless") == 0
    assert stat.S_IMODE(book.expected.stat().st_mode) == mode


def test_a_new_file_gets_the_usual_mode(tmp_path):
    old = os.umask(0o022)
    try:
        expected.write(tmp_path / "x.json", [])
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "x.json").stat().st_mode) == 0o644


# --- finding 2: a chapter edited while the build runs ------------------------------


def test_a_chapter_edited_while_the_build_runs_leaves_a_stale_record(book, monkeypatch):
    """The fingerprint was taken when the build finished, so an edit made
    while a cell ran passed as current ("check_build: accepted as current").
    It is now taken when the build starts: the edit makes the record stale."""
    from types import SimpleNamespace

    from shardbook.book import sphinx_ext

    class NoStep:  # a module of the site's other steps: each of its functions does nothing
        def __getattr__(self, name):
            return lambda *a, **k: None

    for step in ("pages", "theme_assets", "live_assets", "katex_math"):  # the site's other steps
        monkeypatch.setattr(sphinx_ext, step, NoStep())
    app = SimpleNamespace(
        builder=SimpleNamespace(name="html", format="html"),
        outdir=str(book.root / "_build" / "html"),
        srcdir=str(book.root),
        statuscode=0,
    )
    stamp = book.root / "_build" / expected.FINGERPRINT_FILE
    sphinx_ext._forget_fingerprint(app)  # builder-inited
    assert not stamp.exists()
    chapter = book.root / "chapters" / f"{CHAPTER}.md"
    chapter.write_text(chapter.read_text().replace("1.0", "2.0") + "\nedited while a cell ran\n")
    sphinx_ext._finish_site(app, None)  # build-finished
    assert stamp.exists()
    with pytest.raises(ValueError, match="older than the sources"):
        expected.check_build(book.executed, book.root)
    # a build with no edit during it is current
    sphinx_ext._forget_fingerprint(app)
    sphinx_ext._finish_site(app, None)
    expected.check_build(book.executed, book.root)


def test_an_entry_covers_its_change_once(book, capsys):
    """Once a bless has applied an entry, a later change of the same value
    needs an entry of its own: an old correction is no standing licence."""
    book.build(wp_ratio=(1.2, "1.20"))
    book.errata.mkdir()
    (book.errata / "2026-12-01-ratio.toml").write_text(
        errata.entry_text(
            date="2026-12-01",
            chapter=OTHER,
            section="",
            said="1.13",
            says="1.20",
            why="x",
            values=[f"{OTHER}:wp_ratio"],
        )
    )
    book.stamp()
    assert book.run("bless") == 0
    assert json.loads(book.expected.read_text())["errata_applied"] == ["2026-12-01-ratio.toml"]
    book.build(wp_ratio=(1.3, "1.30"))
    assert book.run("bless") == 2
    assert f"{OTHER}:wp_ratio" in _one_line(capsys)
    assert book.values()["wp_ratio"]["text"] == "1.20"


def test_make_bless_passes_the_reason_and_the_drops(book, monkeypatch, capsys):
    """`make bless REASON="..."` sets SHARDBOOK_BLESS_REASON (an empty one
    is no reason); DROP names become --drop options."""
    book.build(wp_ratio=(1.2, "1.20"))
    monkeypatch.setenv(expected.REASON_ENV, "")
    assert book.run("bless") == 2
    monkeypatch.setenv(expected.REASON_ENV, "Recomputed with the fabric model.")
    assert book.run("bless") == 0
    assert [e.why for e in errata.load(book.errata, book.root)] == ["Recomputed with the fabric model."]
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        ["make", "-n", "-C", str(root), "bless", 'REASON=it\'s "quoted"', "DROP=a_value b_value"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"make -n failed here: {done.stderr[-300:]}")
    # the names reach bless through the environment (SHARDBOOK_BLESS_DROP), never the recipe's shell line
    assert "shardbook.book.expected bless\n" in done.stdout and "a_value" not in done.stdout
    capsys.readouterr()
    book.stamp()  # the entry just written is a source of the build
    monkeypatch.setenv(expected.DROP_ENV, "a_value b_value")
    assert book.run("bless") == 2
    assert capsys.readouterr().err.splitlines() == [
        f"ledger: bless refused, nothing written: --drop {name}: no expected value of that name is missing from the build"
        for name in ("a_value", "b_value")
    ]


# --- glued phrases: words are recorded and compared by their exact text -------

OLD_MESH, NEW_MESH = "fsdp 576 × tp 8 × cp 4", "fsdp 576 × tp 4 × cp 8"


def _with_phrase(book, text=OLD_MESH):
    """The small book with a planner's pick glued as a phrase in OTHER, blessed."""
    book.records[OTHER].append(ledger.phrase_record("wp_planner_mesh", text))
    book.build()
    expected.write(book.expected, expected.collect(book.executed))
    return book


def _reglue(book, text):
    book.records[OTHER] = [
        r if r["name"] != "wp_planner_mesh" else dict(r, value=text, text=text) for r in book.records[OTHER]
    ]
    book.build()


def test_show_phrase_records_its_words(monkeypatch):
    shown = []
    monkeypatch.setattr(ledger, "_display", lambda bundle, metadata: shown.append(metadata))
    ledger.show_phrase("wp_planner_mesh", OLD_MESH)
    (entry,) = shown[0][ledger.META_KEY]
    assert shown[0]["scrapbook"]["name"] == "wp_planner_mesh"
    assert entry == {
        "name": "wp_planner_mesh",
        "value": OLD_MESH,
        "unit": "",
        "text": OLD_MESH,
        "rel_tol": 0,
        "live": False,
        "phrase": True,
    }
    with pytest.raises(ValueError, match=r"text \(wp_x\): a phrase must be a string"):
        ledger.show_phrase("wp_x", 3)


def test_a_phrase_is_collected_and_checks_clean(book, capsys):
    _with_phrase(book)
    (got,) = [g for g in expected.collect(book.executed) if g["name"] == "wp_planner_mesh"]
    assert got == {
        "chapter": OTHER,
        "name": "wp_planner_mesh",
        "value": OLD_MESH,
        "unit": "",
        "text": OLD_MESH,
        "rel_tol": 0,
        "phrase": True,
    }
    assert book.values()["wp_planner_mesh"]["phrase"] is True
    assert book.run("check") == 0
    assert "all 5 values match" in capsys.readouterr().out


def test_a_changed_phrase_fails_check_and_needs_a_reason(book, capsys):
    """The reviewer's case: the planner's printed mesh changed and nothing
    failed. Now check fails naming it, bless refuses without an errata
    entry or a reason, and with --reason it is written with an entry."""
    _with_phrase(book)
    _reglue(book, NEW_MESH)
    assert book.run("check") == 1
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if "wp_planner_mesh" in line]
    assert OLD_MESH in row and NEW_MESH in row and row.endswith("text changed")
    assert "1 of 5 values differ" in out
    before = book.expected.read_text()
    assert book.run("bless") == 2
    err = _one_line(capsys)
    assert f"{OTHER}:wp_planner_mesh" in err and f"“{OLD_MESH}” to “{NEW_MESH}”" in err
    assert book.expected.read_text() == before
    assert book.run("bless", "--reason", "The planner splits the sequence before the heads.") == 0
    assert "wp_planner_mesh" in capsys.readouterr().out
    assert book.values()["wp_planner_mesh"] == {
        "chapter": OTHER,
        "name": "wp_planner_mesh",
        "value": NEW_MESH,
        "unit": "",
        "text": NEW_MESH,
        "rel_tol": 0,
        "phrase": True,
    }
    (entry,) = errata.load(book.errata, book.root)
    assert entry.values == (f"{OTHER}:wp_planner_mesh",) and entry.chapter == OTHER
    assert f"“{OLD_MESH}”" in entry.said and f"“{NEW_MESH}”" in entry.says
    book.stamp()  # the new entry is a source of the build
    assert book.run("check") == 0


def test_a_phrase_that_disappears_needs_drop(book, capsys):
    _with_phrase(book)
    book.records[OTHER] = [r for r in book.records[OTHER] if r["name"] != "wp_planner_mesh"]
    book.build()
    assert book.run("check") == 1
    assert "missing" in next(line for line in capsys.readouterr().out.splitlines() if "wp_planner_mesh" in line)
    assert book.run("bless") == 2
    err = _one_line(capsys)
    assert f"{OTHER}:wp_planner_mesh: expected but not in the build" in err and "--drop wp_planner_mesh" in err
    assert book.run("bless", "--drop", "wp_planner_mesh") == 0
    assert "wp_planner_mesh" not in book.values()


def test_a_new_phrase_is_added_like_a_new_number(book, capsys):
    book.records[OTHER].append(ledger.phrase_record("wp_planner_mesh", OLD_MESH))
    book.build()
    assert book.run("check") == 1
    assert "new (no expected entry)" in capsys.readouterr().out
    assert book.run("bless") == 0  # a new entry changes no printed text: no reason, no errata entry
    assert book.values()["wp_planner_mesh"]["text"] == OLD_MESH and not book.errata.exists()


def test_a_phrase_that_reads_inf_stays_words(book, capsys):
    """A number's "inf" is the kernel's spelling of infinity; a phrase's is
    what the page prints."""
    _with_phrase(book, "inf")
    assert book.values()["wp_planner_mesh"]["value"] == "inf"
    assert book.run("check") == 0


@pytest.mark.parametrize(
    "before,after,status",
    [
        (_record("wp_planner_mesh", 4.0, "4"), ledger.phrase_record("wp_planner_mesh", "4"), "now a phrase"),
        (ledger.phrase_record("wp_planner_mesh", "4"), _record("wp_planner_mesh", 4.0, "4"), "no longer a phrase"),
    ],
)
def test_a_value_that_becomes_words_or_back_has_changed(before, after, status):
    stored, built = before | {"chapter": OTHER}, after | {"chapter": OTHER}
    stored.pop("live"), built.pop("live")
    assert [r[5] for r in expected.compare([stored], [built])] == [status]
    _, rewritten, text_changes, problems = expected.plan_bless([stored], [built])
    assert [r[5] for r in rewritten] == [status] and text_changes == [] and problems == []


def _edit_phrase(field, value):
    def apply(doc):
        next(v for v in doc["values"] if v["name"] == "wp_planner_mesh")[field] = value
        return doc

    return apply


PHRASE_EDITS = [
    ("value other than its text", _edit_phrase("value", "fsdp 1 × tp 1"), "value: a phrase's value must be its text"),
    ("numeric value", _edit_phrase("value", 4.0), "value: a phrase's value must be its text"),
    ("a unit", _edit_phrase("unit", "GB"), "unit, rel_tol: a phrase has no unit and tolerance 0"),
    ("a tolerance", _edit_phrase("rel_tol", 0.1), "unit, rel_tol: a phrase has no unit and tolerance 0"),
    ("phrase as a word", _edit_phrase("phrase", "yes"), "phrase: must be true when present"),
    ("measured phrase", _edit_phrase("measured", True), "measured: a phrase is words the page prints"),
]


@pytest.mark.parametrize("label,spoil,message", PHRASE_EDITS, ids=[c[0] for c in PHRASE_EDITS])
def test_a_hand_edited_phrase_is_one_line_naming_the_entry(book, capsys, label, spoil, message):
    _with_phrase(book)
    book.expected.write_text(json.dumps(spoil(json.loads(book.expected.read_text())), indent=1))
    assert book.run("check") == 2
    err = _one_line(capsys)
    assert f"({OTHER}:wp_planner_mesh): {message}" in err


def test_show_stops_quietly_when_its_reader_closes_the_pipe(book):
    """`... expected show | head` printed "ledger: Broken pipe" and exited 2,
    as if the ledger were broken: now it ends as the planner's and the
    errata's command lines do (shardbook._cli), silent, status 1."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # closed before the first write: every run meets it
    try:
        args = ["--root", str(book.root), "--executed", str(book.executed), "--expected", str(book.expected)]
        done = subprocess.run(
            [sys.executable, "-m", "shardbook.book.expected", "show", *args],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert done.stderr == "" and done.returncode == 1, (done.returncode, done.stderr)
