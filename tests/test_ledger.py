"""The drift check of the ledger: the built book matches the committed
values, and a planted change is caught and named."""

import json

import pytest

from conftest import EXPECTED_NUMBERS, ROOT
from shardbook import ledger
from shardbook.book import errata, expected


def test_built_values_match_the_committed_ledger(built_book):
    got = expected.collect(built_book / "jupyter_execute")
    committed = expected.load(EXPECTED_NUMBERS)
    rows = expected.compare(committed, got)
    assert not rows, "numbers moved (review, then `make bless`):\n" + expected.format_rows(rows)


def test_the_planners_printed_mesh_is_in_the_ledger(built_book):
    """Chapter 93's planner pick changed from one mesh to another with no
    check failing: glued words were not recorded. Now every show_phrase is."""
    got = {(g["chapter"], g["name"]): g for g in expected.collect(built_book / "jupyter_execute")}
    committed = {(e["chapter"], e["name"]): e for e in expected.load(EXPECTED_NUMBERS)}
    key = ("93_worked_problems", "wp_4p_planner_mesh")
    assert got[key]["phrase"] is True and got[key]["value"] == got[key]["text"]
    assert committed[key]["phrase"] is True
    assert expected.compare([committed[key]], [dict(got[key], value="fsdp 1 × tp 1", text="fsdp 1 × tp 1")]) == [
        (*key, committed[key]["text"], "fsdp 1 × tp 1", "", "text changed")
    ]


def test_compare_reports_a_changed_phrase_by_its_text():
    stored = ledger.phrase_record("m", "fsdp 576 × tp 8 × cp 4") | {"chapter": "c"}
    assert expected.compare([stored], [stored]) == []
    changed = dict(stored, value="fsdp 576 × tp 4 × cp 8", text="fsdp 576 × tp 4 × cp 8")
    assert expected.compare([stored], [changed]) == [
        ("c", "m", "fsdp 576 × tp 8 × cp 4", "fsdp 576 × tp 4 × cp 8", "", "text changed")
    ]
    assert [r[5] for r in expected.compare([stored], [])] == ["missing"]


def test_compare_reports_moved_missing_and_new():
    base = [
        ledger.record("a", 1.0, text="1.0") | {"chapter": "c"},
        ledger.record("b", 2.0, text="2") | {"chapter": "c"},
    ]
    assert expected.compare(base, base) == []
    moved = [dict(base[0], value=1.1, text="1.1"), ledger.record("z", 3.0, text="3") | {"chapter": "c"}]
    rows = {r[1]: r for r in expected.compare(base, moved)}
    assert rows["a"][5] == "moved" and rows["a"][4] == "+10.000%"
    assert rows["b"][5] == "missing"
    assert rows["z"][5].startswith("new")
    within = [dict(base[0], value=1.0 + 1e-12), base[1]]
    assert expected.compare(base, within) == []


def test_a_measured_value_is_kept_but_never_compared():
    """A step time is recorded as measured: any value on another machine
    passes, but it must still be there."""
    base = [ledger.record("step", 0.2, text="200 ms", measured=True) | {"chapter": "c"}]
    assert base[0]["measured"] is True
    other_machine = [dict(base[0], value=0.9, text="900 ms")]
    assert expected.compare(base, other_machine) == []
    assert [r[5] for r in expected.compare(base, [])] == ["missing"]
    computed = [ledger.record("step", 0.2, text="200 ms") | {"chapter": "c"}]
    assert "measured" not in computed[0]
    assert [r[5] for r in expected.compare(computed, [dict(computed[0], value=0.9, text="900 ms")])] == ["moved"]


def _execute_chapter(stem, planted_source, tmp_path):
    # imported here: Jupytext and nbclient take some 0.6 s, on every worker that collects this file
    import jupytext
    import nbformat
    from nbclient import NotebookClient

    nb = jupytext.read(ROOT / "chapters" / f"{stem}.md")
    nb.cells.insert(1, nbformat.v4.new_code_cell(planted_source))
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "chapters")}}
    ).execute()
    out = tmp_path / "executed"
    out.mkdir()
    nbformat.write(nb, out / f"{stem}.ipynb")
    return expected.collect(out)


