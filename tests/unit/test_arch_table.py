"""The architecture table (toolkit/arch/table.py) and the C runtime agree.

- every Python mirror of a C enum (LayerKind, FFNKind, the rows' tk_arch ids) has the C values,
  member for member;
- the tk_hparams field list (toolkit/arch/abi.py) covers the cffi struct layout and every
  HParams field, with the same value kinds, and the checker does report a disagreement;
- the struct the runtime fills holds what HParams says;
- the tensors each row expects are the ones our converter writes and llama.cpp's files have,
  and exactly the ones the C loader requires: without a required one it fails naming it,
  without an optional group it loads.
"""
from __future__ import annotations

import dataclasses
import pathlib
import re

import numpy as np
import pytest

from families import FIXTURES, names
from toolkit.arch import ARCHES, FFNKind, HParams, LayerKind, Norm, Residual, arch_spec
from toolkit.arch import readers as R
from toolkit.arch import fields as F
from toolkit.arch.abi import PYTHON_ONLY, TK_HPARAMS, CField, flat_fields, struct_mismatches
from toolkit.arch.table import RUNTIME_ARCHES
from toolkit.errors import NativeError
from toolkit.gguf_io import GGUFFile
from toolkit.binding import ffi, lib
from toolkit.runtime.model import Model, _load, c_hparams

pytestmark = pytest.mark.native

FIX = pathlib.Path(__file__).parent.parent / "fixtures"
HF = sorted(p.name for p in (FIX / "hf").iterdir())
LLAMACPP = sorted(p.name for p in (FIX / "llamacpp").glob("*.gguf"))


def _c_fields() -> list[tuple[str, str]]:
    return flat_fields(ffi.typeof("tk_hparams"))


def _py_fields() -> list[str]:
    return [f.name for f in dataclasses.fields(HParams)]


# ---- enums ----------------------------------------------------------------------------------

def _c_enum(c_enum: str, count: str) -> dict[str, int]:
    """The C enum's values without its count sentinel, which must equal how many there are
    (the values are 0 .. count - 1: model.c and forward.c bound ids by it)."""
    c = dict(ffi.typeof(c_enum).relements)
    n = c.pop(count)
    assert sorted(c.values()) == list(range(n)), (c_enum, count, n)
    return c


def test_recipe_enums_equal_c():
    assert {m.name: m.value for m in Norm} == {k[len("TK_NORM_"):]: v for k, v in ffi.typeof("tk_norm_place").relements.items()}
    assert {r.c_id for r in Residual} == set(ffi.typeof("tk_residual").relements.values())
    assert Residual.NORMED_FACTORS.c_id == lib.TK_RESIDUAL_NORMED and Residual.MHC.c_id == lib.TK_RESIDUAL_HC


@pytest.mark.parametrize("enum, c_enum, prefix, count", [(LayerKind, "tk_layer_kind", "TK_LAYER_", "TK_LAYER_KIND_COUNT"),
                                                         (FFNKind, "tk_ffn_kind", "TK_FFN_", "TK_FFN_KIND_COUNT")])
def test_kind_enums_equal_c(enum, c_enum, prefix, count):
    for m in enum:
        assert getattr(lib, prefix + m.name) == m.value, m
    assert _c_enum(c_enum, count) == {prefix + m.name: m.value for m in enum}
    assert getattr(lib, count) == len(enum)


def test_arch_ids_equal_c():
    c = _c_enum("tk_arch", "TK_ARCH_COUNT")        # {"TK_ARCH_GRANITE_HYBRID": 2, ...}
    ours = {a.name.replace("_", "").replace("-", ""): a.c_id for a in ARCHES if a.runs}   # nemotron_h: NEMOTRON_H
    assert {n[len("TK_ARCH_"):].replace("_", "").lower(): v for n, v in c.items()} == ours
    for n, v in c.items():
        assert getattr(lib, n) == v


