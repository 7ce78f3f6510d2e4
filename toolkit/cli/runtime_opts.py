"""The options every model-running command shares with the C library's load and context
parameters (toolkit.runtime.options): ``--repack/--no-repack`` and ``-ctk/-ctv`` here, the rest
from the environment (TOOLKIT_REPACK, TOOLKIT_BF16_GEMM, TOOLKIT_SSD_MIN / GDN_MIN / KDA_MIN /
LIGHTNING_MIN)."""
from __future__ import annotations

from typing import Optional

import typer

REPACK_HELP = ("Re-lay the mat-mul weights at load for the repacked GEMM kernels: Q8_0, Q4_0, IQ4_NL, Q4_K, Q5_K, Q6_K, IQ4_XS, BF16 "
               "at the avx2 and avx512 levels. Default (TOOLKIT_REPACK=auto): the types whose re-laid form "
               "measured faster for prompts and generation (avx512: all eight; avx2: Q4_0, IQ4_NL, Q4_K, BF16); --repack (TOOLKIT_REPACK=1): every type with a repacked "
               "kernel; --no-repack (TOOLKIT_REPACK=0): none, every mat-mul reads the mapped file. -v prints the "
               "bytes re-laid and the time it took.")


def repack_option(help: str = REPACK_HELP):
    """The ``--repack/--no-repack`` typer option (None when neither is given)."""
    return typer.Option(None, "--repack/--no-repack", help=help, show_default=False)


CTK_HELP = ("KV cache type of K (llama.cpp's -ctk): f32 (the default: exact), f16, bf16, q8_0, q4_0 (ggml's block "
            "layouts; the rows are rounded or quantized once as they are stored).")
CTV_HELP = "KV cache type of V (llama.cpp's -ctv): f32 (the default: exact), f16, bf16, q8_0, q4_0."


def cache_type_option(which: str):
    """The ``-ctk/--cache-type-k`` (which "k") or ``-ctv/--cache-type-v`` (which "v") typer option."""
    return typer.Option("f32", f"-ct{which}", f"--cache-type-{which}", help=CTK_HELP if which == "k" else CTV_HELP)


def runtime_options(repack: Optional[bool], cache_type_k: str = "f32", cache_type_v: str = "f32"):
    """:class:`toolkit.runtime.options.RuntimeOptions` from ``--repack`` (True: every type,
    False: none, None: TOOLKIT_REPACK, else auto), ``-ctk`` / ``-ctv`` (the KV cache types) and the
    environment.

    Raises:
        InputError: a TOOLKIT_* variable with a value it does not take (names it); a cache type
            that is not one (``-ctk 'q5_0': not a KV cache type (use one of f32, f16, ...)``).
    """
    from toolkit.runtime.options import RuntimeOptions
    return RuntimeOptions.from_env(repack=None if repack is None else ("all" if repack else "off"),
                                   cache_type_k=cache_type_k.strip().lower(), cache_type_v=cache_type_v.strip().lower())
