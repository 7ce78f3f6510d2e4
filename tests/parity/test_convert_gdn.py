"""convert: qwen3next / qwen35 / qwen35moe against llama.cpp 0c1e570's converter.

References:
- tests/fixtures/llamacpp/{qwen3next,qwen35,qwen35moe}-tiny.f32.gguf: llama.cpp's files of the
  tiny fixtures (the reference set, ``--no-mtp``), compared tensor by tensor and key by key
  (tokenizer keys included).
- tests/fixtures/llamacpp/NAME.f32.summary.json (tools/make_gdn_fixtures.py --summarize):
  llama.cpp's file of qwen35-small (the 11 MB file lives in the reference set's llamacpp/ folder) and of
  the held-back-style fixtures made by tools/make_gdn_fixtures.py: every tensor's shape, type
  and sha256, the ssm_a values, and the non-tokenizer keys.

What may differ, and why:
- ``general.name`` (llama.cpp derives "Qwen35 Tiny" from the directory; we write the directory
  name), ``general.type``, ``general.size_label``, ``general.basename`` and
  ``general.quantization_version`` (llama.cpp's model-card metadata; we write none of them).
- ``blk.N.ssm_a``: llama.cpp computes -exp(A_log) in float32, we round the float64 result:
  within 1 ulp.
- keys only we write: ``{arch}.attention.layer_indices`` (every hybrid here),
  ``tokenizer.huggingface.json``, and ``{arch}.ssm.value_head_dim`` only when
  linear_value_head_dim != linear_key_head_dim.
- ``full_attention_interval`` when config.json has no ``layer_types``: see
  test_full_attention_interval_as_config_json_says.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys

import gguf
import numpy as np
import pytest
from safetensors.numpy import load_file

from cli_runner import cli as run_cli
from toolkit.convert import convert, make_plan

FIX = pathlib.Path(__file__).parent.parent / "fixtures"
HF = FIX / "hf"
LC = FIX / "llamacpp"

# general.* metadata that llama.cpp's model card writes and we do not (or write differently)
GENERAL_MAY_DIFFER = {"general.name", "general.type", "general.size_label", "general.basename",
                      "general.quantization_version"}
ARCH = {"qwen3next-tiny": "qwen3next", "qwen35-tiny": "qwen35", "qwen35moe-tiny": "qwen35moe",
        "qwen35-small": "qwen35", "qwen35-dkdv-tiny": "qwen35", "qwen3next-dkdv-tiny": "qwen3next",
        "qwen35moe-pattern-tiny": "qwen35moe", "qwen35-mtp-tiny": "qwen35", "qwen35moe-vl-tiny": "qwen35moe"}
SUMMARIZED = ["qwen35-small", "qwen35-dkdv-tiny", "qwen3next-dkdv-tiny", "qwen35moe-pattern-tiny",
              "qwen35-mtp-tiny", "qwen35moe-vl-tiny"]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """name -> GGUFReader of our f32 conversion (each fixture converted once)."""
    out_dir = tmp_path_factory.mktemp("gdn")
    cache: dict[str, gguf.GGUFReader] = {}

    def get(name: str) -> gguf.GGUFReader:
        if name not in cache:
            out = out_dir / f"{name}.f32.gguf"
            convert(str(HF / name), str(out), "f32")
            cache[name] = gguf.GGUFReader(str(out))
        return cache[name]
    return get


def kv(r: gguf.GGUFReader, key: str):
    f = r.fields.get(key)
    return None if f is None else f.contents()


def ulps(a: np.ndarray, b: np.ndarray) -> int:
    """Largest distance in float32 units in the last place (same-sign values)."""
    a, b = np.asarray(a, np.float32).reshape(-1), np.asarray(b, np.float32).reshape(-1)
    assert (np.sign(a) == np.sign(b)).all()
    return int(np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64)).max())


def our_extra_keys(arch: str, dk_ne_dv: bool) -> set[str]:
    extra = {f"{arch}.attention.layer_indices"}
    return extra | {f"{arch}.ssm.value_head_dim"} if dk_ne_dv else extra


# ---- the tiny fixtures against llama.cpp's whole files ------------------------------------------

@pytest.mark.parametrize("name", ["qwen3next-tiny", "qwen35-tiny", "qwen35moe-tiny"])
def test_same_file_as_llamacpp(converted, name):
    ours, ref = converted(name), gguf.GGUFReader(str(LC / f"{name}.f32.gguf"))
    mine = {t.name: t for t in ours.tensors}
    theirs = {t.name: t for t in ref.tensors}
    assert sorted(mine) == sorted(theirs)
    n_ssm_a = 0
    for n, t in theirs.items():
        o = mine[n]
        assert [int(x) for x in o.shape] == [int(x) for x in t.shape], n
        assert o.tensor_type == t.tensor_type == gguf.GGMLQuantizationType.F32, n
        if n.endswith(".ssm_a"):
            n_ssm_a += 1
            assert ulps(o.data, t.data) <= 1, n
        else:
            assert o.data.tobytes() == t.data.tobytes(), n
    arch = ARCH[name]
    assert n_ssm_a == sum(kv(ref, f"{arch}.attention.recurrent_layers")) > 0
    for key, f in ref.fields.items():
        if key.startswith("GGUF.") or key in GENERAL_MAY_DIFFER:
            continue
        g = ours.fields.get(key)
        assert g is not None, key
        assert [int(x) for x in g.types] == [int(x) for x in f.types], key
        assert g.contents() == f.contents(), key
    extra = {k for k in ours.fields if not k.startswith("GGUF.")} - set(ref.fields)
    assert extra == our_extra_keys(arch, False) | {"tokenizer.huggingface.json"}
    assert kv(ours, f"{arch}.nextn_predict_layers") is None       # no mtp.* tensors, no flag needed


# ---- qwen35-small and the held-back-style fixtures against llama.cpp's summaries ----------------

@pytest.mark.parametrize("name", SUMMARIZED)
def test_same_tensors_and_keys_as_llamacpp_summary(converted, name):
    ref = json.loads((LC / f"{name}.f32.summary.json").read_text())
    ours = converted(name)
    arch = ARCH[name]
    got = {t.name: t for t in ours.tensors}
    assert sorted(got) == sorted(ref["tensors"])
    for n, want in ref["tensors"].items():
        t = got[n]
        assert [int(x) for x in t.shape] == want["shape"] and t.tensor_type.name == want["type"], n
        if "values" in want:     # ssm_a
            assert ulps(t.data, np.asarray(want["values"], np.float32)) <= 1, n
        else:
            assert hashlib.sha256(t.data.tobytes()).hexdigest() == want["sha256"], n
    cfg = json.loads((HF / name / "config.json").read_text())
    cfg = {**cfg, **cfg.get("text_config", {})}
    for key, want in ref["kv"].items():
        if key in GENERAL_MAY_DIFFER:
            continue
        if key == f"{arch}.full_attention_interval" and "layer_types" not in cfg:
            continue          # see test_full_attention_interval_as_config_json_says
        f = ours.fields.get(key)
        assert f is not None, key
        assert [gguf.GGUFValueType(x).name for x in f.types] == want["type"], key
        v = f.contents()
        assert (list(v) if isinstance(v, list) else v) == want["value"], key
    extra = {k for k in ours.fields if not k.startswith(("GGUF.", "tokenizer."))} - set(ref["kv"])
    dk_ne_dv = cfg["linear_key_head_dim"] != cfg["linear_value_head_dim"]
    assert extra == our_extra_keys(arch, dk_ne_dv)


def test_full_attention_interval_as_config_json_says(converted):
    """qwen35moe-pattern-tiny's config.json has no layer_types, full_attention_interval 3.
    transformers' __post_init__ pops the interval while it builds layer_types, so llama.cpp
    (which reads the config through AutoConfig) writes its default 4; we write 3.  Both write
    the same recurrent_layers, which is what the runtimes read."""
    name = "qwen35moe-pattern-tiny"
    cfg = json.loads((HF / name / "config.json").read_text())
    assert "layer_types" not in cfg and cfg["full_attention_interval"] == 3
    ref = json.loads((LC / f"{name}.f32.summary.json").read_text())["kv"]
    assert ref["qwen35moe.full_attention_interval"]["value"] == 4                # llama.cpp
    ours = converted(name)
    assert kv(ours, "qwen35moe.full_attention_interval") == 3
    want = [True, True, False, True, True, False]
    assert ref["qwen35moe.attention.recurrent_layers"]["value"] == want
    assert kv(ours, "qwen35moe.attention.recurrent_layers") == want
    assert kv(ours, "qwen35moe.attention.layer_indices") == [2, 5]


# ---- linear key head dim != linear value head dim -----------------------------------------------

@pytest.mark.parametrize("name, arch", [("qwen35-dkdv-tiny", "qwen35"), ("qwen3next-dkdv-tiny", "qwen3next")])
def test_value_head_dim_only_when_it_differs(converted, name, arch):
    cfg = json.loads((HF / name / "config.json").read_text())
    dk, dv, hv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], cfg["linear_num_value_heads"]
    assert dk != dv
    r = converted(name)
    assert kv(r, f"{arch}.ssm.state_size") == dk             # what llama.cpp writes (and reads as Dv too)
    assert kv(r, f"{arch}.ssm.value_head_dim") == dv
    assert kv(r, f"{arch}.ssm.inner_size") == hv * dv
    norm = next(t for t in r.tensors if t.name == "blk.1.ssm_norm.weight")
    assert [int(x) for x in norm.shape] == [dv]
    same = converted("qwen35-tiny")
    assert kv(same, "qwen35.ssm.value_head_dim") is None


def test_qwen3next_qkvz_regrouped_per_part(converted):
    """in_proj_qkvz rows [q_h k_h v_h z_h] per key head -> attn_qkv [Q | K | V] and attn_gate [Z],
    value heads in HF's grouped order; in_proj_ba as stored (checked against numpy)."""
    name = "qwen3next-dkdv-tiny"
    d = HF / name
    wm = json.loads((d / "model.safetensors.index.json").read_text())["weight_map"]
    cfg = json.loads((d / "config.json").read_text())
    nk, nv, dk, dv = (cfg[k] for k in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                       "linear_value_head_dim"))
    src = "model.layers.1.linear_attn."
    qkvz = load_file(str(d / wm[src + "in_proj_qkvz.weight"]))[src + "in_proj_qkvz.weight"]
    ba = load_file(str(d / wm[src + "in_proj_ba.weight"]))[src + "in_proj_ba.weight"]
    rdv = nv // nk * dv
    per = qkvz.reshape(nk, 2 * dk + 2 * rdv, -1)
    q, k, v, z = np.split(per, [dk, 2 * dk, 2 * dk + rdv], axis=1)
    want_qkv = np.concatenate([q.reshape(-1, q.shape[-1]), k.reshape(-1, k.shape[-1]), v.reshape(-1, v.shape[-1])])
    r = converted(name)
    t = {x.name: np.asarray(x.data) for x in r.tensors}
    np.testing.assert_array_equal(t["blk.1.attn_qkv.weight"], want_qkv)
    np.testing.assert_array_equal(t["blk.1.attn_gate.weight"], z.reshape(-1, z.shape[-1]))
    np.testing.assert_array_equal(t["blk.1.ssm_ba.weight"], ba)


