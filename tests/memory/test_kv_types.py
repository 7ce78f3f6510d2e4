"""KV cache types (tk_context_params.type_k / type_v; RuntimeOptions.cache_type_k / _v; the CLI's
-ctk / -ctv): f32 (the default), f16, bf16, q8_0, q4_0 in ggml's block layouts.

* per type, the logits against the float32 cache's on three fixtures with head_dim a multiple
  of 32 (qwen35-tiny 32, qwen35-small 64, bamba-small 64), within a bound per type: 4x the
  worst relative L2 measured on them (f16 4.0e-4, bf16 3.3e-3, q8_0 1.0e-2, q4_0 1.5e-1 on
  qwen35-tiny; random tiny weights, so the errors are larger than on a trained model's);
* a token's logits with a typed cache are bit-identical whatever its ubatch (1, 7, 64) and the
  thread count (1, 2, 3), at depth (2300 cells: split-K at 2 and 3 threads), and the blocked
  kernel agrees with the reference kernel (both convert the rows the same way) to 1e-5 relative L2;
* the memory estimate equals what a context allocates, and the KV bytes are the type's rows
  (tk_kv_row_bytes: f16 2 bytes a value, q8_0 34 per 32, q4_0 18 per 32);
* a state blob written with one pair of types is refused by a context with another (one line
  naming both), and `run --session` names the file;
* a context shift re-rotates a quantized K (dequantize, rotate, quantize, as llama.cpp's shift):
  the continuation after it stays within the type's bound of a fresh run at the shifted positions;
* sliding windows, Zamba's shared blocks and QSA run with typed caches (estimate, state blobs);
* bad types are refused with one line (MLA's latent rows: tests/memory/test_kv_types_mla.py).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from cli_runner import cli
from toolkit.binding import lib
from toolkit.errors import InputError, NativeError, UnsupportedError
from toolkit.runtime import Context, Model, memory_estimate
from toolkit.runtime.options import RuntimeOptions

pytestmark = pytest.mark.native

TYPES = ["f16", "bf16", "q8_0", "q4_0"]
BOUND = {"f16": 2e-3, "bf16": 1.5e-2, "q8_0": 4e-2, "q4_0": 0.6}   # relative L2 against the f32 cache
ROW = {"f32": (1, 4), "f16": (1, 2), "bf16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18)}   # (values, bytes) a block
FIXTURES = ["qwen35-tiny", "qwen35-small", "bamba-small"]


def _opts(tk: str, tv: str | None = None) -> RuntimeOptions:
    return RuntimeOptions(cache_type_k=tk, cache_type_v=tv or tk)


def _path(fixtures, name: str) -> str:
    return str(fixtures / "llamacpp" / f"{name}.f32.gguf")


def _toks(m, n: int, a: int = 61, b: int = 11) -> np.ndarray:
    return ((np.arange(n, dtype=np.int64) * a + b) % m.n_vocab).astype(np.int32)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b.astype(np.float64)))


def _logits(path: str, tk: str, tv: str | None = None, n: int = 96, n_ubatch: int = 32, n_threads: int = 2):
    with Model(path, n_threads=n_threads) as m, \
            Context(m, n_ctx=n + 8, n_ubatch=n_ubatch, n_threads=n_threads, options=_opts(tk, tv)) as c:
        return c.decode(_toks(m, n), logits="all")


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("t", TYPES)
def test_logits_near_f32_cache(fixtures, name, t):
    path = _path(fixtures, name)
    ref = _logits(path, "f32")
    got = _logits(path, t)
    e = _rel(got, ref)
    assert np.isfinite(got).all()
    assert 0 < e < BOUND[t], f"{name} -ctk/-ctv {t}: relative L2 {e:.3e} against the f32 cache (bound {BOUND[t]})"


def test_k_and_v_types_apart(fixtures):
    """K and V take their own types: q8_0 K with f32 V sits between f32 and q8_0 for both."""
    path = _path(fixtures, "qwen35-tiny")
    ref, both = _logits(path, "f32"), _logits(path, "q8_0")
    k_only, v_only = _logits(path, "q8_0", "f32"), _logits(path, "f32", "q8_0")
    assert 0 < _rel(k_only, ref) < BOUND["q8_0"] and 0 < _rel(v_only, ref) < BOUND["q8_0"]
    assert not np.array_equal(k_only, v_only) and not np.array_equal(k_only, both)


def test_f32_default_unchanged(fixtures):
    """Options without cache types are the f32 cache: bit-identical logits."""
    path = _path(fixtures, "qwen35-tiny")
    with Model(path, n_threads=2) as m, Context(m, n_ctx=104, n_ubatch=32, n_threads=2) as c:
        plain = c.decode(_toks(m, 96), logits="all")
    assert np.array_equal(plain, _logits(path, "f32"))


def _deep(path: str, t: str, n_threads: int, n_ubatch: int, n_tok: int) -> np.ndarray:
    """Logits of the prompt's last 8 tokens and of 3 tokens decoded one by one after it."""
    with Model(path, n_threads=n_threads) as m, \
            Context(m, n_ctx=n_tok + 8, n_ubatch=n_ubatch, n_threads=n_threads, options=_opts(t)) as c:
        toks = _toks(m, n_tok, 37, 5)
        rows = [c.decode(toks, logits="all")[-8:]]
        for i in range(3):
            rows.append(c.decode([int(toks[i])], logits="last"))
    return np.concatenate(rows)


