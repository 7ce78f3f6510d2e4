"""`toolkit convert` on bad input: one line naming the file/key/tensor, exit 2 (4 for a full
disk), nothing left at OUT, inputs untouched."""
from __future__ import annotations

import hashlib
import json
import pathlib
import resource
import shutil
import subprocess
import sys

import numpy as np
import pytest

from convert_cases import count_config_kind_errors
from families import main_fixture
from safetensors.numpy import save_file

from cli_runner import cli as run_cli

HF = pathlib.Path(__file__).parent.parent / "fixtures" / "hf"




def copy(tmp_path, name="mamba-tiny") -> pathlib.Path:
    d = tmp_path / "in" / name
    shutil.copytree(HF / name, d)
    return d


def expect_error(monkeypatch, capsys, tmp_path, src, *needles, code=2, extra=()):
    out = tmp_path / "out.gguf"
    rc, _, err = run_cli(monkeypatch, capsys, "convert", str(src), str(out), *extra)
    assert rc == code, err
    line = " ".join(err.split())          # rich may wrap the one line on a narrow terminal
    assert line.startswith("error:"), err
    assert "Traceback" not in err
    for n in needles:
        assert n in line, (n, line)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")] == []
    return line


def edit_config(d: pathlib.Path, **kw) -> None:
    c = json.loads((d / "config.json").read_text())
    c.update(kw)
    (d / "config.json").write_text(json.dumps(c))


def add_shard(d: pathlib.Path, name: str, arrays: dict[str, np.ndarray]) -> None:
    save_file(arrays, str(d / name))
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    for k in arrays:
        idx["weight_map"][k] = name
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))


def test_success_prints_summary_and_json(monkeypatch, capsys, tmp_path):
    out = tmp_path / "m.gguf"
    rc, stdout, _ = run_cli(monkeypatch, capsys, "convert", str(HF / "mamba-tiny"), str(out), "--json")
    assert rc == 0 and out.exists()
    s = json.loads(stdout)
    assert s["n_tensors"] == 22 and s["file_bytes"] == out.stat().st_size and s["peak_rss_bytes"] > 0


def test_dry_run_writes_nothing(monkeypatch, capsys, tmp_path):
    out = tmp_path / "m.gguf"
    rc, stdout, _ = run_cli(monkeypatch, capsys, "convert", str(HF / "bamba-tiny"), str(out), "--dry-run", "--json")
    assert rc == 0 and not out.exists()
    plan = json.loads(stdout)
    assert plan["kv"]["granitehybrid.rope.dimension_count"] == 8
    assert any(t["transform"].startswith("rows reordered") for t in plan["tensors"])


