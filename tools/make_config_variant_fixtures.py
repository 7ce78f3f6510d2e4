"""Make the config-variant fixtures of issue 43 that need no torch: a family fixture with flags
flipped in config.json, the tensors the flags add drawn at random (seeded), the ones they remove
dropped, and reference.npz computed by the family's float64 NumPy forward (tests/mamba_ref.py,
tests/lara_ref.py),
which tests/parity/test_config_variants.py first checks against the base fixture's HF logits.

    bamba-bias-tiny          bamba-tiny with attention_bias (q/k/v/o_proj biases), mlp_bias
                             (feed_forward gate/up/down_proj biases), mamba_proj_bias (in_proj /
                             out_proj biases), mamba_conv_bias false (no conv1d.bias) and
                             tie_word_embeddings true (no lm_head)
    granitehybrid-bias-tiny  granitehybrid-moe-tiny with attention_bias, mamba_proj_bias,
                             mamba_conv_bias false, RoPE (position_embedding_type "rope") and
                             multipliers other than 1
    mamba2-bias-tiny         mamba2-tiny with use_bias (in_proj / out_proj biases), use_conv_bias
                             false and tie_word_embeddings false (an lm_head)
    mamba-bias-tiny          mamba-tiny with use_bias, use_conv_bias false, tie_word_embeddings false
    falconmamba-bias-tiny    falconmamba-tiny with use_bias, use_conv_bias false
    jamba-bias-tiny          jamba-tiny with mamba_proj_bias (in_proj / out_proj biases) and mamba_conv_bias false
    nemotronh-bias-tiny      nemotronh-dense-tiny with use_bias, use_conv_bias false and mlp_bias
                             (the ReLU² MLP's up / down_proj biases)
    laramini-var-tiny        laramini-tiny with attention_bias, norm_topk_prob false (top-k weights
                             not renormalised) and tie_word_embeddings false (reference: tests/lara_ref.py)

Biases N(0, 0.1); an added lm_head N(0, 0.08), as the fixtures' matrices.  reference.npz: the base
fixture's tokens, float32 logits of the float64 forward, and its 16 greedy tokens (cache-free
forward, end-of-text suppressed as HF ``generate`` with ``min_new_tokens`` does).

    python tools/make_config_variant_fixtures.py [OUT_DIR] [NAME ...]   # default tests/fixtures/hf
"""
from __future__ import annotations

import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mamba_ref  # noqa: E402
from make_gdn_fixtures import main_of_variants, variant_files  # noqa: E402

_ATTN = r"model\.layers\.(\d+)\.self_attn\.([qkvo])_proj\.weight"
_MLP = r"model\.layers\.(\d+)\.feed_forward\.(gate|up|down)_proj\.weight"
_SSM = r"(model|backbone)\.layers\.(\d+)\.(mamba|mixer)\.(in|out)_proj\.weight"
_RELU2 = r"backbone\.layers\.(\d+)\.mixer\.(up|down)_proj\.weight"
_CONV_B = r"(model|backbone)\.layers\.\d+\.(mamba|mixer)\.conv1d\.bias"

# name: (base fixture, config.json changes, weight patterns that get a bias, patterns dropped,
#        add an lm_head, seed)
SPECS = {
    "bamba-bias-tiny": ("bamba-tiny", dict(attention_bias=True, mlp_bias=True, mamba_proj_bias=True,
                                           mamba_conv_bias=False, tie_word_embeddings=True),
                        (_ATTN, _MLP, _SSM), (_CONV_B, r"lm_head\.weight"), False, 431),
    "granitehybrid-bias-tiny": ("granitehybrid-moe-tiny", dict(
        attention_bias=True, mamba_proj_bias=True, mamba_conv_bias=False, position_embedding_type="rope",
        embedding_multiplier=2.0, attention_multiplier=0.3, residual_multiplier=0.7, logits_scaling=1.5),
        (_ATTN, _SSM), (_CONV_B,), False, 432),
    "mamba2-bias-tiny": ("mamba2-tiny", dict(use_bias=True, use_conv_bias=False, tie_word_embeddings=False),
                         (_SSM,), (_CONV_B,), True, 433),
    "mamba-bias-tiny": ("mamba-tiny", dict(use_bias=True, use_conv_bias=False, tie_word_embeddings=False),
                        (_SSM,), (_CONV_B,), True, 434),
    "falconmamba-bias-tiny": ("falconmamba-tiny", dict(use_bias=True, use_conv_bias=False), (_SSM,), (_CONV_B,), False, 435),
    "jamba-bias-tiny": ("jamba-tiny", dict(mamba_proj_bias=True, mamba_conv_bias=False), (_SSM,), (_CONV_B,), False, 438),
    "nemotronh-bias-tiny": ("nemotronh-dense-tiny", dict(use_bias=True, use_conv_bias=False, mlp_bias=True),
                            (_SSM, _RELU2), (_CONV_B,), False, 437),
    "laramini-var-tiny": ("laramini-tiny", dict(attention_bias=True, norm_topk_prob=False, tie_word_embeddings=False),
                          (_ATTN,), (), True, 436),
}


def make(name: str, out_root: str, src_root: str) -> None:
    base, changes, biased, dropped, lm_head, seed = SPECS[name]
    src, out = os.path.join(src_root, base), os.path.join(out_root, name)
    cfg = variant_files(out, src, changes, biased, seed, dropped, lm_head)
    tokens = np.load(os.path.join(src, "reference.npz"))["tokens"]
    eos = cfg["eos_token_id"]
    np.savez(os.path.join(out, "reference.npz"), tokens=tokens,
             logits=mamba_ref.logits(out, tokens).astype(np.float32),
             greedy=np.array(mamba_ref.greedy(out, tokens, 16, (eos,)), dtype=np.int32))


if __name__ == "__main__":
    main_of_variants(sys.argv[1:], SPECS, make)