@pytest.mark.parametrize("t", TYPES)
def test_ubatch_and_threads_invariant(fixtures, t):
    path = _path(fixtures, "qwen35-tiny")
    base = _deep(path, t, 2, 64, 150)
    for thr, ub in ((1, 64), (3, 64), (2, 1), (2, 7)):
        assert np.array_equal(_deep(path, t, thr, ub, 150), base), f"{t}: threads {thr}, ubatch {ub}"


@pytest.mark.parametrize("t", ["f16", "q8_0"])
def test_threads_invariant_at_depth(fixtures, t):
    """2300 cells: two super-chunks, split-K at 2 and 3 threads with a typed cache."""
    path = _path(fixtures, "qwen35-tiny")
    base = _deep(path, t, 1, 512, 2300)
    for thr in (2, 3):
        assert np.array_equal(_deep(path, t, thr, 512, 2300), base), f"{t}: {thr} threads at depth"


LEVELS = [lv for lv in (lib.TK_CPU_SCALAR, lib.TK_CPU_AVX2, lib.TK_CPU_AVX512) if lv <= lib.tk_cpu_detected()]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("t", TYPES)
def test_chunk_conversion_is_to_float(t, level):
    """The blocked attention's row conversion (attn_body.h tk_attn_cvt_*: F16C, the bf16 shift,
    q8_0's q d in vectors) gives the type's to_float bit for bit, tails included (80 = 2 x 32 + 16
    values; f16 / bf16 rows of 100 with a scalar tail)."""
    from toolkit.binding import ffi
    from toolkit.runtime.options import KV_TYPES
    ty = KV_TYPES[t]
    rng = np.random.default_rng(7)
    for n in ((96, 64) if t.startswith("q") else (100, 96, 7)):
        x = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 300.0], n)).astype(np.float32)
        x[:3] = [0.0, -0.0, 6.1e-5]                          # zeros and an f16 subnormal
        row = bytearray(int(lib.tk_quant_row_size(ty, n)))
        assert lib.tk_quantize_rows(ty, ffi.from_buffer("float[]", x), ffi.from_buffer(row), 1, n, 1) == 0
        want, got = np.empty(n, np.float32), np.full(n, np.nan, np.float32)
        assert lib.tk_dequantize_row(ty, ffi.from_buffer(row), ffi.from_buffer("float[]", want), n) == 0
        lib.tk_attn_cvt_at(level, ty, ffi.from_buffer(row), ffi.from_buffer("float[]", got), n)
        assert got.tobytes() == want.tobytes(), (t, level, n)


@pytest.fixture
def reference_off():
    yield
    lib.tk_attn_set_reference(-1)


@pytest.mark.parametrize("t", TYPES)
def test_blocked_matches_reference(fixtures, t, reference_off):
    path = _path(fixtures, "qwen35-tiny")
    lib.tk_attn_set_reference(1)
    ref = _logits(path, t)
    lib.tk_attn_set_reference(0)
    got = _logits(path, t)
    assert _rel(got, ref) < 1e-5   # float reordering (f16 on qwen35-tiny: 3.3e-6, the others <= 1.4e-6 of the max)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("t", ["f16", "bf16"])
