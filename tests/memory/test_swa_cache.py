"""The sliding-window KV cache (memory_kv.c TK_KV_SWA, memory_iswa.c) on a test model:
lfm2-tiny with layer 3 a window-5 sliding layer and layer 1 full (tests/swa_util.py).

- memory: at -c 4096 the sliding layer holds n_seq x (W + k + n_ckpt x (W - 1)) + n_ubatch cells
  (k: the speculative window; the W - 1 positions before each checkpoint), the full one n_ctx;
  `info --memory`, `run -v` and the C report agree;
- rollback inside what the cache holds (seq_rm, the speculative window, a conv-state checkpoint:
  the hybrid asks the sliding cache whether it holds the window where the recurrent state
  lands) is bit-identical to a recompute; past it, seq_rm answers False and nothing changes;
- sessions (state blobs, one sequence moved to another id) and seq_cp continue bit-identically;
  a blob holds only the window's cells (and the window before each recurrent checkpoint, so a
  loaded state rolls back to them exactly), so its size does not grow with the context;
- bad input: a window of 0 or below, a pattern without a window, a sliding conv layer: one line.
"""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_runner import cli
from hypothesis_util import examples
from swa_util import make_swa, swa_lfm2
from toolkit.runtime import Context, Model

pytestmark = pytest.mark.native

W = 5


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return swa_lfm2(tmp_path_factory.mktemp("swa"), W)


@pytest.fixture(scope="module")
def model(path):
    with Model(path) as m:
        yield m


def toks(n, seed=0, vocab=512):
    return np.random.default_rng(seed).integers(0, vocab, n).astype(np.int32)


def fresh(model, hist, t):
    with Context(model, n_ctx=128, n_ubatch=16) as c:
        return c.decode(np.concatenate([hist, t]).astype(np.int32), logits="all")[len(hist):]


def kv_bytes(model, cells_full, cells_swa):
    hp = model.hparams
    return sum(2 * (cells_swa if hp.swa_layers[i] else cells_full) * hp.n_head_kv[i] * hp.head_dim * 4
               for i in hp.attention_layers)


def test_memory_holds_only_the_window(monkeypatch, capsys, model, path):
    hp = model.hparams
    assert hp.n_swa == W and hp.swa_layers == [0, 0, 0, 1]
    with Context(model, n_ctx=4096, n_ubatch=512) as c:
        assert c.memory_report()["kv"] == kv_bytes(model, 4096, W + 512)
        c.decode(toks(700), logits="last")                    # longer than the sliding cache's cells
        blob1 = c.state_bytes()
        c.decode(toks(300, 1), logits="last")
        blob2 = c.state_bytes()
    kvd = hp.n_head_kv[1] * hp.head_dim * 4 * 2
    assert len(blob2) - len(blob1) == 300 * (kvd + 16)      # only the full layer's cells grow
    rc, out, err = cli(monkeypatch, capsys, "info", path, "--memory", "--json", "-c", "4096", "-np", "2", "-ub", "64",
                       "--checkpoints", "0")
    assert rc == 0, err
    rep = json.loads(out)["memory"]
    assert rep["kv"] == kv_bytes(model, 4096, 2 * W + 64)
    with Context(model, n_ctx=4096, n_seq_max=2, n_ubatch=64) as c:
        assert c.memory_report()["kv"] == rep["kv"]
        c.memory.set_draft_window(4)                          # k more kept positions per sequence
        assert c.memory_report()["kv"] == kv_bytes(model, 4096, 2 * (W + 4) + 64)
    rc, out, err = cli(monkeypatch, capsys, "info", path, "--memory", "--json", "-c", "4096", "-np", "2", "-ub", "64",
                       "--checkpoints", "0", "--draft-max", "4")
    assert rc == 0 and json.loads(out)["memory"]["kv"] == kv_bytes(model, 4096, 2 * (W + 4) + 64)
    with Context(model, n_ctx=4096, n_seq_max=2, n_ubatch=64, n_checkpoints=3) as c:
        assert c.memory_report()["kv"] == kv_bytes(model, 4096, 2 * (W + 3 * (W - 1)) + 64)
    want = kv_bytes(model, 4096, W + 4 * (W - 1) + 512)    # run's defaults: 4 checkpoints, -ub 512
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", path, "-p", "hello", "-n", "2", "--temp", "0", "-c", "4096", "-v")
    assert rc == 0, err
    line = next(ln for ln in err.splitlines() if ln.strip().startswith("kv "))
    assert f"({want} bytes)" in line, line
    rc, out, err = cli(monkeypatch, capsys, "info", path, "--memory", "-c", "4096")
    assert rc == 0 and f"({want} bytes)" in out, out


