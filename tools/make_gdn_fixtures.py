"""Make the held-back-style gated-delta-net fixtures (tests/fixtures/hf/*), checkpoints the
first round of fixtures does not cover:

    qwen35-dkdv-tiny      Qwen3_5ForCausalLM, Dk 16 != Dv 32, Hk 2 / Hv 6 (r = 3), attention at 2 of 4
    qwen3next-dkdv-tiny   Qwen3NextForCausalLM, Dk 16 != Dv 32, attention at layers 0 and 4 of 5, tied embeddings
    qwen35moe-pattern-tiny Qwen3_5MoeForCausalLM, no layer_types in config.json: full_attention_interval 3
                          (attention at 2 and 5 of 6), Hk = Hv (no V-head reorder)
    qwen3next-yarn-tiny   Qwen3NextForCausalLM, rope_parameters yarn (factor 4 over 16 positions, betas 8 / 0.5)
                          on partial RoPE 16 of 32, base 100 (issue 43 item 4)
    qwen35-linear-tiny    Qwen3_5ForCausalLM, rope_parameters linear (factor 4) with interleaved M-RoPE
                          sections, partial 16 of 32, base 100 (issue 43 item 4)
    qwen35moe-yarn-tiny   Qwen3_5MoeForCausalLM, rope_parameters yarn (factor 8 over 12 positions, attention_factor
                          0.9) with M-RoPE sections, 16 of 32 dims, base 200 (issue 43 item 4)
    qwen35-mtp-tiny       Qwen3_5ForCausalLM with synthetic mtp.* tensors (one MTP layer, dense MLP)
                          added to a shard after save_pretrained (which drops them)
    qwen35moe-vl-tiny     Qwen3_5MoeForConditionalGeneration: a tiny vision tower (model.visual.*), text
                          weights under model.language_model.*, config in text_config, and an MTP
                          layer with per-expert MoE (mtp.*)

Runs only where torch and transformers 5.24 are installed (the ``[dev]`` extra; here
/tmp/venv-hf), never in the tests:

    /tmp/venv-hf/bin/python tools/make_gdn_fixtures.py [OUT_DIR] [NAME ...]   # default tests/fixtures/hf
    python tools/make_gdn_fixtures.py --summarize IN.gguf OUT.json            # gguf + numpy only

``--summarize`` writes what tests/parity/test_convert_gdn.py compares against (the references
tests/fixtures/llamacpp/NAME.f32.summary.json): every tensor's ggml shape, type and sha256,
the values of the ``ssm_a`` tensors (llama.cpp computes -exp in float32, we round the float64
result, so they may differ by 1 ulp), and every non-tokenizer key/value.  The llama.cpp files
come from llama.cpp 0c1e570's ``convert_hf_to_gguf.py NAME --outtype f32`` (``--no-mtp`` for
checkpoints without mtp.* tensors, which it otherwise asserts on) with the BPE pre-tokenizer
check forced to ``gpt-2``, as for the reference set.

Like the reference set (round 2): seeded; initializer_range 0.08, every parameter redrawn:
matrices and conv kernels N(0, 0.08); zero-centred RMSNorm gammas (HF computes x (1 + w):
input/post-attention/final/q/k norms) N(0, 0.1) around 0; the gated norm (``linear_attn.norm``,
x w) 1 + N(0, 0.1); A_log = log U(1, 16); dt_bias N(0, 0.1).  Several safetensors shards
(max_shard_size 160KB); the 512-token tokenizer of tests/fixtures/hf/qwen35-tiny.
reference.npz: ``tokens`` (64 tokens of Python source, int32), ``logits`` [64, 512] float32
(eager attention), ``greedy`` (16 tokens from HF ``generate``, greedy, its own cache).

MTP tensors (names and shapes of the real Qwen3.5 checkpoints; HF's modeling ignores them:
``_keys_to_ignore_on_load_unexpected = [r"^mtp.*"]``): mtp.fc [D, 2D], mtp.pre_fc_norm_embedding
[D], mtp.pre_fc_norm_hidden [D], mtp.norm [D], and one decoder layer mtp.layers.0.* (input /
post-attention norms, self_attn q_proj [2 Hq hd, D], k/v/o_proj, q/k_norm, the family's MLP).
"""
from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TOKENIZER_SRC = os.path.join(REPO, "tests", "fixtures", "hf", "qwen35-tiny")
N_TOKENS, N_GREEDY = 64, 16

