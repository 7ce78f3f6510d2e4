"""`toolkit convert`: parity with llama.cpp where it is right, the HF facts where it is wrong,
transformers-4 config forms, outtypes, streaming in bands, the tokenizer export."""
from __future__ import annotations

import json
import pathlib
import shutil
import struct

import gguf
import numpy as np
import pytest
from safetensors.numpy import load_file

from toolkit.arch import HParams, LayerKind
from toolkit.convert import convert, make_plan, plan_to_dict
from toolkit.convert import core as convert_core
from toolkit.convert.base import head_perm, pick_type
from toolkit.convert.encode import f32_to_bf16
from toolkit.convert.tokenizer import detect_pre, parse_sentencepiece
from toolkit.gguf_io import GGMLType, GGUFFile

FIX = pathlib.Path(__file__).parent.parent / "fixtures"
HF = FIX / "hf"
LC = FIX / "llamacpp"


def hf_tensors(name: str) -> dict[str, np.ndarray]:
    d: dict[str, np.ndarray] = {}
    for f in sorted((HF / name).glob("*.safetensors")):
        d.update(load_file(str(f)))
    return d


def conv(tmp_path, name, outtype="f32", src=None) -> GGUFFile:
    out = tmp_path / f"{name}.{outtype}.gguf"
    convert(str(src or HF / name), str(out), outtype)
    return GGUFFile(out)


def llamacpp_keys(f: GGUFFile) -> list[str]:
    return [k for k in f.keys() if not k.startswith(("GGUF.", "general."))]


def same_bytes(a: GGUFFile, b: GGUFFile, name: str) -> bool:
    return np.array_equal(np.asarray(a.raw(name)), np.asarray(b.raw(name)))


# ---- where llama.cpp is right: the same file ------------------------------------------------
def test_mamba2_tiny_identical_to_llamacpp(tmp_path):
    ours, ref = conv(tmp_path, "mamba2-tiny"), GGUFFile(LC / "mamba2-tiny.f32.gguf")
    assert ours.arch == ref.arch == "mamba2"
    for key in llamacpp_keys(ref):
        assert ours.get(key) == ref.get(key), key
        assert ours.value_type(key) == ref.value_type(key), key
    assert set(ours.tensors) == set(ref.tensors)
    for name, t in ref.tensors.items():
        assert (ours.tensors[name].shape, ours.tensors[name].type) == (t.shape, t.type), name
        assert same_bytes(ours, ref, name), name
    # our extra keys: Mamba-2 head dim; and the tokenizer JSON verbatim
    assert ours.get("mamba2.ssm.head_dim") == 16
    assert json.loads(ours.get("tokenizer.huggingface.json")) == json.loads((HF / "mamba2-tiny/tokenizer.json").read_text())


def test_mamba2_special_ids_come_from_tokenizer_config_first(tmp_path):
    # config.json says eos 2 / pad 1; tokenizer_config.json names <|endoftext|> (id 0) for bos
    # and eos and <|pad|> (id 1) for pad: llama.cpp (gguf-py SpecialVocab) takes those first.
    cfg = json.loads((HF / "mamba2-tiny/config.json").read_text())
    assert cfg["eos_token_id"] == 2
    ours = conv(tmp_path, "mamba2-tiny")
    assert (ours.get("tokenizer.ggml.bos_token_id"), ours.get("tokenizer.ggml.eos_token_id"),
            ours.get("tokenizer.ggml.padding_token_id")) == (0, 0, 1)


