"""`toolkit convert` of GLM-5-Next (Glm5NextForConditionalGeneration -> glm5-next, the text
model): our f32 file of glm5next-tiny holds llama.cpp's tensor names, shapes and data
(tests/fixtures/llamacpp/glm5next-tiny.f32.gguf) and exactly its keys; the vision tower is left
out with one line; the tokenizer needs none of GLM's special tokens (llama.cpp's converter fails
with KeyError '[gMASK]' on it, D10); ours only for the softplus gate; bad input gives one line
naming the file / key / tensor and nothing at OUT."""
from __future__ import annotations

import json

import pytest

from convert_error_util import copy, expect_error
from kda_convert_util import FIX, convert, read_gguf, same_as_llama_cpp


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    """the family's converter, registered or not yet"""
    from toolkit.convert import core
    from toolkit.convert.families.glm5_next import Glm5NextFamily
    monkeypatch.setitem(core.REGISTRY, "Glm5NextForConditionalGeneration", Glm5NextFamily)


def edit_text(d, drop=(), **kw):
    c = json.loads((d / "config.json").read_text())
    c["text_config"].update(kw)
    for k in drop:
        c["text_config"].pop(k, None)
    (d / "config.json").write_text(json.dumps(c))


def test_llama_cpp_names_shapes_data_and_keys(monkeypatch, capsys, tmp_path):
    out = tmp_path / "g.gguf"
    convert(monkeypatch, capsys, FIX / "hf" / "glm5next-tiny", out)
    from toolkit.convert import make_plan
    plan = make_plan(str(FIX / "hf" / "glm5next-tiny"))
    assert len([n for n, _ in plan.omitted if n.startswith("model.visual.")]) == 25
    assert len(plan.warnings) == 1 and "vision tower skipped (25 model.visual.* tensors)" in plan.warnings[0]
    keys, ours_only = same_as_llama_cpp(out, "glm5next-tiny")
    assert ours_only == []
    assert keys["glm5-next.attention.indexer.types"] == [True, True, True, False, True]
    import gguf
    r = gguf.GGUFReader(str(out))
    assert r.fields["tokenizer.ggml.model"].contents() == "gpt2"


def test_flat_text_config_gives_the_same_file(monkeypatch, capsys, tmp_path):
    """a text-only checkpoint with the text keys at the root (HF forwards them into text_config)"""
    d = copy(tmp_path, "glm5next-tiny")
    c = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({"architectures": c["architectures"], **c["text_config"]}))
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    convert(monkeypatch, capsys, FIX / "hf" / "glm5next-tiny", a)
    convert(monkeypatch, capsys, d, b)
    assert read_gguf(a)[1] == read_gguf(b)[1]


def test_softplus_gate_is_our_key(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "glm5next-tiny")
    c = json.loads((d / "config.json").read_text())
    edit_text(d, linear_attn_config={**c["text_config"]["linear_attn_config"], "gate_lower_bound": None,
                                     "safe_gate": False})
    out = tmp_path / "g.gguf"
    convert(monkeypatch, capsys, d, out)
    _, keys = read_gguf(out)
    assert keys["glm5-next.kda.safe_gate"] is False and "glm5-next.kda.gate_lower_bound" not in keys


def test_null_bound_with_safe_gate_is_minus_5(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "glm5next-tiny")
    c = json.loads((d / "config.json").read_text())
    edit_text(d, linear_attn_config={**c["text_config"]["linear_attn_config"], "gate_lower_bound": None})
    out = tmp_path / "g.gguf"
    convert(monkeypatch, capsys, d, out)
    _, keys = read_gguf(out)
    assert keys["glm5-next.kda.gate_lower_bound"] == -5.0 and "glm5-next.kda.safe_gate" not in keys


def test_kpool_of_zero(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "glm5next-tiny")
    edit_text(d, index_kpool=0)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "index_kpool = 0")


@pytest.mark.parametrize("kw, needle", [
    ({"num_experts_per_tok": 7}, "num_experts_per_tok 7 is more than the 6 experts"),          # > the experts
    ({"n_group": 3, "topk_group": 1, "num_experts_per_tok": 3}, "num_experts_per_tok 3 is more than the 2 experts"),
    ({"n_group": 6, "topk_group": 6}, "n_group 6 must divide the 6 experts into groups of at least 2"),  # HF: topk(2)
])
def test_routing_the_run_would_refuse(monkeypatch, capsys, tmp_path, kw, needle):
    """these wrote a file (exit 0) that toolkit run then refused (expert_used_count out of range)"""
    d = copy(tmp_path, "glm5next-tiny")
    edit_text(d, **kw)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", needle)


def test_hc_of_zero(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "glm5next-tiny")
    edit_text(d, hc_mult=0)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "hc_mult = 0")


def test_hc_disagrees_with_tensors(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "glm5next-tiny")
    edit_text(d, hc_mult=3)
    expect_error(monkeypatch, capsys, tmp_path, d, "'model.language_model.layers.0.hc_attn_fn'", "[15, 192]")


def test_indexer_head_dim_disagrees_with_projections(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "glm5next-tiny")
    edit_text(d, index_head_dim=8)
    expect_error(monkeypatch, capsys, tmp_path, d, "'model.language_model.layers.2.self_attn.indexer.wq_b.weight'",
                 "[64, 32]")


def test_budget_not_a_multiple_of_the_pool(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "glm5next-tiny")
    edit_text(d, index_topk=30)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "index_topk 30 must be a multiple of index_kpool 8")


def test_shared_indexer_first(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "glm5next-tiny")
    edit_text(d, indexer_types=["full", "full", "shared", "shared", "full"])
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "indexer_types[2] = 'shared'")


def test_rope_dims_refused(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "glm5next-tiny")
    edit_text(d, qk_rope_head_dim=8)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "qk_rope_head_dim = 8", code=3)


def test_mhc_and_pool_weights_stay_f32(monkeypatch, capsys, tmp_path):
    """glm.py:575-580: hc_* and indexer_compressor_* are F32 at any outtype; other matrices follow it"""
    out = tmp_path / "g.gguf"
    convert(monkeypatch, capsys, FIX / "hf" / "glm5next-tiny", out, "--outtype", "f16")
    t, _ = read_gguf(out)
    for n in ("blk.0.hc_attn_fn.weight", "blk.4.hc_ffn_fn.weight", "blk.2.indexer_compressor_ape.weight",
              "blk.2.indexer_compressor_gate.weight", "blk.2.ffn_gate_inp.weight"):
        assert t[n].tensor_type.name == "F32", n
    for n in ("blk.2.indexer.attn_q_b.weight", "blk.2.attn_q_b.weight", "blk.0.ssm_f_a.weight"):
        assert t[n].tensor_type.name == "F16", n
