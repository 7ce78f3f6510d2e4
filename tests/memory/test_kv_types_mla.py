"""KV cache types on MLA's latent rows (Kimi-Linear, Ling 3, GLM-5-Next; issue 42 item 3).

MLA keeps one row [c (kv_lora_rank) | k_rot (rope dims)] per cell, of the K cache's type (ggml's
from_float as it is stored, its to_float as attention reads it; V is the row's first kv_lora_rank
values, so -ctv stores nothing there).  A block type (q8_0, q4_0) needs the row a multiple of 32
wide: kimilinear-tiny / bailinghybrid-tiny (32 + 8) are refused with one line, glm5next-tiny (32
+ 0) takes every type.

* per type, the logits against the float32 cache's within a bound (4x the worst measured here);
* the blocked kernel (V from K's converted rows) agrees with the reference kernel;
* estimate == allocation, and the kv bytes are the type's rows (no V bytes);
* a state blob records the type: another is refused, the same restores the exact continuation;
* speculative rollback (a draft model, lookup) gives plain decoding's tokens with every type;
* a context shift re-rotates the cached k_rot of a typed row (Ling 3: dequantize, rotate,
  quantize): within the type's bound of the f32 cache's shift, far from leaving it unrotated.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from cli_runner import cli
from toolkit.binding import lib
from toolkit.errors import NativeError, UnsupportedError
from toolkit.runtime import Context, Model, memory_estimate
from toolkit.runtime.options import RuntimeOptions

pytestmark = pytest.mark.native

TYPES = ["f16", "bf16", "q8_0", "q4_0"]
# relative L2 against the f32 cache: 4x the worst measured on the cases below (f16 1.3e-4, bf16 2.0e-2
# on bailinghybrid-tiny, q8_0 3.0e-3, q4_0 4.8e-2 on glm5next-tiny)
BOUND = {"f16": 1e-3, "bf16": 8e-2, "q8_0": 1.5e-2, "q4_0": 0.2}
ROW = {"f32": (1, 4), "f16": (1, 2), "bf16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18)}   # (values, bytes) a block
# (fixture, type): every type on glm5next-tiny (latent 32 wide), f16 / bf16 on the 40-wide ones
CASES = ([("glm5next-tiny", t) for t in TYPES] + [(n, t) for n in ("kimilinear-tiny", "bailinghybrid-tiny")
                                                   for t in ("f16", "bf16")])


def _opts(tk: str, tv: str | None = None) -> RuntimeOptions:
    return RuntimeOptions(cache_type_k=tk, cache_type_v=tv or tk)


def _path(fixtures, name: str) -> str:
    return str(fixtures / "llamacpp" / f"{name}.f32.gguf")


def _toks(m, n: int, a: int = 61, b: int = 11) -> np.ndarray:
    return ((np.arange(n, dtype=np.int64) * a + b) % m.n_vocab).astype(np.int32)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b.astype(np.float64)))


def _logits(path: str, t: str, n: int = 96, n_ubatch: int = 32, n_threads: int = 2):
    with Model(path, n_threads=n_threads) as m, \
            Context(m, n_ctx=n + 8, n_ubatch=n_ubatch, n_threads=n_threads, options=_opts(t)) as c:
        return c.decode(_toks(m, n), logits="all")


@pytest.fixture
def reference_off():
    yield
    lib.tk_attn_set_reference(-1)


@pytest.mark.parametrize("name,t", CASES)
def test_logits_near_f32_cache(fixtures, name, t, reference_off):
    path = _path(fixtures, name)
    ref = _logits(path, "f32")
    got = _logits(path, t)
    e = _rel(got, ref)
    assert np.isfinite(got).all()
    assert 0 < e < BOUND[t], f"{name} -ctk {t}: relative L2 {e:.3e} against the f32 cache (bound {BOUND[t]})"
    lib.tk_attn_set_reference(1)               # the reference kernel converts each row it reads
    assert _rel(_logits(path, t), got) < 1e-5
    assert np.array_equal(_logits(path, t, n_ubatch=7), got) or _rel(_logits(path, t, n_ubatch=7), got) < 1e-5


@pytest.mark.parametrize("t", ["f16", "q8_0"])
def test_ubatch_and_threads_invariant(fixtures, t):
    """The blocked kernel over a typed latent: a token's logits are bit-identical whatever its ubatch and threads."""
    path = _path(fixtures, "glm5next-tiny")
    base = _logits(path, t, n=150, n_ubatch=64)
    for thr, ub in ((1, 64), (3, 64), (2, 1), (2, 7)):
        assert np.array_equal(_logits(path, t, n=150, n_ubatch=ub, n_threads=thr), base), (t, thr, ub)


