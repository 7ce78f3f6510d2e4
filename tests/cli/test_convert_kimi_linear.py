"""`toolkit convert` of Kimi-Linear (KimiLinearForCausalLM -> kimi-linear): our f32 file of
kimilinear-tiny holds llama.cpp's tensor names, shapes and data (its file is
tests/fixtures/llamacpp/kimilinear-tiny.f32.gguf) and its keys plus ours only where llama.cpp's
cannot say the value; both config.json forms and both dense-MLP spellings are read; bad input
gives one line naming the file / key / tensor and nothing at OUT."""
from __future__ import annotations

import json
import pathlib

import numpy as np
from safetensors.numpy import load_file, save_file

from cli_runner import cli as run_cli
from convert_error_util import config, copy, edit_config, expect_error, replace_tensor

FIX = pathlib.Path(__file__).parent.parent / "fixtures"


def _read(path):
    import gguf
    r = gguf.GGUFReader(str(path))
    keys = {k: f.contents() for k, f in r.fields.items() if not k.startswith(("tokenizer.", "general."))}
    return {t.name: t for t in r.tensors}, keys


def _convert(monkeypatch, capsys, src, out):
    rc, _, err = run_cli(monkeypatch, capsys, "convert", str(src), str(out), "--outtype", "f32")
    assert rc == 0, err


def test_llama_cpp_names_shapes_and_data(monkeypatch, capsys, tmp_path):
    out = tmp_path / "k.gguf"
    _convert(monkeypatch, capsys, FIX / "hf" / "kimilinear-tiny", out)
    ours, ok = _read(out)
    theirs, tk = _read(FIX / "llamacpp" / "kimilinear-tiny.f32.gguf")
    assert sorted(ours) == sorted(theirs)
    for n, t in theirs.items():
        o = ours[n]
        assert list(o.shape) == list(t.shape) and o.tensor_type == t.tensor_type, n
        assert np.array_equal(np.asarray(o.data), np.asarray(t.data)), n
    # llama.cpp's keys, the same values; ours only for the epsilons HF fixes at 1e-6 (rms_norm_eps is 1e-5)
    assert {k: v for k, v in ok.items() if k in tk} == tk
    assert sorted(set(ok) - set(tk)) == ["kimi-linear.attention.mla_norm_epsilon", "kimi-linear.kda.l2_norm_epsilon"]
    assert ok["kimi-linear.attention.head_count_kv"] == [0, 0, 1, 0]


def _hf_saved_form(d: pathlib.Path) -> None:
    """what transformers 5.24's save_pretrained writes: the 5.x config keys, the dense MLP as block_sparse_moe.*"""
    c = config(d)
    lac = c.pop("linear_attn_config")
    c.pop("first_k_dense_replace")
    c.update(layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
             mlp_layer_types=["dense", "sparse", "sparse", "sparse"], linear_head_dim=lac["head_dim"],
             linear_num_heads=lac["num_heads"], linear_conv_kernel_dim=lac["short_conv_kernel_size"])
    (d / "config.json").write_text(json.dumps(c))
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    for name in [n for n in idx["weight_map"] if n.startswith("model.layers.0.mlp.")]:
        fn = idx["weight_map"].pop(name)
        t = load_file(str(d / fn))
        new = name.replace(".mlp.", ".block_sparse_moe.")
        t[new] = t.pop(name)
        save_file(t, str(d / fn))
        idx["weight_map"][new] = fn
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))


def test_hf_saved_form_gives_the_same_file(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "kimilinear-tiny")
    _hf_saved_form(d)
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    _convert(monkeypatch, capsys, FIX / "hf" / "kimilinear-tiny", a)
    _convert(monkeypatch, capsys, d, b)
    ta, ka = _read(a)
    tb, kb = _read(b)
    assert ka == kb and sorted(ta) == sorted(tb)
    assert all(np.array_equal(np.asarray(ta[n].data), np.asarray(tb[n].data)) for n in ta)


def test_our_keys_only_where_llama_cpp_cannot_say(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "kimilinear-tiny")
    edit_config(d, drop=("num_expert_group", "moe_renormalize"), n_group=2, topk_group=1, norm_topk_prob=False,
                rms_norm_eps=1e-6)
    out = tmp_path / "k.gguf"
    _convert(monkeypatch, capsys, d, out)
    _, keys = _read(out)
    assert keys["kimi-linear.expert_group_count"] == 2 and keys["kimi-linear.expert_group_used_count"] == 1
    assert keys["kimi-linear.expert_weights_norm"] is False
    assert "kimi-linear.kda.l2_norm_epsilon" not in keys and "kimi-linear.kda.head_count" not in keys


def test_kv_lora_rank_disagrees_with_kv_a_proj(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "kimilinear-tiny")
    edit_config(d, kv_lora_rank=24)
    expect_error(monkeypatch, capsys, tmp_path, d, "'model.layers.2.self_attn.kv_a_proj_with_mqa.weight'",
                 "kv_lora_rank 24")


def test_kda_head_dim_disagrees_with_projections(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "kimilinear-tiny")
    edit_config(d, linear_attn_config={**config(d)["linear_attn_config"], "head_dim": 8})
    expect_error(monkeypatch, capsys, tmp_path, d, "'model.layers.0.self_attn.q_proj.weight'", "config.json implies [32, 64]")


def test_layer_named_twice(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "kimilinear-tiny")
    edit_config(d, linear_attn_config={**config(d)["linear_attn_config"], "kda_layers": [1, 2, 3, 4]})
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "names layer 3 twice")


def test_topk_group_larger_than_n_group(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "kimilinear-tiny")
    edit_config(d, topk_group=2)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "topk_group 2 is larger than num_expert_group 1")


def test_wrong_expert_shape(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "kimilinear-tiny")
    replace_tensor(d, "model.layers.1.block_sparse_moe.experts.3.w2.weight", np.zeros((64, 31), np.float32))
    expect_error(monkeypatch, capsys, tmp_path, d, "'model.layers.1.block_sparse_moe.experts.3.w2.weight'", "[64, 31]")


def test_bf16_keeps_llama_cpps_f32_tensors(monkeypatch, capsys, tmp_path):
    """--outtype bf16: the KDA convs stay F32 as llama.cpp's converter keeps them ("Kimi KDA conv
    weights should be F32": ggml_ssm_conv asserts an F32 kernel, llama-bench aborts on a BF16 one),
    with the router, norms, ssm_a and the biases; the matrices are BF16."""
    out = tmp_path / "k.gguf"
    rc, _, err = run_cli(monkeypatch, capsys, "convert", str(FIX / "hf" / "kimilinear-tiny"), str(out), "--outtype", "bf16")
    assert rc == 0, err
    ts, _ = _read(out)
    f32 = {n for n, t in ts.items() if t.tensor_type.name == "F32"}
    for n in ("blk.0.ssm_conv1d_q.weight", "blk.0.ssm_conv1d_k.weight", "blk.0.ssm_conv1d_v.weight", "blk.1.ffn_gate_inp.weight",
              "blk.0.ssm_a", "blk.0.ssm_dt.bias", "blk.1.exp_probs_b.bias", "blk.2.attn_kv_a_norm.weight"):
        assert n in f32, n
    for n in ("blk.0.attn_q.weight", "blk.0.ssm_f_a.weight", "blk.2.attn_k_b.weight", "blk.1.ffn_up_exps.weight"):
        assert ts[n].tensor_type.name == "BF16", n
