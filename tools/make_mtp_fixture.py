"""Make tests/fixtures/hf/qwen3next-mtp-tiny: tests/fixtures/hf/qwen3next-tiny with a synthetic MTP
head (one layer: gated full attention and the family's MoE, names and shapes of the real
Qwen3-Next checkpoints' mtp.* tensors) in a shard of its own, listed in the index.  NumPy only
(no torch): the main weights, reference.npz (HF's logits of the main model, which ignores
mtp.*) and the tokenizer are copied as they are.

    python tools/make_mtp_fixture.py [SRC_DIR] [OUT_DIR]
    python tools/make_mtp_fixture.py tests/fixtures/hf/glm5next-tiny tests/fixtures/hf/glm5next-mtp-tiny

Draws as tools/make_gdn_fixtures.py's _mtp_tensors (seeded): matrices N(0, 0.08), the zero-centred
RMSNorm gammas N(0, 0.1) (HF computes x (1 + w)).

A glm5_next source (model_type) gets GLM-5-Next's NextN layer instead, DeepSeek-V3 style (the
names HF's Glm5NextForConditionalGeneration ignores on load, modeling_glm5_next.py:1390
``layers\.45\.`` / ``layers\.\d+\.shared_head\.``; llama.cpp 0c1e570 glm5-next.cpp loads
block n_layer with no hc_* tensors): ``model.language_model.layers.{L}.`` (L = num_hidden_layers)
with enorm, hnorm, eh_proj [D, 2D], shared_head.norm, the decoder layer's input_layernorm /
post_attention_layernorm, its MLA attention with a full DSA indexer and its MoE (the main
layers' names and shapes); text_config.num_nextn_predict_layers set to 1.  GLM's norms are
plain (x w): gammas 1 + N(0, 0.3); matrices N(0, 0.08) as the main fixture's.  The unchanged
main shards and reference.npz are relative symlinks to the source's (the fixture adds 0.3 MB,
not 2.6).

A bailing_hybrid source (Ling 3) gets its NextN layer as llama.cpp 0c1e570 converts and runs it
(conversion/bailingmoe3.py, src/models/bailingmoe3.cpp graph_mtp; HF ignores
``layers.{num_hidden_layers}.``, modeling_bailing_hybrid.py:964-967): ``model.layers.{L}.`` with
enorm, hnorm, eh_proj [D, 2D], final_layernorm (the shared head's norm, llama.cpp's
layer_output_norm), input_layernorm / post_attention_layernorm, the MLA attention as the main
attention layers have it (q-LoRA, kv_a, kv_b, the head gate g_proj, dense) and the MoE
(gate.expert_bias); config num_nextn_predict_layers 1.  Plain norms as GLM's.
    python tools/make_mtp_fixture.py tests/fixtures/hf/bailinghybrid-tiny tests/fixtures/hf/bailinghybrid-mtp-tiny
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SEED = 116


def mtp_tensors(t: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    D, hd, nh, nkv = t["hidden_size"], t["head_dim"], t["num_attention_heads"], t["num_key_value_heads"]

    def w(*shape):
        return (0.08 * rng.standard_normal(shape)).astype(np.float32)

    def z(n):
        return (0.1 * rng.standard_normal(n)).astype(np.float32)

    p = "mtp.layers.0."
    out = {"mtp.fc.weight": w(D, 2 * D), "mtp.pre_fc_norm_embedding.weight": z(D),
           "mtp.pre_fc_norm_hidden.weight": z(D), "mtp.norm.weight": z(D),
           p + "input_layernorm.weight": z(D), p + "post_attention_layernorm.weight": z(D),
           p + "self_attn.q_proj.weight": w(2 * nh * hd, D), p + "self_attn.k_proj.weight": w(nkv * hd, D),
           p + "self_attn.v_proj.weight": w(nkv * hd, D), p + "self_attn.o_proj.weight": w(D, nh * hd),
           p + "self_attn.q_norm.weight": z(hd), p + "self_attn.k_norm.weight": z(hd)}
    E, F, Fs = t["num_experts"], t["moe_intermediate_size"], t["shared_expert_intermediate_size"]
    out[p + "mlp.gate.weight"] = w(E, D)
    for e in range(E):
        out[p + f"mlp.experts.{e}.gate_proj.weight"] = w(F, D)
        out[p + f"mlp.experts.{e}.up_proj.weight"] = w(F, D)
        out[p + f"mlp.experts.{e}.down_proj.weight"] = w(D, F)
    out.update({p + "mlp.shared_expert.gate_proj.weight": w(Fs, D), p + "mlp.shared_expert.up_proj.weight": w(Fs, D),
                p + "mlp.shared_expert.down_proj.weight": w(D, Fs), p + "mlp.shared_expert_gate.weight": w(1, D)})
    return out


def glm_mtp_tensors(t: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """GLM-5-Next's NextN layer L = num_hidden_layers (see the module docstring)."""
    D, L = t["hidden_size"], t["num_hidden_layers"]
    nh, rq, rkv = t["num_attention_heads"], t["q_lora_rank"], t["kv_lora_rank"]
    dn, dv = t["qk_nope_head_dim"], t["v_head_dim"]
    nI, dI, kp = t["index_n_heads"], t["index_head_dim"], t["index_kpool"]
    E, F = t["n_routed_experts"], t["moe_intermediate_size"]
    Fs = F * t["n_shared_experts"]

    def w(*shape):
        return (0.08 * rng.standard_normal(shape)).astype(np.float32)

    def g(n):
        return (1.0 + 0.3 * rng.standard_normal(n)).astype(np.float32)

    p = f"model.language_model.layers.{L}."
    a = p + "self_attn."
    out = {p + "eh_proj.weight": w(D, 2 * D), p + "enorm.weight": g(D), p + "hnorm.weight": g(D),
           p + "shared_head.norm.weight": g(D), p + "input_layernorm.weight": g(D),
           p + "post_attention_layernorm.weight": g(D),
           a + "q_a_proj.weight": w(rq, D), a + "q_a_layernorm.weight": g(rq), a + "q_b_proj.weight": w(nh * dn, rq),
           a + "kv_a_proj_with_mqa.weight": w(rkv, D), a + "kv_a_layernorm.weight": g(rkv),
           a + "kv_b_proj.weight": w(nh * (dn + dv), rkv), a + "o_proj.weight": w(D, nh * dv),
           a + "indexer.wq_b.weight": w(nI * dI, rq), a + "indexer.wk.weight": w(dI, D),
           a + "indexer.k_norm.weight": g(dI), a + "indexer.k_norm.bias": (0.3 * rng.standard_normal(dI)).astype(np.float32),
           a + "indexer.weights_proj.weight": w(nI, D),
           a + "indexer.index_kpool_compress_ape": (0.3 * rng.standard_normal((kp, dI))).astype(np.float32),
           a + "indexer.index_kpool_compress_gate": w(dI, D),
           p + "mlp.gate.weight": w(E, D),
           p + "mlp.gate.e_score_correction_bias": (0.2 * rng.standard_normal(E)).astype(np.float32)}
    for e in range(E):
        out[p + f"mlp.experts.{e}.gate_proj.weight"] = w(F, D)
        out[p + f"mlp.experts.{e}.up_proj.weight"] = w(F, D)
        out[p + f"mlp.experts.{e}.down_proj.weight"] = w(D, F)
    out.update({p + "mlp.shared_experts.gate_proj.weight": w(Fs, D), p + "mlp.shared_experts.up_proj.weight": w(Fs, D),
                p + "mlp.shared_experts.down_proj.weight": w(D, Fs)})
    return out


