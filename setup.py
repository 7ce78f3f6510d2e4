# cffi cannot be declared in pyproject.toml alone: this file only names the cffi builder, and
# records the git commit the package is built from (toolkit/_build_commit.txt: `toolkit --version`).
import os
import subprocess

from setuptools import setup


def _record_commit() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "-C", here, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return
    if rev:
        with open(os.path.join(here, "toolkit", "_build_commit.txt"), "w", encoding="utf-8") as fh:
            fh.write(rev + ("-dirty" if dirty else "") + "\n")


_record_commit()
setup(cffi_modules=["toolkit/native/_build.py:ffibuilder"])
