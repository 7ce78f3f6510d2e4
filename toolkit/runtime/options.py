"""What a model load and its contexts do besides the weights and sizes: repacking, the BF16 GEMM's
instruction, the chunk thresholds of the scans (toolkit.h ``tk_model_params``, the ``*_min``
fields of ``tk_context_params``).

The C library reads no environment.  The CLI builds a :class:`RuntimeOptions` from its flags
and the environment (:meth:`RuntimeOptions.from_env`) and hands it to :class:`~toolkit.runtime.Model`;
the model's contexts take its thresholds unless given their own.  The environment variables:

    TOOLKIT_REPACK        0 (none), 1 (every type with a repacked kernel at the level), auto
                          (the types whose re-laid form wins: the CLI's default)
    TOOLKIT_BF16_GEMM     fma | dpbf16: the re-laid BF16 GEMM's instruction at avx512
                          (default: the machine's choice, cpu.c choose_bf16_gemm)
    TOOLKIT_SSD_MIN, TOOLKIT_GDN_MIN, TOOLKIT_KDA_MIN, TOOLKIT_LIGHTNING_MIN
                          tokens from which one sequence's run in a ubatch takes the chunked form
                          of Mamba-2's scan, the gated delta rule, KDA, lightning attention
                          (a decimal >= 0; 0: never; default: the library's measured one)

A value that is none of these is an :class:`~toolkit.errors.InputError` naming the variable.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Mapping

from toolkit.binding import ffi, lib
from toolkit.errors import InputError

REPACK_MODES = {"off": lib.TK_REPACK_OFF, "auto": lib.TK_REPACK_AUTO, "all": lib.TK_REPACK_ALL}
REPACK_ENV = {"0": "off", "1": "all", "auto": "auto"}        # TOOLKIT_REPACK's values
BF16_GEMMS = {"default": lib.TK_BF16_GEMM_DEFAULT, "fma": lib.TK_BF16_GEMM_FMA, "dpbf16": lib.TK_BF16_GEMM_DPBF16}
# the KV cache types (tk_context_params.type_k / type_v), by llama.cpp's -ctk / -ctv names
KV_TYPES = {"f32": lib.TK_KV_F32, "f16": lib.TK_KV_F16, "bf16": lib.TK_KV_BF16, "q8_0": lib.TK_KV_Q8_0,
            "q4_0": lib.TK_KV_Q4_0}
CHUNK_ENV = {"ssd_min": "TOOLKIT_SSD_MIN", "gdn_min": "TOOLKIT_GDN_MIN", "kda_min": "TOOLKIT_KDA_MIN",
             "lightning_min": "TOOLKIT_LIGHTNING_MIN"}


@dataclasses.dataclass(frozen=True)
class RuntimeOptions:
    """Options of a load (``repack``, ``bf16_gemm``) and of its contexts (the ``*_min`` thresholds).

    Attributes:
        repack:        "off" (every mat-mul reads the mapped file), "auto" (re-lay the types whose
                       re-laid form wins at the kernel level, prompt and generation: repack.c
                       tk_repack_auto) or "all" (every type with a repacked kernel: tk_repack_fast);
                       True / False mean "all" / "off".
        bf16_gemm:     "default" (the process's: the machine's choice), "fma" or "dpbf16".
        ssd_min, gdn_min, kda_min, lightning_min:
                       tokens (int >= 0) from which a sequence's run in a ubatch takes the chunked
                       form (0: never); None: the library's default (tk_ssd_threshold() ...).
        cache_type_k, cache_type_v:
                       the KV cache's K and V row types, llama.cpp's -ctk / -ctv names: "f32" (the
                       default: exact), "f16", "bf16", "q8_0", "q4_0" (KV_TYPES).

    Raises:
        InputError: a value outside these.
    """
    repack: str = "off"
    bf16_gemm: str = "default"
    ssd_min: int | None = None
    gdn_min: int | None = None
    kda_min: int | None = None
    lightning_min: int | None = None
    cache_type_k: str = "f32"
    cache_type_v: str = "f32"

    def __post_init__(self):
        if isinstance(self.repack, bool):
            object.__setattr__(self, "repack", "all" if self.repack else "off")
        if self.repack not in REPACK_MODES:
            raise InputError(f"repack={self.repack!r}: use one of {', '.join(REPACK_MODES)}")
        if self.bf16_gemm not in BF16_GEMMS:
            raise InputError(f"bf16_gemm={self.bf16_gemm!r}: use one of {', '.join(BF16_GEMMS)}")
        for flag, name in (("-ctk", "cache_type_k"), ("-ctv", "cache_type_v")):
            kv_type_id(getattr(self, name), flag)
        for name in CHUNK_ENV:
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**31):
                raise InputError(f"{name}={v!r}: must be an integer in [0, 2^31) (0: never) or None")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **given) -> "RuntimeOptions":
        """The options from the keyword arguments that are not None (a command's flags), else the
        environment's TOOLKIT_* variables (module docstring), else the CLI's defaults (repack
        "auto").

        Raises:
            InputError: a variable's value is not one of its values (``TOOLKIT_REPACK='yes' is not
                0, 1 or auto``), or a keyword is not an option.
        """
        env = os.environ if environ is None else environ
        bad = set(given) - {f.name for f in dataclasses.fields(cls)}
        if bad:
            raise InputError(f"not a runtime option: {', '.join(sorted(bad))}")
        kw = {k: v for k, v in given.items() if v is not None}
        if "repack" not in kw:
            v = env.get("TOOLKIT_REPACK")
            if v and v not in REPACK_ENV:
                raise InputError(f"TOOLKIT_REPACK={v!r} is not 0, 1 or auto (0: no repacking; 1: every type "
                                 f"with a repacked kernel; auto: where it wins, the default)")
            kw["repack"] = REPACK_ENV[v] if v else "auto"
        if "bf16_gemm" not in kw:
            v = env.get("TOOLKIT_BF16_GEMM")
            if v and v not in ("fma", "dpbf16"):
                raise InputError(f"TOOLKIT_BF16_GEMM={v!r} is not a BF16 GEMM; use one of fma, dpbf16 "
                                 f"(or unset it for this machine's choice)")
            kw["bf16_gemm"] = v or "default"
        for name, var in CHUNK_ENV.items():
            v = env.get(var)
            if name in kw or not v:
                continue
            if not v.isdigit() or int(v) >= 2**31:
                raise InputError(f"{var}={v!r} is not a token count (a decimal >= 0; 0: never)")
            kw[name] = int(v)
        return cls(**kw)

    def model_params(self) -> "ffi.CData":
        """A ``tk_model_params *`` of these options (keep it alive during tk_model_load)."""
        p = ffi.new("tk_model_params *")
        p.repack = REPACK_MODES[self.repack]
        p.bf16_gemm = BF16_GEMMS[self.bf16_gemm]
        return p

    def fill_context(self, p) -> None:
        """Set the thresholds of a ``tk_context_params *`` (None: 0, the library's default;
        0: TK_CHUNK_NEVER)."""
        for name in CHUNK_ENV:
            v = getattr(self, name)
            setattr(p, name, 0 if v is None else lib.TK_CHUNK_NEVER if v == 0 else v)
        p.type_k = KV_TYPES[self.cache_type_k]
        p.type_v = KV_TYPES[self.cache_type_v]


def kv_type_id(name: str, flag: str = "-ctk") -> int:
    """The ggml type id of a KV cache type name (KV_TYPES: f32, f16, bf16, q8_0, q4_0).

    Raises:
        InputError: another name, as ``-ctk 'q5_0': not a KV cache type (use one of f32, f16, ...)``.
    """
    if name not in KV_TYPES:
        raise InputError(f"{flag} {name!r}: not a KV cache type (use one of {', '.join(KV_TYPES)})")
    return int(KV_TYPES[name])
