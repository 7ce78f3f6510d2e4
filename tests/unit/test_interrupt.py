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