# ---- MTP ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, arch", [("qwen35-mtp-tiny", "qwen35"), ("qwen35moe-vl-tiny", "qwen35moe")])
def test_mtp_block_appended(converted, name, arch):
    cfg = json.loads((HF / name / "config.json").read_text())
    cfg = {**cfg, **cfg.get("text_config", {})}
    L = cfg["num_hidden_layers"]
    r = converted(name)
    assert kv(r, f"{arch}.block_count") == L + 1
    assert kv(r, f"{arch}.nextn_predict_layers") == 1
    assert kv(r, f"{arch}.attention.recurrent_layers")[L] is False
    assert max(kv(r, f"{arch}.attention.layer_indices")) < L      # main layers only
    names = {t.name for t in r.tensors}
    for n in ("eh_proj", "enorm", "hnorm", "shared_head_norm"):
        assert f"blk.{L}.nextn.{n}.weight" in names
    assert {f"blk.{L}.attn_q.weight", f"blk.{L}.attn_norm.weight", f"blk.{L}.post_attention_norm.weight"} <= names


def test_no_mtp_flag_leaves_the_head_out(monkeypatch, capsys, tmp_path, converted):
    name = "qwen35-mtp-tiny"
    out = tmp_path / "nomtp.gguf"
    rc, _, err = run_cli(monkeypatch, capsys, "convert", str(HF / name), str(out), "--no-mtp",
                          "--outtype", "f32")
    assert rc == 0, err
    r = gguf.GGUFReader(str(out))
    assert kv(r, "qwen35.block_count") == 4 and kv(r, "qwen35.nextn_predict_layers") is None
    assert len(kv(r, "qwen35.attention.recurrent_layers")) == 4
    full = {t.name: t.data.tobytes() for t in converted(name).tensors}
    got = {t.name: t.data.tobytes() for t in r.tensors}
    assert got == {n: b for n, b in full.items() if not n.startswith("blk.4.")}
    plan = make_plan(str(HF / name), no_mtp=True)
    # mtp.fc, 3 head norms, 2 layer norms, 6 attention and 3 MLP tensors
    assert sum(n.startswith("mtp.") for n, _ in plan.omitted) == 15


