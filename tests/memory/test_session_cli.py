"""`toolkit run --session FILE`: prompt-cache reuse through a saved state.

The second run of a prompt that extends the first one decodes only the new tokens (n_reused in
--json = the first prompt's length) and generates exactly what a from-scratch run generates
(greedy; the logits are bit-identical).  Same prompt again: all but the last token reused.
A corrupt session file or another model's is a clean error that leaves the file as it was; an
unrelated prompt reuses nothing and says why.
"""
from __future__ import annotations

import json
import pathlib

import pytest

from cli_runner import cli
from families import names

pytestmark = pytest.mark.native

HF = pathlib.Path(__file__).parent.parent / "fixtures" / "hf"


@pytest.fixture(scope="module")
def models(hf_f32):
    """name -> our f32 conversion of each fixture with the cli_session cap (tests/families.py)."""
    return {name: hf_f32(name) for name in names("cli_session")}




def run(monkeypatch, capsys, model, ids, *extra):
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(model), "--json", "--temp", "0", "-n", "6",
                       "--tokens", ",".join(map(str, ids)), *extra)
    assert rc == 0, err
    return json.loads(out), err


P1 = [5, 17, 99, 3, 250, 41, 7, 7, 300, 12, 64, 1]
P2 = P1 + [77, 401, 9, 18, 200]


@pytest.mark.parametrize("name", names("cli_session"))
def test_extended_prompt_reuses_and_matches_scratch(monkeypatch, capsys, tmp_path, models, name):
    m, sess = models[name], str(tmp_path / "s.session")
    first, err = run(monkeypatch, capsys, m, P1, "--session", sess)
    assert first["n_reused"] == 0 and "reused 0 of 12" in err
    assert pathlib.Path(sess).is_file()
    second, err = run(monkeypatch, capsys, m, P2, "--session", sess)
    scratch, _ = run(monkeypatch, capsys, m, P2)
    assert second["n_reused"] == len(P1) and f"reused {len(P1)} of {len(P2)}" in err
    assert second["timings"]["n_prompt"] == len(P2) - len(P1)
    assert second["tokens"] == scratch["tokens"]
    assert "n_reused" not in scratch
    # the same prompt once more: everything but the last token comes from the session
    third, _ = run(monkeypatch, capsys, m, P2, "--session", sess)
    assert third["n_reused"] == len(P2) - 1 and third["tokens"] == scratch["tokens"]
    # a prompt that diverges early: nothing to reuse, still the scratch output
    other = [9] + P2[1:]
    fourth, err = run(monkeypatch, capsys, m, other, "--session", sess)
    assert fourth["n_reused"] == 0 and "no prefix" in err
    assert fourth["tokens"] == run(monkeypatch, capsys, m, other)[0]["tokens"]


def test_prefix_of_the_saved_prompt_rolls_back(monkeypatch, capsys, tmp_path, models):
    m, sess = models["bamba-tiny"], str(tmp_path / "s.session")
    run(monkeypatch, capsys, m, P2, "--session", sess, "--checkpoint-every", "4")
    short = P2[:10]                                 # checkpoints at 3, 7, 11, ...: back to 7
    got, _ = run(monkeypatch, capsys, m, short, "--session", sess, "--checkpoint-every", "4")
    assert got["n_reused"] == 8
    assert got["tokens"] == run(monkeypatch, capsys, m, short)[0]["tokens"]


def test_other_model_and_corrupt_session(monkeypatch, capsys, tmp_path, models):
    sess = tmp_path / "s.session"
    run(monkeypatch, capsys, models["bamba-tiny"], P1, "--session", str(sess))
    before = sess.read_bytes()
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(models["jamba-tiny"]), "--json",
                       "--tokens", ",".join(map(str, P2)), "--session", str(sess))
    assert rc == 2 and "another model" in err and out == "", err
    assert sess.read_bytes() == before              # refused, not overwritten
    data = bytearray(sess.read_bytes())
    data[20] ^= 0xFF                                # inside the token list
    sess.write_bytes(bytes(data))
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(models["jamba-tiny"]), "--tokens", "1,2,3",
                       "--session", str(sess))
    assert rc == 2 and "checksum" in err and "Traceback" not in err
    sess.write_bytes(b"junk")
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(models["jamba-tiny"]), "--tokens", "1,2,3",
                       "--session", str(sess))
    assert rc == 2 and "not a toolkit session" in err