@pytest.mark.parametrize("name", ["kimilinear-tiny", "bailinghybrid-tiny"])
def test_block_type_needs_whole_blocks(fixtures, name):
    with Model(_path(fixtures, name), n_threads=1) as m:
        for t in ("q8_0", "q4_0"):
            with pytest.raises(UnsupportedError, match=rf"KV cache type {t}: layer \d+ \(mla\) latent row of 40 values "
                                                       r"\(kv_lora_rank 32 \+ rope 8\) is not a multiple of its block \(32"):
                Context(m, n_ctx=32, options=_opts(t))
            with pytest.raises(UnsupportedError, match="latent row of 40 values"):
                memory_estimate(m, n_ctx=32, options=_opts(t, "f32"))
        with Context(m, n_ctx=32, options=_opts("f32", "q8_0")) as c:   # -ctv: no V rows on MLA layers
            assert c.memory_report()["kv_v"] == 0


@pytest.mark.parametrize("t", ["f32"] + TYPES)
def test_estimate_equals_allocation(fixtures, t):
    path = _path(fixtures, "glm5next-tiny")
    with Model(path, n_threads=2) as m:
        est = memory_estimate(m, n_ctx=256, n_ubatch=64, n_threads=2, options=_opts(t))
        with Context(m, n_ctx=256, n_ubatch=64, n_threads=2, options=_opts(t)) as c:
            got = c.memory_report()
        f32 = memory_estimate(m, n_ctx=256, n_ubatch=64, n_threads=2, options=_opts("f32"))
    assert est == got
    vals, nbytes = ROW[t]
    idx = f32["kv_k"] - 256 * 2 * 32 * 4       # 2 MLA layers of 32 latent values; the rest: DSA's f32 indexer keys
    assert idx > 0 and got["kv_k"] == 256 * 2 * 32 // vals * nbytes + idx
    assert got["kv_v"] == 0 and got["kv"] == got["kv_k"]


@pytest.mark.parametrize("t", TYPES)
def test_state_records_type(fixtures, t):
    path = _path(fixtures, "glm5next-tiny")
    other = "f16" if t != "f16" else "q8_0"
    with Model(path, n_threads=2) as m:
        with Context(m, n_ctx=96, options=_opts(t)) as a:
            a.decode(_toks(m, 40))
            blob = a.state_bytes()
            ref = a.decode([7])
        with Context(m, n_ctx=96, options=_opts(other)) as b:
            with pytest.raises(NativeError, match=rf"K {t}, V {t} in the file.*K {other}, V {other}") as ei:
                b.load_state(blob)
            assert "\n" not in str(ei.value)
        with Context(m, n_ctx=96, options=_opts(t)) as c:
            c.load_state(blob)
            assert np.array_equal(c.decode([7]), ref)


def test_session_cli(monkeypatch, capsys, tmp_path, fixtures):
    path, sess = _path(fixtures, "glm5next-tiny"), str(tmp_path / "s.session")
    base = ["run", "-m", path, "--json", "--temp", "0", "-n", "3", "--tokens", "5,17,99,3,250,41,7", "--session", sess]
    rc, out, err = cli(monkeypatch, capsys, *base, "-ctk", "q4_0")
    assert rc == 0, err
    rc, out, err = cli(monkeypatch, capsys, *base, "-ctk", "bf16")
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and sess in lines[0] and "K q4_0, V f32 in the file" in lines[0], err
    rc, out, err = cli(monkeypatch, capsys, *base, "-ctk", "q4_0")
    assert rc == 0 and json.loads(out)["n_reused"] > 0, err