def test_missing_shard(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    (d / "model-00002-of-00003.safetensors").unlink()
    expect_error(monkeypatch, capsys, tmp_path, d, "model-00002-of-00003.safetensors", "no such file")


def test_truncated_header(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    p = d / "model-00001-of-00003.safetensors"
    p.write_bytes(p.read_bytes()[:40])
    expect_error(monkeypatch, capsys, tmp_path, d, "model-00001-of-00003.safetensors", "header")


def test_corrupt_header(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    p = d / "model-00001-of-00003.safetensors"
    b = bytearray(p.read_bytes())
    b[8:16] = b"\xff{{{{{{{"
    p.write_bytes(bytes(b))
    expect_error(monkeypatch, capsys, tmp_path, d, "model-00001-of-00003.safetensors", "corrupt safetensors header")


def test_truncated_data(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    p = d / "model-00003-of-00003.safetensors"
    p.write_bytes(p.read_bytes()[:-100])
    expect_error(monkeypatch, capsys, tmp_path, d, "model-00003-of-00003.safetensors", "outside the file")


def test_shape_disagrees_with_config(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    edit_config(d, state_size=32)
    expect_error(monkeypatch, capsys, tmp_path, d, "backbone.layers.0.mixer.x_proj.weight", "config.json implies", "[72, 128]")


def test_missing_tensor(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    edit_config(d, num_hidden_layers=3)
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "backbone.layers.2.norm.weight")


def test_unknown_architecture_lists_supported(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    edit_config(d, architectures=["LlamaForCausalLM"])
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "LlamaForCausalLM", "supported:",
                 "MambaForCausalLM", "JambaForCausalLM", "GraniteMoeHybridForCausalLM", code=3)


def test_unknown_tensor_name(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    add_shard(d, "extra.safetensors", {"backbone.layers.0.mixer.lora_A.weight": np.zeros((4, 4), np.float32)})
    expect_error(monkeypatch, capsys, tmp_path, d, "extra.safetensors", "unknown tensor name",
                 "backbone.layers.0.mixer.lora_A.weight")


def test_leftover_tensor(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    add_shard(d, "extra.safetensors", {"backbone.layers.7.norm.weight": np.ones(64, np.float32)})
    expect_error(monkeypatch, capsys, tmp_path, d, "backbone.layers.7.norm.weight", "was not converted")


def test_attention_tensor_on_a_mamba_layer_is_leftover(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "bamba-tiny")
    edit_config(d, attn_layer_indices=[1])   # layer 3 holds attention weights, config now says Mamba
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "model.layers.3.mamba")


def test_index_names_tensor_absent_from_shard(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    idx["weight_map"]["backbone.layers.9.norm.weight"] = "model-00001-of-00003.safetensors"
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    expect_error(monkeypatch, capsys, tmp_path, d, "backbone.layers.9.norm.weight", "model-00001-of-00003.safetensors")


def test_empty_dir(monkeypatch, capsys, tmp_path):
    d = tmp_path / "empty"
    d.mkdir()
    expect_error(monkeypatch, capsys, tmp_path, d, str(d), "no config.json")


def test_no_weights(monkeypatch, capsys, tmp_path):
    d = tmp_path / "cfg-only"
    d.mkdir()
    shutil.copy(HF / "mamba-tiny" / "config.json", d)
    expect_error(monkeypatch, capsys, tmp_path, d, "model.safetensors")


def test_bad_outtype(monkeypatch, capsys, tmp_path):
    expect_error(monkeypatch, capsys, tmp_path, HF / "mamba-tiny", "--outtype", "q4_0", extra=("--outtype", "q4_0"))


def test_bad_layer_types(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "granitehybrid-moe-tiny")
    edit_config(d, layer_types=["linear_attention", "sliding_attention", "linear_attention", "linear_attention"])
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "layer_types", "sliding_attention")


def test_disagreeing_layer_forms(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "bamba-tiny")
    edit_config(d, layer_types=["mamba", "attention", "mamba", "mamba"])
    expect_error(monkeypatch, capsys, tmp_path, d, "layer_types", "attn_layer_indices", "disagree")


def _tree_hash(d: pathlib.Path) -> str:
    h = hashlib.sha256()
    for p in sorted(d.rglob("*")):
        h.update(p.name.encode())
        if p.is_file():
            h.update(p.read_bytes())
            h.update(str(p.stat().st_mtime_ns).encode())
    return h.hexdigest()


def test_inputs_untouched_and_out_cannot_be_an_input(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "jamba-tiny")
    before = _tree_hash(d)
    rc, _, err = run_cli(monkeypatch, capsys, "convert", str(d), str(tmp_path / "j.gguf"), "--outtype", "q8_0")
    assert rc == 0, err
    rc, _, err = run_cli(monkeypatch, capsys, "convert", str(d), str(d / "config.json"))
    assert rc == 2 and "overwrite the input" in err
    assert _tree_hash(d) == before


def test_full_disk_exit_4_nothing_left(tmp_path):
    out = tmp_path / "full.gguf"

    def limit():   # a 64 KiB file-size limit: the write fails with EFBIG (SIGXFSZ is ignored by Python)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))

    r = subprocess.run([sys.executable, "-m", "toolkit", "convert", str(HF / "bamba-tiny"), str(out)],
                       capture_output=True, text=True, preexec_fn=limit, timeout=120)
    assert r.returncode == 4, r.stderr
    assert "error:" in r.stderr and str(out) in " ".join(r.stderr.split()) and "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_header_parser_never_crashes_on_corruption(tmp_path):
    """Random byte flips and truncations of a shard: read_header either parses it or raises
    InputError / UnsupportedError naming the file, never anything else."""
    from hypothesis import given, settings, strategies as st
    from hypothesis_util import examples
    from toolkit.convert.st_reader import read_header
    from toolkit.errors import InputError, UnsupportedError

    good = (HF / "mamba-tiny" / "model-00003-of-00003.safetensors").read_bytes()
    n_head = int.from_bytes(good[:8], "little") + 8
    p = tmp_path / "x.safetensors"

    @settings(max_examples=examples(60, 300), deadline=None)
    @given(st.lists(st.tuples(st.integers(0, n_head + 64), st.integers(0, 255)), max_size=6),
           st.one_of(st.none(), st.integers(0, len(good))))
    def check(flips, cut):
        b = bytearray(good)
        for pos, val in flips:
            b[pos] = val
        p.write_bytes(bytes(b[:cut] if cut is not None else b))
        try:
            read_header(str(p))
        except (InputError, UnsupportedError) as e:
            assert str(p) in str(e)

    check()
    import json as _json
    import struct as _struct
    for ent in ({"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}, {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]},
                {"dtype": "F32", "shape": [1], "data_offsets": [0, 4.0]}, {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]},
                [1, 2, 3]):
        h = _json.dumps({"t": ent}).encode()
        p.write_bytes(_struct.pack("<Q", len(h)) + h + b"\0" * 8)
        with pytest.raises(InputError, match="x.safetensors"):
            read_header(str(p))


@pytest.mark.parametrize("name", list(main_fixture().values()) + ["granitehybrid-moe-tiny"])
def test_config_values_of_the_wrong_kind_are_clean_errors(tmp_path, name):
    """Every key of config.json set to a string, zero, a huge or a fractional number: the plan
    either still builds or fails with a ToolkitError (exit 2/3), never a traceback or a huge
    allocation.  Each family's main fixture (tests/families.py; was the first five families':
    Nemotron-H's head_dim and Zamba's mamba_expand at 1e9 then built a row index of that size
    before the shape check (MemoryError), LFM3's rope_parameters as a number and Ling 3's
    max_position_embeddings as a string were tracebacks)."""
    assert count_config_kind_errors(copy(tmp_path, name)) > 0


@pytest.mark.parametrize("fname", ["tokenizer.json", "tokenizer_config.json"])
def test_tokenizer_values_of_the_wrong_kind_are_clean_errors(tmp_path, fname):
    """Every top-level key (and every key of tokenizer.json's model) set to a wrong kind of
    value: a plan or a ToolkitError, never a traceback."""
    from toolkit.convert import make_plan
    from toolkit.errors import ToolkitError
    d = copy(tmp_path, "mamba2-tiny")
    orig = json.loads((d / fname).read_text())
    cases = [{**orig, k: bad} for k in orig for bad in ("x", 0, [1], {"a": 1}, None)]
    if "model" in orig:
        cases += [{**orig, "model": {**orig["model"], k: bad}} for k in orig["model"] for bad in ("x", 0, [[1, 2]], None)]
        cases += [{**orig, "added_tokens": [{"id": "x", "content": 3}]}, {**orig, "model": {**orig["model"], "merges": [[1, 2]]}}]
    cases += [[1, 2], "x"]
    refused = []
    for c in cases:
        (d / fname).write_text(json.dumps(c))
        try:
            make_plan(str(d))
        except ToolkitError as e:
            refused.append((c, str(e)))
    assert [c for c, _ in refused[-2:]] == [[1, 2], "x"]   # a file that is not a JSON object
    for c, msg in refused:                                  # one line naming the file
        assert fname in msg and "\n" not in msg.strip(), (c, msg)


@pytest.mark.parametrize("name", ["mamba-tiny", "mamba2-tiny"])
@pytest.mark.parametrize("key,value,needle", [("use_conv_bias", False, "'backbone.layers.0.mixer.conv1d.bias' was not converted"),
                                              ("use_bias", True, "'backbone.layers.0.mixer.in_proj.bias'")])
def test_ssm_bias_switch_that_disagrees_with_the_tensors(monkeypatch, capsys, tmp_path, name, key, value, needle):
    """Mamba's and Mamba-2's use_bias / use_conv_bias are honoured (tests/parity/test_config_variants.py):
    a switch the checkpoint's tensors contradict is one line naming the tensor."""
    d = copy(tmp_path, name)
    edit_config(d, **{key: value})
    expect_error(monkeypatch, capsys, tmp_path, d, name, needle, code=2)


# ---- found by the fresh-eyes breaker ----------------------------------------------------------

@pytest.mark.parametrize("name,key", [("bamba-tiny", "rms_norm_eps"), ("mamba-tiny", "layer_norm_epsilon"),
                                      ("qwen3next-tiny", "rms_norm_eps"), ("qwen35-tiny", "rms_norm_eps"),
                                      ("lfm2-tiny", "norm_eps")])
def test_negative_norm_epsilon_is_refused(monkeypatch, capsys, tmp_path, name, key):
    """A negative epsilon was written as is, and toolkit's own loader then refused the file
    ('... is not a valid epsilon'): convert now refuses it up front, naming config.json and the key."""
    d = copy(tmp_path, name)
    edit_config(d, **{key: -1.0})
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", key)


@pytest.mark.parametrize("value", ["false", "no", "True", [False]])
def test_tie_word_embeddings_must_be_a_boolean(monkeypatch, capsys, tmp_path, value):
    """`"tie_word_embeddings": "false"` was read as true (a non-empty string), so the
    checkpoint's own lm_head was silently dropped and the output reused token_embd."""
    d = copy(tmp_path, "bamba-tiny")
    edit_config(d, tie_word_embeddings=value)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "tie_word_embeddings")


@pytest.mark.parametrize("outtype, value", [("f16", 1e6), ("q8_0", 1e9)])   # Q8_0's scale is amax / 127
def test_values_beyond_f16_are_refused(monkeypatch, capsys, tmp_path, outtype, value):
    """A weight of 1e6 (beyond F16's 65504) was written as F16 inf (or a Q8_0 block of scale
    inf) with exit 0, and the model then generated garbage.  Now one line naming the tensor
    and row, pointing at bf16 / f32, exit 2, nothing at OUT; f32 still converts."""
    from safetensors.numpy import load_file
    d = copy(tmp_path, "mamba-tiny")
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    name = "backbone.layers.0.mixer.in_proj.weight"
    fn = d / idx["weight_map"][name]
    t = load_file(str(fn))
    t[name][3, 5] = value
    save_file(t, str(fn), metadata={"format": "pt"})
    line = expect_error(monkeypatch, capsys, tmp_path, d, "blk.0.ssm_in.weight", "row 3", "bf16", extra=("--outtype", outtype))
    assert "inf" in line
    rc, _, err = run_cli(monkeypatch, capsys, "convert", str(d), str(tmp_path / "f32.gguf"))
    assert rc == 0, err


@pytest.mark.parametrize("name", ["lfm2-tiny", "zamba-tiny", "olmohybrid-tiny", "bamba-tiny"])
@pytest.mark.parametrize("value", [1 << 32, 1e30])
def test_config_integer_beyond_uint32_is_refused(monkeypatch, capsys, tmp_path, name, value):
    """`max_position_embeddings` of 2**32 (or 1e30) ended in 'internal error: error: 'I' format
    requires 0 <= number <= 4294967295' (or 'argument out of range'), exit 1: a GGUF UINT32 key
    cannot hold it.  Now one line naming config.json and the key, exit 2, nothing at OUT."""
    d = copy(tmp_path, name)
    edit_config(d, max_position_embeddings=value)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'max_position_embeddings'", "out of range")


@pytest.mark.parametrize("out,needle", [("nodir/", "no such directory"), ("a.gguf/", "not a directory")])
def test_out_with_a_trailing_slash_that_is_no_directory(monkeypatch, capsys, tmp_path, out, needle):
    """`convert HF nodir/` (and OUT = an existing file + '/') ended in 'internal error:
    NotADirectoryError: ... '.XXXX.part' -> 'nodir/'', exit 1; quantize named its temp file
    ('error: /tmp/..../..abc.part: Not a directory').  Now one line naming OUT, exit 2, no .part left."""
    (tmp_path / "a.gguf").write_bytes(b"keep")
    d = copy(tmp_path, "mamba-tiny")
    for argv in (("convert", str(d)), ("quantize", str(HF.parent / "llamacpp" / "mamba-tiny.f32.gguf"))):
        dest = f"{tmp_path}/{out}"   # not tmp_path / out: pathlib drops the slash
        rc, _, err = run_cli(monkeypatch, capsys, *argv, dest, *(("Q8_0",) if argv[0] == "quantize" else ()))
        line = " ".join(err.split())
        assert rc == 2 and line.startswith("error:") and dest in line and needle in line and ".part" not in line, err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gguf", "in"]
        assert (tmp_path / "a.gguf").read_bytes() == b"keep"


def test_empty_out_is_one_line(monkeypatch, capsys, tmp_path):
    """`toolkit convert HF ""` (an unset $OUT) converted everything, then failed the rename:
    'internal error: FileNotFoundError: ... .XXXX.part -> ''', exit 1; quantize named its temp
    file.  Now one line, exit 2, before any work."""
    d = copy(tmp_path, "mamba-tiny")
    for argv in (("convert", str(d), ""), ("quantize", str(HF.parent / "llamacpp" / "mamba-tiny.f32.gguf"), "", "Q8_0")):
        rc, _, err = run_cli(monkeypatch, capsys, *argv)
        line = " ".join(err.split())
        assert rc == 2 and line.startswith("error:") and "empty" in line and ".part" not in line, err