@pytest.mark.slow  # runs the ledger's check in a subprocess over a copied tree: seconds of one core (make test runs it)
def test_planted_constant_change_fails_the_check_and_names_the_value(tmp_path):
    # Slow the MI355X xGMI link by 10 % inside the chapter's kernel, as a
    # mistaken edit of the preset would, and run the chapter again.
    plant = (
        "from dataclasses import replace\n"
        "from shardbook import hardware\n"
        "mi = hardware.PRESETS['MI355X']\n"
        "link = mi.scale_up_link_bytes_per_s\n"
        "hardware.PRESETS['MI355X'] = replace(mi, scale_up_link_bytes_per_s=hardware.Sourced(0.9 * link, link.source))\n"
    )
    got = _execute_chapter("91_numbers", plant, tmp_path)
    committed = [e for e in expected.load(EXPECTED_NUMBERS) if e["chapter"] == "91_numbers"]
    rows = expected.compare(committed, got)
    assert rows, "a 10 % change of a preset did not move any number"
    assert [(r[1], r[5]) for r in rows] == [("numbers_example_ms", "moved")]
    assert "+11.111%" in expected.format_rows(rows)


def test_bless_rewrites_and_restores(tmp_path, built_book):
    target = tmp_path / "expected.json"
    got = expected.collect(built_book / "jupyter_execute")
    i = next(i for i, g in enumerate(got) if not expected.is_phrase(g))  # a number: doubled, it moves
    expected.write(target, got[:i] + [dict(got[i], value=got[i]["value"] * 2)] + got[i + 1 :])
    assert expected.main(["check", "--expected", str(target), "--executed", str(built_book / "jupyter_execute")]) == 1
    assert expected.main(["bless", "--expected", str(target), "--executed", str(built_book / "jupyter_execute")]) == 0
    assert expected.main(["check", "--expected", str(target), "--executed", str(built_book / "jupyter_execute")]) == 0
    assert json.loads(target.read_text())["values"] == got


def test_live_declarations_are_checked():
    from shardbook import ledger

    def ok(a=1.0, b=2):
        return {"x": ledger.value(a * b, "GB", digits=1)}

    def num():
        return ledger.number_input("n", minimum=0, maximum=10)

    assert ledger.evaluate_live(ok, {"a": 2.0, "b": 3}) == {"x": "6.0 GB"}
    with pytest.raises(ValueError, match="parameter 'a' needs a default"):
        ledger.live(lambda a: {}, a=num())
    with pytest.raises(ValueError, match="no input spec for parameter 'b'"):
        ledger.live(ok, a=num())
    with pytest.raises(ValueError, match=r"inputs: \['c'\] are not parameters"):
        ledger.live(ok, a=num(), b=num(), c=num())
    with pytest.raises(ValueError, match="must be returned as ledger.value"):
        ledger.live(lambda a=1: {"x": 3}, a=num())
    with pytest.raises(ValueError, match="options: a choice needs at least one option"):
        ledger.choice_input([])


def _partial_build(tmp_path, built_book, leave_out=()):
    """A copy of the build's executed notebooks (and its fingerprint) without some chapters."""
    import shutil

    executed = tmp_path / "_build" / "jupyter_execute"
    shutil.copytree(
        built_book / "jupyter_execute",
        executed,
        ignore=lambda d, names: [n for n in names if n.split(".")[0] in leave_out],
    )
    shutil.copy2(built_book / expected.FINGERPRINT_FILE, executed.parent / expected.FINGERPRINT_FILE)
    return executed


def test_bless_refuses_a_build_missing_a_chapter(tmp_path, built_book, capsys):
    """Blessing a partial build once rewrote 590 expected values as 260 and
    exited 0; now it names the missing chapter and writes nothing."""
    executed = _partial_build(tmp_path, built_book, leave_out=("03_data_parallel",))
    target = tmp_path / "expected.json"
    target.write_text(EXPECTED_NUMBERS.read_text())
    before = target.read_text()
    assert expected.main(["bless", "--expected", str(target), "--executed", str(executed)]) == 2
    assert "no output for 03_data_parallel (listed in _toc.yml)" in capsys.readouterr().err
    assert target.read_text() == before