SOURCE = '''import os
import sys


def read_lines(path: str) -> list[str]:
    """Return the lines of a text file."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\\n") for line in f]


class Counter:
    def __init__(self):
        self.counts = {}

    def add(self, key, n=1):
        self.counts[key] = self.counts.get(key, 0) + n
        return self.counts[key]


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(name, len(read_lines(name)))
'''

_BASE = dict(vocab_size=512, hidden_size=64, hidden_act="silu", max_position_embeddings=32768,
             initializer_range=0.08, rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=0, pad_token_id=1,
             attention_bias=False, linear_conv_kernel_dim=4)
_MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24, shared_expert_intermediate_size=32)

SPECS = {
    "qwen35-dkdv-tiny": dict(
        cls="Qwen3_5ForCausalLM", conf="Qwen3_5TextConfig", seed=11,
        text=dict(_BASE, num_hidden_layers=4, intermediate_size=96, tie_word_embeddings=False,
                  layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                  linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=16, linear_value_head_dim=32,
                  rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5,
                                       mrope_section=[3, 3, 2], mrope_interleaved=True))),
    "qwen3next-dkdv-tiny": dict(
        cls="Qwen3NextForCausalLM", conf="Qwen3NextConfig", seed=12,
        text=dict(_BASE, **_MOE, num_hidden_layers=5, intermediate_size=96, tie_word_embeddings=True,
                  layer_types=["full_attention", "linear_attention", "linear_attention", "linear_attention",
                               "full_attention"],
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, decoder_sparse_step=1,
                  mlp_only_layers=[], norm_topk_prob=True,
                  linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=32,
                  rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25))),
    # issue 43 item 4: RoPE scaling past the original context, on partial NEOX RoPE (16 of 32 dims, base 100)
    "qwen3next-yarn-tiny": dict(
        cls="Qwen3NextForCausalLM", conf="Qwen3NextConfig", seed=15,
        text=dict(_BASE, **_MOE, num_hidden_layers=3, intermediate_size=96, tie_word_embeddings=False,
                  layer_types=["linear_attention", "full_attention", "linear_attention"],
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, decoder_sparse_step=1,
                  mlp_only_layers=[], norm_topk_prob=True, max_position_embeddings=64,
                  linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                  rope_parameters=dict(rope_type="yarn", rope_theta=100.0, partial_rotary_factor=0.5, factor=4.0,
                                       original_max_position_embeddings=16, beta_fast=8.0, beta_slow=0.5))),
    "qwen35-linear-tiny": dict(
        cls="Qwen3_5ForCausalLM", conf="Qwen3_5TextConfig", seed=14,
        text=dict(_BASE, num_hidden_layers=3, intermediate_size=96, tie_word_embeddings=False,
                  layer_types=["linear_attention", "full_attention", "linear_attention"],
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=64,
                  linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                  rope_parameters=dict(rope_type="linear", rope_theta=100.0, partial_rotary_factor=0.5, factor=4.0,
                                       mrope_section=[3, 3, 2], mrope_interleaved=True))),
    "qwen35moe-yarn-tiny": dict(
        cls="Qwen3_5MoeForCausalLM", conf="Qwen3_5MoeTextConfig", seed=16,
        text=dict(_BASE, **_MOE, num_hidden_layers=3, tie_word_embeddings=False,
                  layer_types=["linear_attention", "linear_attention", "full_attention"],
                  num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=96,
                  linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16, linear_value_head_dim=16,
                  rope_parameters=dict(rope_type="yarn", rope_theta=200.0, partial_rotary_factor=0.5, factor=8.0,
                                       original_max_position_embeddings=12, attention_factor=0.9,
                                       mrope_section=[3, 3, 2], mrope_interleaved=True))),
    "qwen35moe-pattern-tiny": dict(
        cls="Qwen3_5MoeForCausalLM", conf="Qwen3_5MoeTextConfig", seed=13, drop_layer_types=True,
        text=dict(_BASE, **_MOE, num_hidden_layers=6, tie_word_embeddings=False, full_attention_interval=3,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                  linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16, linear_value_head_dim=16,
                  rope_parameters=dict(rope_type="default", rope_theta=1000000.0, partial_rotary_factor=0.25,
                                       mrope_section=[2, 1, 1], mrope_interleaved=True))),
    "qwen35-mtp-tiny": dict(
        cls="Qwen3_5ForCausalLM", conf="Qwen3_5TextConfig", seed=14, mtp=True,
        text=dict(_BASE, num_hidden_layers=4, intermediate_size=128, tie_word_embeddings=False,
                  layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
                  num_attention_heads=4, num_key_value_heads=1, head_dim=32,
                  linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                  rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25,
                                       mrope_section=[2, 1, 1], mrope_interleaved=True))),
    "qwen35moe-vl-tiny": dict(
        cls="Qwen3_5MoeForConditionalGeneration", conf="Qwen3_5MoeConfig", seed=15, mtp=True,
        vision=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=4,
                    spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64, num_position_embeddings=16,
                    initializer_range=0.08),
        text=dict(_BASE, **_MOE, num_hidden_layers=4, tie_word_embeddings=False,
                  layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                  rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5,
                                       mrope_section=[2, 1, 1], mrope_interleaved=True))),
}