def test_mtp_layer_count_from_the_tensors(tmp_path):
    """mtp_num_hidden_layers in config.json must agree with the mtp.layers.N tensors."""
    from toolkit.errors import InputError

    d = tmp_path / "m"
    shutil.copytree(HF / "qwen35-mtp-tiny", d)
    c = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**c, "mtp_num_hidden_layers": 1}))
    assert any(t.name == "blk.4.nextn.eh_proj.weight" for t in make_plan(str(d)).tensors)
    (d / "config.json").write_text(json.dumps({**c, "mtp_num_hidden_layers": 2}))
    with pytest.raises(InputError, match="mtp_num_hidden_layers = 2, but the checkpoint has mtp.layers.0..0"):
        make_plan(str(d))


# ---- ForConditionalGeneration ------------------------------------------------------------------

def test_vision_tower_skipped_with_one_line(tmp_path):
    name = "qwen35moe-vl-tiny"
    plan = make_plan(str(HF / name))
    vis = [n for n, _ in plan.omitted if n.startswith("model.visual.")]
    assert len(vis) == 21
    out = tmp_path / "vl.gguf"
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    p = subprocess.run([sys.executable, "-m", "toolkit", "convert", str(HF / name), str(out),
                        "--outtype", "f32"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "vision tower skipped" in lines[0] and "21 model.visual.*" in lines[0], p.stderr
    assert out.exists()


# ---- config forms ------------------------------------------------------------------------------

def _copy(tmp_path, name) -> pathlib.Path:
    d = tmp_path / name
    shutil.copytree(HF / name, d)
    return d


def _edit_config(d: pathlib.Path, **kw) -> None:
    c = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**c, **kw}))