def test_runtime_arches():
    """The architectures the runtime loads are those of tests/families.py's rows: each has a
    fixture, and every fixture's architecture runs."""
    assert sorted(RUNTIME_ARCHES) == sorted({f.arch for f in FIXTURES})
    assert [a.name for a in ARCHES if not a.runs] == []
    assert arch_spec("llama") is None


def test_rows_are_consistent():
    """A row's readers, mixers and residual say the same thing."""
    for a in ARCHES:
        if not a.runs:
            assert a.readers == ()
            continue
        # LFM2's short conv has no ssm.* keys: read_shortconv takes read_ssm's place; MiniMax's
        # lightning attention has none either (its state is sized by the attention keys); RecurrentGemma's
        # RG-LRU reads rglru.width and ssm.conv_kernel only; Kimi-Linear's KDA reads its own keys (read_kda)
        third = {LayerKind.SHORTCONV: R.read_shortconv, LayerKind.LIGHTNING: R.read_attention,
                 LayerKind.RGLRU: R.read_rglru, LayerKind.KDA: R.read_kda}.get(a.recurrent, R.read_ssm)
        assert a.readers[:3] == (R.read_common, R.read_layer_kinds, third) and a.readers[-1] is R.check_rms_eps
        assert (R.read_lfm2_moe_routing in a.readers) == (a.name == "lfm2moe")
        assert a.recurrent in a.mixers
        mamba2 = {LayerKind.MAMBA2, LayerKind.PARALLEL}    # a parallel layer is attention + Mamba-2
        # zamba2's hybrid layers hold the (shared) attention and a Mamba-2 block
        mamba2 |= {LayerKind.ZAMBA2_SHARED}
        # zamba's hybrid layers hold the (shared) attention and a Mamba-1 block
        attention = {LayerKind.ATTENTION, LayerKind.PARALLEL, LayerKind.ZAMBA2_SHARED, LayerKind.QSA, LayerKind.ZAMBA_SHARED}
        assert (R.read_mamba2 in a.readers) == bool(mamba2 & set(a.mixers))
        # olmo-hybrid reads its GDN sizes with read_olmo_hybrid (Dv from inner_size, beta scale)
        assert (R.read_gdn in a.readers or R.read_olmo_hybrid in a.readers) == (LayerKind.GDN in a.mixers)
        assert (R.read_attention in a.readers) == bool(attention & set(a.mixers))
        assert (R.read_mla in a.readers) == (LayerKind.MLA in a.mixers)   # MLA reads its own keys (read_mla)
        assert bool({LayerKind.ATTENTION, LayerKind.ZAMBA2_SHARED, LayerKind.QSA, LayerKind.ZAMBA_SHARED, LayerKind.MLA}
                    & set(a.mixers)) == a.attention_from_file
        # qwen4exp: QSA layers, hyper-connections and PLE come together (read_qwen4exp)
        assert (R.read_qwen4exp in a.readers) == (LayerKind.QSA in a.mixers) == (a.residual == Residual.HYPER_CONNECTIONS)
        assert (R.read_zamba2 in a.readers) == bool({LayerKind.ZAMBA2_SHARED, LayerKind.ZAMBA_SHARED} & set(a.mixers))
        assert (R.read_mamba1_heads in a.readers) == (LayerKind.ZAMBA_SHARED in a.mixers)
        assert (R.read_multipliers in a.readers) == (a.residual == Residual.MULTIPLIERS)
        assert (R.read_nemotron_layers in a.readers) == (LayerKind.NONE in a.mixers)
        assert set(a.mixer_tensors) == set(LayerKind) and set(a.ffn_tensors) >= set(a.ffns)


# ---- tk_hparams -----------------------------------------------------------------------------

def test_struct_layout_matches_field_list():
    assert struct_mismatches(_c_fields(), _py_fields()) == []
    assert [n for n, _ in _c_fields()] == [f.name for f in TK_HPARAMS]    # same order, for reading