def test_mamba_tiny_matches_llamacpp_and_A_is_correctly_rounded(tmp_path):
    ours, ref = conv(tmp_path, "mamba-tiny"), GGUFFile(LC / "mamba-tiny.f32.gguf")
    assert ours.arch == "mamba"
    for key in llamacpp_keys(ref):
        assert ours.get(key) == ref.get(key), key
        assert ours.value_type(key) == ref.value_type(key), key
    assert set(ours.tensors) == set(ref.tensors)
    hf = hf_tensors("mamba-tiny")
    n_diff = 0
    for name, t in ref.tensors.items():
        assert (ours.tensors[name].shape, ours.tensors[name].type) == (t.shape, t.type), name
        if not name.endswith("ssm_a"):
            assert same_bytes(ours, ref, name), name
            continue
        # A = -exp(A_log): llama.cpp's torch float32 exp is not correctly rounded (its values are
        # up to ~0.53 ulp from the exact result); ours is float64 exp rounded once (<= 0.5 ulp).
        # Where the two differ, they are neighbours (1 ulp) and ours is the nearer one.
        a_log = hf[f"backbone.layers.{name.split('.')[1]}.mixer.A_log"]
        exact = -np.exp(a_log.astype(np.float64))
        mine, theirs = np.asarray(ours.array(name)), np.asarray(ref.array(name))
        assert np.all(np.abs(mine - exact) <= 0.5 * np.spacing(np.abs(mine)) * (1 + 1e-9))
        d = mine != theirs
        n_diff += int(d.sum())
        assert np.all(np.abs(mine[d] - theirs[d]) <= np.spacing(np.abs(mine[d])))
        assert np.all(np.abs(mine[d] - exact[d]) < np.abs(theirs[d] - exact[d]))
    assert n_diff < 0.02 * 2 * 2048   # 42 of 4096 on the fixture


# ---- where llama.cpp is wrong: the HF facts win --------------------------------------------
@pytest.mark.parametrize("name", ["bamba-tiny", "bamba-small"])
def test_bamba_rope_dims_and_partial_rotary_reorder(tmp_path, name):
    cfg = json.loads((HF / name / "config.json").read_text())
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg["hidden_size"] // n_head
    rot = int(hd * cfg["rope_parameters"]["partial_rotary_factor"])
    ours, ref = conv(tmp_path, name), GGUFFile(LC / f"{name}.f32.gguf")
    # llama.cpp misses the nested partial_rotary_factor and writes the whole head dim
    assert ref.get("granitehybrid.rope.dimension_count") == hd
    assert ours.get("granitehybrid.rope.dimension_count") == rot == hd // 2
    for key in llamacpp_keys(ref):
        if key != "granitehybrid.rope.dimension_count":
            assert ours.get(key) == ref.get(key), key
    assert ours.get("granitehybrid.attention.layer_indices") == cfg["attn_layer_indices"]
    assert ours.get("granitehybrid.ssm.head_dim") == cfg["mamba_d_head"]
    hf = hf_tensors(name)
    assert set(ours.tensors) == set(ref.tensors)
    for name in ref.tensors:
        if ".attn_q." in name or ".attn_k." in name:
            i = int(name.split(".")[1])
            src = hf[f"model.layers.{i}.self_attn.{'q' if '.attn_q.' in name else 'k'}_proj.weight"]
            nh = n_head if ".attn_q." in name else n_kv
            # ours: (i, i+rot/2) -> (2i, 2i+1) within the first rot rows of each head, rest untouched
            assert np.array_equal(np.asarray(ours.array(name)), src[head_perm(nh, hd, rot)])
            assert np.array_equal(np.asarray(ours.array(name)).reshape(nh, hd, -1)[:, rot:], src.reshape(nh, hd, -1)[:, rot:])
            # llama.cpp: the same reorder over the whole head
            assert np.array_equal(np.asarray(ref.array(name)), src[head_perm(nh, hd, hd)])
        else:
            assert same_bytes(ours, ref, name), name


def test_head_perm_pairs():
    p = head_perm(2, 8, 4)
    assert p.tolist() == [0, 2, 1, 3, 4, 5, 6, 7, 8, 10, 9, 11, 12, 13, 14, 15]
    assert sorted(head_perm(3, 16, 16).tolist()) == list(range(48))


