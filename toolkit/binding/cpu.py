"""What the C library knows about the CPU: the kernel level in force, the machine's best,
its SIMD features, the Mamba-2 SSD threshold; and the default thread count.

Levels are ``tk_cpu_level_t`` ints (``lib.TK_CPU_SCALAR``, ``TK_CPU_AVX2``, ...), named by
:func:`level_name` ("scalar", "avx2", ...).  ``TOOLKIT_CPU`` caps the level in force
(``avx2-novnni``: avx2 without its AVX-VNNI kernels): the C library reads no environment, so
:func:`apply_env` sets it through tk_cpu_set_level / tk_cpu_set_avxvnni when this package loads
the library (a process-wide setting, for the CLI, the tests' child processes and any user).
"""
from __future__ import annotations

import os

from toolkit.binding import ffi, lib
from toolkit.errors import InputError


LEVELS = {"scalar": lib.TK_CPU_SCALAR, "avx2": lib.TK_CPU_AVX2, "avx2-novnni": lib.TK_CPU_AVX2,
          "avx512": lib.TK_CPU_AVX512, "neon": lib.TK_CPU_NEON}   # TOOLKIT_CPU's values


def apply_env(environ=None) -> None:
    """Cap the kernel level at ``TOOLKIT_CPU`` when it is set (``avx2-novnni``: avx2 with its
    AVX-VNNI kernels off).  A value that is not a level means scalar, the safe choice (the CLI
    refuses it first: toolkit.cli.argv.check_cpu_env)."""
    v = (os.environ if environ is None else environ).get("TOOLKIT_CPU")
    if not v:
        return
    lib.tk_cpu_set_level(LEVELS.get(v, lib.TK_CPU_SCALAR))
    if v == "avx2-novnni":
        lib.tk_cpu_set_avxvnni(0)


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


def has_avxvnni() -> bool:
    """Whether the machine has AVX-VNNI with the avx2 level (tk_cpu_has_avxvnni): the Q8_0 /
    k-quant (Q2_K..Q6_K) prompt kernels of qdot_avxvnni.c, in force while the level is avx2."""
    return bool(lib.tk_cpu_has_avxvnni())


def avxvnni() -> bool:
    """Whether the AVX-VNNI kernels are on (the machine has them and neither
    ``TOOLKIT_CPU=avx2-novnni`` nor :func:`set_avxvnni` turned them off; tk_cpu_avxvnni)."""
    return bool(lib.tk_cpu_avxvnni())


def set_avxvnni(on: bool) -> bool:
    """Turn the AVX-VNNI kernels on (where the machine has them) or off; returns :func:`avxvnni`."""
    return bool(lib.tk_cpu_set_avxvnni(1 if on else 0))


def ssd_threshold() -> int:
    """Tokens from which a Mamba-2 ubatch takes the chunked SSD scan (tk_ssd_threshold)."""
    return int(lib.tk_ssd_threshold())


def chunk_thresholds(options=None) -> dict:
    """Tokens from which one sequence's run in a ubatch takes each chunked form instead of its
    recurrence (0: never): Mamba-2's SSD, the gated delta rule, KDA and lightning attention:
    ``options``' ``ssd_min`` ... (toolkit.runtime.options.RuntimeOptions) where not None, else the
    process defaults (tk_ssd_threshold, tk_gdn_threshold, tk_kda_threshold, tk_lightning_threshold)."""
    out = {"ssd": int(lib.tk_ssd_threshold()), "gdn": int(lib.tk_gdn_threshold()),
           "kda": int(lib.tk_kda_threshold()), "lightning": int(lib.tk_lightning_threshold())}
    for k in out:
        v = getattr(options, f"{k}_min", None)
        if v is not None:
            out[k] = int(v)
    return out


def cpu_info(options=None) -> dict:
    """{"cpu_level": name in force, "cpu_level_detected": the machine's best name,
    "cpu_features": str, "ssd_threshold": int, "chunk_thresholds": :func:`chunk_thresholds`}
    (the fields ``toolkit bench`` reports; the thresholds of ``options`` where it sets them).
    The name in force is "avx2-novnni" where the level is avx2 on an AVX-VNNI machine whose
    AVX-VNNI kernels are off (``TOOLKIT_CPU=avx2-novnni``), so A/B runs tell themselves apart."""
    lv = level()
    name = level_name(lv)
    if lv == lib.TK_CPU_AVX2 and has_avxvnni() and not avxvnni():
        name = "avx2-novnni"
    return {
        "cpu_level": name,
        "cpu_level_detected": level_name(detected()),
        "cpu_features": features(),
        "ssd_threshold": chunk_thresholds(options)["ssd"],
        "chunk_thresholds": chunk_thresholds(options),
    }


def default_threads() -> int:
    """``TOOLKIT_THREADS`` when set and not 0, else the CPUs this process may use.

    ``TOOLKIT_THREADS=0`` means every CPU, as ``-t 0`` does.

    Raises:
        InputError: TOOLKIT_THREADS is not an integer in [0, 256].
    """
    env = os.environ.get("TOOLKIT_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise InputError(f"TOOLKIT_THREADS={env!r} is not an integer") from None
        if not 0 <= n <= 256:   # context.c's bound, like -t/--threads (0: every CPU, as -t 0)
            raise InputError(f"TOOLKIT_THREADS={env!r}: must be in [0, 256] (0: all cores)")
        if n:
            return n
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1