def test_direct_read_equals_converted_rows(fixtures, t, level, reference_off, at_level):
    """f16 / bf16 K and V are read by the blocked chunk directly (attn_body.h v_load_kt): the
    logits equal, bit for bit, those of the chunk over the rows converted first
    (tk_attn_set_reference(2)), at every level, in one ubatch and one token at a time."""
    at_level(level)
    path = _path(fixtures, "qwen35-tiny")
    lib.tk_attn_set_reference(2)
    want = _logits(path, t)
    lib.tk_attn_set_reference(0)
    got = _logits(path, t)
    assert got.tobytes() == want.tobytes(), (t, level)


@pytest.mark.parametrize("t", ["f32"] + TYPES)
def test_estimate_equals_allocation(fixtures, t):
    path = _path(fixtures, "bamba-small")
    with Model(path, n_threads=2) as m:
        est = memory_estimate(m, n_ctx=256, n_ubatch=64, n_threads=2, options=_opts(t))
        with Context(m, n_ctx=256, n_ubatch=64, n_threads=2, options=_opts(t)) as c:
            got = c.memory_report()
        hp = m.hparams
        per_cell = sum(hp.n_head_kv[i] for i in hp.attention_layers) * hp.head_dim
        vals, nbytes = ROW[t]
        assert got["kv_k"] == got["kv_v"] == 256 * per_cell // vals * nbytes
    assert est == got
    assert got["kv"] == got["kv_k"] + got["kv_v"]


def test_estimate_mixed_types(fixtures):
    path = _path(fixtures, "qwen35-tiny")
    with Model(path, n_threads=2) as m:
        est = memory_estimate(m, n_ctx=128, options=_opts("q4_0", "f16"))
        with Context(m, n_ctx=128, n_threads=2, options=_opts("q4_0", "f16")) as c:
            assert c.memory_report() == est
    assert est["kv_v"] * 18 == est["kv_k"] * 2 * 32   # f16: 2 bytes a value, q4_0: 18 per 32


def test_state_type_mismatch_refused(fixtures):
    path = _path(fixtures, "qwen35-tiny")
    with Model(path, n_threads=2) as m:
        with Context(m, n_ctx=64, options=_opts("q8_0", "f16")) as a:
            a.decode(_toks(m, 20))
            blob = a.state_bytes()
            ref = a.decode([7])
        with Context(m, n_ctx=64, options=_opts("f16", "f16")) as b:
            with pytest.raises(NativeError, match=r"K q8_0, V f16 in the file.*K f16, V f16") as ei:
                b.load_state(blob)
            assert "\n" not in str(ei.value)
            assert b.memory.seq_pos_max(0) == -1   # nothing changed
        with Context(m, n_ctx=64, options=_opts("q8_0", "f16")) as c:
            c.load_state(blob)
            assert np.array_equal(c.decode([7]), ref)   # same types: restored exactly
        with Context(m, n_ctx=64) as d:            # a typed blob into the f32 default, and back
            with pytest.raises(NativeError, match=r"K q8_0, V f16 in the file.*K f32, V f32"):
                d.load_state(blob)
            d.decode(_toks(m, 20))
            f32_blob = d.state_bytes()
    with Model(path, n_threads=2) as m, Context(m, n_ctx=64, options=_opts("q8_0", "f16")) as e:
        with pytest.raises(NativeError, match=r"K f32, V f32 in the file.*K q8_0, V f16"):
            e.load_state(f32_blob)


def test_session_cli_type_mismatch(monkeypatch, capsys, tmp_path, fixtures):
    path, sess = _path(fixtures, "qwen35-tiny"), str(tmp_path / "s.session")
    base = ["run", "-m", path, "--json", "--temp", "0", "-n", "3", "--tokens", "5,17,99,3,250,41,7", "--session", sess]
    rc, out, err = cli(monkeypatch, capsys, *base, "-ctk", "q8_0")
    assert rc == 0, err
    before = open(sess, "rb").read()
    rc, out, err = cli(monkeypatch, capsys, *base, "-ctk", "f16")
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1, err
    assert sess in lines[0] and "K q8_0, V f32 in the file" in lines[0] and "K f16, V f32" in lines[0], err
    assert open(sess, "rb").read() == before   # the file is left as it was
    rc, out, err = cli(monkeypatch, capsys, *base, "-ctk", "q8_0")   # the same types reuse it
    assert rc == 0 and json.loads(out)["n_reused"] > 0, err