def test_granitehybrid_moe_head_count_kv_and_nope(tmp_path):
    cfg = json.loads((HF / "granitehybrid-moe-tiny/config.json").read_text())
    attn = [i for i, t in enumerate(cfg["layer_types"]) if t == "full_attention"]
    ours, ref = conv(tmp_path, "granitehybrid-moe-tiny"), GGUFFile(LC / "granitehybrid-moe-tiny.f32.gguf")
    # llama.cpp looks for layer_types == "attention"; transformers 5 writes "full_attention"
    assert list(ref.get("granitehybrid.attention.head_count_kv")) == [0, 0, 0, 0]
    want = [cfg["num_key_value_heads"] if i in attn else 0 for i in range(cfg["num_hidden_layers"])]
    assert list(ours.get("granitehybrid.attention.head_count_kv")) == want == [0, 2, 0, 0]
    assert ours.get("granitehybrid.attention.layer_indices") == attn
    assert cfg["position_embedding_type"] == "nope" and ours.get("granitehybrid.rope.scaling.finetuned") is False
    for key in llamacpp_keys(ref):
        if key != "granitehybrid.attention.head_count_kv":
            assert ours.get(key) == ref.get(key), key
    # every tensor (MoE split into gate/up exps, shared expert, router) equals llama.cpp's
    assert set(ours.tensors) == set(ref.tensors)
    for name, t in ref.tensors.items():
        assert (ours.tensors[name].shape, ours.tensors[name].type) == (t.shape, t.type), name
        assert same_bytes(ours, ref, name), name
    hp = HParams.from_gguf(ours)
    assert hp.attention_layers == attn and hp.n_expert == 4 and hp.n_ff_shexp == cfg["shared_intermediate_size"]
    assert not hp.use_rope
    # the split, checked against the HF tensor directly
    hf = hf_tensors("granitehybrid-moe-tiny")
    il = hf["model.layers.0.block_sparse_moe.input_linear.weight"]
    F = cfg["intermediate_size"]
    assert np.array_equal(np.asarray(ours.array("blk.0.ffn_gate_exps.weight")), il[:, :F])
    assert np.array_equal(np.asarray(ours.array("blk.0.ffn_up_exps.weight")), il[:, F:])


def test_jamba_converted_from_tokenizer_json(tmp_path):
    # llama.cpp's converter could not convert this checkpoint (it wants tokenizer.model)
    assert not (LC / "jamba-tiny.f32.gguf").exists()
    assert not (HF / "jamba-tiny/tokenizer.model").exists()
    cfg = json.loads((HF / "jamba-tiny/config.json").read_text())
    ours = conv(tmp_path, "jamba-tiny")
    L = cfg["num_hidden_layers"]
    attn = [i for i in range(L) if i % cfg["attn_layer_period"] == cfg["attn_layer_offset"]]
    moe = [i for i in range(L) if i % cfg["expert_layer_period"] == cfg["expert_layer_offset"]]
    assert ours.arch == "jamba"
    assert ours.get("jamba.attention.layer_indices") == attn == [1, 3]
    assert list(ours.get("jamba.attention.head_count_kv")) == [cfg["num_key_value_heads"] if i in attn else 0 for i in range(L)]
    assert ours.get("jamba.expert_count") == cfg["num_experts"]
    assert ours.get("tokenizer.ggml.model") == "gpt2" and ours.get("tokenizer.ggml.pre") == "gpt-2"
    hp = HParams.from_gguf(ours)
    assert hp.layer_kinds == [LayerKind.ATTENTION if i in attn else LayerKind.MAMBA1 for i in range(L)]
    assert [i for i, f in enumerate(hp.ffn_kinds) if f.name == "MOE"] == moe
    hf = hf_tensors("jamba-tiny")
    gate = np.asarray(ours.array("blk.1.ffn_gate_exps.weight"))
    for e in range(cfg["num_experts"]):
        assert np.array_equal(gate[e], hf[f"model.layers.1.feed_forward.experts.{e}.gate_proj.weight"])
    for n in ("ssm_dt_norm.weight", "ssm_b_norm.weight", "ssm_c_norm.weight"):
        assert ours.tensors[f"blk.0.{n}"].type == GGMLType.F32
    a = np.asarray(ours.array("blk.0.ssm_a"))
    assert np.array_equal(a, (-np.exp(hf["model.layers.0.mamba.A_log"].astype(np.float64))).astype(np.float32))


# ---- transformers 4 config forms give the same file --------------------------------------
def _variant(tmp_path, name, edit) -> pathlib.Path:
    d = tmp_path / "v4" / name   # same basename: general.name comes from it
    shutil.copytree(HF / name, d)
    cfg = json.loads((d / "config.json").read_text())
    edit(cfg)
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    return d


