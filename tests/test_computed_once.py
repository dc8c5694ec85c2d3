"""Tables that chapters and tests share, computed once per version of the
package (shardbook.book.computed_once): computed by the first to ask, read
back by the others, and computed again whenever the package changes."""

import json
import threading
import time

import pytest

from shardbook.book import computed_once


def _counting(calls, value=3.0, delay_s=0.0):
    def compute(scale=1.0):
        calls.append(scale)
        time.sleep(delay_s)
        return {"value": value * scale}

    return compute


def _once(folder, compute, **args):
    return computed_once.once("table", compute, dict, dict, args, folder)


def test_the_first_call_computes_and_the_next_read_its_file(tmp_path):
    calls = []
    compute = _counting(calls)
    assert _once(tmp_path, compute) == {"value": 3.0}
    assert _once(tmp_path, compute) == {"value": 3.0}
    assert calls == [1.0]
    # other arguments are another table
    assert _once(tmp_path, compute, scale=2.0) == {"value": 6.0}
    assert calls == [1.0, 2.0]
    # no temporary file is left beside the tables
    assert sorted(p.suffix for p in tmp_path.iterdir() if not p.name.startswith(".")) == [".json", ".json", ".lock"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_change_to_the_package_computes_the_table_again(tmp_path, monkeypatch):
    calls = []
    compute = _counting(calls)
    _once(tmp_path, compute)
    monkeypatch.setattr(computed_once, "package_digest", lambda: "another version of the package")
    _once(tmp_path, compute)
    assert calls == [1.0, 1.0]


def test_the_digest_covers_every_file_of_the_package(tmp_path):
    package = tmp_path / "pkg"
    (package / "data").mkdir(parents=True)
    (package / "model.py").write_text("A = 1\n")
    (package / "data" / "runs.json").write_text("[]")
    before = computed_once.package_digest(package)
    (package / "data" / "runs.json").write_text("[1]")
    after_data = computed_once.package_digest(package)
    (package / "model.py").write_text("A = 2\n")
    after_code = computed_once.package_digest(package)
    assert len({before, after_data, after_code}) == 3
    # bytecode is not the package's source: it does not change the digest
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")
    assert computed_once.package_digest(package) == after_code


def test_an_unreadable_file_is_computed_again(tmp_path):
    calls = []
    compute = _counting(calls)
    _once(tmp_path, compute)
    (table,) = tmp_path.glob("table-*.json")
    table.write_text("{not json")
    assert _once(tmp_path, compute) == {"value": 3.0}
    assert calls == [1.0, 1.0]
    assert json.loads(table.read_text()) == {"value": 3.0}


def test_a_failed_computation_leaves_nothing_behind(tmp_path):
    def broken():
        raise RuntimeError("the fit failed")

    with pytest.raises(RuntimeError, match="the fit failed"):
        _once(tmp_path, broken)
    assert [p.name for p in tmp_path.iterdir()] == ["table.lock"]


def test_two_callers_at_once_compute_it_once(tmp_path):
    calls = []
    compute = _counting(calls, delay_s=0.3)
    results = []
    threads = [threading.Thread(target=lambda: results.append(_once(tmp_path, compute))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert results == [{"value": 3.0}, {"value": 3.0}]
    assert calls == [1.0]


def test_tables_live_in_the_build_folder_of_a_checkout_else_in_the_users_cache(tmp_path):
    checkout = tmp_path / "repo"
    (checkout / "code").mkdir(parents=True)
    (checkout / "code" / "pyproject.toml").write_text("")
    assert computed_once.default_dir(checkout) == checkout / "_build" / "computed_once"
    installed = computed_once.default_dir(tmp_path / "site-packages", {"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert installed == tmp_path / "cache" / "shardbook" / "computed_once"