def _shifted(m, t: str, toks, nxt, d: int, rotate: bool = True) -> np.ndarray:
    """Drop positions [4, 4 + d), shift the rest down by d (the context shift; rotate False:
    by d and back, twice the rounding), then the logits of the tokens nxt one by one."""
    with Context(m, n_ctx=96, n_threads=2, options=_opts(t)) as c:
        c.decode(toks)
        assert c.memory.seq_rm(0, 4, 4 + d)
        assert c.memory.seq_add(0, 4 + d, -1, -d)
        return np.concatenate([c.decode([x], logits="last") for x in nxt])


@pytest.mark.parametrize("t", TYPES)
def test_shift_requantizes_k(fixtures, t):
    """The shift of a typed cache dequantizes K, rotates it by -d and stores it again (llama.cpp's
    shift): the continuation stays within the type's bound of the f32 cache's shifted one (the
    recurrent layers keep what they saw, so a fresh run is no reference on these hybrids).  A K
    left unrotated is far outside it: the same tokens at positions d further on."""
    path, d, n = _path(fixtures, "qwen35-tiny"), 24, 64
    with Model(path, n_threads=2) as m:
        toks = _toks(m, n)
        nxt = [int(x) for x in _toks(m, 4, 13, 3)]
        ref = _shifted(m, "f32", toks, nxt, d)
        got = _shifted(m, t, toks, nxt, d)
        with Context(m, n_ctx=96, n_threads=2) as c:   # what no rotation would give: K as stored before the shift
            c.decode(toks)
            assert c.memory.seq_rm(0, 4, 4 + d)
            far = np.concatenate([c.decode([x], logits="last") for x in nxt])
    e, e_far = _rel(got, ref), _rel(far, ref)
    assert 0 < e < BOUND[t], f"{t}: shifted vs the f32 cache's shift {e:.3e}"
    assert e < e_far / 2 or t == "q4_0", (e, e_far)


def test_bad_type_refused():
    with pytest.raises(InputError, match=r"-ctk 'q5_0': not a KV cache type \(use one of f32, f16, bf16, q8_0, q4_0\)"):
        RuntimeOptions(cache_type_k="q5_0")
    with pytest.raises(InputError, match=r"-ctv 'F16x'"):
        RuntimeOptions(cache_type_v="F16x")


def test_block_type_needs_whole_blocks(fixtures):
    """bamba-tiny's heads are 16 wide: q8_0 / q4_0 (blocks of 32) are refused, f16 runs."""
    path = _path(fixtures, "bamba-tiny")
    with Model(path, n_threads=1) as m:
        with pytest.raises(UnsupportedError, match=r"KV cache type q8_0: head_dim 16 is not a multiple of its block \(32"):
            Context(m, n_ctx=32, options=_opts("q8_0"))
        with Context(m, n_ctx=32, options=_opts("f16")) as c:
            assert np.isfinite(c.decode([1, 2, 3])).all()


@pytest.mark.parametrize("cmd", [["run"], ["perplexity"], ["bench"], ["serve"], ["info", "--memory"]])
def test_cli_bad_type_one_line(monkeypatch, capsys, fixtures, cmd):
    path = _path(fixtures, "qwen35-tiny")
    extra = {"run": ["-n", "1", "-p", "hi"], "perplexity": ["-f", path], "bench": ["-p", "8", "-n", "0", "-r", "1"],
             "serve": [], "info": []}[cmd[0]]
    where = ["-m", path] if cmd[0] != "info" else [path]
    rc, out, err = cli(monkeypatch, capsys, cmd[0], *where, *cmd[1:], *extra, "-ctk", "q9_9")
    assert rc == 2, (rc, err)
    assert len(err.strip().splitlines()) == 1 and "q9_9" in err and "not a KV cache type" in err, err