def _redraw(torch, named, g) -> None:
    """Every parameter redrawn (see the module docstring)."""
    with torch.no_grad():
        for name, p in named:
            if name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(1.0, 16.0, generator=g).log())
            elif name.endswith("linear_attn.norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif p.ndim == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


def _mtp_tensors(torch, t: dict, g) -> dict:
    """Synthetic MTP head of one layer, shaped as real Qwen3.5 checkpoints' mtp.* tensors."""
    D, hd, nh, nkv = t["hidden_size"], t["head_dim"], t["num_attention_heads"], t["num_key_value_heads"]

    def w(*shape):
        return (0.08 * torch.randn(shape, generator=g)).contiguous()

    def z(n):   # zero-centred gamma
        return (0.1 * torch.randn((n,), generator=g)).contiguous()

    p = "mtp.layers.0."
    out = {"mtp.fc.weight": w(D, 2 * D), "mtp.pre_fc_norm_embedding.weight": z(D),
           "mtp.pre_fc_norm_hidden.weight": z(D), "mtp.norm.weight": z(D),
           p + "input_layernorm.weight": z(D), p + "post_attention_layernorm.weight": z(D),
           p + "self_attn.q_proj.weight": w(2 * nh * hd, D), p + "self_attn.k_proj.weight": w(nkv * hd, D),
           p + "self_attn.v_proj.weight": w(nkv * hd, D), p + "self_attn.o_proj.weight": w(D, nh * hd),
           p + "self_attn.q_norm.weight": z(hd), p + "self_attn.k_norm.weight": z(hd)}
    if "num_experts" in t:
        E, F, Fs = t["num_experts"], t["moe_intermediate_size"], t["shared_expert_intermediate_size"]
        out[p + "mlp.gate.weight"] = w(E, D)
        for e in range(E):
            out[p + f"mlp.experts.{e}.gate_proj.weight"] = w(F, D)
            out[p + f"mlp.experts.{e}.up_proj.weight"] = w(F, D)
            out[p + f"mlp.experts.{e}.down_proj.weight"] = w(D, F)
        out.update({p + "mlp.shared_expert.gate_proj.weight": w(Fs, D), p + "mlp.shared_expert.up_proj.weight": w(Fs, D),
                    p + "mlp.shared_expert.down_proj.weight": w(D, Fs), p + "mlp.shared_expert_gate.weight": w(1, D)})
    else:
        F = t["intermediate_size"]
        out.update({p + "mlp.gate_proj.weight": w(F, D), p + "mlp.up_proj.weight": w(F, D),
                    p + "mlp.down_proj.weight": w(D, F)})
    return out


def _add_to_last_shard(out: str, tensors: dict) -> None:
    """Append ``tensors`` to the last shard of a saved checkpoint and list them in the index."""
    from safetensors.torch import load_file, save_file

    index_path = os.path.join(out, "model.safetensors.index.json")
    with open(index_path) as f:
        index = json.load(f)
    wm = index["weight_map"]
    last = sorted(set(wm.values()))[-1]
    have = load_file(os.path.join(out, last))
    have.update(tensors)
    save_file(have, os.path.join(out, last), metadata={"format": "pt"})
    wm.update({n: last for n in tensors})
    index["weight_map"] = dict(sorted(wm.items()))
    with open(index_path, "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


def _drop_layer_types(out: str, interval: int) -> None:
    """config.json without layer_types, with full_attention_interval (HF's other form; the
    config class built layer_types from the same interval, so the weights agree)."""
    path = os.path.join(out, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg.pop("layer_types")
    cfg["full_attention_interval"] = interval
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def tokens_of_source() -> np.ndarray:
    """The first N_TOKENS token ids of the source text, int32."""
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(os.path.join(TOKENIZER_SRC, "tokenizer.json")).encode(SOURCE).ids
    if len(ids) < N_TOKENS:
        sys.exit(f"the source text gives only {len(ids)} tokens")
    return np.asarray(ids[:N_TOKENS], dtype=np.int32)


def hf_reference(model, tokens: np.ndarray, eos: int | None = None, min_new: bool = True):
    """HF's reference of ``model`` on ``tokens`` [T] int32: (logits [T, n_vocab] float32, greedy
    [N_GREEDY] int32).  The greedy tokens are HF ``generate``'s (greedy, its own cache;
    ``min_new_tokens`` = N_GREEDY when ``min_new``) or, with ``eos``, the cache-free forward's
    argmax with ``eos`` masked (as ``min_new_tokens`` does)."""
    import torch

    ids = torch.tensor(tokens[None].astype(np.int64))
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits[0].float().numpy().astype(np.float32)
        if eos is None:
            extra = dict(min_new_tokens=N_GREEDY) if min_new else {}
            gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=N_GREEDY,
                                 do_sample=False, **extra)
            return logits, gen[0, len(tokens):].numpy().astype(np.int32)
        seq, greedy = [int(t) for t in tokens], []
        for _ in range(N_GREEDY):
            lg = model(torch.tensor([seq], dtype=torch.long), use_cache=False).logits[0, -1].clone()
            lg[eos] = -float("inf")
            greedy.append(int(lg.argmax()))
            seq.append(greedy[-1])
    return logits, np.array(greedy, dtype=np.int32)


def save_reference(out: str, tokens: np.ndarray, logits: np.ndarray, greedy: np.ndarray, extra: str = "",
                   budget_mib: float = 1.4) -> None:
    """reference.npz (``tokens``, ``logits``, ``greedy``) at ``out``; prints the fixture's size and
    exits when it is over the budget (1.4 MiB unless the base fixture was larger)."""
    import transformers

    np.savez(os.path.join(out, "reference.npz"), tokens=tokens, logits=logits, greedy=greedy)
    files = [os.path.join(out, f) for f in sorted(os.listdir(out))]
    total = sum(os.path.getsize(f) for f in files if not os.path.islink(f))   # links: the shared tokenizer
    print(f"wrote {out}: {total / 1024:.0f} KiB, greedy {greedy.tolist()}{extra}, transformers {transformers.__version__}")
    if total > budget_mib * 2**20:
        sys.exit(f"{out} is {total / 2**20:.2f} MiB, over the {budget_mib} MiB fixture budget")


def write_fixture(model, out: str, reload=None, edit_config=None, describe=None, after_save=None,
                  min_new: bool = True) -> None:
    """Save ``model`` as a fixture at ``out`` (replaced): safetensors shards of 160KB, this
    module's tokenizer, and reference.npz (the N_TOKENS prompt tokens, their float32 logits, the
    N_GREEDY greedy tokens of HF ``generate``, with ``min_new_tokens`` when ``min_new``: see
    :func:`hf_reference`).  ``reload(out)`` reads the saved checkpoint back, which must reproduce
    the logits (None: not checked); ``edit_config(dict)`` rewrites config.json after saving;
    ``after_save(out)`` edits the saved files further; ``describe(reloaded)`` adds to the printed
    line.  Exits when the fixture is over the 1.4 MiB budget."""
    import torch

    if os.path.exists(out):
        shutil.rmtree(out)
    model.save_pretrained(out, max_shard_size="160KB")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER_SRC, f), os.path.join(out, f))
    if edit_config is not None:
        path = os.path.join(out, "config.json")
        with open(path) as fh:
            c = json.load(fh)
        edit_config(c)
        with open(path, "w") as fh:
            json.dump(c, fh, indent=2)
    if after_save is not None:
        after_save(out)
    tokens = tokens_of_source()
    logits, greedy = hf_reference(model, tokens, min_new=min_new)
    extra = ""
    if reload is not None:
        re = reload(out)   # the saved checkpoint reproduces the logits (what the tests convert is what was run)
        with torch.no_grad():
            again = re(input_ids=torch.tensor(tokens[None].astype(np.int64))).logits[0].float().numpy()
        assert np.array_equal(again, logits), "reloaded checkpoint gives other logits"
        extra = f", {describe(re)}" if describe is not None else ""
    save_reference(out, tokens, logits, greedy, extra)