def _same_file(tmp_path, name, edit):
    a = tmp_path / "v5.gguf"
    b = tmp_path / "v4.gguf"
    convert(str(HF / name), str(a), "f32")
    convert(str(_variant(tmp_path, name, edit)), str(b), "f32")
    assert a.read_bytes() == b.read_bytes()


def test_v4_flat_rope_and_layer_types_bamba(tmp_path):
    def edit(c):
        rp = c.pop("rope_parameters")
        c["rope_theta"], c["partial_rotary_factor"] = rp["rope_theta"], rp["partial_rotary_factor"]
        idx = c.pop("attn_layer_indices")
        c["layer_types"] = ["attention" if i in idx else "mamba" for i in range(c["num_hidden_layers"])]
    _same_file(tmp_path, "bamba-tiny", edit)


def test_v4_attn_layer_period_offset_bamba(tmp_path):
    def edit(c):
        assert c.pop("attn_layer_indices") == [1, 3]
        c["attn_layer_period"], c["attn_layer_offset"] = 2, 1
    _same_file(tmp_path, "bamba-tiny", edit)


def test_v4_layer_types_granite(tmp_path):
    def edit(c):
        c["layer_types"] = ["attention" if t == "full_attention" else "mamba" for t in c["layer_types"]]
        c["rope_theta"] = c.pop("rope_parameters")["rope_theta"]
    _same_file(tmp_path, "granitehybrid-moe-tiny", edit)


def test_v4_jamba_indices(tmp_path):
    def edit(c):
        c["attn_layer_indices"] = [1, 3]
        del c["attn_layer_period"], c["attn_layer_offset"]
    _same_file(tmp_path, "jamba-tiny", edit)


# ---- outtypes ---------------------------------------------------------------------------
@pytest.mark.parametrize("outtype", ["f16", "bf16", "q8_0"])
def test_outtype_rules_and_bits(tmp_path, outtype):
    f32 = conv(tmp_path, "bamba-small")
    q = conv(tmp_path, "bamba-small", outtype)
    want_t = {"f16": GGMLType.F16, "bf16": GGMLType.BF16, "q8_0": GGMLType.Q8_0}[outtype]
    assert q.get("general.file_type") == {"f16": 1, "bf16": 32, "q8_0": 7}[outtype]
    for name, t in q.tensors.items():
        src = np.asarray(f32.array(name))
        if (len(t.shape) == 1 or name.endswith("_norm.weight") or not name.endswith(".weight")
                or ".ssm_conv1d." in name or ".ffn_gate_inp." in name):
            assert t.type == GGMLType.F32, name
            assert same_bytes(q, f32, name), name
            continue
        assert t.type == want_t, name
        assert np.array_equal(np.asarray(q.raw(name)).view(np.uint8).ravel(),
                              gguf.quants.quantize(src, want_t).view(np.uint8).ravel()), name


def test_pick_type_q8_0_fallback():
    assert pick_type("blk.0.ssm_in.weight", (296, 64), "q8_0") == GGMLType.Q8_0
    assert pick_type("blk.0.ssm_x.weight", (40, 136), "q8_0") == GGMLType.F16   # 136 % 32 != 0
    assert pick_type("blk.0.ssm_a", (8, 1), "bf16") == GGMLType.F32
    assert pick_type("blk.0.ffn_gate_inp.weight", (4, 64), "bf16") == GGMLType.F32


def test_bf16_rounding_matches_gguf_py():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 3, 10000).astype(np.float32),
                        np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 3.4e38, -3.4e38, 1e-40], np.float32)])
    assert np.array_equal(f32_to_bf16(x).view(np.uint8), gguf.quants.quantize(x, GGMLType.BF16).view(np.uint8))


