"""RoPE scaling (HF ``rope_parameters`` / ``rope_scaling`` types ``linear`` and ``yarn``) as
llama.cpp's GGUF keys (``{arch}.rope.scaling.*``), for the families whose HF rotary embedding takes
its frequencies from ``ROPE_INIT_FUNCTIONS`` (transformers 5.24 modeling_rope_utils.py).

    linear  rope.scaling.type "linear", rope.scaling.factor
    yarn    rope.scaling.type "yarn", rope.scaling.factor, rope.scaling.original_context_length,
            rope.scaling.yarn_beta_fast / yarn_beta_slow (when not HF's 32 / 1), and
            rope.scaling.attn_factor = HF's attention_factor / (0.1 ln(factor) + 1) when HF's is not
            that default (given, or from mscale / mscale_all_dim): llama.cpp multiplies its own
            yarn scale by rope.scaling.attn_factor (llama-context.cpp), so the product is HF's

The runtime reads the same keys (toolkit/arch/readers.py read_rope_scaling; kernels/ops.c
tk_rope_scaling_of), as llama.cpp runs them.  Not converted (ConfigKeys refuses the type):
``dynamic`` (HF re-bases per forward call by its length, so its logits depend on how the
prompt is split; llama.cpp has no such type), ``llama3`` and ``longrope`` (llama.cpp writes them as
rope_freqs / rope_factors_* tensors, which its hybrid architectures do not load), and yarn with
``truncate`` false (llama.cpp always truncates the ramp's ends).
"""
from __future__ import annotations

import math
from typing import Any, Callable

from toolkit.convert.plan import KV, kv_f32, kv_str, kv_u32
from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io.constants import Keys

# the rope_type values a family whose HF model runs ROPE_INIT_FUNCTIONS converts with this module
SCALED_ROPE_TYPES = ("default", "linear", "yarn")
# why the other types stay refused there (ConfigKeys.rope_why)
SCALED_WHY = ("dynamic re-bases per HF forward call by its length (the logits depend on how the prompt "
              "is split) and llama.cpp has no such type; llama3 / longrope are tensors in llama.cpp "
              "(rope_freqs, rope_factors_*) that its hybrid architectures do not load")


def _params(c) -> dict[str, Any]:
    """The one RoPE dict of config.json: ``rope_parameters`` (transformers 5) or ``rope_scaling`` (4)."""
    for key in ("rope_parameters", "rope_scaling"):
        rp = c.d.get(key)
        if isinstance(rp, dict) and (rp.get("rope_type") or rp.get("type")) not in (None, "default"):
            return rp
    return {}


def _number(c, name: str, v: Any, positive: bool = True) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (positive and not v > 0):
        raise InputError(f"{c.path}: key 'rope_parameters.{name}' = {v!r} must be a positive number")
    return float(v)


def _mscale(scale: float, m: float = 1.0) -> float:
    """HF's get_mscale (modeling_rope_utils.py _compute_yarn_parameters)."""
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def rope_scaling_kv(c, key: Callable[[str], str]) -> list[KV]:
    """llama.cpp's ``rope.scaling.*`` keys for config ``c`` (an HFConfig; ``key`` formats a key
    template for the architecture); [] for the default RoPE.

    Raises:
        InputError: a factor / context / beta that is not a positive number (names config.json and the key).
        UnsupportedError: yarn with ``truncate`` false.
    """
    rp = _params(c)
    t = rp.get("rope_type") or rp.get("type")
    if t is None:
        return []
    factor = rp.get("factor")
    if t == "linear":
        return [kv_str(key(Keys.Rope.SCALING_TYPE), "linear"),
                kv_f32(key(Keys.Rope.SCALING_FACTOR), _number(c, "factor", factor))]
    # yarn (ConfigKeys refused every other type before this runs)
    orig = rp.get("original_max_position_embeddings", c.d.get("original_max_position_embeddings"))
    if orig is None:      # HF's standardize_rope_params: max_position_embeddings
        orig = c.d.get("max_position_embeddings")
    orig = int(_number(c, "original_max_position_embeddings", orig))
    if factor is None:    # HF: max_position_embeddings / original_max_position_embeddings
        factor = _number(c, "max_position_embeddings", c.d.get("max_position_embeddings")) / orig
    factor = _number(c, "factor", factor)
    if rp.get("truncate", True) is not True:
        raise UnsupportedError(f"{c.path}: key 'rope_parameters.truncate' = false is not supported "
                               f"(only true: llama.cpp's yarn always truncates the ramp's ends)")
    kv = [kv_str(key(Keys.Rope.SCALING_TYPE), "yarn"),
          kv_f32(key(Keys.Rope.SCALING_FACTOR), factor),
          kv_u32(key(Keys.Rope.SCALING_ORIG_CTX_LEN), orig)]
    for name, hf_default, k in (("beta_fast", 32.0, Keys.Rope.SCALING_YARN_BETA_FAST),
                                ("beta_slow", 1.0, Keys.Rope.SCALING_YARN_BETA_SLOW)):
        v = rp.get(name) or hf_default          # HF: `rope_parameters.get(name) or default`
        if _number(c, name, v) != hf_default:
            kv.append(kv_f32(key(k), v))
    af = rp.get("attention_factor")
    if af is None:
        m, m_all = rp.get("mscale"), rp.get("mscale_all_dim")
        af = (_mscale(factor, _number(c, "mscale", m)) / _mscale(factor, _number(c, "mscale_all_dim", m_all))
              if m and m_all else _mscale(factor))
    af = _number(c, "attention_factor", af)
    if af != _mscale(factor):
        kv.append(kv_f32(key(Keys.Rope.SCALING_ATTN_FACTOR), af / _mscale(factor)))
    return kv


def mla_softmax_mscale(c) -> float:
    """HF's DeepSeek-style softmax factor of an MLA (transformers 5.24 modeling_bailing_hybrid.py
    yarn_apply_mscale): ``mscale(factor, mscale_all_dim)^2`` when ``rope_parameters`` has a type other
    than default and a non-zero ``mscale_all_dim``; else 1.

    Raises:
        InputError: a factor or mscale_all_dim that is not a positive number (names config.json and the key).
    """
    rp = _params(c)
    m_all = rp.get("mscale_all_dim")
    if not rp or not m_all:
        return 1.0
    m = _mscale(_number(c, "factor", rp.get("factor")), _number(c, "mscale_all_dim", m_all))
    return m * m
