"""Guards of the build itself: a prose number whose glue key no cell defines
stops the build instead of leaving an empty span."""

import subprocess
import sys
import textwrap


def test_undefined_glue_key_fails_the_build(tmp_path):
    (tmp_path / "conf.py").write_text(textwrap.dedent("""
        extensions = ["myst_nb", "shardbook.sphinx_ext"]
        nb_execution_mode = "force"
        exclude_patterns = ["_build"]
    """))
    (tmp_path / "index.md").write_text(textwrap.dedent("""
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
    """).lstrip())
    result = subprocess.run([sys.executable, "-m", "sphinx", "-q", "-b", "html", str(tmp_path), str(tmp_path / "_build")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "glue key 'undefined_key' is used in prose but no cell of that page glues it" in result.stderr + result.stdout
