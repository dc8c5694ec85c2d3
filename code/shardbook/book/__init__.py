"""The book's machinery: the committed numbers and the build check
(expected), the prose lint, the plotting helpers (figures), the Sphinx
extension and its static files, the local site server, the benchmark, the
PDF, the build-cache guard and the JupyterLab view. None of it is loaded by
`import shardbook`; the chapters' own API, shardbook.ledger, stays at the top
level because the live pages run it in the browser too."""