def copy_tokenizer(src: str, out: str, more=()) -> None:
    """tokenizer.json and tokenizer_config.json of the fixture at ``src`` into ``out``: its links
    to tests/fixtures/tokenizer/ kept as links, files copied; the files ``more`` copied where
    ``src`` has them."""
    for f in ("tokenizer.json", "tokenizer_config.json", *more):
        p = os.path.join(src, f)
        if os.path.islink(p) and f.startswith("tokenizer"):
            os.symlink(os.readlink(p), os.path.join(out, f))
        elif os.path.exists(p):
            shutil.copy(p, out)


def _matches(n: str, w: dict, patterns) -> bool:
    """Whether tensor ``n`` of the weights ``w`` matches one of ``patterns``: a regular expression
    that fully matches the name, or a function ``(name, weights) -> bool``."""
    import re

    return any(p(n, w) if callable(p) else re.fullmatch(p, n) for p in patterns)


def variant_files(out: str, src: str, changes: dict, biased=(), seed: int = 0, dropped=(), lm_head: bool = False,
                  root_changes: dict | None = None, keep_shards: bool = False) -> dict:
    """The checkpoint files of a variant of the fixture at ``src``, at ``out`` (replaced): its
    config.json with ``changes`` (into ``text_config`` where the fixture has one) and
    ``root_changes`` (into the root), its weights in one model.safetensors with a bias N(0, 0.1)
    (numpy ``default_rng(seed)``) added beside each weight that matches a pattern of ``biased``
    (:func:`_matches`: a regular expression on the name or a function of the name and the weights),
    the tensors matching a pattern of ``dropped`` left out, and with ``lm_head`` an lm_head.weight
    N(0, 0.08) of the embedding's shape; with ``keep_shards`` (no biases, drops or lm_head), the
    fixture's safetensors files and index copied as they are.  generation_config.json copied and the
    tokenizer links kept (a copied tokenizer where ``src`` has files).  Needs numpy and safetensors
    only.  Returns the config written."""
    from safetensors.numpy import load_file, save_file

    rng = np.random.default_rng(seed)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    copy_tokenizer(src, out, ("generation_config.json",))
    cfg = json.load(open(os.path.join(src, "config.json")))
    (cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg).update(changes)
    cfg.update(root_changes or {})
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=2, sort_keys=True)
    if keep_shards:
        assert not (biased or dropped or lm_head), "keep_shards copies the weights as they are"
        for f in sorted(os.listdir(src)):
            if f.endswith(".safetensors") or f == "model.safetensors.index.json":
                shutil.copy(os.path.join(src, f), out)
        return cfg
    w = {}
    for f in sorted(os.listdir(src)):
        if f.endswith(".safetensors"):
            w.update(load_file(os.path.join(src, f)))
    for n in sorted(w):
        if _matches(n, w, biased):
            w[n[:-len("weight")] + "bias"] = (0.1 * rng.standard_normal(w[n].shape[0])).astype(np.float32)
    w = {n: t for n, t in w.items() if not _matches(n, w, dropped)}
    if lm_head:
        embd = next(n for n in w if n.endswith("embeddings.weight") or n.endswith("embed_tokens.weight"))
        w["lm_head.weight"] = (0.08 * rng.standard_normal(w[embd].shape)).astype(np.float32)
    save_file(dict(sorted(w.items())), os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    return cfg


def _size_mib(d: str) -> float:
    """The size of the files in ``d`` (not the links: the shared tokenizer), MiB."""
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if not os.path.islink(os.path.join(d, f))) / 2**20