def test_session_and_logits_out_refused(monkeypatch, capsys, tmp_path, models):
    rc, _, err = cli(monkeypatch, capsys, "run", "-m", str(models["bamba-tiny"]), "--tokens", "1,2",
                     "--session", str(tmp_path / "s"), "--logits-out", str(tmp_path / "l.npy"))
    assert rc == 2 and "--logits-out" in err


def test_memory_report_cli(monkeypatch, capsys, models):
    from toolkit.arch import HParams
    from toolkit.gguf_io import GGUFFile
    from toolkit.runtime import Context, Model
    for name, m in models.items():
        rc, out, err = cli(monkeypatch, capsys, "info", str(m), "--memory", "--json", "-c", "300", "-np", "3",
                           "--checkpoints", "2", "-ub", "64")
        assert rc == 0, err
        rep = json.loads(out)["memory"]
        hp = HParams.from_gguf(GGUFFile(str(m)))
        # KV only for the attention layers: 2 x n_ctx x n_head_kv x head_dim x 4 bytes each (a
        # sliding-window layer holds fewer cells: tests/memory/test_swa_cache.py)
        if not any(hp.swa_layers or ()):
            assert rep["kv"] == sum(2 * 300 * hp.n_head_kv[i] * hp.head_dim * 4 for i in hp.attention_layers)
        assert rep["checkpoints"] == 2 * rep["recurrent"]
        with Model(m) as mm, Context(mm, n_ctx=300, n_seq_max=3, n_ubatch=64, n_checkpoints=2) as ctx:
            got = ctx.memory_report()
        assert rep == got, name      # the C estimate (same default threads) is what the context allocates
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(models["bamba-tiny"]), "--tokens", "1,2,3", "-n", "1",
                       "-v", "-c", "64")
    assert rc == 0 and "recurrent" in err and "checkpoints" in err and "kv" in err


@pytest.mark.parametrize("damage", ["flip_state", "truncate"])
def test_corrupt_state_blob_is_exit_2_and_file_untouched(monkeypatch, capsys, tmp_path, models, damage):
    """README: a corrupt file is an error (exit 2); the file is left as it was, even when the
    new prompt shares nothing with it."""
    sess = tmp_path / "s.session"
    run(monkeypatch, capsys, models["bamba-tiny"], P1, "--session", str(sess))
    data = bytearray(sess.read_bytes())
    if damage == "flip_state":
        data[-40] ^= 0xFF                              # inside the state blob
    else:
        data = data[:-100]
    sess.write_bytes(bytes(data))
    for ids in (P2, [9, 9, 9]):                        # shared prefix, and none
        rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(models["bamba-tiny"]), "--json", "-n", "1",
                           "--tokens", ",".join(map(str, ids)), "--session", str(sess))
        assert rc == 2 and "session" in err and "Traceback" not in err, err
        assert sess.read_bytes() == bytes(data)


@pytest.mark.parametrize("name", ["qwen3next-tiny", "qwen35-tiny", "qwen35moe-tiny"])
def test_memory_report_cli_gated_delta_net(monkeypatch, capsys, name):
    """`info --memory` (the C estimate) equals the allocated report for the GDN families
    (llama.cpp's files): recurrent = n_seq_max x GDN layers x ((K-1) C + Hv Dk Dv) floats."""
    from toolkit.arch import HParams
    from toolkit.gguf_io import GGUFFile
    from toolkit.runtime import Context, Model
    m = HF.parent / "llamacpp" / f"{name}.f32.gguf"
    rc, out, err = cli(monkeypatch, capsys, "info", str(m), "--memory", "--json", "-c", "300", "-np", "3",
                       "--checkpoints", "2", "-ub", "64")
    assert rc == 0, err
    rep = json.loads(out)["memory"]
    hp = HParams.from_gguf(GGUFFile(str(m)))
    C = 2 * hp.n_group * hp.d_state + hp.ssm_n_head * hp.ssm_head_dim
    per_seq = (hp.d_conv - 1) * C + hp.ssm_n_head * hp.d_state * hp.ssm_head_dim
    assert rep["recurrent"] == 3 * len(hp.recurrent_layers) * per_seq * 4
    assert rep["kv"] == sum(2 * 300 * hp.n_head_kv[i] * hp.head_dim * 4 for i in hp.attention_layers)
    with Model(m) as mm, Context(mm, n_ctx=300, n_seq_max=3, n_ubatch=64, n_checkpoints=2) as ctx:
        got = ctx.memory_report()
    assert rep == got, name          # the C estimate (same default threads) is what the context allocates


