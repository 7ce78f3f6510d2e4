"""convert: qwen4exp (Qwen3.8-Flash-Next) on the tiny transformers fixture.

Reference: llama.cpp 0c1e570's converter on the same checkpoint (its tensor table with sha256
of every tensor's bytes and its key/values: tests/fixtures/llamacpp/qwen4exp-tiny.f32.summary.json,
made by tools/make_qwen4exp_fixture.py --summarize).  The PLE n-gram table arrives in 5 shards
(52, 52, 52, 52, 48 rows) stored in two safetensors files, odd shards first.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import pathlib
import random
import shutil
import sys
import tracemalloc

import gguf
import numpy as np
import pytest

from convert_cases import count_config_kind_errors
from safetensors.numpy import load_file, save_file

from toolkit.cli import main
from toolkit.convert import convert, make_plan
from toolkit.errors import InputError

FIX = pathlib.Path(__file__).parent.parent / "fixtures"
SRC = FIX / "hf" / "qwen4exp-tiny"
REF = FIX / "llamacpp" / "qwen4exp-tiny.f32.summary.json"
NG = "model.layers.1.ple.ple_embedding."
SHARD = NG + "ngram_embedding.shard_{}.weight"


def _tools():
    spec = importlib.util.spec_from_file_location("make_qwen4exp_fixture", FIX.parents[1] / "tools" / "make_qwen4exp_fixture.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def copy(tmp_path: pathlib.Path, name: str = "qwen4exp-tiny") -> pathlib.Path:
    d = tmp_path / "in" / name
    shutil.copytree(SRC, d)
    return d


def index(d: pathlib.Path) -> dict:
    return json.loads((d / "model.safetensors.index.json").read_text())


def write_index(d: pathlib.Path, idx: dict) -> None:
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))


def edit_file(d: pathlib.Path, fn: str, fun) -> None:
    """Rewrite one safetensors file of ``d`` through ``fun(dict) -> dict``; index updated."""
    t = fun(load_file(str(d / fn)))
    save_file(t, str(d / fn), metadata={"format": "pt"})
    idx = index(d)
    wm = idx["weight_map"]
    for n in [n for n, f in wm.items() if f == fn and n not in t]:
        del wm[n]
    for n in t:
        wm[n] = fn
    write_index(d, idx)


def file_of(d: pathlib.Path, name: str) -> str:
    return index(d)["weight_map"][name]


def edit_config(d: pathlib.Path, drop=(), **kw) -> None:
    c = json.loads((d / "config.json").read_text())
    c.update(kw)
    for k in drop:
        c.pop(k, None)
    (d / "config.json").write_text(json.dumps(c))


def conv(d: pathlib.Path, out: pathlib.Path, outtype: str = "f32") -> gguf.GGUFReader:
    convert(str(d), str(out), outtype)
    return gguf.GGUFReader(str(out))


def kv(r: gguf.GGUFReader, key: str):
    f = r.fields.get(key)
    return None if f is None else f.contents()


def tensor(r: gguf.GGUFReader, name: str) -> np.ndarray:
    t = next(t for t in r.tensors if t.name == name)
    return np.asarray(t.data)


def shards_in_order(d: pathlib.Path) -> list[np.ndarray]:
    out = []
    for k in range(5):
        n = SHARD.format(k)
        out.append(load_file(str(d / file_of(d, n)))[n])
    return out


@pytest.fixture(scope="module")
def ours(tmp_path_factory) -> gguf.GGUFReader:
    out = tmp_path_factory.mktemp("q4") / "qwen4exp-tiny.f32.gguf"
    return conv(SRC, out)


# ---- against llama.cpp ---------------------------------------------------------------------

def test_same_tensors_and_keys_as_llamacpp(ours):
    ref = json.loads(REF.read_text())
    got = {t.name: {"shape": [int(x) for x in t.shape], "type": t.tensor_type.name,
                    "sha256": hashlib.sha256(t.data.tobytes()).hexdigest()} for t in ours.tensors}
    assert sorted(got) == sorted(ref["tensors"])
    for name, want in ref["tensors"].items():
        assert got[name] == want, name
    # key/values: every llama.cpp key (but general.* metadata) with the same type and value,
    # except compress_ratios (see the next test); layer_indices and ssm.output_gate_type are ours
    for key, want in ref["kv"].items():
        if key.startswith("general.") or key == "qwen4exp.attention.compress_ratios":
            continue
        f = ours.fields.get(key)
        assert f is not None, key
        assert [gguf.GGUFValueType(t).name for t in f.types] == want["type"], key
        v = f.contents()
        assert (list(v) if isinstance(v, list) else v) == want["value"], key
    extra = {k for k in ours.fields if not k.startswith(("GGUF.", "general.", "tokenizer."))} - set(ref["kv"])
    assert extra == {"qwen4exp.attention.layer_indices", "qwen4exp.ssm.output_gate_type"}
    # HF: output_gate_type (null here) or hidden_act; llama.cpp assumes sigmoid
    assert kv(ours, "qwen4exp.ssm.output_gate_type") == "silu"


def test_compress_ratios_carried_on_indexed_layers(ours):
    """llama.cpp 0c1e570 sets the ratio where layer_types == "full_attention"; transformers 5.24
    writes "indexed_attention", so llama.cpp writes all zeros (dense attention everywhere).
    We carry indexer_compress_ratio on every attention layer."""
    cfg = json.loads((SRC / "config.json").read_text())
    assert cfg["layer_types"][3] == "indexed_attention" and "full_attention" not in cfg["layer_types"]
    ref = json.loads(REF.read_text())["kv"]["qwen4exp.attention.compress_ratios"]["value"]
    assert ref == [0, 0, 0, 0]                       # llama.cpp: wrong
    assert kv(ours, "qwen4exp.attention.compress_ratios") == [0, 0, 0, cfg["indexer_compress_ratio"]]
    assert kv(ours, "qwen4exp.attention.recurrent_layers") == [True, True, True, False]


def test_ple_hparams(ours):
    cfg = json.loads((SRC / "config.json").read_text())
    assert cfg["ple_layer_ids"] == [2]
    assert kv(ours, "qwen4exp.ple.layers") == [1]    # 0-based
    assert kv(ours, "qwen4exp.ple.ngram_size") == 3
    assert kv(ours, "qwen4exp.ple.heads_per_ngram") == 2
    assert kv(ours, "qwen4exp.ple.conv_kernel") == 4
    assert kv(ours, "qwen4exp.ple.eos_token_id") == 2
    assert kv(ours, "qwen4exp.embedding_length_per_layer_input") == 16
    assert kv(ours, "qwen4exp.ple.image_token_id") is None
    assert kv(ours, "qwen4exp.rope.dimension_sections") == [3, 3, 2, 0]
    assert kv(ours, "qwen4exp.rope.dimension_count") == 16


# ---- the PLE table ---------------------------------------------------------------------------

def test_ple_table_is_the_shards_in_index_order(ours):
    want = np.concatenate(shards_in_order(SRC))
    assert want.shape == (256, 16)
    got = tensor(ours, "per_layer_token_embd.weight")
    assert got.shape == (256, 16)
    np.testing.assert_array_equal(got, want)


def test_shard_order_and_files_do_not_matter(tmp_path, ours):
    """Every shard in a file of its own, written in reverse, the index shuffled: same bytes."""
    d = copy(tmp_path)
    shards = shards_in_order(d)
    for k in range(5):
        edit_file(d, file_of(d, SHARD.format(k)), lambda t, k=k: {n: a for n, a in t.items() if n != SHARD.format(k)})
    for k in reversed(range(5)):
        save_file({SHARD.format(k): shards[k]}, str(d / f"ple-part-{4 - k}.safetensors"), metadata={"format": "pt"})
    idx = index(d)
    wm = idx["weight_map"]
    for k in range(5):
        wm[SHARD.format(k)] = f"ple-part-{4 - k}.safetensors"
    items = list(wm.items())
    random.Random(1).shuffle(items)
    idx["weight_map"] = dict(items)
    write_index(d, idx)
    r = conv(d, tmp_path / "qwen4exp-tiny.f32.gguf")
    np.testing.assert_array_equal(tensor(r, "per_layer_token_embd.weight"), tensor(ours, "per_layer_token_embd.weight"))
    assert hashlib.sha256((tmp_path / "qwen4exp-tiny.f32.gguf").read_bytes()).digest() == \
        hashlib.sha256(pathlib.Path(ours.data.filename).read_bytes()).digest()


def test_ple_streaming_keeps_one_shard_resident(tmp_path):
    """A table of 16 shards of 1 MiB: no read of the table spans more than one shard, and the
    converter's peak Python/numpy allocation (tracemalloc) stays below two shards plus 1 MiB,
    far below the 16 MiB table (concatenating it would need all of it)."""
    import toolkit.convert.st_reader as st

    shard_rows, row_dim = 16384, 16
    shard_bytes = shard_rows * row_dim * 4
    d = tmp_path / "big"
    total = _tools().synthetic_ple(str(SRC), str(d), 16, shard_rows, 9000)
    assert total > 15 * shard_bytes
    idx = index(d)                        # shards listed in shuffled order
    items = list(idx["weight_map"].items())
    random.Random(7).shuffle(items)
    idx["weight_map"] = dict(items)
    write_index(d, idx)
    for outtype in ("f32", "f16"):        # f16: the band path (read, encode, write)
        reads: list[tuple[str, int, int]] = []
        orig = st.ShardReader.read_into

        def spy(self, t, start, out, orig=orig):
            if ".ngram_embedding." in t.name:
                reads.append((t.name, start, len(out)))
            return orig(self, t, start, out)

        plan = make_plan(str(d), outtype)
        st.ShardReader.read_into = spy
        tracemalloc.start()
        try:
            convert(str(d), str(tmp_path / f"big.{outtype}.gguf"), outtype, plan=plan)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
            st.ShardReader.read_into = orig
        assert all(n <= shard_bytes for _, _, n in reads), max(reads, key=lambda x: x[2])
        assert peak < 2 * shard_bytes + 2**20, (outtype, peak)
        r = gguf.GGUFReader(str(tmp_path / f"big.{outtype}.gguf"))
        t = next(t for t in r.tensors if t.name == "per_layer_token_embd.weight")
        assert [int(x) for x in t.shape] == [row_dim, 15 * shard_rows + 9000]
        if outtype == "f32":   # rows landed where they belong: spot-check shard 7 and the last
            s7 = load_file(str(d / "ple-00007.safetensors"))
            (a7,) = s7.values()
            np.testing.assert_array_equal(np.asarray(t.data)[7 * shard_rows: 8 * shard_rows], a7)
            (a15,) = load_file(str(d / "ple-00015.safetensors")).values()
            np.testing.assert_array_equal(np.asarray(t.data)[15 * shard_rows:], a15)
        del r, t


# ---- hash constants: exact UINT64 ---------------------------------------------------------------

def test_hash_constants_are_exact_uint64(ours):
    fn = file_of(SRC, NG + "layer_multipliers")
    t = load_file(str(SRC / fn))
    for src, key in (("layer_multipliers", "layer_multipliers"), ("ngram_heads_offsets", "head_offsets"),
                     ("ngram_heads_vocab_sizes", "head_vocab_sizes")):
        f = ours.fields[f"qwen4exp.ple.{key}"]
        assert [gguf.GGUFValueType(x) for x in f.types] == [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT64]
        want = [int(x) for x in t[NG + src].tolist()]
        assert [int(x) for x in f.contents()] == want
    big = [int(x) for x in t[NG + "layer_multipliers"].tolist() if int(x) > 2**53]
    assert big and all(int(float(x)) != x for x in big)   # a float round trip would change them


def test_hash_constants_up_to_2_63_round_trip(tmp_path):
    d = copy(tmp_path)
    vals = np.array([2**53 + 1, 2**62 + 12345, 2**63 - 1], dtype=np.int64)
    edit_file(d, file_of(d, NG + "layer_multipliers"), lambda t: {**t, NG + "layer_multipliers": vals})
    r = conv(d, tmp_path / "o.gguf")
    assert [int(x) for x in kv(r, "qwen4exp.ple.layer_multipliers")] == [2**53 + 1, 2**62 + 12345, 2**63 - 1]


def test_float_hash_constants_are_refused(tmp_path):
    d = copy(tmp_path)
    fn = file_of(d, NG + "layer_multipliers")
    edit_file(d, fn, lambda t: {**t, NG + "layer_multipliers": t[NG + "layer_multipliers"].astype(np.float64)})
    with pytest.raises(InputError, match="layer_multipliers.*must be stored as integers"):
        make_plan(str(d))


# ---- config keys --------------------------------------------------------------------------------

def test_eos_list_uses_the_first_id_as_hf_hashes(tmp_path):
    """HF's n-gram hash restarts on eos_token_id[0]; llama.cpp 0c1e570 writes eos_token_id[-1]."""
    d = copy(tmp_path)
    edit_config(d, eos_token_id=[2, 7])
    r = conv(d, tmp_path / "o.gguf")
    assert kv(r, "qwen4exp.ple.eos_token_id") == 2


