#!/usr/bin/env python3
"""Write the tiny qwen4exp (Qwen3.8-Flash-Next) checkpoint under tests/fixtures/hf/qwen4exp-tiny.

Needs torch + transformers >= 5.24 (models/qwen4_exp); run it in the dev venv, never in tests:

    /tmp/venv-dev/bin/python tools/make_qwen4exp_fixture.py [OUT_DIR]

What it makes (Qwen4ExpForCausalLM, float32, random weights, seed 0):
- 4 layers: gated delta net at 0-2, indexed (QSA) attention at 3; MoE (4 experts, top 2) with a
  gated shared expert everywhere; hyper-connections with hc_count 2, hc_lowrank 8.
- linear attention with 2 key heads and 4 value heads (so the V-head reorder is not a no-op).
- attention head_dim 64 with partial_rotary_factor 0.25 -> 16 rotary dims; interleaved M-RoPE
  sections [3, 3, 2] (sum 8 = 16 / 2: they fit the rotary half, as llama.cpp requires).
- PLE on layer 2 (1-based ``ple_layer_ids`` [2] -> 0-based layer 1, a linear-attention layer),
  ngram_size 3, heads_per_ngram 2, ngram_vocab_size_base 50 -> head vocab sizes are the primes
  53, 59, 61, 67; 240 rows padded to 256, saved by transformers as ``split_ngram_parts`` = 5
  shards (52, 52, 52, 52, 48 rows: the last one is shorter), spread over several safetensors files
  by a small ``max_shard_size``.  With vocab_size 512 the hash multipliers are up to ~2^54, above
  2^53, so a float64 round trip would change them.
- eos_token_id 2, written as an int; the 512-token byte-level BPE tokenizer of bamba-tiny.

Every parameter is randomised (norm gammas around 0, since these RMSNorms compute x * (1 + w);
the gated delta net's RMSNormGated around 1; A_log = log U(1, 16)), so a converter that drops
the +1, misorders a head or misplaces a PLE shard row shows in the data.

reference.npz (``--reference``, on the checkpoint as saved): ``tokens`` int32 [160] (EOS
tokens at 40, 41 and 97: the PLE n-gram hash restarts after each; QSA is sparse from position
budget + ratio - 1 = 11 on), ``logits`` float32 [160, 512] of one forward pass (eager
attention), ``greedy`` int32 [16], HF's greedy continuation through its own cache (a plain
argmax loop: it does not stop at EOS).

Held-back-style variants (``--variants``, next to qwen4exp-tiny; a few hundred KB each, the
same reference.npz): ``qwen4exp-hc3-tiny`` (hc_count 3, hc_lowrank 6, budget 12 / ratio 3,
a sigmoid output gate, eos_token_id a list [2, 5]: the PLE uses the first), and
``qwen4exp-ple2-tiny`` (hc_count 4, two PLE layers (ple_layer_ids [1, 3]), budget 16 /
ratio 8, heads_per_ngram 1, ngram_size 4).

    # reference.npz of an existing checkpoint (default qwen4exp-tiny, left as it is)
    /tmp/venv-hf/bin/python tools/make_qwen4exp_fixture.py --reference [DIR]
    # the held-back-style variants, each with its reference
    /tmp/venv-hf/bin/python tools/make_qwen4exp_fixture.py --variants [NAME ...]

Two more jobs, numpy only (no torch):

    # a copy of a checkpoint whose PLE table is N synthetic shards of ROWS rows (the last one
    # LAST rows), one safetensors file each, for memory measurements; --spread: the n-gram
    # heads share the whole table (so a prompt's rows land all over it)
    python tools/make_qwen4exp_fixture.py --synthetic-ple SRC OUT N ROWS [LAST] [--spread] [--row-dim=W]

    # tensor names/shapes/types/sha256 and key/values of a GGUF (llama.cpp's converter output),
    # the reference tests/parity/test_convert_qwen4exp.py compares against
    python tools/make_qwen4exp_fixture.py --summarize IN.gguf OUT.json

The llama.cpp reference is llama.cpp 0c1e570 (llama-cpp-python 0.3.36 sdist, vendor/llama.cpp):
``convert_hf_to_gguf.py tests/fixtures/hf/qwen4exp-tiny --outtype f32`` with the BPE
pre-tokenizer check forced to ``gpt-2`` (as for the other fixtures), then ``--summarize``.
"""
from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TOKENIZER_SRC = os.path.join(REPO, "tests", "fixtures", "hf", "bamba-tiny")

