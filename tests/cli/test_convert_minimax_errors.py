"""`toolkit convert` on bad MiniMax-Text-01 input: one line naming the file / key / tensor, exit 2
(3: valid but unsupported), nothing left at OUT.  Each test breaks a copy of minimax-tiny (layers
[linear, linear, full, linear]) in tmp_path.  Also: the residual factors llama.cpp's one key
cannot say are written as ours, and the remote-code spellings are read."""
from __future__ import annotations

import numpy as np

from convert_error_util import config, copy, drop_tensor, edit_config, expect_error, replace_tensor


def test_qkv_proj_of_the_wrong_width(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "minimax-tiny")
    replace_tensor(d, "model.layers.1.self_attn.qkv_proj.weight", np.zeros((191, 64), np.float32))
    expect_error(monkeypatch, capsys, tmp_path, d, "'model.layers.1.self_attn.qkv_proj.weight'", "[191, 64]",
                 "config.json implies [192, 64]")


def test_missing_output_gate(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "minimax-tiny")
    drop_tensor(d, "model.layers.0.self_attn.output_gate.weight")
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "'model.layers.0.self_attn.output_gate.weight'")


def test_unknown_layer_type(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "minimax-tiny")
    edit_config(d, layer_types=config(d)["layer_types"][:3] + ["conv"])
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "layer_types[3] = 'conv'")


def test_layer_types_of_the_wrong_length(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "minimax-tiny")
    edit_config(d, layer_types=config(d)["layer_types"][:3])
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'layer_types' must list 4")


def test_layer_types_disagree_with_tensors(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "minimax-tiny")
    edit_config(d, layer_types=["full_attention"] + config(d)["layer_types"][1:])
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "model.layers.0.self_attn.q_proj")


def test_sliding_window_out_of_range(monkeypatch, capsys, tmp_path):
    """sliding_window converts (minimax-swa-tiny runs it against HF); 0 or more than the runtime's
    2**24 is one line naming the key, exit 2."""
    for w in (0, (1 << 24) + 1):
        d = copy(tmp_path / str(w), "minimax-tiny")
        edit_config(d, sliding_window=w)
        expect_error(monkeypatch, capsys, tmp_path / str(w), d, "config.json", "sliding_window", code=2)


def test_rope_type_is_unsupported(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "minimax-tiny")
    edit_config(d, rope_parameters={"rope_theta": 1e6, "rope_type": "dynamic", "factor": 2.0})
    expect_error(monkeypatch, capsys, tmp_path, d, "rope_type' = \"dynamic\" is not supported", code=3)


def test_hidden_act_outside_the_runtime_s_activations_is_unsupported(monkeypatch, capsys, tmp_path):
    """HF applies ACT2FN[hidden_act] to qkv_proj and the experts' gate; the runtime has the
    activations of toolkit.convert.activation.ACCEPTED (minimax-gelu-tiny / -relu2-tiny run them),
    and refuses another ACT2FN name (mish) with one line."""
    d = copy(tmp_path, "minimax-tiny")
    edit_config(d, hidden_act="mish")
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'hidden_act' = \"mish\" is not supported", code=3)


def test_remote_code_postnorm_false_is_unsupported(monkeypatch, capsys, tmp_path):
    """The remote code's postnorm false joins each branch to the un-normed residual; transformers
    5.24 (and the runtime) always join it to the normed one (MiniMax-Text-01 has postnorm true)."""
    d = copy(tmp_path, "minimax-tiny")
    edit_config(d, postnorm=False)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'postnorm' = False is not supported", code=3)

def test_residual_factor_beyond_float32(monkeypatch, capsys, tmp_path):
    """Stored as float32: 1e39 is named, not an internal OverflowError."""
    d = copy(tmp_path, "minimax-tiny")
    edit_config(d, mlp_beta_factor=1e39)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'mlp_beta_factor' = 1e+39")


def _convert(d, out):
    from toolkit.convert import convert
    from toolkit.gguf_io import GGUFFile
    convert(str(d), str(out), "f32")
    return GGUFFile(str(out)).metadata()


def test_residual_factors_llama_cpp_cannot_say_are_ours(tmp_path):
    d = copy(tmp_path, "minimax-tiny")
    edit_config(d, mlp_alpha_factor=1.0, full_attn_beta_factor=0.5)
    md = _convert(d, tmp_path / "out.gguf")
    assert np.allclose(md["minimax-01.residual_alpha"], [1.7, 1.7, 1.0])
    assert np.allclose(md["minimax-01.residual_beta"], [1.0, 0.5, 1.0])
    # llama.cpp's loader requires residual_scale: without it, it refuses a file it would run wrong
    assert "minimax-01.residual_scale" not in md


def test_remote_code_spellings(tmp_path):
    """MiniMaxText01ForCausalLM's config: layernorm_*_alpha / _beta and attn_type_list (0 lightning, 1 softmax)."""
    d = copy(tmp_path, "minimax-tiny")
    c = config(d)
    edits = {"architectures": ["MiniMaxText01ForCausalLM"], "attn_type_list": [0, 0, 1, 0], "rotary_dim": 16}
    drop = ["layer_types"]
    for branch, new in (("linear_attn", "linear_attention"), ("full_attn", "full_attention"), ("mlp", "mlp")):
        for f in ("alpha", "beta"):
            edits[f"layernorm_{new}_{f}"] = c[f"{branch}_{f}_factor"]
            drop.append(f"{branch}_{f}_factor")
    edit_config(d, drop=drop, **edits)
    md = _convert(d, tmp_path / "out.gguf")
    assert md["minimax-01.attention.recurrent_layers"] == [True, True, False, True]
    assert abs(md["minimax-01.residual_scale"] - 1.7) < 1e-6 and "minimax-01.residual_alpha" not in md


def test_slope_count_disagrees_with_heads(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "minimax-tiny")
    nh = config(d)["num_attention_heads"]
    replace_tensor(d, "model.layers.1.self_attn.slope_rate", np.ones((nh + 1, 1, 1), np.float32))
    expect_error(monkeypatch, capsys, tmp_path, d, "'model.layers.1.self_attn.slope_rate'", f"{nh + 1} slopes",
                 f"num_attention_heads = {nh}")


def test_slopes_other_than_hf_s_are_refused(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "minimax-tiny")
    nh = config(d)["num_attention_heads"]
    replace_tensor(d, "model.layers.0.self_attn.slope_rate", np.full((nh, 1, 1), 0.5, np.float32))
    expect_error(monkeypatch, capsys, tmp_path, d, "'model.layers.0.self_attn.slope_rate'", "is not HF's", code=3)
