"""The C model loader on hostile tensor tables and hparams, handed to it directly.

Python's GGUF parser rejects most malformed files before C sees them; these tests skip it and
give tk_model_load tables that the parser would never produce (negative or overflowing ne,
n_dims 0 or 5, offsets past the mapping, NULL names, inconsistent hparams).  Each must come
back as a non-OK status with a message, never a crash or an out-of-bounds read: CI runs this
file under ASan + UBSan (pytest -m native), where any stray read aborts the run.
"""
from __future__ import annotations

import os
import pathlib

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from toolkit.arch.abi import CField
from toolkit.errors import ToolkitError
from toolkit.runtime import Model
from toolkit.binding import ffi, lib, last_error

from fuzz_util import N_EXAMPLES, record
from hypothesis_util import examples

pytestmark = pytest.mark.native

FIX = pathlib.Path(__file__).parent.parent / "fixtures" / "llamacpp"


@pytest.fixture(scope="module")
def base():
    m = Model(FIX / "bamba-tiny.f32.gguf")   # hybrid: exercises attention, Mamba-2 and dense FFN binding
    yield m
    m.close()


def _table(m: Model, extra=()):
    """A tk_tensor_desc[] copy of the model's table (+ extra (name, offset, type, n_dims, ne) rows)."""
    rows = [(t.name, t.offset, int(t.type), max(1, len(t.shape)), list(t.shape) + [1] * (4 - len(t.shape)))
            for t in m.gguf] + list(extra)
    descs = ffi.new("tk_tensor_desc[]", len(rows))
    keep = []
    for i, (name, off, typ, nd, ne) in enumerate(rows):
        if name is None:
            descs[i].name = ffi.NULL
        else:
            nm = ffi.new("char[]", name.encode())
            keep.append(nm)
            descs[i].name = nm
        descs[i].offset = off & 0xFFFFFFFFFFFFFFFF
        descs[i].type = typ
        descs[i].n_dims = nd
        for j in range(4):
            descs[i].ne[j] = ne[j]
    return descs, len(rows), keep


def _load_status(m: Model, descs, n: int, hp=None, path=None) -> tuple[int, str]:
    out = ffi.new("tk_model **")
    st_ = lib.tk_model_load((path or m.path).encode(), hp or m._c_hparams, descs, n, ffi.NULL, out)
    if st_ == lib.TK_OK:
        lib.tk_model_free(out[0])
        return st_, ""
    assert out[0] == ffi.NULL, "a failed load must not hand out a model"
    return st_, last_error()


def _edit(m: Model, name: str, **kw):
    descs, n, keep = _table(m)
    for i in range(n):
        if ffi.string(descs[i].name).decode() == name:
            for key, v in kw.items():
                if key == "ne":
                    for j in range(4):
                        descs[i].ne[j] = v[j]
                else:
                    setattr(descs[i], key, v)
    return descs, n, keep


def test_unchanged_table_loads(base):
    descs, n, _keep = _table(base)
    assert _load_status(base, descs, n) == (lib.TK_OK, "")


@pytest.mark.parametrize("nd,ne,why", [
    (2, [2**24, 2**40, 1, 1], "implausibly large"),         # 2^64 elements: wrapped to 0 before the fix
    (2, [2**40, 2**24, 1, 1], "implausibly large"),
    (3, [2**21, 2**21, 2**22, 1], "implausibly large"),     # 2^64 again, over three dims
    (4, [2**16, 2**16, 2**16, 2**16], "implausibly large"),
    (2, [2**62, 4, 1, 1], "implausibly large"),
    (2, [0, 64, 1, 1], "invalid ne"),
    (2, [-64, 64, 1, 1], "invalid ne"),
    (2, [64, -1, 1, 1], "invalid ne"),
    (2, [64, 2, 3, 1], "invalid ne"),                       # a dim beyond n_dims = 2 that is not 1
])
def test_unused_tensor_with_bad_dims_is_rejected_before_use(base, nd, ne, why):
    # the tensor is not one the architecture binds: the table check alone must catch it
    descs, n, _keep = _table(base, [("junk.weight", 0, 0, nd, ne)])
    st_, msg = _load_status(base, descs, n)
    assert st_ == lib.TK_ERR_INVALID and "junk.weight" in msg and why in msg, msg