TEXT_CONFIG = dict(
    vocab_size=512,
    hidden_size=64,
    num_hidden_layers=4,
    layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    hidden_act="silu",
    max_position_embeddings=4096,
    initializer_range=0.08,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                     "mrope_section": [3, 3, 2], "mrope_interleaved": True},
    linear_conv_kernel_dim=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=32,
    num_experts_per_tok=2,
    num_experts=4,
    hc_count=2,
    hc_lowrank=8,
    ple_layer_ids=[2],
    ple_conv_kernel_size=4,
    ngram_size=3,
    heads_per_ngram=2,
    ngram_vocab_size_base=50,
    make_ngram_vocab_size_divisible_by=128,
    seed=1234,
    split_ngram_parts=5,
    indexer_n_heads=2,
    indexer_kv_heads=1,
    indexer_head_dim=16,
    indexer_budget=8,
    indexer_compress_ratio=4,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)


def _spread_ple_shards(out: str) -> None:
    """save_pretrained keeps the (small) PLE shards together in one file; move the odd-numbered
    ones, highest first, into a file of their own and rewrite the index, so a converter has to
    find them by name in more than one file and in no particular order."""
    from safetensors.torch import load_file, save_file

    index_path = os.path.join(out, "model.safetensors.index.json")
    with open(index_path) as f:
        index = json.load(f)
    wm = index["weight_map"]
    odd = sorted((n for n in wm if ".ngram_embedding.shard_" in n and int(n.split("shard_")[1].split(".")[0]) % 2),
                 reverse=True)
    src = wm[odd[0]]
    tensors = load_file(os.path.join(out, src))
    moved = {n: tensors.pop(n) for n in odd}
    save_file(tensors, os.path.join(out, src), metadata={"format": "pt"})
    extra = "model-ple-odd-shards.safetensors"
    save_file(moved, os.path.join(out, extra), metadata={"format": "pt"})
    for n in odd:
        wm[n] = extra
    with open(index_path, "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
        f.write("\n")


def main(out: str) -> None:
    import torch
    from transformers import Qwen4ExpForCausalLM, Qwen4ExpTextConfig

    torch.manual_seed(0)
    cfg = Qwen4ExpTextConfig(**TEXT_CONFIG)
    cfg.architectures = ["Qwen4ExpForCausalLM"]
    model = Qwen4ExpForCausalLM(cfg).eval()
    _randomize(model)
    if os.path.exists(out):
        shutil.rmtree(out)
    model.save_pretrained(out, max_shard_size="160KB")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER_SRC, f), os.path.join(out, f))

    _spread_ple_shards(out)
    reference(out)
    with open(os.path.join(out, "model.safetensors.index.json")) as f:
        wm = json.load(f)["weight_map"]
    ple = sorted((n, fn) for n, fn in wm.items() if ".ngram_embedding.shard_" in n)
    files = sorted(set(wm.values()))
    total = sum(os.path.getsize(os.path.join(out, fn)) for fn in files)
    print(f"wrote {out}: {len(wm)} tensors in {len(files)} files, {total / 1024:.0f} KiB")
    print("PLE shards:", ", ".join(f"{n.split('.')[-2]}->{fn}" for n, fn in ple))
    if len({fn for _, fn in ple}) < 2:
        sys.exit("the PLE shards landed in one file; lower max_shard_size")


N_REF = 160
EOS_AT = (40, 41, 97)


def reference(out: str, n_greedy: int = 16) -> None:
    """reference.npz for the checkpoint in ``out`` (float32, eager attention): see the docstring."""
    import torch
    from transformers import Qwen4ExpForCausalLM

    model = Qwen4ExpForCausalLM.from_pretrained(out, attn_implementation="eager", dtype=torch.float32).eval()
    cfg = model.config
    eos = cfg.eos_token_id[0] if isinstance(cfg.eos_token_id, list) else cfg.eos_token_id
    tokens = np.random.default_rng(1).integers(3, cfg.vocab_size, size=N_REF).astype(np.int32)
    tokens[list(EOS_AT)] = eos
    ids = torch.tensor(tokens[None].astype(np.int64))
    with torch.no_grad():
        logits = model(ids).logits[0].float().numpy()
        out_ = model(ids, use_cache=True)
        cache = out_.past_key_values if hasattr(out_, "past_key_values") else out_.cache
        greedy = [int(out_.logits[0, -1].argmax())]
        for _ in range(n_greedy - 1):
            o = model(torch.tensor([[greedy[-1]]]), cache=cache, use_cache=True)
            cache = o.past_key_values if hasattr(o, "past_key_values") else o.cache
            greedy.append(int(o.logits[0, -1].argmax()))
    np.savez(os.path.join(out, "reference.npz"), tokens=tokens, logits=logits.astype(np.float32),
             greedy=np.array(greedy, dtype=np.int32))
    print(f"{out}: reference {N_REF} tokens, greedy {greedy}")