def test_rollback_to_a_checkpoint_is_exact_past_them_refused(model):
    t = toks(40)
    with Context(model, n_ctx=128, n_ubatch=16, n_checkpoints=2, checkpoint_every=8) as c:
        c.decode(t[:20], logits="last")
        c.decode(t[20:36], logits="last")
        ck = c.memory.checkpoints(0)
        assert len(ck) == 2 and ck[-1] == 35
        # back to the checkpoint before 30 (the conv state's; the sliding layer kept its window)
        r = c.memory.rollback(0, 30)
        assert r == ck[0] + 1 and c.memory.seq_pos_max(0) == ck[0]
        got = c.decode(t[r:r + 6], logits="all")
        assert np.array_equal(got, fresh(model, t[:r], t[r:r + 6]))
        h = t[:r + 6]
        # before every checkpoint: nothing holds that state: refused, nothing changes
        assert not c.memory.seq_rm(0, 3, -1) and c.memory.rollback(0, 3) is None
        assert c.memory.seq_pos_max(0) == len(h) - 1
        got = c.decode(toks(2, 8), logits="all")
        assert np.array_equal(got, fresh(model, h, toks(2, 8)))
        assert c.memory.seq_rm(0, 0, -1)                     # whole removal always works
        assert np.array_equal(c.decode(t[:6], logits="all"), fresh(model, t[:0], t[:6]))


def test_pure_kv_tail_removal_refused_past_the_window(model):
    """Without recurrent checkpoints the sliding layer holds the last W positions: one token
    back works, W back is refused."""
    t = toks(20)
    with Context(model, n_ctx=128, n_ubatch=16) as c:
        c.decode(t, logits="last")
        assert not c.memory.seq_rm(0, 20 - W, -1) and c.memory.seq_pos_max(0) == 19


def test_speculative_rollback_is_exact(model):
    t = toks(17)
    with Context(model, n_ctx=128, n_ubatch=16) as c:
        c.memory.set_draft_window(4)
        c.decode(t[:12], logits="last")
        draft = toks(5, 3)                                   # a verify call of k + 1 tokens
        c.decode(draft, logits="all", snapshots=True)
        for keep in (2, 1):                                  # keep 2 of the verify call's tokens, then 1
            c.memory.seq_rm(0, 12 + keep, -1) or pytest.fail(f"keep {keep} refused")
            assert c.memory.seq_pos_max(0) == 12 + keep - 1
            got = c.decode(t[12:15], logits="all", snapshots=True)
            assert np.array_equal(got, fresh(model, np.concatenate([t[:12], draft[:keep]]), t[12:15]))
            c.memory.seq_rm(0, 12 + keep, -1) or pytest.fail("undo refused")
            c.decode(draft[keep:], logits="last", snapshots=True)


def test_sessions_and_seq_cp_continue_exactly(model):
    t = toks(30)
    with Context(model, n_ctx=256, n_seq_max=3, n_ubatch=16) as c:
        c.decode(t, logits="last")
        whole, one = c.state_bytes(), c.state_bytes(0)
        c.memory.seq_cp(0, 1)
        got = c.decode_batch([(toks(4, 1), 0), (toks(3, 2), 1)], logits="all")
        assert np.array_equal(got[0], fresh(model, t, toks(4, 1)))
        assert np.array_equal(got[1], fresh(model, t, toks(3, 2)))
        c.load_state(one, seq_id=2)                          # one sequence, to another id
        assert np.array_equal(c.decode(toks(5, 4), seq_id=2, logits="all"), fresh(model, t, toks(5, 4)))
        assert not c.memory.seq_rm(2, 28, -1)                # a loaded window allows no rollback past it
    with Context(model, n_ctx=256, n_seq_max=3, n_ubatch=16) as c:
        c.load_state(whole)
        assert c.state_bytes() == whole
        assert np.array_equal(c.decode(toks(6, 5), logits="all"), fresh(model, t, toks(6, 5)))


def test_saved_state_rolls_back_to_its_checkpoints(model):
    """A state blob carries the window before each recurrent checkpoint as well as the one the
    next token sees, so after a load a rollback to a checkpoint (a session's split_last) is
    allowed and bit-identical to a recompute, as it is in the memory that wrote the blob."""
    t = toks(40)
    kw = dict(n_ctx=128, n_seq_max=2, n_ubatch=16, n_checkpoints=2, checkpoint_every=8)
    with Context(model, **kw) as c:
        c.decode(t[:20], logits="last")
        c.decode(t[20:36], logits="last")
        ck = c.memory.checkpoints(0)
        assert len(ck) == 2 and ck[-1] == 35
        one, whole = c.state_bytes(0), c.state_bytes()
    for blob, seq in ((one, 1), (whole, 0)):
        with Context(model, **kw) as c:
            c.load_state(blob, **({"seq_id": seq} if blob is one else {}))
            assert c.memory.checkpoints(seq) == ck
            r = c.memory.rollback(seq, 30)                   # the checkpoint before 30, and its window
            assert r == ck[0] + 1 and c.memory.seq_pos_max(seq) == ck[0]
            got = c.decode(t[r:r + 6], seq_id=seq, logits="all")
            assert np.array_equal(got, fresh(model, t[:r], t[r:r + 6]))
    with Context(model, n_ctx=128, n_ubatch=16) as c:        # no checkpoints here: the windows are extra
        c.load_state(one, seq_id=0)
        assert not c.memory.seq_rm(0, 30, -1)
        assert np.array_equal(c.decode(toks(5, 4), logits="all"), fresh(model, t[:36], toks(5, 4)))