def _write_bf16_copy(src: pathlib.Path, dst: pathlib.Path) -> None:
    """Rewrite every shard of ``src`` with BF16 data (round to nearest even), same names."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors"))
    for f in sorted(src.glob("*.safetensors")):
        arrs = load_file(str(f))
        head, blobs, off = {}, [], 0
        for k, v in arrs.items():
            b = f32_to_bf16(v.astype(np.float32)).tobytes()
            head[k] = {"dtype": "BF16", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
            blobs.append(b)
            off += len(b)
        h = json.dumps(head).encode()
        (dst / f.name).write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_bf16_checkpoint_auto_passthrough_and_f32(tmp_path):
    src = tmp_path / "bamba-tiny"
    _write_bf16_copy(HF / "bamba-tiny", src)
    auto = conv(tmp_path, "bamba-tiny", "auto", src=src)
    assert auto.get("general.file_type") == 32
    f32 = conv(tmp_path, "bamba-tiny", "f32", src=src)
    for name, t in auto.tensors.items():
        want = np.asarray(f32.array(name))
        if t.type == GGMLType.BF16:   # raw passthrough == widening then rounding again
            got = (np.asarray(auto.raw(name)).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
            assert np.array_equal(got.reshape(want.shape), want), name
        else:
            assert t.type == GGMLType.F32 and same_bytes(auto, f32, name), name


def test_auto_on_f32_checkpoint_is_f16(tmp_path):
    """llama.cpp's converter: no BF16/F16 matrix -> f16 (it was f32 here)."""
    assert make_plan(str(HF / "mamba-tiny"), "auto").outtype == "f16"


# ---- streaming ------------------------------------------------------------------------------
def test_small_bands_give_the_same_file(tmp_path, monkeypatch):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    convert(str(HF / "bamba-tiny"), str(a), "bf16")
    monkeypatch.setattr(convert_core, "BAND_ELEMENTS", 48)   # bands of < 1 row up to a few rows
    convert(str(HF / "bamba-tiny"), str(b), "bf16")
    assert a.read_bytes() == b.read_bytes()


def test_dry_run_plan_writes_nothing(tmp_path):
    plan = plan_to_dict(make_plan(str(HF / "granitehybrid-moe-tiny"), "bf16"))
    names = {t["name"]: t for t in plan["tensors"]}
    assert names["blk.0.ffn_gate_exps.weight"]["shape"] == [64, 128, 4]
    assert names["blk.0.ffn_gate_exps.weight"]["sources"] == ["model.layers.0.block_sparse_moe.input_linear.weight"]
    assert names["blk.0.ffn_gate_inp.weight"]["type"] == "F32"
    assert plan["kv"]["granitehybrid.attention.head_count_kv"] == [0, 2, 0, 0]
    assert list(tmp_path.iterdir()) == []


# ---- tokenizer ------------------------------------------------------------------------------
def test_detect_pre_from_structure():
    assert detect_pre({"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}}) == "gpt-2"
    llama3 = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
              "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
    seq = {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": llama3}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}}
    assert detect_pre(seq) == "llama-bpe"
    seq["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{L}+"
    assert detect_pre(seq) is None
    assert detect_pre({"pre_tokenizer": {"type": "Metaspace"}}) is None
    star = {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}]}}
    assert detect_pre(star) == "starcoder"
    star["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = False
    assert detect_pre(star) is None


def test_unknown_pre_tokenizer_is_default_with_warning(tmp_path):
    d = tmp_path / "mamba-tiny"
    shutil.copytree(HF / "mamba-tiny", d)
    tok = json.loads((d / "tokenizer.json").read_text())
    tok["pre_tokenizer"] = {"type": "Whitespace"}
    (d / "tokenizer.json").write_text(json.dumps(tok))
    plan = make_plan(str(d), "f32")
    kv = {x.key: x.value for x in plan.kv}
    assert kv["tokenizer.ggml.pre"] == "default"
    assert any("pre-tokenizer not recognised" in w for w in plan.warnings)


def _pb_varint(n: int) -> bytes:
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def _pb_field(fn: int, wt: int, payload: bytes) -> bytes:
    return _pb_varint(fn << 3 | wt) + (_pb_varint(len(payload)) + payload if wt == 2 else payload)


def test_sentencepiece_protobuf_parse(tmp_path):
    pieces = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3), ("▁the", -1.5, 1), ("<0x41>", 0.0, 6)]
    msg = b""
    for p, s, t in pieces:
        sp = _pb_field(1, 2, p.encode()) + _pb_field(2, 5, struct.pack("<f", s)) + _pb_field(3, 0, _pb_varint(t))
        msg += _pb_field(1, 2, sp)
    msg += _pb_field(2, 2, _pb_field(3, 0, _pb_varint(1)))   # a trainer_spec, ignored
    f = tmp_path / "tokenizer.model"
    f.write_bytes(msg)
    assert parse_sentencepiece(str(f)) == pieces


