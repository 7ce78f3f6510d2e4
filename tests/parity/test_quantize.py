"""toolkit quantize: byte-identical to llama-quantize, banding, rules, bad input.

References: tests/fixtures/quant/MODEL.TYPE.json, extracted by tools/make_quant_reference.py
from llama-quantize's outputs (llama.cpp 0c1e570, no imatrix unless named, 2 threads) of
- tests/fixtures/llamacpp/bamba-small.f32.gguf (granitehybrid) and qwen35-small.f32.gguf (qwen35,
  dense, gated delta net + gated attention);
- tests/fixtures/quant/qwen35moe-small.f32.gguf (8 experts) and qwen3next-small.f32.gguf (4 experts),
  made as tests/fixtures/quant/README.md says;
- tests/fixtures/llamacpp/qwen35-tiny, qwen35moe-tiny, qwen3next-tiny.f32.gguf (widths 64 / 32:
  the fallbacks of the GDN, expert and tied-embedding tensors; 18 types), and
  tests/fixtures/quant/qwen35moe-tiny-mtp.f32.gguf (the same with an MTP block: blk.4.nextn.*);
- tests/fixtures/llamacpp/kimilinear-tiny.f32.gguf (kimi-linear: KDA, MLA k_b / v_b, 8 experts; widths
  64 / 32 / 16: fallbacks; llama-quantize built from llama.cpp 0c1e570, the 15 types);
- the odd-width granitehybrid models (fallbacks); bamba-small and qwen35moe-small with a synthetic imatrix.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct

import gguf
import numpy as np
import pytest

from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import GGMLType
from toolkit.quantize import Options, make_plan, quantize_file
from toolkit.quantize.rules import ModelInfo, TypeChooser, allows_quantization, llama_tensor_order, n_dims
from toolkit.quantize.types import FILE_TYPES, FileType, file_type

from families import FIXTURES, FULL_SET, WITH_S_L

FIX = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures")
SRC = os.path.join(FIX, "llamacpp", "bamba-small.f32.gguf")
REF_FILES = sorted(f for f in os.listdir(os.path.join(FIX, "quant")) if f.endswith(".json"))
# the fixtures' reference sets are their rows' quant_refs (tests/families.py); these three inputs
# live in tests/fixtures/quant/ only (tests/fixtures/quant/README.md)
REF_SETS = {f.name: f.quant_refs for f in FIXTURES if f.quant_refs} | {
    "qwen35moe-small": FULL_SET, "qwen3next-small": FULL_SET, "qwen35moe-tiny-mtp": WITH_S_L}


def _refs(model: str) -> set[str]:
    """The file types with a plain (no imatrix) reference for MODEL."""
    return {f[len(model) + 1:-len(".json")] for f in REF_FILES
            if f.startswith(model + ".") and not f.startswith(model + ".imatrix.")}


def _input_path(name: str) -> str:
    for d in ("llamacpp", "quant"):
        p = os.path.join(FIX, d, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(name)


def _sha(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        h.update(fh.read())
    return h.hexdigest()


def _digests(path: str) -> dict[str, list[str]]:
    r = gguf.GGUFReader(path)
    return {t.name: [t.tensor_type.name, hashlib.sha256(np.asarray(t.data).view(np.uint8).tobytes()).hexdigest()]
            for t in r.tensors}


@pytest.mark.parametrize("model", sorted(REF_SETS))
def test_reference_set_is_complete(model):
    assert _refs(model) == REF_SETS[model]


@pytest.mark.slow
@pytest.mark.parametrize("ref_file", REF_FILES)
def test_matches_llama_quantize(ref_file, tmp_path, bamba_small_q):
    """Every tensor's ggml type and data bytes, the tensor order and the changed metadata equal
    llama-quantize's output; without an imatrix, the whole file does too.  References: bamba-small
    (all 15 types), the odd-width models (fallbacks) and bamba-small with a synthetic imatrix."""
    with open(os.path.join(FIX, "quant", ref_file)) as fh:
        ref = json.load(fh)
    qtype = ref["type"]
    im = os.path.join(FIX, "quant", ref["imatrix"]) if ref["imatrix"] else None
    if _input_path(ref["input"]) == SRC and not im:
        out = str(bamba_small_q(qtype))   # the session's file (conftest.py): quantize_file(SRC, ..., n_threads=2)
    else:
        out = str(tmp_path / f"out.{qtype}.gguf")
        quantize_file(_input_path(ref["input"]), out, qtype, n_threads=2, imatrix=im)
    got = _digests(out)
    wrong = {n: (got.get(n, ["missing"])[0], want[0]) for n, want in ref["tensors"].items() if got.get(n) != want}
    assert not wrong, f"{ref_file}: {len(wrong)} tensors differ from llama-quantize (ours, theirs): {wrong}"
    assert set(got) == set(ref["tensors"])
    r = gguf.GGUFReader(out)
    assert [t.name for t in r.tensors] == ref["order"]
    for key, val in ref["metadata"].items():
        if key == "quantize.imatrix.file":  # the path as given on the command line
            assert os.path.basename(r.fields[key].contents()) == os.path.basename(val)
        else:
            assert r.fields[key].contents() == val, key
    if not im:
        assert _sha(out) == ref["file_sha256"], f"{ref_file}: tensors equal but the file bytes differ"


@pytest.mark.slow
@pytest.mark.parametrize("qtype", ["Q4_K_M", "Q8_0", "IQ4_XS"])
def test_tiny_bands_give_identical_bytes(qtype, tmp_path, bamba_small_q):
    """Rows are independent: a band of one row (band_mb tiny) and one thread give the same file."""
    a, b = str(bamba_small_q(qtype)), str(tmp_path / "b.gguf")   # a: 2 threads, default bands
    quantize_file(SRC, b, qtype, n_threads=1, band_mb=1e-6)
    assert _sha(a) == _sha(b)


def test_requantize_refused_then_allowed(tmp_path, bamba_small_q):
    q8 = str(bamba_small_q("Q8_0"))
    with pytest.raises(InputError, match="allow-requantize"):
        quantize_file(q8, str(tmp_path / "x.gguf"), "Q4_K_M")
    assert not os.path.exists(tmp_path / "x.gguf")
    out = str(tmp_path / "q4.gguf")
    quantize_file(q8, out, "Q4_K_M", allow_requantize=True, n_threads=2)
    types = {k: v[0] for k, v in _digests(out).items()}
    assert types["blk.0.ssm_in.weight"] == "Q4_K" and types["output.weight"] == "Q6_K"


@pytest.mark.slow
def test_bf16_source_converts_row_by_row(tmp_path, bamba_small_q):
    """A BF16 input goes through tk_convert_rows (one-row float32 scratch): the bytes equal
    dequantizing the whole tensor and quantizing it, and do not depend on the band size."""
    from toolkit.binding import rows
    bf = str(bamba_small_q("BF16"))
    a, b = str(tmp_path / "a.gguf"), str(tmp_path / "b.gguf")
    quantize_file(bf, a, "Q4_K_M", n_threads=2)
    quantize_file(bf, b, "Q4_K_M", n_threads=1, band_mb=1e-6)
    assert _sha(a) == _sha(b)
    r, rb = gguf.GGUFReader(a), gguf.GGUFReader(bf)
    n = 0
    for t, tb in zip(r.tensors, rb.tensors):
        if t.tensor_type in (GGMLType.Q4_K, GGMLType.Q6_K):
            x = rows.dequantize(GGMLType.BF16, np.asarray(tb.data).view(np.uint8).tobytes(), int(tb.shape[0]))
            want = rows.quantize(t.tensor_type, x)
            assert np.array_equal(np.asarray(t.data).view(np.uint8).reshape(-1), want), t.name
            n += 1
    assert n == 24


# ---- rules --------------------------------------------------------------------------------

def test_llama_tensor_order_sorts_by_layer_number():
    names = ["blk.10.a.weight", "token_embd.weight", "blk.2.b.weight", "output.weight", "blk.2.a.weight"]
    assert llama_tensor_order(names) == ["output.weight", "token_embd.weight", "blk.2.a.weight", "blk.2.b.weight",
                                         "blk.10.a.weight"]


def test_allows_quantization():
    assert n_dims((512, 1)) == 1 and n_dims((1, 8)) == 2
    assert allows_quantization("blk.0.ssm_in.weight", (256, 1096))
    for name, shape in [("blk.0.ssm_a", (1, 8)), ("blk.0.ssm_d", (1, 8)), ("blk.0.ssm_conv1d.weight", (4, 576)),
                        ("blk.0.ssm_norm.weight", (64, 8)), ("blk.0.ffn_gate_inp.weight", (256, 4)),
                        ("blk.0.attn_norm.weight", (256,)), ("blk.0.x.weight", (512, 1))]:
        assert not allows_quantization(name, shape), name
    assert not allows_quantization("output.weight", (256, 512), quantize_output_tensor=False)


def _chooser(ftype: str, names, n_layer=4, **kw):
    ft = file_type(ftype)
    return TypeChooser(ModelInfo("granitehybrid", n_layer, **kw), ft.ftype, ft.default, Options(), names)


@pytest.mark.parametrize("width,target,expect", [
    (96, "Q4_K_M", GGMLType.Q5_0),   # Q4_K -> Q5_0
    (64, "Q6_K", GGMLType.Q8_0),     # Q6_K -> Q8_0
    (96, "Q5_K_M", GGMLType.Q5_1),   # Q5_K -> Q5_1
    (96, "Q2_K", GGMLType.Q4_0),     # Q2_K -> Q4_0 (ffn_up keeps the default type Q2_K first)
    (64, "IQ4_XS", GGMLType.IQ4_NL),
    (48, "Q4_K_M", GGMLType.F16),    # even the 32-block fallback does not divide
    (48, "Q8_0", GGMLType.F16),
])
def test_fallback_for_odd_widths(width, target, expect):
    name = "blk.0.ffn_up.weight"
    c = _chooser(target, [name]).choose(name, (width, 128), GGMLType.F32)
    assert c.type == expect
    assert c.fallback and str(width) in c.fallback and expect.name in c.fallback


def test_output_of_odd_width_is_q8_0():
    c = _chooser("Q4_K_M", ["output.weight"]).choose("output.weight", (96, 512), GGMLType.F32)
    assert c.type == GGMLType.Q8_0 and c.fallback is None


def test_attn_v_bump_counts_only_attention_layers():
    """Q4_K_M: attn_v gets Q6_K by use_more_bits over the attention layers only (hybrid)."""
    names = [f"blk.{i}.attn_v.weight" for i in (5, 11, 17, 23)]
    ch = _chooser("Q4_K_M", names, n_layer=24)
    got = [ch.choose(n, (1024, 256), GGMLType.F32).type for n in names]
    # use_more_bits(i, 4): i < 0 or i >= 3 or (i % 3 == 2) -> layers #2 and #3 of 4
    assert got == [GGMLType.Q4_K, GGMLType.Q4_K, GGMLType.Q6_K, GGMLType.Q6_K]


def test_tensor_type_override_and_pure():
    names = ["blk.0.ffn_down.weight", "blk.0.ffn_up.weight"]
    ft = file_type("Q4_K_M")
    ch = TypeChooser(ModelInfo("granitehybrid", 1), ft.ftype, ft.default,
                     Options(tensor_types=[("FFN_DOWN", GGMLType.Q8_0), ("nomatch", GGMLType.Q6_K)]), names)
    assert ch.choose(names[0], (256, 256), GGMLType.F32).type == GGMLType.Q8_0  # regex lowercased like llama
    assert ch.pattern_hits == {"FFN_DOWN": 1, "nomatch": 0}
    pure = TypeChooser(ModelInfo("granitehybrid", 1), ft.ftype, ft.default, Options(pure=True), names)
    assert pure.choose(names[0], (256, 256), GGMLType.F32).type == GGMLType.Q4_K


def test_dry_run_plan_sizes():
    from toolkit.gguf_io.header import GGUFHeader
    p = make_plan(GGUFHeader(SRC), "Q4_K_M")
    assert p.ftype.ftype == FileType.MOSTLY_Q4_K_M
    assert p.dst_bytes < p.src_bytes
    with open(os.path.join(FIX, "quant", "bamba-small.Q4_K_M.json")) as fh:
        ref = json.load(fh)
    assert {t.name: t.dst_type.name for t in p.tensors} == {n: v[0] for n, v in ref["tensors"].items()}


@pytest.mark.parametrize("ref_file", REF_FILES)
def test_plan_types_match_llama_quantize(ref_file):
    """The type chosen for every tensor (no data read: the fast form of test_matches_llama_quantize)."""
    from toolkit.gguf_io.header import GGUFHeader
    from toolkit.quantize.imatrix import load_imatrix
    with open(os.path.join(FIX, "quant", ref_file)) as fh:
        ref = json.load(fh)
    im = load_imatrix(os.path.join(FIX, "quant", ref["imatrix"])) if ref["imatrix"] else None
    p = make_plan(GGUFHeader(_input_path(ref["input"])), ref["type"], imatrix=im)
    got = {t.name: t.dst_type.name for t in p.tensors}
    want = {n: v[0] for n, v in ref["tensors"].items()}
    assert {n: (got.get(n), t) for n, t in want.items() if got.get(n) != t} == {}
    assert [t.name for t in p.tensors] == ref["order"]


# ---- rules of the gated-delta-net families (qwen3next, qwen35, qwen35moe) ----------------------

# ggml shapes (ne0 first) of one GDN layer and one gated-attention layer of qwen35moe-small
GDN_LAYER = {"blk.0.ssm_a": (4,), "blk.0.ssm_conv1d.weight": (4, 512), "blk.0.ssm_dt.bias": (4,),
             "blk.0.ssm_alpha.weight": (256, 4), "blk.0.ssm_beta.weight": (256, 4), "blk.0.ssm_ba.weight": (256, 8),
             "blk.0.attn_qkv.weight": (256, 512), "blk.0.attn_gate.weight": (256, 256),
             "blk.0.ssm_norm.weight": (64,), "blk.0.ssm_out.weight": (256, 256), "blk.0.attn_norm.weight": (256,),
             "blk.0.post_attention_norm.weight": (256,), "blk.0.ffn_gate_inp.weight": (256, 8),
             "blk.0.ffn_gate_inp_shexp.weight": (256, 1), "blk.0.ffn_up_exps.weight": (256, 256, 8),
             "blk.0.ffn_down_exps.weight": (256, 256, 8), "blk.0.ffn_down_shexp.weight": (256, 256)}
ATTN_LAYER = {"blk.1.attn_q.weight": (256, 512), "blk.1.attn_k.weight": (256, 64), "blk.1.attn_v.weight": (256, 64),
              "blk.1.attn_output.weight": (256, 256), "blk.1.attn_q_norm.weight": (64,),
              "blk.1.attn_k_norm.weight": (64,)}


def test_gdn_tensors_that_stay_f32():
    """ssm_a, ssm_dt.bias, the norms (1-D), the conv kernel and the routers stay as they are;
    ffn_gate_inp_shexp is [n_embd, 1], so 1-D for ggml_n_dims; ssm_alpha / ssm_beta / ssm_ba
    are ordinary [n_embd, H] matrices and are quantized."""
    kept = {n for n, sh in {**GDN_LAYER, **ATTN_LAYER}.items() if not allows_quantization(n, sh)}
    assert kept == {"blk.0.ssm_a", "blk.0.ssm_conv1d.weight", "blk.0.ssm_dt.bias", "blk.0.ssm_norm.weight",
                    "blk.0.attn_norm.weight", "blk.0.post_attention_norm.weight", "blk.0.ffn_gate_inp.weight",
                    "blk.0.ffn_gate_inp_shexp.weight", "blk.1.attn_q_norm.weight", "blk.1.attn_k_norm.weight"}


def _choose_all(ftype: str, shapes: dict, n_layer: int, n_expert: int = 0, n_gqa: int = 4) -> dict[str, str]:
    names = llama_tensor_order(shapes)
    ft = file_type(ftype)
    ch = TypeChooser(ModelInfo("qwen35moe", n_layer, n_expert=n_expert, n_gqa=n_gqa), ft.ftype, ft.default,
                     Options(), names)
    return {n: ch.choose(n, shapes[n], GGMLType.F32).type.name for n in names}


def test_gdn_attn_qkv_is_counted_and_bumped_as_attn_v():
    """attn_qkv (the GDN layers' fused q/k/v) falls in llama.cpp's attn_v branch, which comes before
    its ATTENTION_QKV branch: Q4_K_M gives it Q6_K by use_more_bits over the attn_qkv + attn_v
    tensors of all layers (4 here: #2 and #3 get Q6_K), never the ATTENTION_QKV branch's Q5_K."""
    shapes = {f"blk.{i}.attn_qkv.weight": (256, 512) for i in range(3)}
    shapes["blk.3.attn_v.weight"] = (256, 64)
    got = _choose_all("Q4_K_M", shapes, n_layer=4)
    assert got == {"blk.0.attn_qkv.weight": "Q4_K", "blk.1.attn_qkv.weight": "Q4_K",
                   "blk.2.attn_qkv.weight": "Q6_K", "blk.3.attn_v.weight": "Q6_K"}
    assert _choose_all("Q3_K_M", shapes, n_layer=4)["blk.1.attn_qkv.weight"] == "Q5_K"   # i_attention_wv < 2


@pytest.mark.parametrize("n_expert", [8, 4])
def test_gdn_moe_rules_depend_on_eight_experts(n_expert):
    """With exactly 8 experts llama-quantize raises attn_v / attn_qkv and attn_k to Q8_0 and
    attn_output to Q5_K (Q4_K_M); ffn_down_exps / _shexp take the layer from the name."""
    got = _choose_all("Q4_K_M", {**GDN_LAYER, **ATTN_LAYER}, n_layer=2, n_expert=n_expert)
    eight = n_expert == 8
    assert got["blk.0.attn_qkv.weight"] == ("Q8_0" if eight else "Q4_K")
    assert got["blk.1.attn_v.weight"] == ("Q8_0" if eight else "Q6_K")
    assert got["blk.1.attn_k.weight"] == ("Q8_0" if eight else "Q4_K")
    assert got["blk.1.attn_output.weight"] == ("Q5_K" if eight else "Q4_K")
    # use_more_bits(0, 2) is false: layer 0's ffn_down tensors keep Q4_K, whatever their count
    assert got["blk.0.ffn_down_exps.weight"] == got["blk.0.ffn_down_shexp.weight"] == "Q4_K"
    for n in ("blk.0.ssm_alpha.weight", "blk.0.ssm_ba.weight", "blk.0.attn_gate.weight", "blk.0.ssm_out.weight",
              "blk.0.ffn_up_exps.weight", "blk.1.attn_q.weight"):
        assert got[n] == "Q4_K", n
    assert got["blk.0.ssm_a"] == got["blk.0.ffn_gate_inp_shexp.weight"] == "F32"


def test_gdn_moe_expert_tensor_outside_a_layer_is_an_error():
    with pytest.raises(InputError, match="ffn_down_exps"):
        _choose_all("Q4_K_M", {"ffn_down_exps.weight": (256, 256, 8)}, n_layer=2, n_expert=8)


def test_unknown_type_lists_valid_ones():
    with pytest.raises(InputError, match="Q4_K_M"):
        file_type("Q4_K_X")
    assert file_type("q4_k").name == "Q4_K_M"
    assert "IQ4_XS" in FILE_TYPES


# ---- bad input ----------------------------------------------------------------------------

def test_not_gguf_and_truncated(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all" * 10)
    out = tmp_path / "out.gguf"
    with pytest.raises(InputError):
        quantize_file(str(bad), str(out), "Q8_0")
    trunc = tmp_path / "trunc.gguf"
    with open(SRC, "rb") as fh:
        trunc.write_bytes(fh.read()[: 4_000_000])
    with pytest.raises(InputError):
        quantize_file(str(trunc), str(out), "Q8_0")
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")] == []


def test_output_equal_to_input_is_refused(tmp_path):
    import shutil
    src = tmp_path / "m.gguf"
    shutil.copy(SRC, src)
    before = _sha(str(src))
    with pytest.raises(InputError, match="overwrite"):
        quantize_file(str(src), str(src), "Q8_0")
    assert _sha(str(src)) == before


def test_unreadable_source_type_is_unsupported(tmp_path, monkeypatch):
    from toolkit.quantize import types
    monkeypatch.setattr(types, "is_supported_source", lambda t: False)
    with pytest.raises(UnsupportedError):
        quantize_file(SRC, str(tmp_path / "o.gguf"), "Q8_0")


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(os.path.join(FIX, "llamacpp")) if f.endswith(".f32.gguf")))
def test_metadata_copied_exactly(name, tmp_path):
    """Every key/value of the input (tokenizer arrays included) is copied with its value type;
    only general.file_type (and quantization_version) are set."""
    src = os.path.join(FIX, "llamacpp", name)
    out = str(tmp_path / "o.gguf")
    quantize_file(src, out, "Q8_0", n_threads=2)
    a, b = gguf.GGUFReader(src), gguf.GGUFReader(out)
    skip = {"general.file_type", "general.quantization_version"}
    ka = [k for k in a.fields if k not in skip and not k.startswith("GGUF.")]
    kb = [k for k in b.fields if k not in skip and not k.startswith("GGUF.")]
    assert ka == kb
    for k in ka:
        fa, fb = a.fields[k], b.fields[k]
        assert list(fa.types) == list(fb.types), k
        assert [bytes(fa.parts[i]) for i in fa.data] == [bytes(fb.parts[i]) for i in fb.data], k
    assert b.fields["general.file_type"].contents() == int(FileType.MOSTLY_Q8_0)
    assert b.fields["general.quantization_version"].contents() == 2


# ---- imatrix --------------------------------------------------------------------------------

IMAT = os.path.join(FIX, "quant", "bamba-small.imatrix.gguf")


def test_imatrix_loader_divides_by_counts():
    from toolkit.quantize.imatrix import load_imatrix
    im = load_imatrix(IMAT)
    r = gguf.GGUFReader(IMAT)
    t = {x.name: x for x in r.tensors}
    assert len(im.data) == 24 and im.chunk_count == 10 and im.datasets == ["synthetic-test-data.txt"]
    for name, e in im.data.items():
        sums = np.asarray(t[name + ".in_sum2"].data, np.float32).reshape(-1)
        counts = np.asarray(t[name + ".counts"].data, np.float32).reshape(-1)
        ne0 = sums.size // counts.size
        for j, c in enumerate(counts):
            want = np.ones(ne0, np.float32) if c == 0 else sums[j * ne0:(j + 1) * ne0] / np.float32(c)
            assert np.array_equal(e[j * ne0:(j + 1) * ne0], want), name
    assert any((np.asarray(t[n + ".counts"].data) == 0).any() for n in im.data)  # the count-0 path is exercised


def test_imatrix_changes_weighted_types_only(tmp_path, bamba_small_q):
    """With an imatrix, the imatrix-aware types change bytes, Q8_0 does not (ggml ignores it)."""
    for qtype, changes in (("Q4_K_M", True), ("Q8_0", False)):
        a, b = str(bamba_small_q(qtype)), str(tmp_path / "b.gguf")
        quantize_file(SRC, b, qtype, n_threads=2, imatrix=IMAT)
        da, db = _digests(a), _digests(b)
        assert {k: v[0] for k, v in da.items()} == {k: v[0] for k, v in db.items()}
        assert (da["blk.0.ssm_in.weight"] != db["blk.0.ssm_in.weight"]) == changes
        r = gguf.GGUFReader(b)
        assert r.fields["quantize.imatrix.entries_count"].contents() == 24


def test_imatrix_bad_inputs(tmp_path):
    bad = tmp_path / "legacy.dat"
    # llama-imatrix's legacy layout: i32 n_entries, i32 name length, name, i32 ncall, i32 nval, f32[nval]
    bad.write_bytes(struct.pack("<ii", 1, 19) + b"blk.0.ffn_up.weight" + struct.pack("<ii", 1, 4) + b"\x00" * 16)
    with pytest.raises(UnsupportedError, match="legacy"):
        quantize_file(SRC, str(tmp_path / "o.gguf"), "Q4_K_M", imatrix=str(bad))
    text = tmp_path / "text.gguf"    # neither format: bad input (exit 2), not "legacy"
    text.write_text("hello, this is not an imatrix\n")
    with pytest.raises(InputError, match="not an imatrix file"):
        quantize_file(SRC, str(tmp_path / "o.gguf"), "Q4_K_M", imatrix=str(text))
    # an imatrix for another model: entry sizes do not match the tensors
    other = str(tmp_path / "other.imatrix.gguf")
    w = gguf.GGUFWriter(other, arch="imatrix")
    w.add_array(gguf.Keys.IMatrix.DATASETS, ["x"])
    w.add_uint32(gguf.Keys.IMatrix.CHUNK_COUNT, 1)
    w.add_uint32(gguf.Keys.IMatrix.CHUNK_SIZE, 512)
    w.add_tensor("blk.0.ffn_up.weight.in_sum2", np.ones((1, 100), np.float32))
    w.add_tensor("blk.0.ffn_up.weight.counts", np.ones((1, 1), np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    with pytest.raises(InputError, match="blk.0.ffn_up.weight"):
        quantize_file(SRC, str(tmp_path / "o.gguf"), "Q4_K_M", imatrix=other)
    assert not (tmp_path / "o.gguf").exists()


# ---- CLI ------------------------------------------------------------------------------------

def _cli(*args):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "toolkit", "quantize", *args], capture_output=True, text=True)


def test_cli_errors_and_dry_run(tmp_path):
    out = tmp_path / "o.gguf"
    p = _cli(SRC, str(out), "Q9_K")
    assert p.returncode == 2 and "Q4_K_M" in p.stderr and "Traceback" not in p.stderr and not out.exists()
    notg = tmp_path / "x.gguf"
    notg.write_text("hello")
    p = _cli(str(notg), str(out), "Q8_0")
    assert p.returncode == 2 and "x.gguf" in p.stderr and not out.exists()
    p = _cli(SRC, str(out), "Q4_K_M", "--dry-run", "--json", "--tensor-type", "nomatch_xyz=q8_0")
    assert p.returncode == 0 and not out.exists()
    d = json.loads(p.stdout)
    assert d["file_type"] == "Q4_K_M" and d["size_after"] < d["size_before"]
    assert any("nomatch_xyz" in w for w in d["warnings"])
    p = _cli(SRC, str(out), "Q4_K_M", "--tensor-type", "ffn_down=q9")
    assert p.returncode == 2 and "q9" in p.stderr


def test_per_layer_token_embd_can_be_named_apart_from_token_embedding_type():
    """--token-embedding-type covers token_embd and per_layer_token_embd, unless a --tensor-type
    pattern names per_layer_token_embd (llama.cpp's llama_tensor_get_type)."""
    names = ["per_layer_token_embd.weight", "token_embd.weight", "output.weight"]
    ft = file_type("Q4_K_M")
    opts = Options(token_embedding_type=GGMLType.Q8_0, tensor_types=[("per_layer_token_embd", GGMLType.Q4_K)])
    ch = TypeChooser(ModelInfo("qwen4exp", 4), ft.ftype, ft.default, opts, names)
    assert ch.choose("per_layer_token_embd.weight", (256, 4096), GGMLType.BF16).type == GGMLType.Q4_K
    assert ch.choose("token_embd.weight", (256, 512), GGMLType.BF16).type == GGMLType.Q8_0
    plain = TypeChooser(ModelInfo("qwen4exp", 4), ft.ftype, ft.default, Options(token_embedding_type=GGMLType.Q8_0), names)
    assert plain.choose("per_layer_token_embd.weight", (256, 4096), GGMLType.BF16).type == GGMLType.Q8_0


def test_peak_rss_is_bounded_by_the_band_not_the_tensor(tmp_path):
    """One 64 MiB float32 tensor: with --band-mb 4 the quantize process stays far below the
    tensor's size; with a band larger than the tensor it does not (the test is calibrated)."""
    import subprocess
    import sys
    src = str(tmp_path / "big.gguf")
    w = gguf.GGUFWriter(src, "granitehybrid")
    w.add_uint32("granitehybrid.block_count", 1)
    w.add_tensor("blk.0.ffn_up.weight", np.random.default_rng(0).standard_normal((4096, 4096), np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    # peak_rss_mb() reads VmHWM (ru_maxrss would include this forking parent's pages)
    code = ("import sys; from toolkit.quantize import quantize_file; "
            "s = quantize_file(sys.argv[1], sys.argv[2], 'Q8_0', n_threads=2, band_mb=float(sys.argv[3])); "
            "print(s.peak_rss_mb)")
    rss = {}
    for band in (4, 512):
        p = subprocess.run([sys.executable, "-c", code, src, str(tmp_path / f"o{band}.gguf"), str(band)],
                           capture_output=True, text=True, check=True)
        rss[band] = float(p.stdout.strip().splitlines()[-1])
    assert rss[512] - rss[4] > 48, rss     # the whole tensor staged vs 4 MiB bands
    assert _sha(str(tmp_path / "o4.gguf")) == _sha(str(tmp_path / "o512.gguf"))