def test_struct_checker_reports_disagreements():
    c, py = _c_fields(), _py_fields()
    assert struct_mismatches(c + [("sliding_window", "int32_t")], py) == \
        ["tk_hparams.sliding_window (int32_t) is not filled from Python"]
    assert struct_mismatches([x for x in c if x[0] != "logit_scale"], py) == \
        ["field list fills tk_hparams.logit_scale, which the C struct lacks"]
    assert struct_mismatches(c, py + ["not_a_field_yet"]) == \
        ["HParams.not_a_field_yet is not passed to C (nor listed as Python-only)"]
    assert struct_mismatches([(n, "float" if n == "attn.n_rot" else t) for n, t in c], py) == \
        ["tk_hparams.attn.n_rot is float in C, int32 in the field list"]
    assert struct_mismatches(c, [p for p in py if p != "n_ff"]) == ["Python-only 'n_ff' is not an HParams field"]
    assert struct_mismatches(c, py, python_only={**PYTHON_ONLY, "n_head": "?"}) == \
        ["HParams.n_head is listed as Python-only but also passed to C"]
    table = [f if f.name != "moe.n_expert" else CField("moe.n_expert", "int32", "spec.n_experts") for f in TK_HPARAMS]
    assert struct_mismatches(c, py, table=table) == [
        "tk_hparams.moe.n_expert: source 'spec.n_experts' is not a field of ArchSpec",
        "HParams.n_expert is not passed to C (nor listed as Python-only)"]


def test_header_struct_is_generated_from_the_declarations(monkeypatch):
    """toolkit.h's tk_hparams block is what toolkit/arch/fields.py gives (tools/gen_hparams.py
    writes it): one declaration per hparam, and the header cannot drift from it."""
    header = (pathlib.Path(F.__file__).parents[1] / "native" / "toolkit.h").read_text()
    assert F.header_with_struct(header) == header
    assert "(appended)" not in header
    # a field added to the declarations (or a C member edited by hand) is a difference
    monkeypatch.setattr(F, "HPARAMS", F.HPARAMS + (F.HParam("n_new", "int32", 0, "a new field", group="kda"),))
    assert F.header_with_struct(header) != header


def test_declarations_are_consistent():
    """Each GGUF key has one value type; names, C paths unique; a kind-less C group is not declared."""
    types: dict[str, str] = {}
    for h in F.HPARAMS:
        if h.key:
            assert types.setdefault(h.key, h.key_type or h.type) == (h.key_type or h.type), h.key
        assert h.group in F.GROUPS, h
        assert h.absent is F.REQUIRED or h.key, h       # an absent value is the value of a missing key
    paths = [h.c_path for h in F.c_fields()]
    assert len(paths) == len(set(paths))
    assert {h.group for h in F.c_fields()} == set(F.GROUPS)


@pytest.mark.parametrize("name", LLAMACPP)
def test_filled_struct_holds_hparams(name):
    f = GGUFFile(str(FIX / "llamacpp" / name))
    hp = HParams.from_gguf(f)
    spec = arch_spec(hp.arch)
    c, arrays = c_hparams(hp)
    assert c.arch == spec.c_id and c.moe.softmax_topk == int(spec.moe_softmax_topk)
    for fld in TK_HPARAMS:
        got = fld.get(c)
        want = fld.value(hp, spec)
        if fld.kind in ("int32[]", "uint64[]") and not len(want):
            assert got == ffi.NULL, fld          # a family without the array (qwen4exp's)
        elif fld.kind == "str":
            assert ffi.string(got).decode() == want, fld
        elif fld.kind == "int32[]":
            assert list(ffi.unpack(got, hp.n_layer)) == [int(x) for x in want], fld
        elif fld.kind == "float":
            assert got == float(np.float32(want)), fld
        else:
            assert got == int(want), fld
    assert len(arrays) == 3 + bool(hp.dsa_full) + 2     # glm5-next: the DSA indexer types; the two norm names
    assert ffi.string(c.block.ffn_norm).decode() == spec.ffn_norm and c.block.residual == spec.residual.c_id


