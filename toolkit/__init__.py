"""toolkit: hybrid recurrent/attention language models from HF checkpoints to text on a CPU."""
import sys as _sys

__version__ = "0.1.0"


def build_commit() -> str:
    """The git commit toolkit was built from (``9318f25d1d4a``, ``-dirty`` with uncommitted
    changes): asked of git when the package is a checkout (an editable install), else read from
    ``_build_commit.txt``, which setup.py writes at build time; ``unknown`` when neither says."""
    import os
    import subprocess
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        top = subprocess.run(["git", "-C", here, "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                             timeout=5)
        if top.returncode == 0 and os.path.isfile(os.path.join(top.stdout.strip(), "toolkit", "__init__.py")) \
                and os.path.samefile(os.path.join(top.stdout.strip(), "toolkit"), here):
            rev = subprocess.run(["git", "-C", here, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                 text=True, timeout=5).stdout.strip()
            dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=5).stdout.strip()
            if rev:
                return rev + ("-dirty" if dirty else "")
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    try:
        with open(os.path.join(here, "_build_commit.txt"), encoding="utf-8") as fh:
            return fh.read().strip() or "unknown"
    except OSError:
        return "unknown"

# `python -m toolkit`: runpy imports this package before toolkit/__main__.py runs (sys.argv[0]
# is "-m" meanwhile).  Record SIGINT / SIGTERM from here on, so that one arriving during the
# imports ends the command with 128 + n and no traceback (toolkit/cli/app.py main() reads this
# list; toolkit/runtime/interrupt.py takes over).  Importing toolkit as a library changes nothing.
_EARLY_SIGNALS: list[int] = []
if _sys.argv[:1] == ["-m"]:
    import signal as _signal
    for _s in (_signal.SIGINT, _signal.SIGTERM):
        _signal.signal(_s, lambda n, f: _EARLY_SIGNALS.append(n))