def test_mtp_num_hidden_layers_without_tensors(tmp_path, converted):
    """config.json may say mtp_num_hidden_layers = 1 when save_pretrained dropped the mtp.*
    tensors: no MTP block, no nextn key (llama.cpp counts the config's layers into block_count
    without writing their tensors)."""
    d = _copy(tmp_path, "qwen35-tiny")
    _edit_config(d, mtp_num_hidden_layers=1)
    r = gguf.GGUFReader(str(convert(str(d), str(tmp_path / "o.gguf")).out))
    assert kv(r, "qwen35.block_count") == 4 and kv(r, "qwen35.nextn_predict_layers") is None
    assert {t.name: t.data.tobytes() for t in r.tensors} == \
        {t.name: t.data.tobytes() for t in converted("qwen35-tiny").tensors}


def test_model_mtp_prefix(tmp_path, converted):
    """``model.mtp.*`` (some exports) is read as ``mtp.*``, as llama.cpp's _QwenMtpMixin does."""
    from safetensors.numpy import save_file

    d = _copy(tmp_path, "qwen35-mtp-tiny")
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    wm = idx["weight_map"]
    for fn in sorted({f for n, f in wm.items() if n.startswith("mtp.")}):
        t = load_file(str(d / fn))
        save_file({("model." + n if n.startswith("mtp.") else n): a for n, a in t.items()}, str(d / fn),
                  metadata={"format": "pt"})
    idx["weight_map"] = {("model." + n if n.startswith("mtp.") else n): f for n, f in wm.items()}
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    r = gguf.GGUFReader(str(convert(str(d), str(tmp_path / "o.gguf")).out))
    assert {t.name: t.data.tobytes() for t in r.tensors} == \
        {t.name: t.data.tobytes() for t in converted("qwen35-mtp-tiny").tensors}