# ---- tensors --------------------------------------------------------------------------------

def _main_names(names: set[str], n_layer: int) -> set[str]:
    """The tensors of the main model: all but the MTP / NextN blocks that follow the main
    layers (blk.{n_layer + j}.*, with blk.{n_layer}.nextn.*: llama.cpp's qwen3next / qwen35
    layout, block_count = n_layer + nextn_predict_layers), which the main graph never runs."""
    mtp = {n for n in names if (m := re.match(r"blk\.(\d+)\.", n)) and int(m.group(1)) >= n_layer}
    assert not mtp or f"blk.{n_layer}.nextn.eh_proj.weight" in mtp, sorted(mtp)
    return names - mtp


def _ple_layers(hp: HParams) -> list[int]:
    """qwen4exp's PLE layers in module order (ple_index), [] elsewhere."""
    return [i for _, i in sorted((k, i) for i, k in enumerate(hp.ple_index) if k >= 0)]


def _check_names(f: GGUFFile, hp: HParams | None = None) -> None:
    hp = hp or HParams.from_gguf(f)
    spec = arch_spec(hp.arch)
    assert set(hp.layer_kinds) <= set(spec.mixers) and set(hp.ffn_kinds) <= set(spec.ffns)
    req, groups = spec.expected_tensors(hp.layer_kinds, hp.ffn_kinds, max(hp.n_shared_block, 1), _ple_layers(hp))
    names = _main_names(set(f.tensors), hp.n_layer)
    assert req <= names, sorted(req - names)
    for g in groups:
        assert not (g & names) or g <= names, sorted(g)   # a group comes whole
    assert names <= req.union(*groups), sorted(names - req.union(*groups))


@pytest.mark.parametrize("name", HF)
def test_converted_tensor_names(hf_f32, name):
    _check_names(GGUFFile(str(hf_f32(name))))


@pytest.mark.parametrize("name", LLAMACPP)
def test_llamacpp_tensor_names(hf_f32, name):
    f = GGUFFile(str(FIX / "llamacpp" / name))
    hp = None
    if name == "granitehybrid-moe-tiny.f32.gguf":
        # llama.cpp writes head_count_kv = 0 on every layer of this file (test_runtime_load's
        # test_llamacpp_granite_file_with_zero_head_count_kv): its tensors are right, its layer
        # kinds are not, so take the kinds from our conversion of the same checkpoint
        hp = HParams.from_gguf(GGUFFile(str(hf_f32("granitehybrid-moe-tiny"))))
    _check_names(f, hp)


@pytest.mark.parametrize("name", names("loader") + [f"llamacpp/{n}" for n in names("loader_lc")])   # tests/families.py
def test_loader_requires_exactly_the_expected_tensors(hf_f32, name):
    path = FIX / f"{name}.f32.gguf" if name.startswith("llamacpp/") else hf_f32(name)
    m = Model(path, n_threads=1)
    try:
        hp = m.hparams
        req, groups = arch_spec(hp.arch).expected_tensors(hp.layer_kinds, hp.ffn_kinds, max(hp.n_shared_block, 1),
                                                          _ple_layers(hp))
        infos = list(m.gguf)
        for drop in [{n} for n in sorted(req)] + [g for g in groups if g <= set(m.gguf.tensors)]:
            # a shared expert's gate goes with the shared expert (a gate alone is an unused tensor)
            drop = drop | {n.replace("ffn_up_shexp", "ffn_gate_inp_shexp") for n in drop if "ffn_up_shexp" in n}
            rest = [t for t in infos if t.name not in drop]
            if drop <= req:
                (n,) = drop
                with pytest.raises(NativeError, match=f"missing tensor '{n}'"):
                    _load(m.path, m._c_hparams, rest)
            else:
                lib.tk_model_free(_load(m.path, m._c_hparams, rest))
    finally:
        m.close()