def test_check_and_bless_refuse_a_stale_or_unfinished_build(tmp_path, built_book, capsys):
    executed = _partial_build(tmp_path, built_book)
    stamp = executed.parent / expected.FINGERPRINT_FILE
    target = tmp_path / "expected.json"
    target.write_text(EXPECTED_NUMBERS.read_text())
    stamp.write_text("0" * 64 + "\n")  # a build made from other sources
    for command in ("check", "bless"):
        assert expected.main([command, "--expected", str(target), "--executed", str(executed)]) == 2
        assert "the build is older than the sources" in capsys.readouterr().err
    stamp.unlink()  # a build that started and did not finish
    assert expected.main(["check", "--expected", str(target), "--executed", str(executed)]) == 2
    assert "no record of a finished build" in capsys.readouterr().err
    assert target.read_text() == EXPECTED_NUMBERS.read_text()


def test_bless_never_drops_a_value_silently(tmp_path, built_book, capsys):
    executed = _partial_build(tmp_path, built_book)
    target = tmp_path / "expected.json"
    values = expected.load(EXPECTED_NUMBERS)
    extra = dict(values[0], name="a_value_no_cell_shows_any_more")
    expected.write(target, values + [extra])
    assert expected.main(["bless", "--expected", str(target), "--executed", str(executed)]) == 2
    err = capsys.readouterr().err
    assert "a_value_no_cell_shows_any_more" in err and "--drop" in err
    assert any(v["name"] == extra["name"] for v in expected.load(target))
    assert (
        expected.main(
            [
                "bless",
                "--expected",
                str(target),
                "--executed",
                str(executed),
                "--drop",
                "a_value_no_cell_shows_any_more",
            ]
        )
        == 0
    )
    assert not any(v["name"] == extra["name"] for v in expected.load(target))


@pytest.mark.parametrize(
    "content,message",
    [
        (None, "no such file; `make bless` writes it"),
        ("{bad", "not valid JSON"),
        ("[1, 2]", "not an expected-values file"),
        ('{"values": [{"name": "x"}]}', "not an expected-values file"),
        ("DIR", "is a folder, not the expected-values file"),
    ],
)
def test_ledger_command_names_a_bad_expected_file_in_one_line(tmp_path, built_book, capsys, content, message):
    target = tmp_path / "expected.json"
    if content == "DIR":
        target.mkdir()
    elif content is not None:
        target.write_text(content)
    assert expected.main(["check", "--expected", str(target), "--executed", str(built_book / "jupyter_execute")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ledger: {target}: ") and message in err and len(err.splitlines()) == 1


def test_bless_recreates_a_missing_expected_file(tmp_path, built_book):
    target = tmp_path / "expected.json"
    assert expected.main(["bless", "--expected", str(target), "--executed", str(built_book / "jupyter_execute")]) == 0
    assert expected.load(target) == expected.collect(built_book / "jupyter_execute")


def test_a_corrupt_glue_file_is_named(tmp_path, built_book, capsys):
    executed = _partial_build(tmp_path, built_book)
    broken = next(executed.rglob("*.ipynb"))
    broken.write_text("{not json")
    with pytest.raises(ValueError, match=f"{broken.name}: cannot be read as JSON"):
        expected.collect(executed)


def test_bless_refuses_a_planted_text_change_without_an_errata_entry(tmp_path, built_book, capsys):
    """Issue 30: a value whose printed text would change, listed by no entry
    of errata/ and given no --reason, stops bless with one line naming it;
    with --reason it is blessed and the reason is recorded as an entry."""
    target = tmp_path / "expected.json"
    values = expected.load(EXPECTED_NUMBERS)
    planted = next(v for v in values if (v["chapter"], v["name"]) == ("91_numbers", "numbers_example_ms"))
    expected.write(target, [dict(v, text="9.99 ms") if v is planted else v for v in values])
    before = target.read_text()
    args = ["bless", "--expected", str(target), "--executed", str(built_book / "jupyter_execute")]
    assert expected.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "91_numbers:numbers_example_ms" in err[0] and "--reason" in err[0], err
    assert target.read_text() == before
    log = tmp_path / "errata"
    assert expected.main([*args, "--errata", str(log), "--reason", "A planted change, for the test."]) == 0
    (entry,) = errata.load(log, ROOT)
    assert entry.values == ("91_numbers:numbers_example_ms",) and entry.why == "A planted change, for the test."
    assert {v["name"]: v["text"] for v in expected.load(target)}["numbers_example_ms"] == planted["text"]