@pytest.mark.parametrize("window,pattern,msg", [
    (0, [False, False, False, True], "a sliding window must be in [1, 2**24]"),
    (-3, [False, False, False, True], "a sliding window must be in [1, 2**24]"),
    (5, [True, False, False, False], "marks layer 0 sliding, but it is not an attention layer"),
])
def test_bad_sliding_window_is_one_line(monkeypatch, capsys, tmp_path, window, pattern, msg):
    base = pathlib.Path(swa_lfm2(tmp_path, W)).parent / "lfm2-tiny.f32.gguf"
    bad = make_swa(base, tmp_path / "bad.gguf", window, pattern)
    for args in (("info", bad, "--memory"), ("run", "-m", bad, "-p", "x", "-n", "1")):
        rc, out, err = cli(monkeypatch, capsys, *args)
        assert rc != 0 and msg in err, err
        assert len(err.strip().splitlines()) == 1, err
    if window > 0:
        return                                               # quantize reads no layer kinds
    out = tmp_path / "out.gguf"
    rc, _, err = cli(monkeypatch, capsys, "quantize", bad, str(out), "Q8_0")
    assert rc != 0 and msg in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_lfm3_memory_report_equals_info(monkeypatch, capsys, hf_f32):
    """LFM3 (window 16 on layer 4): `info --memory` (the C estimate, compute included) equals
    the C report with parallel sequences, checkpoints and a draft window (its ring's bytes are
    test_run_speculative's); the sliding layer holds 3 x (16 + 4 + 2 x 15) + 64 cells of 4096."""
    path = hf_f32("lfm3-tiny")
    monkeypatch.setenv("TOOLKIT_THREADS", "1")
    rc, out, err = cli(monkeypatch, capsys, "info", str(path), "--memory", "--json", "-c", "4096", "-np", "3",
                       "--checkpoints", "2", "-ub", "64", "--draft-max", "4")
    assert rc == 0, err
    rep = json.loads(out)["memory"]
    with Model(path, n_threads=1) as m, Context(m, n_ctx=4096, n_seq_max=3, n_ubatch=64, n_checkpoints=2,
                                                n_threads=1) as c:
        c.memory.set_draft_window(4)
        got = c.memory_report()
        hp = m.hparams
        assert got["kv"] == kv_bytes(m, 4096, 3 * (16 + 4 + 2 * 15) + 64)
    assert {k: rep[k] for k in got if k != "draft"} == {k: v for k, v in got.items() if k != "draft"}
    assert hp.swa_layers == [0, 0, 0, 0, 1]


_steps = st.lists(st.one_of(st.tuples(st.just("decode"), st.integers(0, 1), st.integers(1, 16), st.integers(0, 2**16)),
                            st.tuples(st.just("rollback"), st.integers(0, 1), st.floats(0, 1))), min_size=2, max_size=16)


@pytest.mark.parametrize("every", [3, 5])
@settings(max_examples=examples(15, 50), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps)
def test_rollbacks_match_recompute(model, every, steps):
    """Decodes and rollbacks (to a checkpoint, refused past them) in two sequences against a
    recompute of each history: the sliding layer must hold each checkpoint's window."""
    hist = [np.zeros(0, np.int32) for _ in range(2)]
    with Context(model, n_ctx=2 * 64, n_seq_max=2, n_ubatch=8, n_checkpoints=3, checkpoint_every=every) as c:
        for kind, s, *rest in steps:
            if kind == "decode":
                t = toks(min(rest[0], 60 - len(hist[s])), rest[1])
                if len(t):
                    assert np.array_equal(c.decode(t, seq_id=s, logits="all"), fresh(model, hist[s], t))
                    hist[s] = np.concatenate([hist[s], t])
            else:
                r = c.memory.rollback(s, int(rest[0] * len(hist[s])))
                if r is not None:
                    hist[s] = hist[s][:r]
            assert c.memory.seq_pos_max(s) == len(hist[s]) - 1
