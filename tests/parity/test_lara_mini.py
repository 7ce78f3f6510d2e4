"""Lara-Mini (LaraMiniForCausalLM -> lara-mini): our conversion against HF's logits, and the file's
layout.

laramini-tiny is the reference set's (transformers 5.24): 5 layers linear (GDN), sliding
attention, linear, full attention, sliding attention (window 16); 4 heads / 2 KV heads of 16,
NeoX RoPE θ 10 000 on the sliding layers and NoPE on the full one; GDN Hk 2, Hv 4, Dk = Dv = 16,
conv 4, the fused in_proj; MoE on every layer (4 experts, top-2, renormalised) plus an ungated
shared expert (48); plain norm weights; tied embeddings.  llama.cpp has no lara-mini.

Checked: f32 logits < 1e-5 relative L2 in one shot and in ubatches of 1 and 7 (64 tokens: the
sliding layers' window is passed), greedy continuation identical (end-of-text, id 0, suppressed
as HF's reference did); two sequences in one batch give each its own run's logits; `toolkit
quantize` Q8_0 / Q4_K_M (qwen35moe's rules) with the error ordered by bits; a file without its
sliding-window keys is refused at load, one line.

The f32 parity, two-sequence and quantize-order checks of the family's fixtures are table rows now
(tests/families.py), run by tests/parity/test_families.py; this module keeps the special ones.
"""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

pytestmark = pytest.mark.native

NAME = "laramini-tiny"


def test_layout(hf_f32):
    from toolkit.arch import HParams, arch_spec
    from toolkit.gguf_io import GGUFFile
    f = GGUFFile(str(hf_f32(NAME)))
    hp = HParams.from_gguf(f)
    assert hp.arch == "lara-mini" and hp.attention_layers == [1, 3, 4] and hp.recurrent_layers == [0, 2]
    assert hp.n_swa == 16 and hp.swa_layers == [0, 1, 0, 0, 1] and arch_spec(hp.arch).rope_swa_only
    assert hp.n_rot == 16 and hp.rope_freq_base == 1e4 and hp.n_expert == 4 and hp.n_expert_used == 2
    t = f.tensors
    # the fused in_proj [2 Hk Dk + 2 Hv Dv + 2 Hv, D] = [192, 64] cut into four (ne: [D, rows])
    assert tuple(t["blk.0.attn_qkv.weight"].shape) == (64, 128) and tuple(t["blk.0.attn_gate.weight"].shape) == (64, 64)
    assert tuple(t["blk.0.ssm_beta.weight"].shape) == (64, 4) and tuple(t["blk.0.ssm_alpha.weight"].shape) == (64, 4)
    assert tuple(t["blk.1.attn_q.weight"].shape) == (64, 64)                       # no gate half
    assert "blk.0.ffn_up_shexp.weight" in t and not any("gate_inp_shexp" in n for n in t)   # ungated shared expert
    assert "output.weight" not in t                                                 # tied


def test_norms_are_written_as_stored(hf_f32):
    """Plain multipliers (modeling_lara_mini.py:52-68): every norm weight equals the checkpoint's, no +1."""
    from safetensors.numpy import load_file
    from toolkit.gguf_io import GGUFFile
    d = pathlib.Path(__file__).parent.parent / "fixtures" / "hf" / NAME
    hf = {}
    for p in sorted(d.glob("*.safetensors")):
        hf.update(load_file(str(p)))
    f = GGUFFile(str(hf_f32(NAME)))
    pairs = {"blk.0.attn_norm.weight": "model.layers.0.input_layernorm.weight",
             "blk.0.ffn_norm.weight": "model.layers.0.post_attention_layernorm.weight",
             "blk.0.ssm_norm.weight": "model.layers.0.linear_attn.out_norm.weight",
             "blk.1.attn_q_norm.weight": "model.layers.1.self_attn.q_norm.weight",
             "blk.1.attn_k_norm.weight": "model.layers.1.self_attn.k_norm.weight",
             "output_norm.weight": "model.norm.weight"}
    for g, h in pairs.items():
        np.testing.assert_array_equal(np.asarray(f.array(g)).reshape(-1), hf[h].reshape(-1), err_msg=g)


def test_run_refuses_a_sliding_pattern_marking_a_gdn_layer(monkeypatch, capsys, tmp_path, hf_f32):
    import gguf
    from gguf_edit_util import rewrite, run_error
    bad = tmp_path / "bad.gguf"
    rewrite(hf_f32("laramini-tiny"), bad, kv={"lara-mini.attention.sliding_window_pattern":
                                              ([True, True, False, False, True], gguf.GGUFValueType.ARRAY,
                                               gguf.GGUFValueType.BOOL)})
    err = run_error(monkeypatch, capsys, bad)
    assert "sliding_window_pattern" in err and "layer 0" in err, err
