"""The bottom Python layer: the only module that loads the cffi extension ``toolkit._native``.

Owns ``ffi`` / ``lib`` (the C library, declared in toolkit/native/toolkit.h), the map from
C status codes to toolkit's exceptions (:func:`check`, :func:`exception_for`,
:func:`last_error`), the base of the handle-owning classes (:class:`NativeHandle`), the row
codec (:mod:`toolkit.binding.rows`) and the CPU information (:mod:`toolkit.binding.cpu`).

Only ``toolkit.convert``, ``toolkit.quantize`` and ``toolkit.runtime`` import this package
(ARCHITECTURE.md, Layering; tests/unit/test_layering.py keeps it so).

Raises at import:
    ImportError: the C extension is not built (install the package with ``pip install .``).
"""
from __future__ import annotations

import os
import re

from toolkit.errors import NativeError, ResourceError, ToolkitError, UnsupportedError

try:
    from toolkit._native import ffi, lib  # noqa: F401
except ImportError as e:  # pragma: no cover - only when the package was not built
    raise ImportError(f"toolkit's C library is not built ({e}); install the package with `pip install .`") from e

_STATUS_EXC = {
    lib.TK_ERR_NOMEM: ResourceError,
    lib.TK_ERR_UNSUPPORTED: UnsupportedError,
}


_C_LOCATION = re.compile(r"^[\w./-]+\.[ch]:\d+: ")


def last_error() -> str:
    """tk_last_error()'s message, without its ``file.c:NN: `` prefix unless TOOLKIT_DEBUG=1."""
    msg = ffi.string(lib.tk_last_error()).decode("utf-8", "replace")
    if os.environ.get("TOOLKIT_DEBUG") != "1":
        msg = _C_LOCATION.sub("", msg)
    return msg


def exception_for(status: int, message: str) -> ToolkitError:
    """The exception (not raised) for a non-zero tk_status: TK_ERR_NOMEM -> ResourceError,
    TK_ERR_UNSUPPORTED -> UnsupportedError, any other -> NativeError; ``message`` as its text."""
    return _STATUS_EXC.get(status, NativeError)(message)


def check(status: int, what: str = "") -> None:
    """Raise the exception matching a non-zero tk_status, with tk_last_error()'s message
    (prefixed by ``what: `` when given); return None for TK_OK.

    Raises:
        ResourceError / UnsupportedError / NativeError: see :func:`exception_for`.
    """
    if status != lib.TK_OK:
        raise exception_for(status, prefixed(what, last_error()))


def prefixed(what: str, msg: str) -> str:
    """``what: msg``, or ``msg`` alone when it already starts with ``what`` as a word
    ("context needs 3 GiB", "state: bad tag", "checkpoints = -1 ..."): never "context: context"."""
    if not what or re.match(re.escape(what) + r"(?![\w-])", msg, re.IGNORECASE):
        return msg
    return f"{what}: {msg}"


class NativeHandle:
    """Base of the Python objects that own a C handle: ``with`` support and a finaliser,
    both calling the subclass's ``close()`` (which must be idempotent)."""

    def close(self) -> None:  # pragma: no cover - always overridden
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


# TOOLKIT_CPU, the process-wide kernel level cap, applied once (the C library reads no environment)
from toolkit.binding.cpu import apply_env as _apply_cpu_env  # noqa: E402

_apply_cpu_env()
