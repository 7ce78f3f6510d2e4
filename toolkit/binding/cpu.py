"""What the C library knows about the CPU: the kernel level in force, the machine's best,
its SIMD features, the Mamba-2 SSD threshold; and the default thread count.

Levels are ``tk_cpu_level_t`` ints (``lib.TK_CPU_SCALAR``, ``TK_CPU_AVX2``, ...), named by
:func:`level_name` ("scalar", "avx2", ...).  ``TOOLKIT_CPU`` caps the level in force.
"""
from __future__ import annotations

import os

from toolkit.binding import ffi, lib
from toolkit.errors import InputError


def level() -> int:
    """The kernel level in force (tk_cpu_level): the detected one, capped by ``TOOLKIT_CPU``."""
    return int(lib.tk_cpu_level())


def detected() -> int:
    """The best kernel level this machine runs (tk_cpu_detected)."""
    return int(lib.tk_cpu_detected())


def set_level(lv: int) -> int:
    """Set the kernel level (capped at :func:`detected`); returns the level now in force."""
    return int(lib.tk_cpu_set_level(int(lv)))


def level_name(lv: int) -> str:
    """A level's name: "scalar", "avx2", "avx512", "neon"."""
    return ffi.string(lib.tk_cpu_level_name(int(lv))).decode()


def features() -> str:
    """The SIMD features the machine reports, space-separated (tk_cpu_features)."""
    return ffi.string(lib.tk_cpu_features()).decode()


def has_avx512bf16() -> bool:
    """Whether the machine runs the BF16 x BF16 kernel (AVX512_BF16 at the AVX-512 level, OS
    ZMM state; tk_cpu_has_avx512bf16).  It is in force only while the level is avx512."""
    return bool(lib.tk_cpu_has_avx512bf16())


def ssd_threshold() -> int:
    """Tokens from which a Mamba-2 ubatch takes the chunked SSD scan (tk_ssd_threshold)."""
    return int(lib.tk_ssd_threshold())


def cpu_info() -> dict:
    """{"cpu_level": name in force, "cpu_level_detected": the machine's best name,
    "cpu_features": str, "ssd_threshold": int} (the fields ``toolkit bench`` reports)."""
    return {
        "cpu_level": level_name(level()),
        "cpu_level_detected": level_name(detected()),
        "cpu_features": features(),
        "ssd_threshold": ssd_threshold(),
    }


def default_threads() -> int:
    """``TOOLKIT_THREADS`` when set, else the CPUs this process may use.

    Raises:
        InputError: TOOLKIT_THREADS is not an integer in [1, 256].
    """
    env = os.environ.get("TOOLKIT_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise InputError(f"TOOLKIT_THREADS={env!r} is not an integer") from None
        if not 1 <= n <= 256:   # context.c's bound, like -t/--threads
            raise InputError(f"TOOLKIT_THREADS={env!r}: must be in [1, 256]")
        return n
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1