def write_variant(out: str, src: str, changes: dict, biased=(), seed: int = 0, load: dict | None = None,
                  eos_masked: bool = True, budget_mib: float | None = None, dropped=(),
                  root_changes: dict | None = None, keep_shards: bool = False) -> tuple:
    """A variant fixture at ``out`` of the fixture at ``src`` (:func:`variant_files`: ``changes``
    in config.json (its text_config where it has one), ``root_changes`` in its root, biases on the
    weights matching ``biased``, the tensors matching ``dropped`` left out, ``keep_shards``: the
    weights' files copied), with reference.npz of ``src``'s tokens by :func:`hf_reference`
    (``eos_masked``: the cache-free greedy with config's eos_token_id masked) on the class of its
    ``architectures[0]`` (AutoModelForCausalLM where transformers has none) in float32 (``load``:
    more from_pretrained arguments).  The model must load every tensor of the files and miss none
    (no missing, unexpected or mismatched key, and as many ``.bias`` tensors in the model as in
    the files: none dropped by the class's keys to ignore on load), and its config must read each
    change that is not a dict (dicts, such as rope_parameters, HF rewrites) back.  ``budget_mib``:
    the size the fixture may have (:func:`save_reference`; None: 1.4 MiB, or the base fixture's
    size and a tenth where that is larger).  Returns (logits [T, n_vocab] float32, greedy int32)."""
    import torch
    import transformers
    from safetensors import safe_open

    cfg = variant_files(out, src, changes, biased, seed, dropped, root_changes=root_changes, keep_shards=keep_shards)
    torch.manual_seed(0)
    cls = getattr(transformers, cfg["architectures"][0], transformers.AutoModelForCausalLM)
    model, info = cls.from_pretrained(out, dtype=torch.float32, output_loading_info=True, **(load or {}))
    model.eval()
    assert not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    n_bias = 0
    for f in sorted(os.listdir(out)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(out, f), "np") as st:
                n_bias += sum(1 for n in st.keys() if n.endswith(".bias"))
    loaded = sum(1 for n in model.state_dict() if n.endswith(".bias"))
    assert loaded == n_bias, f"{out}: the model has {loaded} .bias tensors, the files {n_bias}"
    for conf, ch in ((model.config.get_text_config(), changes), (model.config, root_changes or {})):
        for k, v in ch.items():
            assert isinstance(v, dict) or getattr(conf, k) == v, (out, k, getattr(conf, k), v)
    tokens = np.load(os.path.join(src, "reference.npz"))["tokens"]
    eos = cfg.get("text_config", cfg).get("eos_token_id", cfg.get("eos_token_id")) if eos_masked else None
    logits, greedy = hf_reference(model, tokens, eos=eos)
    save_reference(out, tokens, logits, greedy, budget_mib=max(1.4, 1.1 * _size_mib(src)) if budget_mib is None else budget_mib)
    return logits, greedy


