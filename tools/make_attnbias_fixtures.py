"""Make the attention-side variant fixtures of issue 43 from HF (needs /work/tfvenv: torch + transformers
5.24): a family fixture with one config switch flipped (``attention_bias`` true: its biases drawn
N(0, 0.1), seeded), the other weights the base fixture's; reference.npz: the base fixture's tokens, HF's
float32 logits [T, n_vocab] and 16 greedy tokens (cache-free forward, end-of-text masked as
``min_new_tokens`` does).

    qwen35-attnbias-tiny   qwen35-tiny with attention_bias (gated attention: q_proj's bias [2 Hq hd]
                           covers the gate half)
    kimilinear-attnbias-tiny     kimilinear-var-tiny (q-LoRA) with attention_bias: the MLA layers'
                                 q_a_proj, kv_a_proj_with_mqa and o_proj biases (KimiLinearAttention)
    glm5next-attnbias-tiny       glm5next-tiny likewise (Glm5NextTextAttention; the DSA indexer reads the
                                 biased q-LoRA latent)
    bailinghybrid-attnbias-tiny  bailinghybrid-tiny likewise (BailingHybridAttention; o_proj saved as
                                 attention.dense, which HF renames on load)
    glm5next-tied-tiny           glm5next-tiny with the root config's tie_word_embeddings true (what
                                 Glm5NextConfig(tie_word_embeddings=True) saves: text_config's stays false,
                                 and HF ties by the root's) and no lm_head.weight (save_pretrained drops it)
    lfm3-attnbias-tiny           lfm3-tiny with attention_bias (q/k/v biases before the q / k norms, o's
                                 after the per-head gate; full and sliding layers)
    qwen4exp-attnbias-tiny       qwen4exp-tiny with attention_bias (the QSA layers' gated attention, as
                                 qwen35-attnbias-tiny; the indexer's projections have no bias)
    minimax-swa-tiny             minimax-tiny with sliding_window 8 (HF: every full_attention layer sees
                                 the keys j with i - 8 < j <= i)

Made by tools/make_gdn_fixtures.py's write_variant (one model.safetensors, the tokenizer links kept;
HF's class must load every tensor, each bias included, and read the changes back).

    /work/tfvenv/bin/python tools/make_attnbias_fixtures.py [OUT_DIR] [NAME ...]   # default tests/fixtures/hf
"""
from __future__ import annotations

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gdn_fixtures import main_of_variants, write_variant  # noqa: E402

_ATTN = r"model\.layers\.(\d+)\.self_attn\.([qkvo])_proj\.weight"
# the MLA layers' biased projections (group 1: the layer's attention prefix)
_MLA_RE = r"(model\.(?:language_model\.)?layers\.\d+\.(?:self_attn|attention)\.)(?:q_a_proj|kv_a_proj_with_mqa|o_proj|dense)\.weight"


def _mla(n: str, w: dict) -> bool:
    """Whether weight ``n`` of the checkpoint ``w`` is an MLA layer's q_a_proj / kv_a_proj_with_mqa /
    o_proj (dense): a layer is MLA when it has kv_a_proj_with_mqa (the KDA layers' o_proj / dense
    stay bias-free, as in HF)."""
    m = re.fullmatch(_MLA_RE, n)
    return bool(m) and m.group(1) + "kv_a_proj_with_mqa.weight" in w


# name: (base fixture, config.json changes (into text_config where the base has one), weight patterns
# that get a bias, seed)
SPECS = {"qwen35-attnbias-tiny": ("qwen35-tiny", dict(attention_bias=True), (_ATTN,), 451),
         "kimilinear-attnbias-tiny": ("kimilinear-var-tiny", dict(attention_bias=True), (_mla,), 452),
         "glm5next-attnbias-tiny": ("glm5next-tiny", dict(attention_bias=True), (_mla,), 453),
         "bailinghybrid-attnbias-tiny": ("bailinghybrid-tiny", dict(attention_bias=True), (_mla,), 454),
         "glm5next-tied-tiny": ("glm5next-tiny", {}, (), 455),
         "lfm3-attnbias-tiny": ("lfm3-tiny", dict(attention_bias=True), (_ATTN,), 457),
         "qwen4exp-attnbias-tiny": ("qwen4exp-tiny", dict(attention_bias=True), (_ATTN,), 458),
         "minimax-swa-tiny": ("minimax-tiny", dict(sliding_window=8), (), 456)}
# name: changes to the root of config.json (not text_config), tensors left out of the checkpoint
ROOT_CHANGES = {"glm5next-tied-tiny": dict(tie_word_embeddings=True)}
DROP = {"glm5next-tied-tiny": (r"lm_head\.weight",)}


def make(name: str, out_root: str, src_root: str) -> None:
    base, changes, biased, seed = SPECS[name]
    write_variant(os.path.join(out_root, name), os.path.join(src_root, base), changes, biased, seed,
                  dropped=DROP.get(name, ()), root_changes=ROOT_CHANGES.get(name))


if __name__ == "__main__":
    main_of_variants(sys.argv[1:], SPECS, make)