def test_output_follows_lm_head(tmp_path):
    """output.weight is written when the checkpoint has lm_head.weight (as llama.cpp does, even
    with tie_word_embeddings); without it the embeddings must be tied."""
    d = _copy(tmp_path, "qwen3next-dkdv-tiny")        # tied: no lm_head.weight saved
    assert json.loads((d / "config.json").read_text())["tie_word_embeddings"] is True
    assert not any(t.name == "output.weight" for t in make_plan(str(d)).tensors)
    _edit_config(d, tie_word_embeddings=False)
    from toolkit.errors import InputError
    with pytest.raises(InputError, match="missing tensor 'lm_head.weight' .tie_word_embeddings is false"):
        make_plan(str(d))
    d2 = _copy(tmp_path, "qwen35moe-tiny")             # untied, lm_head.weight saved
    _edit_config(d2, tie_word_embeddings=True)
    assert any(t.name == "output.weight" for t in make_plan(str(d2)).tensors)


def test_qwen3next_dense_layers_from_mlp_only_layers(tmp_path):
    """HF Qwen3-Next: a layer in mlp_only_layers (or off decoder_sparse_step) has a dense MLP;
    llama.cpp cannot load that, we write ffn_gate/up/down for it."""
    from toolkit.errors import InputError

    d = _copy(tmp_path, "qwen3next-tiny")
    _edit_config(d, mlp_only_layers=[1])
    with pytest.raises(InputError, match=r"missing tensor 'model\.layers\.1\.mlp\.gate_proj\.weight'"):
        make_plan(str(d))
    _edit_config(d, mlp_only_layers=[], decoder_sparse_step=2)
    with pytest.raises(InputError, match=r"missing tensor 'model\.layers\.0\.mlp\.gate_proj\.weight'"):
        make_plan(str(d))


def test_qwen35_pre_tokenizer_named(tmp_path):
    """Qwen3.5's split regex (qwen2's with \\p{M}) -> tokenizer.ggml.pre "qwen35", the name
    llama.cpp's converter gives it (by hash) and llama-vocab.cpp implements."""
    d = _copy(tmp_path, "qwen35-tiny")
    rx = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
          "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
    tok = json.loads((d / "tokenizer.json").read_text())
    tok["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": rx}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    (d / "tokenizer.json").write_text(json.dumps(tok))
    pre = {k.key: k.value for k in make_plan(str(d)).kv}["tokenizer.ggml.pre"]
    assert pre == "qwen35"


def test_value_head_reorder_streams_head_by_head(tmp_path, monkeypatch):
    """With bands of one value head (Dv x D elements), no read of a GDN projection exceeds a
    band: the V-head reorder never needs all value heads resident.  Same bytes as with the
    default bands."""
    import toolkit.convert.core as core
    import toolkit.convert.st_reader as st

    name = "qwen35-dkdv-tiny"
    cfg = json.loads((HF / name / "config.json").read_text())
    band = cfg["linear_value_head_dim"] * cfg["hidden_size"]
    want = tmp_path / "default.gguf"
    convert(str(HF / name), str(want), "f16")
    reads: list[tuple[str, int]] = []
    orig = st.ShardReader.read_into

    def spy(self, t, start, out):
        if ".linear_attn.in_proj_" in t.name:
            reads.append((t.name, len(out)))
        return orig(self, t, start, out)

    monkeypatch.setattr(st.ShardReader, "read_into", spy)
    monkeypatch.setattr(core, "BAND_ELEMENTS", band)
    got = tmp_path / "banded.gguf"
    convert(str(HF / name), str(got), "f16")
    assert reads and max(n for _, n in reads) <= band * 4, max(reads, key=lambda x: x[1])
    assert got.read_bytes() == want.read_bytes()