def test_cli_run_verbose_reports_types(monkeypatch, capsys, fixtures):
    path = _path(fixtures, "qwen35-tiny")
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", path, "-n", "2", "--temp", "0", "--tokens", "5,17,99",
                       "-v", "-c", "256", "-ctk", "q8_0", "-ctv", "f16")
    assert rc == 0, err
    with Model(path) as m:
        est = memory_estimate(m, n_ctx=256, options=_opts("q8_0", "f16"))
    kv = [ln for ln in err.splitlines() if ln.strip().startswith("kv ")]
    assert kv and f"({est['kv']} bytes)" in kv[0] and "K q8_0" in kv[0] and "V f16" in kv[0], err


def test_cli_info_memory_types(monkeypatch, capsys, fixtures):
    path = _path(fixtures, "qwen35-tiny")
    rc, out, err = cli(monkeypatch, capsys, "info", path, "--memory", "--json", "-c", "1024", "-ctk", "q4_0", "-ctv", "bf16")
    assert rc == 0, err
    d = json.loads(out)
    with Model(path) as m, Context(m, n_ctx=1024, options=_opts("q4_0", "bf16")) as c:
        got = c.memory_report()
    assert d["memory"]["kv"] == got["kv"] and d["memory"]["kv_k"] == got["kv_k"]
    assert d["cache_type_k"] == "q4_0" and d["total"] == sum(d["memory"][k] for k in
                                                            ("weights", "kv", "recurrent", "checkpoints", "compute"))


@pytest.mark.parametrize("t", ["q8_0", "f16"])
def test_bench_runs_typed_cache(monkeypatch, capsys, fixtures, t):
    path = _path(fixtures, "qwen35-tiny")
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", path, "-p", "16", "-n", "2", "-r", "1", "-o", "jsonl",
                       "-ctk", t, "-ctv", t, "-d", "8")
    assert rc == 0, err
    rows = [json.loads(ln) for ln in out.splitlines() if ln.strip()]
    assert rows and all(r["type_k"] == t and r["type_v"] == t for r in rows)


def test_speculative_rollback_typed(monkeypatch, capsys, fixtures):
    """Greedy output with a draft model (rollbacks of the KV cache) equals plain decoding, with a q8_0 cache."""
    path = _path(fixtures, "qwen35-tiny")
    args = ["run", "-m", path, "--json", "--temp", "0", "-n", "12", "--tokens", "5,17,99,3,250,41", "-ctk", "q8_0",
            "-ctv", "q8_0"]
    rc, out, err = cli(monkeypatch, capsys, *args)
    assert rc == 0, err
    plain = json.loads(out)["tokens"]
    rc, out, err = cli(monkeypatch, capsys, *args, "--lookup", "--draft-max", "4")
    assert rc == 0, err
    assert json.loads(out)["tokens"] == plain
    rc, out, err = cli(monkeypatch, capsys, *args, "-md", path, "--draft-max", "3")
    assert rc == 0, err
    assert json.loads(out)["tokens"] == plain


@pytest.mark.parametrize("name,t", [("lfm3-tiny", "f16"), ("zamba2-mem2-tiny", "q8_0"), ("qwen4exp-tiny", "q8_0"),
                                    ("zamba-1head-tiny", "bf16")])
def test_other_attention_kinds(hf_f32, name, t):
    """Sliding windows (lfm3: the iSWA caches), Zamba's shared blocks, QSA's selected cells (its
    indexer keys stay f32): estimate == allocation, logits within the type's bound of the f32
    cache, and a state blob restores the exact continuation."""
    path = str(hf_f32(name))
    with Model(path, n_threads=2) as m:
        toks = _toks(m, 80)
        o = _opts(t)
        with Context(m, n_ctx=128, n_ubatch=16, n_threads=2) as c:
            ref = c.decode(toks, logits="all")
        with Context(m, n_ctx=128, n_ubatch=16, n_threads=2, options=o, n_checkpoints=2) as c:
            got = c.decode(toks, logits="all")
            assert c.memory_report() == memory_estimate(m, n_ctx=128, n_ubatch=16, n_threads=2, n_checkpoints=2, options=o)
            blob = c.state_bytes()
            nxt = c.decode([5])
            c.memory.seq_rm(0, -1, -1)
            c.load_state(blob)
            assert np.array_equal(c.decode([5]), nxt)
    assert 0 < _rel(got, ref) < BOUND[t]