def test_kernel_copy_fallback_gives_the_same_file(tmp_path, monkeypatch):
    """Tensors whose bytes pass through are copied with os.copy_file_range; without it (or when
    it refuses) the pread/pwrite loop must write the same file."""
    import errno
    import os
    a, b, c = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "c.gguf"
    convert(str(HF / "granitehybrid-moe-tiny"), str(a), "f32")
    monkeypatch.delattr(os, "copy_file_range", raising=False)
    convert(str(HF / "granitehybrid-moe-tiny"), str(b), "f32")
    assert a.read_bytes() == b.read_bytes()

    def refuse(*args):
        raise OSError(errno.EXDEV, "cross-device")
    monkeypatch.setattr(os, "copy_file_range", refuse, raising=False)
    convert(str(HF / "granitehybrid-moe-tiny"), str(c), "f32")
    assert a.read_bytes() == c.read_bytes()


def _sp_model(pieces) -> bytes:
    msg = b""
    for p, s, t in pieces:
        sp = _pb_field(1, 2, p.encode()) + _pb_field(2, 5, struct.pack("<f", s)) + _pb_field(3, 0, _pb_varint(t))
        msg += _pb_field(1, 2, sp)
    return msg


def test_sentencepiece_checkpoint(tmp_path):
    # a Mamba-2 checkpoint with only tokenizer.model: llama.cpp writes model "llama", pieces,
    # scores and types, and pads to the embedding's rows with [PAD{i}] (UNUSED, score -1000)
    d = tmp_path / "mamba2-tiny"
    shutil.copytree(HF / "mamba2-tiny", d)
    (d / "tokenizer.json").unlink()
    (d / "tokenizer_config.json").unlink()
    pieces = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3), ("▁the", -1.5, 1), ("<0x41>", 0.0, 6)]
    (d / "tokenizer.model").write_bytes(_sp_model(pieces))
    f = conv(tmp_path, "mamba2-tiny", src=d)
    assert f.get("tokenizer.ggml.model") == "llama" and f.get("tokenizer.ggml.pre") == "default"
    toks, scores, types = f.get("tokenizer.ggml.tokens"), f.get("tokenizer.ggml.scores"), f.get("tokenizer.ggml.token_type")
    assert len(toks) == 512 and toks[:5] == [p for p, _, _ in pieces] and toks[5] == "[PAD5]"
    assert list(types[:6]) == [2, 3, 3, 1, 6, 5] and scores[3] == -1.5 and scores[5] == -1000.0
    # no tokenizer_config.json: config.json's ids are the fallback (bos 0, eos 2, pad 1)
    assert (f.get("tokenizer.ggml.bos_token_id"), f.get("tokenizer.ggml.eos_token_id"),
            f.get("tokenizer.ggml.padding_token_id")) == (0, 2, 1)
    assert f.get("tokenizer.huggingface.json") is None