@pytest.mark.parametrize("field,value,why", [
    ("n_dims", 0, "dims"), ("n_dims", 5, "dims"), ("n_dims", -1, "dims"), ("n_dims", 2**31 - 1, "dims"),
    ("type", 4, "unknown ggml type"), ("type", -1, "unknown ggml type"), ("type", 2**31 - 1, "unknown ggml type"),
    ("offset", 2**64 - 1, "beyond the end"), ("offset", 2**63, "beyond the end"), ("offset", 2**64 - 4, "beyond the end"),
])
def test_bad_fields_of_a_bound_tensor_are_named(base, field, value, why):
    descs, n, _keep = _edit(base, "blk.0.ssm_in.weight", **{field: value})
    st_, msg = _load_status(base, descs, n)
    assert st_ != lib.TK_OK and "blk.0.ssm_in.weight" in msg and why in msg, msg


def test_offset_plus_size_wrapping_past_2_64_is_rejected(base):
    size = os.path.getsize(base.path)
    t = base.gguf.tensor("token_embd.weight")
    # offset + nbytes wraps around 2^64 to a small number: must not pass a naive end check
    descs, n, _keep = _edit(base, "token_embd.weight", offset=(2**64 - t.nbytes + 64) & ~3)
    st_, msg = _load_status(base, descs, n)
    assert st_ == lib.TK_ERR_INVALID and "beyond the end of the file" in msg and str(size) in msg, msg


def test_null_name_and_bad_counts(base):
    descs, n, _keep = _table(base, [(None, 0, 0, 1, [4, 1, 1, 1])])
    st_, msg = _load_status(base, descs, n)
    assert st_ == lib.TK_ERR_INVALID and "no name" in msg
    descs, n, _keep = _table(base)
    assert _load_status(base, descs, -1)[0] == lib.TK_ERR_INVALID
    assert _load_status(base, ffi.NULL, 5)[0] == lib.TK_ERR_INVALID
    # zero tensors: every required tensor is missing
    st_, msg = _load_status(base, descs, 0)
    assert st_ == lib.TK_ERR_INVALID and "missing tensor" in msg


def test_file_is_not_the_one_described(base, tmp_path):
    # the same table over a shorter file: every offset is checked against *this* mapping
    p = tmp_path / "short.gguf"
    p.write_bytes(pathlib.Path(base.path).read_bytes()[:4096])
    descs, n, _keep = _table(base)
    st_, msg = _load_status(base, descs, n, path=str(p))
    assert st_ == lib.TK_ERR_INVALID and "beyond the end of the file" in msg
    st_, msg = _load_status(base, descs, n, path=str(tmp_path / "absent.gguf"))
    assert st_ == lib.TK_ERR_IO and "absent.gguf" in msg
    (tmp_path / "empty.gguf").write_bytes(b"")
    assert _load_status(base, descs, n, path=str(tmp_path / "empty.gguf"))[0] == lib.TK_ERR_IO


HP_EDITS = [
    ("n_layer", 0), ("n_layer", -3), ("n_layer", 2**31 - 1), ("n_embd", 0), ("n_embd", 65), ("n_vocab", -1),
    ("n_vocab", 513), ("ssm.d_conv", 0), ("ssm.d_conv", 2**20), ("ssm.d_state", 0), ("ssm.d_inner", -8), ("ssm.dt_rank", 0),
    ("ssm.n_group", 0), ("ssm.n_group", 3), ("ssm.n_head", 7), ("ssm.head_dim", 0), ("attn.n_head", 0), ("attn.n_head", 3),
    ("attn.head_dim", 0), ("attn.head_dim", 2**30), ("attn.n_rot", 3), ("attn.n_rot", -2), ("attn.rope_freq_base", 0.0),
    ("attn.rope_freq_base", float("nan")), ("logit_scale", 0.0), ("logit_scale", float("inf")), ("rms_eps", float("nan")),
    ("arch", 99), ("arch", -1),   # (the id at TK_ARCH_COUNT: the sentinel test below)
]


@pytest.mark.parametrize("field,value", HP_EDITS)
def test_inconsistent_hparams_are_rejected(base, field, value):
    hp = ffi.new("tk_hparams *")
    ffi.buffer(hp)[:] = ffi.buffer(base._c_hparams)[:]   # pointers to the per-layer arrays stay valid
    CField(field, "").set(hp, value)     # a sub-struct member by its path (ssm.d_conv)
    descs, n, _keep = _table(base)
    st_, msg = _load_status(base, descs, n, hp=hp)
    assert st_ != lib.TK_OK and msg, (field, value)