@pytest.mark.parametrize("name,t", CASES)
def test_speculative_rollback(monkeypatch, capsys, fixtures, name, t):
    """Greedy output with drafts (the latent rows of rejected drafts dropped) equals plain decoding."""
    path = _path(fixtures, name)
    args = ["run", "-m", path, "--json", "--temp", "0", "-n", "12", "--tokens", "5,17,99,3,250,41,5,17,99", "-ctk", t]
    rc, out, err = cli(monkeypatch, capsys, *args)
    assert rc == 0, err
    plain = json.loads(out)["tokens"]
    for extra in (["--lookup", "--draft-max", "4"], ["-md", path, "--draft-max", "3"]):
        rc, out, err = cli(monkeypatch, capsys, *args, *extra)
        assert rc == 0, err
        assert json.loads(out)["tokens"] == plain, (name, t, extra)


def _shifted(m, t: str, toks, nxt, d: int, shift: bool = True) -> np.ndarray:
    """Drop positions [4, 4 + d), shift the rest down by d (shift False: leave them), then the
    logits of the tokens nxt one by one."""
    with Context(m, n_ctx=96, n_threads=2, options=_opts(t)) as c:
        c.decode(toks)
        assert c.memory.seq_rm(0, 4, 4 + d)
        if shift:
            assert c.memory.seq_add(0, 4 + d, -1, -d)
        return np.concatenate([c.decode([x], logits="last") for x in nxt])


@pytest.mark.parametrize("name,t", CASES)
def test_context_shift(fixtures, name, t):
    """The shift of a typed latent: Ling 3 (bailinghybrid) re-rotates the cached k_rot of each row
    (dequantize, rotate, quantize): within the type's bound of the f32 cache's shift, and nearer to
    it than the unshifted continuation; Kimi-Linear / GLM-5-Next (no RoPE) move positions only."""
    path, d, n = _path(fixtures, name), 24, 64
    with Model(path, n_threads=2) as m:
        toks = _toks(m, n)
        nxt = [int(x) for x in _toks(m, 4, 13, 3)]
        ref = _shifted(m, "f32", toks, nxt, d)
        got = _shifted(m, t, toks, nxt, d)
        e = _rel(got, ref)
        assert 0 < e < BOUND[t], f"{name} {t}: shifted vs the f32 cache's shift {e:.3e}"
        if name == "bailinghybrid-tiny":
            far = _shifted(m, "f32", toks, nxt, d, shift=False)
            assert e < _rel(far, ref) / 2, (e, _rel(far, ref))


def test_cli_info_memory(monkeypatch, capsys, fixtures):
    """info --memory per type on an MLA model: the kv bytes a context allocates, K the latent's type, no V."""
    path = _path(fixtures, "glm5next-tiny")
    for t in ("f32", "q8_0", "q4_0"):
        rc, out, err = cli(monkeypatch, capsys, "info", path, "--memory", "--json", "-c", "1024", "-ctk", t)
        assert rc == 0, err
        d = json.loads(out)
        with Model(path) as m, Context(m, n_ctx=1024, options=_opts(t, "f32")) as c:
            got = c.memory_report()
        assert d["memory"]["kv"] == got["kv"] == d["memory"]["kv_k"] and d["memory"]["kv_v"] == 0
        assert d["cache_type_k"] == t
        lat = d["mla_latent"]                  # the latent in the K type, the DSA keys in f32
        assert lat["type"] == t and lat["bytes"] + lat["dsa_bytes"] == d["memory"]["kv"]
        assert lat["bytes"] == 2 * 32 // ROW[t][0] * ROW[t][1] * 1024
        # the DSA selection rows (n_ubatch x n_ctx) and kept pools are in compute
        assert lat["dsa_selection_bytes"] == 512 * 1024 and 0 < lat["dsa_pools_bytes"]
        assert lat["dsa_selection_bytes"] + lat["dsa_pools_bytes"] < d["memory"]["compute"]