def test_bpe_vocab_padded_to_embedding_rows(tmp_path):
    d = tmp_path / "mamba-tiny"
    shutil.copytree(HF / "mamba-tiny", d)
    tok = json.loads((d / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    for text in [t for t, i in vocab.items() if i >= 500]:
        del vocab[text]
    (d / "tokenizer.json").write_text(json.dumps(tok))
    f = conv(tmp_path, "mamba-tiny", src=d)
    toks, types = f.get("tokenizer.ggml.tokens"), f.get("tokenizer.ggml.token_type")
    assert len(toks) == 512 == f.tensors["token_embd.weight"].shape[1]
    assert toks[500:] == [f"[PAD{i}]" for i in range(500, 512)] and set(types[500:]) == {5}
    assert list(types[:3]) == [3, 3, 1]   # <|endoftext|>, <|pad|> are CONTROL, then NORMAL


def test_more_tokens_than_embedding_rows_is_an_error(tmp_path):
    from toolkit.errors import InputError
    d = tmp_path / "mamba-tiny"
    shutil.copytree(HF / "mamba-tiny", d)
    tok = json.loads((d / "tokenizer.json").read_text())
    tok["added_tokens"].append({"id": 600, "content": "<|extra|>", "special": True})
    (d / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(InputError, match="token id 600 does not fit the embedding's 512 rows"):
        make_plan(str(d))


@pytest.mark.parametrize("outtype", ["f16", "q8_0"])
def test_native_and_numpy_row_conversion_agree_on_bf16_source(tmp_path, monkeypatch, outtype):
    src = tmp_path / "bamba-tiny"
    _write_bf16_copy(HF / "bamba-tiny", src)
    a, b = tmp_path / "native.gguf", tmp_path / "numpy.gguf"
    convert(str(src), str(a), outtype)
    monkeypatch.setattr(convert_core, "USE_NATIVE", False)
    convert(str(src), str(b), outtype)
    assert a.read_bytes() == b.read_bytes()


def test_native_row_converter_is_used():
    # the C library is part of the package: the fast path must be live, not silently numpy
    assert convert_core._native() is not None


def test_granite_dense_variant(tmp_path):
    """Granite 4.0-H dense (num_local_experts = 0): shared_mlp is the FFN -> ffn_gate/up/down."""
    from safetensors.numpy import save_file
    d = tmp_path / "granite-dense"
    shutil.copytree(HF / "granitehybrid-moe-tiny", d, ignore=shutil.ignore_patterns("*.safetensors", "*.json"))
    weights = {k: v for k, v in hf_tensors("granitehybrid-moe-tiny").items() if "block_sparse_moe" not in k}
    save_file(weights, str(d / "model.safetensors"))
    cfg = json.loads((HF / "granitehybrid-moe-tiny/config.json").read_text())
    cfg["num_local_experts"] = 0
    (d / "config.json").write_text(json.dumps(cfg))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(HF / "granitehybrid-moe-tiny" / f, d)
    f = conv(tmp_path, "granite-dense", src=d)
    Fs = cfg["shared_intermediate_size"]
    assert f.get("granitehybrid.feed_forward_length") == Fs and f.get("granitehybrid.expert_count") is None
    assert not any("exps" in n or "shexp" in n or "gate_inp" in n for n in f.tensors)
    si = weights["model.layers.2.shared_mlp.input_linear.weight"]
    assert np.array_equal(np.asarray(f.array("blk.2.ffn_gate.weight")), si[:Fs])
    assert np.array_equal(np.asarray(f.array("blk.2.ffn_up.weight")), si[Fs:])
    assert np.array_equal(np.asarray(f.array("blk.2.ffn_down.weight")), weights["model.layers.2.shared_mlp.output_linear.weight"])
    hp = HParams.from_gguf(f)
    assert [k.name for k in hp.ffn_kinds] == ["DENSE"] * 4


def test_hybrid_without_attention_layers(tmp_path):
    # a Bamba whose config lists no attention layer: every layer must then be Mamba-2 (the
    # checkpoint's attention weights become leftovers); an empty layer list is not written
    d = tmp_path / "bamba-tiny"
    shutil.copytree(HF / "bamba-tiny", d)
    c = json.loads((d / "config.json").read_text())
    c["attn_layer_indices"] = []
    (d / "config.json").write_text(json.dumps(c))
    from toolkit.errors import InputError
    with pytest.raises(InputError, match="missing tensor 'model.layers.1.mamba"):
        make_plan(str(d))
    # an empty array key (gguf-py cannot type one) is left out rather than failing the write
    from toolkit.convert.plan import kv_arr_i32
    plan = make_plan(str(HF / "mamba2-tiny"))
    plan.kv.append(kv_arr_i32("mamba2.attention.layer_indices", []))
    out = tmp_path / "m.gguf"
    convert(str(HF / "mamba2-tiny"), str(out), plan=plan)
    assert GGUFFile(out).get("mamba2.attention.layer_indices") is None