def ling_mtp_tensors(t: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Ling 3's NextN layer L = num_hidden_layers (see the module docstring)."""
    D, L = t["hidden_size"], t["num_hidden_layers"]
    nh, rkv = t["num_attention_heads"], t["kv_lora_rank"]
    dn, dr, dv, rq = t["qk_nope_head_dim"], t["qk_rope_head_dim"], t["v_head_dim"], t.get("q_lora_rank")
    E, F = t["num_experts"], t["moe_intermediate_size"]
    Fs = F * t.get("num_shared_experts", 1)

    def w(*shape):
        return (0.08 * rng.standard_normal(shape)).astype(np.float32)

    def g(n):
        return (1.0 + 0.3 * rng.standard_normal(n)).astype(np.float32)

    p = f"model.layers.{L}."
    a = p + "attention."
    out = {p + "eh_proj.weight": w(D, 2 * D), p + "enorm.weight": g(D), p + "hnorm.weight": g(D),
           p + "final_layernorm.weight": g(D), p + "input_layernorm.weight": g(D),
           p + "post_attention_layernorm.weight": g(D),
           a + "kv_a_proj_with_mqa.weight": w(rkv + dr, D), a + "kv_a_layernorm.weight": g(rkv),
           a + "kv_b_proj.weight": w(nh * (dn + dv), rkv), a + "g_proj.weight": w(nh, D), a + "dense.weight": w(D, nh * dv),
           p + "mlp.gate.weight": w(E, D), p + "mlp.gate.expert_bias": (0.2 * rng.standard_normal(E)).astype(np.float32)}
    if rq:
        out.update({a + "q_a_proj.weight": w(rq, D), a + "q_a_layernorm.weight": g(rq),
                    a + "q_b_proj.weight": w(nh * (dn + dr), rq)})
    else:
        out[a + "q_proj.weight"] = w(nh * (dn + dr), D)
    for e in range(E):
        out[p + f"mlp.experts.{e}.gate_proj.weight"] = w(F, D)
        out[p + f"mlp.experts.{e}.up_proj.weight"] = w(F, D)
        out[p + f"mlp.experts.{e}.down_proj.weight"] = w(D, F)
    out.update({p + "mlp.shared_experts.gate_proj.weight": w(Fs, D), p + "mlp.shared_experts.up_proj.weight": w(Fs, D),
                p + "mlp.shared_experts.down_proj.weight": w(D, Fs)})
    return out


def save_st(path: str, tensors: dict[str, np.ndarray]) -> None:
    """A safetensors file of float32 tensors (the format: u64 header length, JSON header, data)."""
    head, off, blobs = {}, 0, []
    for name in sorted(tensors):
        b = np.ascontiguousarray(tensors[name], np.float32).tobytes()
        head[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    head["__metadata__"] = {"format": "pt"}
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def main(src: str, out: str) -> None:
    if os.path.exists(out):
        shutil.rmtree(out)
    shutil.copytree(src, out, symlinks=True)   # the tokenizer links stay links
    cp = os.path.join(out, "config.json")
    with open(cp) as f:
        cfg = json.load(f)
    if cfg.get("model_type") in ("glm5_next", "bailing_hybrid"):
        for fn in os.listdir(out):    # the main weights and HF's logits are the source's: link them
            if fn.endswith(".safetensors") or fn == "reference.npz":
                os.remove(os.path.join(out, fn))
                os.symlink(os.path.relpath(os.path.join(src, fn), out), os.path.join(out, fn))
        glm = cfg["model_type"] == "glm5_next"
        t = cfg["text_config"] if glm else cfg
        tensors = (glm_mtp_tensors if glm else ling_mtp_tensors)(t, np.random.default_rng(SEED))
        t["num_nextn_predict_layers"] = 1
        with open(cp, "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
    else:
        tensors = mtp_tensors(cfg, np.random.default_rng(SEED))
    shard = "model-mtp.safetensors"
    save_st(os.path.join(out, shard), tensors)
    ip = os.path.join(out, "model.safetensors.index.json")
    with open(ip) as f:
        index = json.load(f)
    index["weight_map"].update({n: shard for n in tensors})
    index["weight_map"] = dict(sorted(index["weight_map"].items()))
    with open(ip, "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0] if a else os.path.join(REPO, "tests", "fixtures", "hf", "qwen3next-tiny"),
         a[1] if len(a) > 1 else os.path.join(REPO, "tests", "fixtures", "hf", "qwen3next-mtp-tiny"))
