"""Make tests/fixtures/hf/qwen3next-mtp-tiny: tests/fixtures/hf/qwen3next-tiny with a synthetic MTP
head (one layer: gated full attention and the family's MoE, names and shapes of the real
Qwen3-Next checkpoints' mtp.* tensors) in a shard of its own, listed in the index.  NumPy only
(no torch): the main weights, reference.npz (HF's logits of the main model, which ignores
mtp.*) and the tokenizer are copied as they are.

    python tools/make_mtp_fixture.py [SRC_DIR] [OUT_DIR]

Draws as tools/make_gdn_fixtures.py's _mtp_tensors (seeded): matrices N(0, 0.08), the zero-centred
RMSNorm gammas N(0, 0.1) (HF computes x (1 + w)).
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
    shutil.copytree(src, out)
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
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
