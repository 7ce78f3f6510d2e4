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


DEFAULT_BATCH = 2048    # llama.cpp's n_batch
DEFAULT_UBATCH = 512    # llama.cpp's n_ubatch


def micro_batch(batch: int, ubatch: int) -> int:
    """The micro-batch of ``-b/--batch-size`` (llama.cpp's logical batch, n_batch) and
    ``-ub/--ubatch-size`` (the micro-batch, n_ubatch), by llama.cpp's rule (llama_context:
    n_ubatch = min(n_batch, n_ubatch)): the tokens the C library decodes at once, which size
    the compute buffers.  InputError naming the flag outside [1, 65536]."""
    check_range("-b/--batch-size", batch, 1, 2**31 - 1)
    check_range("-ub/--ubatch-size", ubatch, 1, MAX_UBATCH)
    return min(batch, ubatch)


def check_threads(flag: str, value: int | None, zero_is_auto: bool = False) -> None:
    """--threads: 1..256, or 0 meaning "all CPUs" where ``zero_is_auto``; None passes."""
    if value is None or (zero_is_auto and value == 0):
        return
    check_range(flag, value, 1, MAX_THREADS, "0 = all CPUs" if zero_is_auto else "")
