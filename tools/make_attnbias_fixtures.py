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

    /work/tfvenv/bin/python tools/make_attnbias_fixtures.py [OUT_DIR] [NAME ...]   # default tests/fixtures/hf
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ATTN = r"model\.layers\.(\d+)\.self_attn\.([qkvo])_proj\.weight"
# the MLA layers' biased projections (group 1: the layer's attention prefix); a layer is MLA when it has
# kv_a_proj_with_mqa (the KDA layers' o_proj / dense stay bias-free, as in HF)
_MLA = r"(model\.(?:language_model\.)?layers\.\d+\.(?:self_attn|attention)\.)(?:q_a_proj|kv_a_proj_with_mqa|o_proj|dense)\.weight"
# name: (base fixture, config.json changes (into text_config where the base has one), weight patterns
# that get a bias, seed)
SPECS = {"qwen35-attnbias-tiny": ("qwen35-tiny", dict(attention_bias=True), (_ATTN,), 451),
         "kimilinear-attnbias-tiny": ("kimilinear-var-tiny", dict(attention_bias=True), (_MLA,), 452),
         "glm5next-attnbias-tiny": ("glm5next-tiny", dict(attention_bias=True), (_MLA,), 453),
         "bailinghybrid-attnbias-tiny": ("bailinghybrid-tiny", dict(attention_bias=True), (_MLA,), 454),
         "glm5next-tied-tiny": ("glm5next-tiny", {}, (), 455),
         "lfm3-attnbias-tiny": ("lfm3-tiny", dict(attention_bias=True), (_ATTN,), 457),
         "qwen4exp-attnbias-tiny": ("qwen4exp-tiny", dict(attention_bias=True), (_ATTN,), 458),
         "minimax-swa-tiny": ("minimax-tiny", dict(sliding_window=8), (), 456)}
# name: changes to the root of config.json (not text_config), tensors left out of the checkpoint
ROOT_CHANGES = {"glm5next-tied-tiny": dict(tie_word_embeddings=True)}
DROP = {"glm5next-tied-tiny": ("lm_head.weight",)}


def _biased(n: str, w: dict, patterns) -> bool:
    for p in patterns:
        m = re.fullmatch(p, n)
        if m and (p is not _MLA or m.group(1) + "kv_a_proj_with_mqa.weight" in w):
            return True
    return False


def make(name: str, out_root: str, src_root: str) -> None:
    import torch
    import transformers
    from safetensors.numpy import load_file, save_file

    base, changes, biased, seed = SPECS[name]
    src, out = os.path.join(src_root, base), os.path.join(out_root, name)
    rng = np.random.default_rng(seed)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    for f in ("generation_config.json",):
        if os.path.exists(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), out)
    cfg = json.load(open(os.path.join(src, "config.json")))
    (cfg["text_config"] if "text_config" in cfg else cfg).update(changes)
    cfg.update(ROOT_CHANGES.get(name, {}))
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=2, sort_keys=True)
    w = {}
    for f in sorted(os.listdir(src)):
        if f.endswith(".safetensors"):
            w.update(load_file(os.path.join(src, f)))
    for n in DROP.get(name, ()):
        del w[n]
    for n in sorted(w):
        if _biased(n, w, biased):
            w[n[:-len("weight")] + "bias"] = (0.1 * rng.standard_normal(w[n].shape[0])).astype(np.float32)
    save_file(dict(sorted(w.items())), os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    torch.manual_seed(0)
    cls = getattr(transformers, cfg["architectures"][0], transformers.AutoModelForCausalLM)
    model, info = cls.from_pretrained(out, dtype=torch.float32, output_loading_info=True)
    model.eval()
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    n_bias = sum(1 for n in model.state_dict() if re.search(r"self_attn\.[a-z_]*_(?:proj|mqa)\.bias$", n))
    assert n_bias == sum(1 for n in w if n.endswith(".bias") and _biased(n[:-4] + "weight", w, biased)), n_bias
    tokens = np.load(os.path.join(src, "reference.npz"))["tokens"]
    eos = cfg.get("eos_token_id", cfg.get("text_config", {}).get("eos_token_id"))
    with torch.no_grad():
        logits = model(torch.tensor(tokens[None], dtype=torch.long), use_cache=False).logits[0].float().numpy()
        seq = [int(t) for t in tokens]
        greedy = []
        for _ in range(16):
            lg = model(torch.tensor([seq], dtype=torch.long), use_cache=False).logits[0, -1].clone()
            lg[eos] = -float("inf")
            greedy.append(int(lg.argmax()))
            seq.append(greedy[-1])
    np.savez(os.path.join(out, "reference.npz"), tokens=tokens, logits=logits.astype(np.float32),
             greedy=np.array(greedy, dtype=np.int32))


def main(argv: list[str]) -> None:
    out_root = argv[0] if argv else os.path.join(REPO, "tests", "fixtures", "hf")
    src_root = os.path.join(REPO, "tests", "fixtures", "hf")
    for name in argv[1:] or list(SPECS):
        make(name, out_root, src_root)


if __name__ == "__main__":
    main(sys.argv[1:])