VARIANTS = {
    "qwen4exp-hc3-tiny": dict(hidden_size=32, head_dim=32, num_attention_heads=2, num_key_value_heads=1,
                              moe_intermediate_size=16, shared_expert_intermediate_size=16, hc_count=3, hc_lowrank=6,
                              indexer_budget=12, indexer_compress_ratio=3, output_gate_type="sigmoid",
                              eos_token_id=[2, 5], ple_embed_dim=32, ngram_vocab_size_base=30, split_ngram_parts=2,
                              rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                               "partial_rotary_factor": 0.25, "mrope_section": [2, 1, 1],
                                               "mrope_interleaved": True}),
    "qwen4exp-ple2-tiny": dict(hidden_size=32, head_dim=32, num_attention_heads=2, num_key_value_heads=1,
                               moe_intermediate_size=16, shared_expert_intermediate_size=16, hc_count=4, hc_lowrank=4,
                               indexer_budget=16, indexer_compress_ratio=8, ple_layer_ids=[1, 3], heads_per_ngram=1,
                               ngram_size=4, ple_embed_dim=48, ngram_vocab_size_base=30, split_ngram_parts=3,
                               rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                "partial_rotary_factor": 0.25, "mrope_section": [2, 1, 1],
                                                "mrope_interleaved": True}),
    # issue 43 item 4: yarn RoPE scaling (factor 4 over 40 of the 160 reference positions, base 100, betas
    # 4 / 0.5) on the partial interleaved M-RoPE (8 of 32 dims), which the QSA indexer's q / pooled keys share
    "qwen4exp-yarn-tiny": dict(hidden_size=32, head_dim=32, num_attention_heads=2, num_key_value_heads=1,
                               moe_intermediate_size=16, shared_expert_intermediate_size=16, hc_count=3, hc_lowrank=6,
                               indexer_budget=12, indexer_compress_ratio=3, ple_embed_dim=32, ngram_vocab_size_base=30,
                               split_ngram_parts=2, max_position_embeddings=160,
                               rope_parameters={"rope_type": "yarn", "rope_theta": 100.0, "factor": 4.0,
                                                "original_max_position_embeddings": 40, "beta_fast": 4.0,
                                                "beta_slow": 0.5, "partial_rotary_factor": 0.25,
                                                "mrope_section": [2, 1, 1], "mrope_interleaved": True}),
}


def variant(name: str) -> None:
    """One held-back-style variant (VARIANTS) next to qwen4exp-tiny, with its reference."""
    import torch
    from transformers import Qwen4ExpForCausalLM, Qwen4ExpTextConfig

    out = os.path.join(REPO, "tests", "fixtures", "hf", name)
    torch.manual_seed(0)
    cfg = Qwen4ExpTextConfig(**{**TEXT_CONFIG, **VARIANTS[name]})
    cfg.architectures = ["Qwen4ExpForCausalLM"]
    model = Qwen4ExpForCausalLM(cfg).eval()
    _randomize(model)
    if os.path.exists(out):
        shutil.rmtree(out)
    model.save_pretrained(out)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER_SRC, f), os.path.join(out, f))
    reference(out)


