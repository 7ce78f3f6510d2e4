"""Hostile Hugging Face checkpoints: safetensors headers, model.safetensors.index.json, config.json.

The seed is tests/fixtures/hf/mamba-tiny (3 shards + index).  Each example copies it, mutates
one file (a shard's header length or header JSON, the index, the config), then

* reads every shard header with :func:`toolkit.convert.st_reader.read_header`, and
* runs ``toolkit convert DIR OUT.gguf`` through the CLI in this process;

each must succeed or end in one ToolkitError (exit 2-4, one stderr line); on failure nothing
is left at OUT, and the input files are never modified (hashed before and after).
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import struct

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fuzz_util import N_EXAMPLES, cli, expect_clean, record

SEED = pathlib.Path(__file__).parent.parent / "fixtures" / "hf" / "mamba-tiny"
SHARDS = sorted(p.name for p in SEED.glob("*.safetensors"))
INTERESTING = [0, 1, 2, 7, 8, 255, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 10**30]


def split_st(b: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack_from("<Q", b, 0)
    return json.loads(b[8:8 + n]), b[8 + n:]


def _parsed(files, name):
    """(header, data) of a shard, or None when an earlier mutation already broke it."""
    try:
        hdr, data = split_st(files[name])
    except (ValueError, RecursionError, struct.error):
        return None
    return (hdr, data) if isinstance(hdr, dict) and any(k != "__metadata__" for k in hdr) else None


def join_st(hdr, data: bytes, header_len: int | None = None, raw_json: bytes | None = None) -> bytes:
    j = raw_json if raw_json is not None else json.dumps(hdr).encode()
    return struct.pack("<Q", (len(j) if header_len is None else header_len) & (2**64 - 1)) + j + data


# ---- mutations: (files: {name: bytes}, draw) -> edits files --------------------------------

def mut_st_entry(files, draw):
    name = draw(st.sampled_from(SHARDS))
    p = _parsed(files, name)
    if p is None:
        return
    hdr, data = p
    tensors = [k for k in hdr if k != "__metadata__"]
    t = draw(st.sampled_from(tensors))
    field = draw(st.sampled_from(["dtype", "shape", "data_offsets", "drop", "rename", "entry"]))
    if field == "dtype":
        hdr[t]["dtype"] = draw(st.sampled_from(["F16", "BF16", "F64", "I64", "U8", "BOOL", "F8_E4M3", "X", 5, None, ""]))
    elif field == "shape":
        hdr[t]["shape"] = draw(st.sampled_from([[-1], [2**63], [], [0], ["a"], 3.5, [2**32, 2**32], None, [1.5],
                                                [True], list(reversed(hdr[t]["shape"])), hdr[t]["shape"] + [1],
                                                [x * 2 for x in hdr[t]["shape"]]]))
    elif field == "data_offsets":
        b, e = hdr[t]["data_offsets"]
        hdr[t]["data_offsets"] = draw(st.sampled_from([[e, b], [b, len(data) + 1], [0, 0], [b], "x", [b, e + 1],
                                                       [-8, e - b - 8], [2**64, 2**64 + e - b], [b + 1, e + 1], [0, e - b],
                                                       [b, e, 0], [float(b), float(e)], None]))
    elif field == "drop":
        del hdr[t]
    elif field == "rename":
        hdr[draw(st.sampled_from(["", "x" * 5000, "backbone.layers.9.mixer.D", "lm_head.weight", "a\u0000b"]))] = hdr.pop(t)
    else:
        hdr[t] = draw(st.sampled_from([None, [], "F32", 1, {"dtype": "F32"}, {"dtype": "F32", "shape": [1]}]))
    files[name] = join_st(hdr, data)


def mut_st_raw(files, draw):
    name = draw(st.sampled_from(SHARDS))
    p = _parsed(files, name)
    if p is None:
        return
    hdr, data = p
    j = json.dumps(hdr).encode()
    what = draw(st.sampled_from(["len", "truncjson", "deep", "notobj", "utf8", "metadata", "cutdata", "tiny"]))
    if what == "len":
        files[name] = join_st(hdr, data, header_len=draw(st.sampled_from(INTERESTING + [len(j) - 1, len(j) + 1])))
    elif what == "truncjson":
        files[name] = join_st(hdr, data, raw_json=j[: draw(st.integers(0, len(j) - 1))])
    elif what == "deep":
        n = draw(st.sampled_from([50, 100000]))   # parses (not an object) / RecursionError
        files[name] = join_st(hdr, data, raw_json=b"[" * n + b"]" * n)
    elif what == "notobj":
        files[name] = join_st(hdr, data, raw_json=draw(st.sampled_from([b"[]", b"null", b"1", b'"x"', b"{}"])))
    elif what == "utf8":
        files[name] = join_st(hdr, data, raw_json=j[:10] + b"\xff\xfe" + j[12:])
    elif what == "metadata":
        hdr["__metadata__"] = draw(st.sampled_from([None, [], 1, {"format": 1}, {"a": {"b": []}}]))
        files[name] = join_st(hdr, data)
    elif what == "cutdata":
        files[name] = files[name][: len(files[name]) - draw(st.sampled_from([1, 4, 64, len(data)]))]
    else:
        files[name] = files[name][: draw(st.integers(0, 8))]


def mut_index(files, draw):
    try:
        idx = json.loads(files["model.safetensors.index.json"])
        wm = idx["weight_map"]
        assert isinstance(wm, dict) and wm
    except (ValueError, RecursionError, TypeError, KeyError, AssertionError):
        return
    what = draw(st.sampled_from(["shard", "drop", "add", "wm", "idx", "raw"]))
    if what == "shard":
        k = draw(st.sampled_from(sorted(wm)))
        wm[k] = draw(st.sampled_from(["../config.json", "/etc/passwd", "", "missing.safetensors", "a\u0000b",
                                      "config.json", "tokenizer.json", ".", "model.safetensors.index.json",
                                      SHARDS[0], SHARDS[-1], 3, None, ["x"]]))
    elif what == "drop":
        del wm[draw(st.sampled_from(sorted(wm)))]
    elif what == "add":
        wm[draw(st.sampled_from(["extra.weight", "backbone.layers.7.mixer.D", ""]))] = draw(st.sampled_from(SHARDS))
    elif what == "wm":
        idx["weight_map"] = draw(st.sampled_from([None, [], {}, "x", 1, [["a", "b"]]]))
    elif what == "idx":
        idx = draw(st.sampled_from([None, [], 1, "x", {}]))
    else:
        files["model.safetensors.index.json"] = draw(st.sampled_from([b"", b"{", b"\xff\xfe", b"[" * 100000]))
        return
    files["model.safetensors.index.json"] = json.dumps(idx).encode()


def mut_config(files, draw):
    cfg = json.loads(files["config.json"])
    key = draw(st.sampled_from(["hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size", "conv_kernel",
                                "state_size", "time_step_rank", "layer_norm_epsilon", "architectures",
                                "tie_word_embeddings", "use_bias"]))
    cfg[key] = draw(st.sampled_from([None, 0, -1, 1, 3, 2**31, 2**63, 1e308, float("nan"), "auto", "x", [], {},
                                     True, ["MambaForCausalLM"], ["Nope"], 63, 65, 128, 1024]))
    files["config.json"] = json.dumps(cfg).encode()


MUTS = [mut_st_entry, mut_st_entry, mut_st_raw, mut_index, mut_config]
_ORIG = {p.name: p.read_bytes() for p in SEED.iterdir() if p.name != "reference.npz"}


class Case(tuple):
    def __repr__(self) -> str:
        return f"Case({self[0]!r})"


@st.composite
def mutated_dir(draw):
    files = dict(_ORIG)
    muts = draw(st.lists(st.sampled_from(MUTS), min_size=1, max_size=2))
    for m in muts:
        m(files, draw)
    return Case((", ".join(m.__name__ for m in muts), files))


def _hashes(d: pathlib.Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


@pytest.mark.slow
@settings(derandomize=True, max_examples=N_EXAMPLES, deadline=None, database=None,
          suppress_health_check=list(HealthCheck), print_blob=True)
@given(mutated_dir())
def test_convert_on_mutated_checkpoints(tmp_path_factory, case):
    from toolkit.convert.st_reader import read_header

    what, files = case
    root = tmp_path_factory.mktemp("fc")
    d = root / "hf"
    d.mkdir()
    for name, b in files.items():
        (d / name).write_bytes(b)
    before = _hashes(d)
    for name in SHARDS:
        e = expect_clean(lambda: read_header(str(d / name)), what)
        record("safetensors header", "ok" if e is None else type(e).__name__)
    out = root / "out.gguf"
    code, _o, err = cli(["convert", str(d), str(out)])
    assert code in (0, 2, 3, 4), f"{what}: exit {code}\n{err[-2000:]}"
    record("toolkit convert (CLI)", f"exit {code}")
    if code:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:"), f"{what}: {err!r}"
        assert not out.exists(), f"{what}: failed convert left {out}"
    else:
        from toolkit.gguf_io import GGUFFile
        GGUFFile(out)   # a success is a complete, readable file
    assert not [p for p in root.iterdir() if p.name.endswith(".part")], f"{what}: temp file left behind"
    assert _hashes(d) == before, f"{what}: convert modified its input"


# ---- targeted regressions -----------------------------------------------------------------

def _one(tmp_path, name: str, data: bytes) -> pathlib.Path:
    d = tmp_path / "hf"
    shutil.copytree(SEED, d)
    os.chmod(d, 0o755)
    for p in d.iterdir():
        os.chmod(p, 0o644)
    (d / name).write_bytes(data)
    return d


def test_deeply_nested_header_json_is_an_input_error(tmp_path):
    from toolkit.convert.st_reader import read_header
    from toolkit.errors import InputError
    hdr, data = split_st(_ORIG[SHARDS[0]])
    d = _one(tmp_path, SHARDS[0], join_st(hdr, data, raw_json=b"[" * 100000 + b"]" * 100000))
    with pytest.raises(InputError, match=SHARDS[0]):
        read_header(str(d / SHARDS[0]))


def test_shard_name_with_nul_byte_in_index_is_an_input_error(tmp_path):
    idx = json.loads(_ORIG["model.safetensors.index.json"])
    k = sorted(idx["weight_map"])[0]
    idx["weight_map"][k] = "model\u0000.safetensors"
    d = _one(tmp_path, "model.safetensors.index.json", json.dumps(idx).encode())
    code, _o, err = cli(["convert", str(d), str(tmp_path / "o.gguf")])
    assert code == 2 and "model.safetensors.index.json" in err, err


def test_unmutated_seed_converts(tmp_path):
    code, _o, err = cli(["convert", str(SEED), str(tmp_path / "o.gguf")])
    assert code == 0, err
