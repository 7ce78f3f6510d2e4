"""Lara-Mini (LaraMiniForCausalLM -> lara-mini): our conversion against HF's logits, and the file's
layout.

laramini-tiny is ../shared/fixtures' (transformers 5.24): 5 layers linear (GDN), sliding
attention, linear, full attention, sliding attention (window 16); 4 heads / 2 KV heads of 16,
NeoX RoPE θ 10 000 on the sliding layers and NoPE on the full one; GDN Hk 2, Hv 4, Dk = Dv = 16,
conv 4, the fused in_proj; MoE on every layer (4 experts, top-2, renormalised) plus an ungated
shared expert (48); plain norm weights; tied embeddings.  llama.cpp has no lara-mini.

Checked: f32 logits < 1e-5 relative L2 in one shot and in ubatches of 1 and 7 (64 tokens: the
sliding layers' window is passed), greedy continuation identical (end-of-text, id 0, suppressed
as HF's reference did); two sequences in one batch give each its own run's logits; `toolkit
quantize` Q8_0 / Q4_K_M (qwen35moe's rules) with the error ordered by bits; a file without its
sliding-window keys is refused at load, one line.
"""
from __future__ import annotations

import pathlib

import numpy as np
import pytest
from parity_util import check_against_hf, logits_of, rel_l2, terminal_report, two_sequences_vs_separate

pytestmark = pytest.mark.native

NAME = "laramini-tiny"
F32_BOUND = 1e-5
EOT = (0,)


@pytest.fixture(scope="module")
def report(request):
    yield from terminal_report(request, "lara-mini parity")


@pytest.fixture(scope="module")
def ref():
    return np.load(pathlib.Path(__file__).parent.parent / "fixtures" / "hf" / NAME / "reference.npz")


def test_layout(hf_f32):
    from toolkit.arch import HParams
    from toolkit.gguf_io import GGUFFile
    f = GGUFFile(str(hf_f32(NAME)))
    hp = HParams.from_gguf(f)
    assert hp.arch == "lara-mini" and hp.attention_layers == [1, 3, 4] and hp.recurrent_layers == [0, 2]
    assert hp.n_swa == 16 and hp.swa_layers == [0, 1, 0, 0, 1] and hp.rope_swa_only == 1
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


def test_converted_f32_matches_hf(hf_f32, ref, report):
    check_against_hf(hf_f32(NAME), ref, NAME, report, F32_BOUND, suppress=EOT)


def test_two_sequences_in_one_batch_equal_separate_runs(hf_f32, ref, report):
    diff = two_sequences_vs_separate(hf_f32(NAME), ref["tokens"])
    report.append(f"{NAME}: two sequences in one batch vs separate runs: max |diff| {diff:.1e}")
    assert diff == 0.0


def test_quantize_error_ordered_by_bits(hf_f32, ref, tmp_path, report):
    """Q8_0 and Q4_K_M by qwen35moe's (llama.cpp's name-based) rules: norms, the conv kernel,
    ssm_a / ssm_dt and the router stay F32; the error against HF grows as the bits shrink."""
    from toolkit.gguf_io import GGMLType, GGUFFile
    from toolkit.quantize import Options, quantize_file
    src = hf_f32(NAME)
    errs = {"F32": rel_l2(logits_of(src, ref["tokens"]), ref["logits"])}
    for qtype in ("Q8_0", "Q4_K_M"):
        out = tmp_path / f"{NAME}.{qtype}.gguf"
        quantize_file(str(src), str(out), qtype, Options(), n_threads=2)
        f = GGUFFile(str(out))
        for n, t in f.tensors.items():
            if len(t.shape) == 1 or n.endswith(("ssm_conv1d.weight", "ffn_gate_inp.weight")):
                assert t.type == GGMLType.F32, (qtype, n)
        assert any(t.type != GGMLType.F32 for t in f.tensors.values())
        lo = logits_of(out, ref["tokens"])
        assert np.isfinite(lo).all()
        errs[qtype] = rel_l2(lo, ref["logits"])
    report.append(f"{NAME} vs HF: " + ", ".join(f"{k} {v:.2e}" for k, v in errs.items()))
    assert errs["F32"] < errs["Q8_0"] < errs["Q4_K_M"] < 1.0


def test_run_refuses_a_sliding_pattern_marking_a_gdn_layer(monkeypatch, capsys, tmp_path, hf_f32):
    import gguf
    from gguf_edit_util import rewrite, run_error
    bad = tmp_path / "bad.gguf"
    rewrite(hf_f32("laramini-tiny"), bad, kv={"lara-mini.attention.sliding_window_pattern":
                                              ([True, True, False, False, True], gguf.GGUFValueType.ARRAY,
                                               gguf.GGUFValueType.BOOL)})
    err = run_error(monkeypatch, capsys, bad)
    assert "sliding_window_pattern" in err and "layer 0" in err, err
