"""Ranges of the numeric flags the C runtime accepts, checked in the CLI so that an error names
the flag (``--threads 100000: must be in [1, 256]``) instead of a C source line.

The bounds are the C library's: toolkit/native/context.c (n_threads <= 256, n_ubatch <= 65536,
n_ctx <= 2^24).
"""
from __future__ import annotations

import math

from toolkit.errors import InputError

MAX_THREADS = 256
MAX_UBATCH = 65536
MAX_CTX = 1 << 24


def check_range(flag: str, value: float, lo: float, hi: float, note: str = "") -> None:
    """InputError ``"FLAG VALUE: must be in [LO, HI]"`` (plus ``note``) unless lo <= value <= hi
    (NaN is outside every range)."""
    if isinstance(value, float) and math.isnan(value) or not lo <= value <= hi:
        raise InputError(f"{flag} {value}: must be in [{lo}, {hi}]" + (f" ({note})" if note else ""))


def check_threads(flag: str, value: int | None, zero_is_auto: bool = False) -> None:
    """--threads: 1..256, or 0 meaning "all CPUs" where ``zero_is_auto``; None passes."""
    if value is None or (zero_is_auto and value == 0):
        return
    check_range(flag, value, 1, MAX_THREADS, "0 = all CPUs" if zero_is_auto else "")