@pytest.mark.parametrize("kinds", [[2, 2, 2, 2], [0, 0, 0, 0], [1, 7, 1, 2], [1, -1, 1, 2]])
def test_layer_kinds_that_disagree_with_the_tensors(base, kinds):
    hp = ffi.new("tk_hparams *")
    ffi.buffer(hp)[:] = ffi.buffer(base._c_hparams)[:]
    arr = ffi.new("int32_t[]", kinds)
    hp.layer_kinds = arr
    descs, n, _keep = _table(base)
    st_, msg = _load_status(base, descs, n, hp=hp)
    assert st_ != lib.TK_OK and msg


def test_ids_at_the_enum_counts_are_unknown(base):
    """The first id past each enum (its *_COUNT sentinel) is refused as unknown: model.c and
    forward.c bound the ids by the counts, so a new value needs no other bound raised."""
    descs, n, _keep = _table(base)
    hp = ffi.new("tk_hparams *")
    ffi.buffer(hp)[:] = ffi.buffer(base._c_hparams)[:]
    hp.arch = lib.TK_ARCH_COUNT
    st_, msg = _load_status(base, descs, n, hp=hp)
    assert st_ == lib.TK_ERR_UNSUPPORTED and "unknown architecture id" in msg, msg
    hp.arch = lib.TK_ARCH_COUNT - 1                      # the last one is known (qwen4exp: the tensors then disagree)
    assert "unknown architecture" not in _load_status(base, descs, n, hp=hp)[1]
    ffi.buffer(hp)[:] = ffi.buffer(base._c_hparams)[:]
    for field, count, what in (("layer_kinds", lib.TK_LAYER_KIND_COUNT, "unknown layer kind"),
                               ("ffn_kinds", lib.TK_FFN_KIND_COUNT, "unknown ffn kind")):
        kinds = [getattr(base._c_hparams, field)[i] for i in range(base._c_hparams.n_layer)]
        arr = ffi.new("int32_t[]", [count] + kinds[1:])
        setattr(hp, field, arr)
        st_, msg = _load_status(base, descs, n, hp=hp)
        assert st_ == lib.TK_ERR_UNSUPPORTED and what in msg, (field, msg)
        setattr(hp, field, getattr(base._c_hparams, field))


# ---- property: any single-field edit of any tensor row -> a status, never a crash ------------

I64 = st.sampled_from([0, 1, -1, 2, 3, 31, 32, 64, 256, 2**31 - 1, 2**31, 2**32, 2**40, 2**40 + 1, 2**62,
                       2**63 - 1, -2**63]) | st.integers(-2**63, 2**63 - 1)


@settings(derandomize=True, max_examples=examples(N_EXAMPLES, N_EXAMPLES * 3), deadline=None,
          database=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_any_table_edit_gives_a_status_not_a_crash(base, data):
    names = [t.name for t in base.gguf]
    name = data.draw(st.sampled_from(names))
    field = data.draw(st.sampled_from(["offset", "type", "n_dims", "ne0", "ne1", "ne2", "ne3", "ne_all"]))
    kw = {}
    t = base.gguf.tensor(name)
    ne = list(t.shape) + [1] * (4 - len(t.shape))
    if field == "offset":
        kw["offset"] = data.draw(I64) & 0xFFFFFFFFFFFFFFFF
    elif field == "type":
        kw["type"] = data.draw(st.integers(-2**31, 2**31 - 1) | st.sampled_from([0, 1, 2, 8, 12, 14, 20, 23, 24, 30, 39]))
    elif field == "n_dims":
        kw["n_dims"] = data.draw(st.integers(-2**31, 2**31 - 1) | st.integers(0, 5))
    elif field == "ne_all":
        kw["ne"] = [data.draw(I64) for _ in range(4)]
    else:
        ne[int(field[2])] = data.draw(I64)
        kw["ne"] = ne
    descs, n, _keep = _edit(base, name, **kw)
    st_, msg = _load_status(base, descs, n)
    record("tk_model_load tensor table", "ok" if st_ == lib.TK_OK else f"status {st_}")
    assert st_ in (lib.TK_OK, lib.TK_ERR_INVALID, lib.TK_ERR_UNSUPPORTED, lib.TK_ERR_NOMEM), st_
    assert st_ == lib.TK_OK or msg


def test_model_object_maps_status_to_toolkit_errors(base, tmp_path):
    # through the Python API a failed load is a ToolkitError subclass (exit codes 2-4)
    import dataclasses
    from toolkit.runtime.model import _load
    infos = [dataclasses.replace(t, offset=2**63) if t.name == "output_norm.weight" else t for t in base.gguf]
    with pytest.raises(ToolkitError, match="output_norm.weight"):
        _load(base.path, base._c_hparams, infos)