def test_image_token_id_written_when_present(tmp_path):
    d = copy(tmp_path)
    edit_config(d, image_token_id=500)
    assert kv(conv(d, tmp_path / "o.gguf"), "qwen4exp.ple.image_token_id") == 500


# ---- bad input: one line, exit 2, nothing written -----------------------------------------------

def cli_error(monkeypatch, capsys, tmp_path, src, *needles):
    out = tmp_path / "out.gguf"
    monkeypatch.setattr(sys, "argv", ["toolkit", "convert", str(src), str(out)])
    with pytest.raises(SystemExit) as e:
        main()
    _, err = capsys.readouterr()
    line = " ".join(err.split())
    assert e.value.code == 2, err
    assert line.startswith("error:") and "Traceback" not in err
    for n in needles:
        assert n in line, (n, line)
    assert not out.exists()
    return line


def test_missing_shard(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    edit_file(d, file_of(d, SHARD.format(2)), lambda t: {n: a for n, a in t.items() if n != SHARD.format(2)})
    cli_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "shard_2.weight", "split_ngram_parts = 5")


def test_ragged_shard(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    fn = file_of(d, SHARD.format(1))
    edit_file(d, fn, lambda t: {**t, SHARD.format(1): t[SHARD.format(1)][:50]})
    cli_error(monkeypatch, capsys, tmp_path, d, fn, "shard_1.weight", "has 50 rows, shard 0 has 52")


def test_shard_rows_of_different_width(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    fn = file_of(d, SHARD.format(3))
    edit_file(d, fn, lambda t: {**t, SHARD.format(3): np.zeros((52, 8), np.float32)})
    cli_error(monkeypatch, capsys, tmp_path, d, "shard_3.weight", "rows of 8 elements")


def test_shard_beyond_split_ngram_parts(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    edit_config(d, split_ngram_parts=4)
    cli_error(monkeypatch, capsys, tmp_path, d, "shard_4.weight", "shard index 4 >= split_ngram_parts 4")


def test_table_too_short_for_the_head_ranges(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    fn = file_of(d, SHARD.format(4))
    edit_file(d, fn, lambda t: {**t, SHARD.format(4): t[SHARD.format(4)][:20]})   # 228 rows < 240
    cli_error(monkeypatch, capsys, tmp_path, d, "228 rows", "reach row 240")


def test_no_ple_eos_id(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    edit_config(d, drop=("eos_token_id",))
    cli_error(monkeypatch, capsys, tmp_path, d, "config.json", "eos_token_id", "PLE")


def test_ple_on_an_attention_layer(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    edit_config(d, ple_layer_ids=[4])
    cli_error(monkeypatch, capsys, tmp_path, d, "ple_layer_ids", "attention layer")


def test_mrope_sections_must_fit_the_rotary_dims(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    c = json.loads((d / "config.json").read_text())
    edit_config(d, rope_parameters={**c["rope_parameters"], "mrope_section": [11, 11, 10]})
    cli_error(monkeypatch, capsys, tmp_path, d, "mrope_section", "8 rotary pairs")


# ---- toolkit info ------------------------------------------------------------------------------

def test_info_shows_the_ple_table_and_exact_constants(ours, monkeypatch, capsys):
    from toolkit.cli.cmd_info import describe

    path = ours.data.filename
    d = describe(path)
    assert d["architecture"] == "qwen4exp" and d["hparams"]["hc_count"] == 2
    assert d["hparams"]["compress_ratios"] == [0, 0, 0, 4] and d["hparams"]["ple_index"] == [-1, 0, -1, -1]
    ple = d["ple"]
    assert ple["layers"] == [1] and ple["row_dim"] == 16
    assert ple["table"] == {"name": "per_layer_token_embd.weight", "rows": 256, "row_dim": 16, "type": "F32",
                            "bytes": 256 * 16 * 4}
    t = load_file(str(SRC / file_of(SRC, NG + "layer_multipliers")))
    assert ple["layer_multipliers"] == [int(x) for x in t[NG + "layer_multipliers"].tolist()]
    assert ple["head_vocab_sizes"] == [53, 59, 61, 67] and ple["head_offsets"] == [0, 53, 112, 173]
    monkeypatch.setattr(sys, "argv", ["toolkit", "info", path, "--json", "--no-tensors"])
    try:
        main()
    except SystemExit as e:
        assert e.code in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["ple"]["layer_multipliers"][1] == ple["layer_multipliers"][1] > 2**53   # exact in JSON too


def test_conditional_generation_text_part(tmp_path, ours):
    """Qwen4ExpForConditionalGeneration: text weights under model.language_model.*, a vision
    tower under model.visual.* (left out), hparams in text_config, image_token_id at the root."""
    d = copy(tmp_path)
    idx = index(d)
    new_wm = {}
    for fn in sorted(set(idx["weight_map"].values())):
        t = load_file(str(d / fn))
        t = {("model.language_model." + n[len("model."):] if n.startswith("model.") else n): a for n, a in t.items()}
        if fn == "model-00001-of-00011.safetensors":
            t["model.visual.patch_embed.proj.weight"] = np.ones((8, 3, 2, 2, 2), np.float32)
        save_file(t, str(d / fn), metadata={"format": "pt"})
        new_wm.update({n: fn for n in t})
    idx["weight_map"] = new_wm
    write_index(d, idx)
    text = json.loads((d / "config.json").read_text())
    cfg = {"architectures": ["Qwen4ExpForConditionalGeneration"], "model_type": "qwen4_exp",
           "image_token_id": 500, "tie_word_embeddings": False, "text_config": {**text, "model_type": "qwen4_exp_text"},
           "vision_config": {"depth": 1, "hidden_size": 8}}
    del cfg["text_config"]["architectures"]
    (d / "config.json").write_text(json.dumps(cfg))
    plan = make_plan(str(d))
    assert [n for n, _ in plan.omitted if n.startswith("model.visual.")] == ["model.visual.patch_embed.proj.weight"]
    r = conv(d, tmp_path / "vlm.gguf")
    assert kv(r, "qwen4exp.ple.image_token_id") == 500
    want = {t.name: t.data.tobytes() for t in ours.tensors}
    assert {t.name: t.data.tobytes() for t in r.tensors} == want


def test_mtp_head_left_out_with_a_warning(tmp_path):
    """llama.cpp 0c1e570's qwen4exp converter does not export the MTP draft head either."""
    d = copy(tmp_path)
    save_file({"mtp.fc.weight": np.zeros((64, 128), np.float32)}, str(d / "mtp.safetensors"), metadata={"format": "pt"})
    idx = index(d)
    idx["weight_map"]["mtp.fc.weight"] = "mtp.safetensors"
    write_index(d, idx)
    plan = make_plan(str(d))
    assert ("mtp.fc.weight", "MTP / NextN draft head: not converted") in plan.omitted
    assert any("mtp" in w for w in plan.warnings)
    assert not any("mtp" in t.name for t in plan.tensors)


def test_two_tensors_for_one_shard(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    fn = file_of(d, SHARD.format(3))
    edit_file(d, fn, lambda t: {**t, NG + "ngram_embedding.shard_03.weight": t[SHARD.format(3)]})
    cli_error(monkeypatch, capsys, tmp_path, d, "shard_03.weight", "both PLE shard 3")


def test_config_values_of_the_wrong_kind(tmp_path):
    """Every config.json key set to a string, zero, 10**9 or 0.5: a plan or a ToolkitError,
    never a traceback or an allocation sized by the bad value (split_ngram_parts = 10**9 is a
    missing-shard error, num_hidden_layers = 10**9 a layer-count error)."""
    assert count_config_kind_errors(copy(tmp_path)) > 40


def test_variants_two_ple_layers_sigmoid_gate_eos_list(tmp_path):
    """The held-back-style variants: two PLE layers (ple.layers lists both, each UINT64 array
    holds both sets in that order, the second table is blk.2.per_layer_token_embd, ours); a
    sigmoid output gate written as ssm.output_gate_type; eos_token_id [2, 5] -> the first."""
    two = conv(SRC.parent / "qwen4exp-ple2-tiny", tmp_path / "ple2.gguf")
    cfg = json.loads((SRC.parent / "qwen4exp-ple2-tiny" / "config.json").read_text())
    assert cfg["ple_layer_ids"] == [1, 3] and kv(two, "qwen4exp.ple.layers") == [0, 2]
    nh = (cfg["ngram_size"] - 1) * cfg["heads_per_ngram"]
    assert len(kv(two, "qwen4exp.ple.layer_multipliers")) == 2 * cfg["ngram_size"]
    offs, vocs = kv(two, "qwen4exp.ple.head_offsets"), kv(two, "qwen4exp.ple.head_vocab_sizes")
    assert len(offs) == len(vocs) == 2 * nh and offs[0] == offs[nh] == 0        # each module's own table
    names = {t.name for t in two.tensors}
    assert {"per_layer_token_embd.weight", "blk.2.per_layer_token_embd.weight"} <= names
    assert not any(n.startswith("blk.0.per_layer") for n in names)
    hc3 = conv(SRC.parent / "qwen4exp-hc3-tiny", tmp_path / "hc3.gguf")
    assert kv(hc3, "qwen4exp.ssm.output_gate_type") == "sigmoid"
    assert kv(hc3, "qwen4exp.ple.eos_token_id") == 2 and kv(hc3, "qwen4exp.hyper_connection.count") == 3
