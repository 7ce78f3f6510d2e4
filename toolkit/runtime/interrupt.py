"""SIGINT / SIGTERM that stop native work at a safe point instead of raising at a random one.

Python raises KeyboardInterrupt (and the CLI's SIGTERM handler SystemExit) between any two
bytecodes of the main thread: inside ``threading``'s lock bookkeeping ("release unlocked lock"),
between ``tk_context_free`` and the line that forgets the pointer (a double free later), or in a
finaliser, where it is printed and swallowed (the run then exits 0).  The handlers installed
here only *record* the signal while runtime work is under way (:func:`deferred`): a running
``tk_decode`` is asked to stop (``tk_context_abort``, polled by ``Context``), and the runtime
raises KeyboardInterrupt itself at its next safe point (:func:`check`).  Outside ``deferred``
scopes the handlers raise as Python's do (KeyboardInterrupt for SIGINT, SystemExit(128 + n)
for SIGTERM), so code that unwinds on them (atomic outputs) keeps working.

    install()                      # once, in the main thread (the CLI does it first thing)
    with deferred():               # runtime work: model, context, decode, session files
        ...
        check()                    # KeyboardInterrupt here if a signal came
    received()                     # 0, or the first signal's number (exit status 128 + n)

Without :func:`install` (library use) nothing changes: Python's own SIGINT handler raises.
"""
from __future__ import annotations

import contextlib
import signal
import threading

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _State:
    signum = 0            # the first signal received (0: none)
    installed = False
    defer = 1             # > 0: record only; install() starts deferred (interpreter start-up)
    previous: dict = {}   # signal -> the handler install() replaced


_state = _State()
_lock = threading.Lock()


class Interrupted(KeyboardInterrupt):
    """What the handlers and :func:`check` raise for SIGINT.  A subclass on purpose: CPython
    remembers a plain KeyboardInterrupt that passes through ``exec(str)`` (dataclasses,
    typer and pydantic run such code while importing) and then ends the process by SIGINT
    (status -2) whatever exit status the program chose; it compares the type exactly."""


def _handler(signum, frame) -> None:
    if not _state.signum or signum == signal.SIGTERM:   # a SIGTERM outranks an earlier SIGINT
        _state.signum = signum
    if _state.defer > 0:
        return
    if signum == signal.SIGINT:
        raise Interrupted
    raise SystemExit(128 + signum)


def install(already: int = 0) -> None:
    """Install the SIGINT / SIGTERM handlers (main thread only; elsewhere a no-op), in the
    recording mode until :func:`arm` is called.  ``already``: a signal number recorded before
    (the CLI records signals from its first line, before the imports that lead here)."""
    if _state.installed or threading.current_thread() is not threading.main_thread():
        return
    if already and not _state.signum:
        _state.signum = already
    _state.previous = {s: signal.signal(s, _handler) for s in _SIGNALS}
    _state.installed = True


def uninstall() -> None:
    """Put back the handlers :func:`install` replaced and forget any recorded signal (for
    callers that run the CLI in-process, such as tests)."""
    if not _state.installed:
        return
    for s, h in _state.previous.items():
        signal.signal(s, h)
    _state.installed, _state.signum, _state.defer, _state.previous = False, 0, 1, {}


def arm() -> None:
    """Leave the start-up recording mode: from now on a signal outside :func:`deferred` raises.
    Raises KeyboardInterrupt at once if a signal came during start-up."""
    with _lock:
        _state.defer = max(_state.defer - 1, 0)
    check()


def installed() -> bool:
    """True when :func:`install` ran (signals are recorded inside :func:`deferred`)."""
    return _state.installed


def received() -> int:
    """The signal received since :func:`install`: SIGTERM if one came, else SIGINT (0: none)."""
    return _state.signum


def pending() -> bool:
    """True when a signal was recorded (and the handlers are ours)."""
    return _state.installed and _state.signum != 0


def check() -> None:
    """Raise :class:`Interrupted` (a KeyboardInterrupt) if a signal was recorded (a safe point
    of the runtime)."""
    if pending():
        raise Interrupted


@contextlib.contextmanager
def deferred():
    """Within the block signals are recorded, never raised asynchronously (nestable)."""
    with _lock:
        _state.defer += 1
    try:
        yield
    finally:
        with _lock:
            _state.defer -= 1


@contextlib.contextmanager
def raising():
    """Within a :func:`deferred` block, let signals raise again (a blocking read of stdin:
    the read would otherwise be resumed after the handler).  Raises at once if one is pending."""
    with _lock:
        saved, _state.defer = _state.defer, 0
    try:
        check()
        yield
    finally:
        with _lock:
            _state.defer = saved


def clear() -> None:
    """Forget a recorded SIGINT (a chat turn that Ctrl-C ended: the chat goes on).  A SIGTERM
    is kept: the process is to end."""
    if _state.signum == signal.SIGINT:
        _state.signum = 0
