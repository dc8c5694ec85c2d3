"""Packaging beyond pyproject.toml: a package built from the repository
(pip install ./code, or a wheel) carries a copy of the compiler captures the
chapters read (shardbook.hlo.artifacts.SHIPPED, from ../hlo_artifacts) and
the chapters' titles (the front page's map), so that a chapter downloaded as
a notebook runs outside the repository. An
editable install reads the checkout's hlo_artifacts/ and copies nothing."""

import json
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildPyWithArtifacts(build_py):
    """build_py, then the captures into shardbook/data/hlo_artifacts."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        source = HERE.parent / "hlo_artifacts"
        if not source.is_dir():  # a source distribution of code/ alone
            return
        sys.path.insert(0, str(HERE))
        try:
            from shardbook.book.book_map import chapter_titles
            from shardbook.hlo.artifacts import shipped_files
        finally:
            sys.path.remove(str(HERE))
        data = Path(self.build_lib) / "shardbook" / "data"
        for relative, path in shipped_files(source):
            out = data / "hlo_artifacts" / relative
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out)
        # the front page's map of the chapters, drawn from their titles
        if (HERE.parent / "chapters").is_dir():
            titles = chapter_titles(HERE.parent / "chapters", packaged=data / "none")
            (data / "chapter_titles.json").write_text(json.dumps(titles, indent=1, ensure_ascii=False) + "\n")


setup(cmdclass={"build_py": BuildPyWithArtifacts})
