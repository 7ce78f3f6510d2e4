"""toolkit/runtime/interrupt.py: inside deferred() a signal is only recorded (raised later at a
safe point by check()), outside it raises as Python's handlers do; uninstall() restores."""
from __future__ import annotations

import os
import signal

import pytest

from toolkit.runtime import interrupt


@pytest.fixture()
def handlers():
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    interrupt.install()
    interrupt.arm()
    yield
    interrupt.uninstall()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_deferred_records_then_check_raises(handlers):
    with interrupt.deferred():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):   # bytecodes for the handler to run on
            pass
        assert interrupt.received() == signal.SIGINT and interrupt.pending()
        with pytest.raises(KeyboardInterrupt) as ei:
            interrupt.check()
        assert type(ei.value) is interrupt.Interrupted   # not a plain KeyboardInterrupt (see its doc)
    interrupt.clear()
    assert interrupt.received() == 0


def test_outside_deferred_it_raises(handlers):
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
    with pytest.raises(SystemExit) as ei:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            pass
    assert ei.value.code == 143
    interrupt.clear()                                 # a SIGTERM outranks the SIGINT and is kept
    assert interrupt.received() == signal.SIGTERM


def test_raising_inside_deferred(handlers):
    with interrupt.deferred():
        with pytest.raises(KeyboardInterrupt):
            with interrupt.raising():
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(1000):
                    pass
        os.kill(os.getpid(), signal.SIGINT)           # deferred again: recorded only
        for _ in range(1000):
            pass


def test_without_install_nothing_is_pending():
    assert not interrupt.installed() and not interrupt.pending()
    interrupt.check()                                 # no-op


@pytest.mark.native
def test_decode_calls_share_one_thread_that_survives_errors():
    """The main thread's decodes run on one kept thread (not a thread per call); an exception
    in a call is raised on the caller and the thread goes on serving."""
    import pathlib
    import threading

    from toolkit.runtime import Context, Model
    demo = pathlib.Path(interrupt.__file__).resolve().parents[1] / "data" / "default.gguf"
    m = Model(str(demo), n_threads=1)
    with Context(m, n_ctx=64) as ctx:
        first = ctx.decode([1, 2, 3], logits="last")
        for t in range(4, 10):
            ctx.decode([t], logits="last")
        assert [t.name for t in threading.enumerate()].count("toolkit-decode") == 1
        with pytest.raises(ZeroDivisionError):
            ctx._run_interruptible(lambda: 1 // 0, "test")
        ctx.memory.seq_rm(0, 0, -1)
        assert (ctx.decode([1, 2, 3], logits="last") == first).all()
        assert [t.name for t in threading.enumerate()].count("toolkit-decode") == 1
    m.close()