def _randomize(model) -> None:
    import torch
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(1.0, 16.0, generator=g).log())
            elif name.endswith("linear_attn.norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif p.ndim == 1 or name.endswith("dt_bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


def _write_safetensors(path: str, arrays: dict[str, np.ndarray]) -> None:
    """A minimal safetensors writer (header, then each array's bytes, in order)."""
    names = {np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<i8"): "I64"}
    hdr, off = {"__metadata__": {"format": "pt"}}, 0
    for n, a in arrays.items():
        hdr[n] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    raw = json.dumps(hdr, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        for a in arrays.values():
            f.write(np.ascontiguousarray(a).tobytes())


def synthetic_ple(src: str, out: str, n_shards: int, rows: int, last: int | None = None, seed: int = 0,
                  spread: bool = False, row_dim: int | None = None) -> int:
    """Copy checkpoint ``src`` to ``out`` with its PLE table replaced by ``n_shards`` float32
    shards of ``rows`` rows (the last ``last`` rows), one file each, written one at a time (so
    making a multi-GB table needs one shard of memory).  With ``spread`` the n-gram heads'
    vocabulary sizes and offsets (int64 buffers) are rewritten to split the whole table between
    the heads, so the hash reaches rows all over it (a file for the runtime's memory
    measurements; HF would build other constants from config.json).  ``row_dim``: table rows of
    that width instead (ple_embed_dim and the PLE key / value projections follow, random), e.g.
    32 so that Q4_1 can take the table.  Returns the table's byte size."""
    from safetensors.numpy import load_file

    last = rows if last is None else last
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(src, "model.safetensors.index.json")) as f:
        index = json.load(f)
    wm = index["weight_map"]
    old = [n for n in wm if ".ngram_embedding.shard_" in n]
    prefix = old[0].split("shard_")[0]
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    nh = (cfg.get("ngram_size", 3) - 1) * cfg.get("heads_per_ngram", 8)
    want_dim, row_dim = row_dim, None
    rng = np.random.default_rng(seed)
    for fn in sorted(set(wm.values())):
        t = load_file(os.path.join(src, fn))
        for n in old:
            if n in t:
                row_dim = t[n].shape[1]
        keep = {n: a for n, a in t.items() if n not in old}
        if want_dim:
            for n in keep:
                if n.endswith(("ple.key_proj.weight", "ple.value_proj.weight")):
                    keep[n] = (0.08 * rng.standard_normal((keep[n].shape[0], nh * want_dim))).astype(keep[n].dtype)
        if spread:
            total_rows = rows * (n_shards - 1) + last
            for n in keep:
                n_h = keep[n].shape[0] if keep[n].ndim == 1 else 0
                if n.endswith("ngram_heads_vocab_sizes"):
                    keep[n] = np.full(n_h, total_rows // n_h - 7, dtype=np.int64)
                elif n.endswith("ngram_heads_offsets"):
                    keep[n] = np.arange(n_h, dtype=np.int64) * (total_rows // n_h)
        _write_safetensors(os.path.join(out, fn), keep)
    for n in old:
        del wm[n]
    for f in os.listdir(src):
        if not f.endswith(".safetensors") and f != "model.safetensors.index.json" and f != "config.json":
            shutil.copy(os.path.join(src, f), os.path.join(out, f))
    if want_dim:
        row_dim = want_dim
        cfg["ple_embed_dim"] = nh * want_dim
    cfg["split_ngram_parts"] = n_shards
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    total = 0
    for k in range(n_shards):
        name, fn = f"{prefix}shard_{k}.weight", f"ple-{k:05d}.safetensors"
        a = rng.standard_normal((rows if k < n_shards - 1 else last, row_dim), dtype=np.float32)
        _write_safetensors(os.path.join(out, fn), {name: a})
        total += a.nbytes
        wm[name] = fn
        del a
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
    return total


def summarize(gguf_path: str, out: str) -> None:
    """Tensor table (name, ggml shape, type, sha256 of the data) and non-tokenizer key/values
    (type name, value) of a GGUF file, as JSON."""
    import hashlib

    import gguf

    r = gguf.GGUFReader(gguf_path)
    tensors = {t.name: {"shape": [int(x) for x in t.shape], "type": t.tensor_type.name,
                        "sha256": hashlib.sha256(t.data.tobytes()).hexdigest()} for t in r.tensors}
    kv = {}
    for k, f in r.fields.items():
        if k.startswith(("GGUF.", "tokenizer.")):
            continue
        v = f.contents()
        kv[k] = {"type": [gguf.GGUFValueType(t).name for t in f.types],
                 "value": [int(x) if isinstance(x, (int, np.integer)) else x for x in v] if isinstance(v, list) else v}
    with open(out, "w") as f:
        json.dump({"source": os.path.basename(gguf_path), "tensors": tensors, "kv": kv}, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[:1] == ["--synthetic-ple"]:
        spread = "--spread" in a
        rd = next((int(x.split("=")[1]) for x in a if x.startswith("--row-dim=")), None)
        a = [x for x in a if x != "--spread" and not x.startswith("--row-dim=")]
        n = synthetic_ple(a[1], a[2], int(a[3]), int(a[4]), int(a[5]) if len(a) > 5 else None, spread=spread,
                          row_dim=rd)
        print(f"wrote {a[2]}: PLE table {n / 2**20:.1f} MiB in {a[3]} shards")
    elif a[:1] == ["--reference"]:
        reference(a[1] if len(a) > 1 else os.path.join(REPO, "tests", "fixtures", "hf", "qwen4exp-tiny"))
    elif a[:1] == ["--variants"]:
        for name in a[1:] or VARIANTS:
            variant(name)
    elif a[:1] == ["--summarize"]:
        summarize(a[1], a[2])
    else:
        main(a[0] if a else os.path.join(REPO, "tests", "fixtures", "hf", "qwen4exp-tiny"))