@pytest.mark.parametrize("name", ["nemotronh-tiny", "nemotronh-dense-tiny"])
def test_memory_report_cli_nemotron_h(monkeypatch, capsys, tmp_path, name):
    """`info --memory` (the C estimate) equals the allocated report for Nemotron-H (our
    conversion): recurrent state on the Mamba-2 layers only (not on the MLP / MoE blocks, which
    have no mixer), KV on the attention layers only."""
    from toolkit.arch import HParams, LayerKind
    from toolkit.convert import convert
    from toolkit.gguf_io import GGUFFile
    from toolkit.runtime import Context, Model
    m = tmp_path / f"{name}.f32.gguf"
    convert(str(HF / name), str(m), "f32")
    rc, out, err = cli(monkeypatch, capsys, "info", str(m), "--memory", "--json", "-c", "300", "-np", "3",
                       "--checkpoints", "2", "-ub", "64")
    assert rc == 0, err
    rep = json.loads(out)["memory"]
    hp = HParams.from_gguf(GGUFFile(str(m)))
    n_m2 = hp.layer_kinds.count(LayerKind.MAMBA2)
    assert LayerKind.NONE in hp.layer_kinds and len(hp.recurrent_layers) == n_m2 == 2
    C = hp.d_inner + 2 * hp.n_group * hp.d_state
    assert rep["recurrent"] == 3 * n_m2 * ((hp.d_conv - 1) * C + hp.d_state * hp.d_inner) * 4
    assert rep["kv"] == sum(2 * 300 * hp.n_head_kv[i] * hp.head_dim * 4 for i in hp.attention_layers) > 0
    with Model(m) as mm, Context(mm, n_ctx=300, n_seq_max=3, n_ubatch=64, n_checkpoints=2) as ctx:
        got = ctx.memory_report()
    assert rep == got, name          # the C estimate (same default threads) is what the context allocates


@pytest.mark.parametrize("name", ["lfm2-tiny", "lfm2moe-tiny"])
def test_memory_report_cli_short_conv(monkeypatch, capsys, models, name):
    """`info --memory` (the C estimate) equals the allocated report, compute included, for
    LFM2 / LFM2-MoE (our files): recurrent = n_seq_max x conv layers x (K-1) x D floats (the
    short conv window), KV only on the attention layers."""
    from toolkit.arch import HParams
    from toolkit.gguf_io import GGUFFile
    from toolkit.runtime import Context, Model
    m = models[name]
    monkeypatch.setenv("TOOLKIT_THREADS", "1")
    rc, out, err = cli(monkeypatch, capsys, "info", str(m), "--memory", "--json", "-c", "300", "-np", "3",
                       "--checkpoints", "2", "-ub", "64")
    assert rc == 0, err
    rep = json.loads(out)["memory"]
    hp = HParams.from_gguf(GGUFFile(str(m)))
    assert hp.attention_layers and hp.recurrent_layers
    assert rep["recurrent"] == 3 * len(hp.recurrent_layers) * (hp.d_conv - 1) * hp.n_embd * 4
    assert rep["checkpoints"] == 2 * rep["recurrent"]
    assert rep["kv"] == sum(2 * 300 * hp.n_head_kv[i] * hp.head_dim * 4 for i in hp.attention_layers)
    with Model(m, n_threads=1) as mm, Context(mm, n_ctx=300, n_seq_max=3, n_ubatch=64, n_checkpoints=2,
                                              n_threads=1) as ctx:
        got = ctx.memory_report()
    assert {k: rep[k] for k in got} == got
