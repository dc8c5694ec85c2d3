"""Math rendered to HTML at build time by KaTeX (sphinxcontrib-katex with
`katex_prerender`, run by node): pages carry no math runtime, only KaTeX's
stylesheet and the WOFF2 fonts it names, copied from the pinned npm package
into `_static/katex/`. The book reads offline."""

from pathlib import Path

from .node_files import copy_if_changed, node_package

KATEX_CSS = "katex/katex.min.css"
# The two KaTeX fonts nearly every formula uses, preloaded on pages with math:
# text set before they arrive would reflow when they do.
KATEX_PRELOAD = ("KaTeX_Main-Regular.woff2", "KaTeX_Math-Italic.woff2")


def katex_dist(srcdir):
    """The `dist/` folder of the pinned npm KaTeX (node_modules/katex)."""
    return node_package(srcdir, "katex", "dist/katex.min.js") / "dist"


def _start_katex_server_process(cls, rundir, timeout):
    """sphinxcontrib-katex 0.9.11 connects to its node server as soon as the
    socket file exists, which is before the server listens on it: on a busy
    machine the connection is refused, the build fails, and the node process,
    never stopped, keeps the build's output pipe open. The same start, with
    the connection retried until the timeout (as its TCP path does) and the
    process stopped if it never answers."""
    import socket
    import subprocess
    import time

    socket_path = rundir / "katex.sock"
    process = subprocess.Popen(
        cls.build_command(socket=socket_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=rundir
    )
    deadline = time.monotonic() + timeout
    try:
        while True:
            if socket_path.is_socket():
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.settimeout(max(deadline - time.monotonic(), 0.001))
                    sock.connect(str(socket_path))
                    sock.settimeout(None)
                    return process, sock
                except ConnectionRefusedError:
                    sock.close()  # bound, not listening yet
            if time.monotonic() > deadline:
                raise cls.timeout_error(timeout)
            time.sleep(0.001)
    except BaseException:
        process.kill()
        process.wait()
        raise


def _use_katex(app, config):
    """Math rendered at build time by the pinned npm KaTeX (the same version
    as the stylesheet the pages load)."""
    from sphinxcontrib import katex

    katex.KaTeXServer.start_server_process = classmethod(_start_katex_server_process)
    config.html_math_renderer = "katex"
    config.katex_prerender = True
    config.katex_css_path = KATEX_CSS
    config.katex_js_path = str(katex_dist(app.srcdir) / "katex.min.js")


def copy_katex_assets(app):
    """KaTeX's stylesheet and WOFF2 fonts into the site's `_static/katex/`."""
    dist = katex_dist(app.srcdir)
    out = Path(app.outdir) / "_static" / "katex"
    copy_if_changed(dist / "katex.min.css", out / "katex.min.css")
    for font in (dist / "fonts").glob("*.woff2"):  # every browser the theme supports reads WOFF2
        copy_if_changed(font, out / "fonts" / font.name)


def _preload_math_fonts(app, pagename, templatename, context, doctree):
    from docutils import nodes

    if doctree is None or not any(
        True for _ in doctree.findall(lambda n: isinstance(n, (nodes.math, nodes.math_block)))
    ):
        return
    links = "".join(
        f'<link rel="preload" href="{context["pathto"]("_static/katex/fonts/" + font, 1)}" as="font" '
        'type="font/woff2" crossorigin>\n'
        for font in KATEX_PRELOAD
    )
    context["metatags"] = context.get("metatags", "") + links


def setup(app):
    app.setup_extension("sphinxcontrib.katex")
    app.connect("config-inited", _use_katex)
    app.connect("html-page-context", _preload_math_fonts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
