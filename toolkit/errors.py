"""The exception types every layer raises; the CLI maps them to one-line messages and exit codes.

Exit codes (documented in README.md):
    0  success
    1  internal error (a bug: please report; traceback with TOOLKIT_DEBUG=1)
    2  bad input: a file, key, tensor or flag at fault (the message names it)
    3  unsupported: a valid input this version does not handle (architecture, type)
    4  resources: disk full, out of memory, too large to allocate
  130  interrupted (Ctrl-C); nothing half-written is left behind
"""


class ToolkitError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with."""

    exit_code = 2


class InputError(ToolkitError):
    """A file, key, tensor or argument is missing, malformed or inconsistent."""

    exit_code = 2


class UnsupportedError(ToolkitError):
    """A well-formed input this version does not support (names what is supported)."""

    exit_code = 3


class ResourceError(ToolkitError):
    """Not enough disk or memory for the request (names how much was asked for)."""

    exit_code = 4


class NativeError(ToolkitError):
    """An error status returned by the C library, with its message (tk_last_error)."""

    exit_code = 2
