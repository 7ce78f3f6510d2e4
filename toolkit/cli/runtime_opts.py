"""The options every model-running command shares with the C library's load and context
parameters (toolkit.runtime.options): ``--repack/--no-repack`` here, the rest from the
environment (TOOLKIT_REPACK, TOOLKIT_BF16_GEMM, TOOLKIT_SSD_MIN / GDN_MIN / KDA_MIN /
LIGHTNING_MIN)."""
from __future__ import annotations

from typing import Optional

import typer

REPACK_HELP = ("Re-lay the mat-mul weights at load for the repacked GEMM kernels: Q8_0, Q4_0, IQ4_NL, Q4_K, BF16 "
               "at the avx2 and avx512 levels, Q6_K at avx512. Default (TOOLKIT_REPACK=auto): the types whose re-laid form "
               "measured faster for prompts and generation (avx512: all six; avx2: Q4_0, IQ4_NL, Q4_K, BF16); --repack (TOOLKIT_REPACK=1): every type with a repacked "
               "kernel; --no-repack (TOOLKIT_REPACK=0): none, every mat-mul reads the mapped file. -v prints the "
               "bytes re-laid and the time it took.")


def repack_option(help: str = REPACK_HELP):
    """The ``--repack/--no-repack`` typer option (None when neither is given)."""
    return typer.Option(None, "--repack/--no-repack", help=help, show_default=False)


def runtime_options(repack: Optional[bool]):
    """:class:`toolkit.runtime.options.RuntimeOptions` from ``--repack`` (True: every type,
    False: none, None: TOOLKIT_REPACK, else auto) and the environment.

    Raises:
        InputError: a TOOLKIT_* variable with a value it does not take (names it).
    """
    from toolkit.runtime.options import RuntimeOptions
    return RuntimeOptions.from_env(repack=None if repack is None else ("all" if repack else "off"))
