"""Load the cffi extension and turn C status codes into NativeError."""
from __future__ import annotations

import os
import re

from toolkit.errors import NativeError, ResourceError, UnsupportedError

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


def check(status: int, what: str = "") -> None:
    """Raise the exception matching a non-zero tk_status, with tk_last_error()'s message."""
    if status != lib.TK_OK:
        msg = last_error()
        exc = _STATUS_EXC.get(status, NativeError)
        raise exc(f"{what}: {msg}" if what else msg)


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
