"""toolkit: hybrid recurrent/attention language models from HF checkpoints to text on a CPU."""
import sys as _sys

__version__ = "0.1.0"

# `python -m toolkit`: runpy imports this package before toolkit/__main__.py runs (sys.argv[0]
# is "-m" meanwhile).  Record SIGINT / SIGTERM from here on, so that one arriving during the
# imports ends the command with 128 + n and no traceback (toolkit/cli/app.py main() reads this
# list; toolkit/runtime/interrupt.py takes over).  Importing toolkit as a library changes nothing.
_EARLY_SIGNALS: list[int] = []
if _sys.argv[:1] == ["-m"]:
    import signal as _signal
    for _s in (_signal.SIGINT, _signal.SIGTERM):
        _signal.signal(_s, lambda n, f: _EARLY_SIGNALS.append(n))
