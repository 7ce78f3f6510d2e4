"""toolkit.runtime.perplexity: the llama-perplexity protocol and KL divergence, on numpy models.

The runtime-backed end-to-end checks (a real GGUF) are in tests/parity/test_default_model.py.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from toolkit.errors import InputError
from toolkit.runtime.perplexity import (
    LogitsFileSource, LogitsFileWriter, chunk_nll, evaluate, kld_rows, log_softmax, mean_stderr,
    scored_range,
)


class Bigram:
    """logits[i] = table[tokens[i]]: a model with one token of context."""

    def __init__(self, table: np.ndarray):
        self.table = table.astype(np.float32)
        self.n_vocab = table.shape[1]
        self.calls: list[list[int]] = []

    def chunk_logits(self, tokens):
        self.calls.append(list(tokens))
        return self.table[np.asarray(tokens)]


def _reference_ppl(table: np.ndarray, tokens, n_ctx: int, n_chunks: int) -> tuple[float, int]:
    """Independent loop: sum of -log softmax(table[t_i])[t_{i+1}] over the scored positions."""
    total, count = 0.0, 0
    for c in range(n_chunks):
        ch = tokens[c * n_ctx:(c + 1) * n_ctx]
        for i in range(n_ctx // 2, n_ctx - 1):
            row = [float(x) for x in table[ch[i]]]
            m = max(row)
            lse = m + math.log(sum(math.exp(x - m) for x in row))
            total += lse - row[ch[i + 1]]
            count += 1
    return math.exp(total / count), count


def test_scored_range_is_second_half():
    assert scored_range(512) == (256, 511)
    assert scored_range(8) == (4, 7)


def test_uniform_model_has_perplexity_n_vocab():
    V = 37
    src = Bigram(np.zeros((V, V)))
    toks = list(np.random.default_rng(0).integers(0, V, 200))
    r = evaluate(src, toks, 16)
    assert r.ppl == pytest.approx(V, rel=1e-12)
    assert r.ppl_stderr == pytest.approx(0.0, abs=1e-9)
    assert r.n_chunks == 200 // 16 and r.n_scored == r.n_chunks * (16 - 1 - 8)


def test_matches_an_independent_loop_and_drops_the_tail():
    rng = np.random.default_rng(1)
    V, n_ctx = 11, 10
    table = (rng.normal(size=(V, V)) * 2).astype(np.float32)
    toks = list(rng.integers(0, V, 57))           # 5 chunks + a tail of 7 that is dropped
    r = evaluate(Bigram(table), toks, n_ctx)
    ref, count = _reference_ppl(table, toks, n_ctx, 5)
    assert r.n_chunks == 5 and r.n_scored == count == 5 * 4
    assert r.ppl == pytest.approx(ref, rel=1e-9)
    # chunks are decoded separately, each exactly once
    src = Bigram(table)
    evaluate(src, toks, n_ctx, max_chunks=3)
    assert src.calls == [toks[0:10], toks[10:20], toks[20:30]]


def test_stderr_is_the_standard_error_of_the_mean_nll():
    rng = np.random.default_rng(2)
    V, n_ctx = 7, 8
    table = rng.normal(size=(V, V)).astype(np.float32)
    toks = list(rng.integers(0, V, 80))
    r = evaluate(Bigram(table), toks, n_ctx)
    v = []
    for c in range(10):
        ch = toks[c * 8:(c + 1) * 8]
        v.extend(chunk_nll(log_softmax(table[ch][4:7]), ch))
    v = np.array(v)
    assert r.ppl_stderr == pytest.approx(math.exp(v.mean()) * v.std(ddof=0) / math.sqrt(len(v) - 1), rel=1e-9)


def test_bos_replaces_the_first_token_of_each_chunk():
    V = 5
    src = Bigram(np.zeros((V, V)))
    toks = [1, 2, 3, 4, 1, 2, 3, 4]
    evaluate(src, toks, 4, bos_id=0)
    assert src.calls == [[0, 2, 3, 4], [0, 2, 3, 4]]


def test_kld_closed_form_and_identity():
    p = np.log(np.array([[0.5, 0.5], [0.9, 0.1]]))
    q = np.log(np.array([[0.25, 0.75], [0.9, 0.1]]))
    kl, same = kld_rows(p, q)
    assert kl[0] == pytest.approx(0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75), rel=1e-12)
    assert kl[1] == pytest.approx(0.0, abs=1e-15)
    assert list(same) == [False, True]   # argmax of [.5,.5] is 0, of [.25,.75] is 1

    rng = np.random.default_rng(3)
    table = rng.normal(size=(9, 9))
    toks = list(rng.integers(0, 9, 64))
    r = evaluate(Bigram(table), toks, 16, base=Bigram(table), base_name="same")
    assert r.kld.mean == pytest.approx(0.0, abs=1e-12) and r.kld.top1 == 1.0


def test_kld_grows_with_the_perturbation():
    rng = np.random.default_rng(4)
    table = rng.normal(size=(50, 50)) * 3
    toks = list(rng.integers(0, 50, 640))
    base = Bigram(table)
    klds, top1 = [], []
    for eps in (0.01, 0.1, 1.0):
        r = evaluate(Bigram(table + eps * rng.normal(size=table.shape)), toks, 32, base=base)
        klds.append(r.kld.mean)
        top1.append(r.kld.top1)
    assert klds[0] < klds[1] < klds[2]
    assert top1[0] >= top1[1] >= top1[2] and top1[2] < 1.0


def test_logits_file_round_trip_equals_live_base(tmp_path):
    rng = np.random.default_rng(5)
    table = rng.normal(size=(13, 13))
    other = table + 0.3 * rng.normal(size=table.shape)
    toks = list(rng.integers(0, 13, 100))
    n_ctx = 12
    n_chunks = 100 // n_ctx
    first, last = scored_range(n_ctx)
    w = LogitsFileWriter(str(tmp_path / "base.npz"), toks[:n_chunks * n_ctx], n_ctx, 13, n_chunks * (last - first))
    evaluate(Bigram(table), toks, n_ctx, kld_writer=w)
    w.write()
    live = evaluate(Bigram(other), toks, n_ctx, base=Bigram(table))
    from_file = evaluate(Bigram(other), toks, n_ctx, base=LogitsFileSource(str(tmp_path / "base.npz")))
    assert from_file.kld.mean == pytest.approx(live.kld.mean, rel=1e-5)
    assert from_file.kld.top1 == live.kld.top1


def test_logits_file_for_another_text_is_refused(tmp_path):
    rng = np.random.default_rng(6)
    table = rng.normal(size=(13, 13))
    toks = list(rng.integers(0, 13, 48))
    w = LogitsFileWriter(str(tmp_path / "b.npz"), toks, 12, 13, 4 * 5)
    evaluate(Bigram(table), toks, 12, kld_writer=w)
    w.write()
    other = list(toks)
    other[3] = (other[3] + 1) % 13
    with pytest.raises(InputError, match="tokens differ"):
        evaluate(Bigram(table), other, 12, base=LogitsFileSource(str(tmp_path / "b.npz")), base_name="b.npz")
    with pytest.raises(InputError, match="--ctx"):
        evaluate(Bigram(table), toks, 16, base=LogitsFileSource(str(tmp_path / "b.npz")), base_name="b.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(InputError, match="junk.npz"):
        LogitsFileSource(str(tmp_path / "junk.npz"))


def test_bad_arguments():
    src = Bigram(np.zeros((4, 4)))
    with pytest.raises(InputError, match="fewer than one chunk"):
        evaluate(src, [1, 2, 3], 8, file_name="t.txt")
    with pytest.raises(InputError, match="even"):
        evaluate(src, [1] * 20, 7)
    with pytest.raises(InputError, match="n_vocab"):
        evaluate(src, [1] * 20, 8, base=Bigram(np.zeros((5, 5))), base_name="b.gguf")


def test_mean_stderr():
    m, se = mean_stderr(np.array([1.0, 2.0, 3.0, 4.0]))
    assert m == 2.5 and se == pytest.approx(np.std([1, 2, 3, 4]) / math.sqrt(3))
    assert mean_stderr(np.array([5.0])) == (5.0, 0.0)


def test_log_softmax_is_stable():
    x = np.array([[1000.0, 0.0, -1000.0]])
    lp = log_softmax(x)
    assert np.isfinite(lp[0, :2]).all() and lp[0, 0] == pytest.approx(0.0, abs=1e-12)
    assert np.exp(log_softmax(np.random.default_rng(0).normal(size=(3, 9)))).sum(1) == pytest.approx(1.0)