def main_of_variants(argv: list[str], names, make) -> None:
    """The variant makers' command line, ``[OUT_DIR] [NAME ...]``: ``make(name, OUT_DIR, src_root)``
    for each NAME (default: every one of ``names``), OUT_DIR default and src_root tests/fixtures/hf."""
    src_root = os.path.join(REPO, "tests", "fixtures", "hf")
    out_root = argv[0] if argv else src_root
    for name in argv[1:] or list(names):
        if name not in names:
            sys.exit(f"unknown fixture {name!r}; known: {', '.join(names)}")
        make(name, out_root, src_root)


def _build(name: str, spec: dict):
    import torch
    import transformers

    torch.manual_seed(spec["seed"])
    text = dict(spec["text"])
    conf_cls = getattr(transformers, spec["conf"])
    if "vision" in spec:
        cfg = conf_cls(text_config=text, vision_config=spec["vision"], tie_word_embeddings=False)
    else:
        cfg = conf_cls(**text)
    cfg.architectures = [spec["cls"]]
    model = getattr(transformers, spec["cls"])._from_config(cfg, attn_implementation="eager").eval()
    _redraw(torch, model.named_parameters(), torch.Generator().manual_seed(spec["seed"]))
    return model


def make(name: str, out_root: str) -> None:
    import torch

    spec = SPECS[name]
    model = _build(name, spec)

    def after_save(out: str) -> None:
        if spec.get("drop_layer_types"):
            _drop_layer_types(out, spec["text"]["full_attention_interval"])
        if spec.get("mtp"):
            _add_to_last_shard(out, _mtp_tensors(torch, spec["text"], torch.Generator().manual_seed(spec["seed"] + 100)))

    write_fixture(model, os.path.join(out_root, name), after_save=after_save, min_new=False)


def summarize(gguf_path: str, out: str) -> None:
    """The reference summary of a GGUF file (see the module docstring), as JSON."""
    import hashlib

    import gguf

    r = gguf.GGUFReader(gguf_path)
    tensors = {}
    for t in r.tensors:
        d = {"shape": [int(x) for x in t.shape], "type": t.tensor_type.name,
             "sha256": hashlib.sha256(t.data.tobytes()).hexdigest()}
        if t.name.endswith(".ssm_a"):
            d["values"] = [float(x) for x in np.asarray(t.data, dtype=np.float32).reshape(-1)]
        tensors[t.name] = d
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


def main(argv: list[str]) -> None:
    if argv[:1] == ["--summarize"] and len(argv) == 3:
        summarize(argv[1], argv[2])
        return
    out_root = argv[0] if argv else os.path.join(REPO, "tests", "fixtures", "hf")
    names = argv[1:] or list(SPECS)
    for n in names:
        if n not in SPECS:
            sys.exit(f"unknown fixture {n!r}; known: {', '.join(SPECS)}")
        make(n, out_root)


if __name__ == "__main__":
    main(sys.argv[1:])
