"""Packaging beyond pyproject.toml: a package built from the repository
(pip install ./code, or a wheel) carries a copy of the compiler captures the
chapters read (shardbook.hlo.artifacts.SHIPPED, from ../hlo_artifacts), so
that a chapter downloaded as a notebook runs outside the repository. An
editable install reads the checkout's hlo_artifacts/ and copies nothing."""

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
            from shardbook.hlo.artifacts import shipped_files
        finally:
            sys.path.remove(str(HERE))
        target = Path(self.build_lib) / "shardbook" / "data" / "hlo_artifacts"
        for relative, path in shipped_files(source):
            out = target / relative
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out)


setup(cmdclass={"build_py": BuildPyWithArtifacts})
