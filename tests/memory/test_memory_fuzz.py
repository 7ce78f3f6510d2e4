"""Random sequences of memory operations against an oracle that recomputes from scratch.

Each step is one of: decode tokens into a sequence, decode tokens into several sequences in
one batch, roll a sequence back (seq_rm(s, p0, -1)), seq_cp, seq_keep, whole-sequence removal,
clear, an explicit checkpoint, a whole-context state round trip, or a one-sequence state moved
to another id.  The oracle keeps each sequence's token history; every decode's logits must
equal a fresh context's logits for that history (F32), and every sequence must end where its
history ends.  The models are tests/families.py's rows with a ``fuzz`` value (the
checkpoint interval: 0 none), on our conversion, or on llama.cpp's file for ``fuzz_lc``
(KV cells, recurrent pieces, MLA's and
DSA's cached rows, sliding windows, shared blocks), plus lfm2-tiny with sliding layers
(swa_util), and the MTP blocks (mtp_util.MTP_FIXTURES).  Run under ASan/UBSan by CI (pytest -m
native).
"""
from __future__ import annotations

import pathlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from families import FIXTURES
from hypothesis_util import examples
from mtp_util import MTP_FIXTURES
from toolkit.runtime import Context, Model

pytestmark = pytest.mark.native

HF = pathlib.Path(__file__).parent.parent / "fixtures" / "hf"
N_SEQ, MAX_LEN = 3, 40
# Every context here runs ubatches of at most UB tokens: below the chunked-SSD threshold
# (tk_ssd_threshold, 32), so the token-by-token recurrence runs in the reference and in the
# rolled-back run alike - the same computation, compared bit for bit.
UB = 16
_models: dict = {}
_dirs: list = []


def model(name: str) -> Model:
    if name.startswith("llamacpp/") and name not in _models:
        _models[name] = Model(HF.parent / f"{name}.f32.gguf")
    if name.startswith("swa/") and name not in _models:
        import tempfile
        from swa_util import swa_lfm2
        _dirs.append(pathlib.Path(tempfile.mkdtemp(prefix="memfuzz")))
        pattern = (False, True, False, True) if name.endswith("-all") else (False, False, False, True)
        _models[name] = Model(swa_lfm2(_dirs[-1], 5, pattern))
    if name not in _models:
        import tempfile
        from toolkit.convert import convert
        _dirs.append(pathlib.Path(tempfile.mkdtemp(prefix="memfuzz")))
        out = _dirs[-1] / f"{name}.f32.gguf"
        convert(str(HF / name), str(out), "f32")
        _models[name] = Model(out)
    return _models[name]


@pytest.fixture(scope="module", autouse=True)
def _close_models():
    yield
    import shutil
    for m in _models.values():
        m.close()
    _models.clear()
    for d in _dirs:
        shutil.rmtree(d, ignore_errors=True)
    _dirs.clear()


seq = st.integers(0, N_SEQ - 1)
op = st.one_of(
    st.tuples(st.just("decode"), seq, st.integers(1, 9), st.integers(0, 2**16)),
    st.tuples(st.just("decode"), seq, st.just(1), st.integers(0, 2**16)),
    st.tuples(st.just("batch"), st.lists(st.tuples(seq, st.integers(1, 6), st.integers(0, 2**16)), min_size=2,
                                         max_size=N_SEQ, unique_by=lambda x: x[0])),
    st.tuples(st.just("rollback"), seq, st.floats(0, 1), st.booleans()),
    st.tuples(st.just("cp"), seq, seq),
    st.tuples(st.just("keep"), seq),
    st.tuples(st.just("rm"), seq),
    st.tuples(st.just("clear"),),
    st.tuples(st.just("checkpoint"), seq),
    st.tuples(st.just("save_load"),),
    st.tuples(st.just("move"), seq, seq),
)


def fresh(m: Model, hist: list, t: np.ndarray, h=None) -> np.ndarray:
    """Logits of tokens t after history hist (tokens, or (token, h row) pairs for an MTP block
    with h [len(t), D] for t), from a fresh context."""
    with Context(m, n_ubatch=UB, n_ctx=MAX_LEN) as ref_ctx:
        if h is None:
            return ref_ctx.decode(np.array(hist + list(t), np.int32), logits="all")[len(hist):]
        toks = [x for x, _ in hist] + list(t)
        embd = np.concatenate([np.array([r for _, r in hist], np.float32).reshape(-1, h.shape[1]), h])
        return ref_ctx.decode_batch([(np.array(toks, np.int32), 0)], logits="all", embd=[embd])[0][len(hist):]


def _rows(m: Model, seed: int, n: int):
    """An MTP block's h rows for n tokens (None for other models)."""
    if not getattr(m, "block", None):
        return None
    return np.random.default_rng(seed + 7).standard_normal((n, m.hparams.n_embd)).astype(np.float32)


def _items(t, h) -> list:
    """History entries of tokens t (with their h rows for an MTP block)."""
    return [int(x) for x in t] if h is None else list(zip((int(x) for x in t), h))


def play(m: Model, ops, every: int) -> None:
    """The ops on a context of m, each decode checked against a fresh context (module docstring).
    An MTP block's model (toolkit.runtime.mtp.MtpModel) gets random h rows with its tokens."""
    hist = [[] for _ in range(N_SEQ)]
    with Context(m, n_ubatch=UB, n_ctx=N_SEQ * MAX_LEN, n_seq_max=N_SEQ, n_checkpoints=3, checkpoint_every=every) as ctx:
        for o in ops:
            kind = o[0]
            if kind == "decode":
                _, s, n, seed = o
                n = min(n, MAX_LEN - len(hist[s]))
                if n <= 0:
                    continue
                t = np.random.default_rng(seed).integers(0, m.n_vocab, n).astype(np.int32)
                h = _rows(m, seed, n)
                got = ctx.decode_batch([(t, s)], logits="all", embd=None if h is None else [h])[0]
                ref = fresh(m, hist[s], t, h)
                assert np.array_equal(got, ref), f"{kind} seq {s}: max diff {np.abs(got - ref).max():.3e}"
                hist[s] += _items(t, h)
            elif kind == "batch":             # several sequences, one tk_decode
                parts = [(s, min(n, MAX_LEN - len(hist[s])), seed) for s, n, seed in o[1]]
                parts = [(s, np.random.default_rng(seed).integers(0, m.n_vocab, n).astype(np.int32), _rows(m, seed, n))
                         for s, n, seed in parts if n > 0]
                if not parts:
                    continue
                mtp = parts[0][2] is not None
                got = ctx.decode_batch([(t, s) for s, t, _ in parts], logits="all",
                                       embd=[h for *_, h in parts] if mtp else None)
                for g, (s, t, h) in zip(got, parts):
                    ref = fresh(m, hist[s], t, h)
                    assert np.array_equal(g, ref), f"{kind} seq {s}: max diff {np.abs(g - ref).max():.3e}"
                    hist[s] += _items(t, h)
            elif kind == "rollback":
                _, s, f, finite = o
                p0 = int(f * len(hist[s]))
                if finite:                          # [p0, far past the end): the same rollback
                    r = ctx.memory.seq_pos_max(s) + 1 if ctx.memory.seq_rm(s, p0, 10**6) else None
                else:
                    r = ctx.memory.rollback(s, p0)
                if r is not None:
                    assert r <= p0 or p0 >= len(hist[s])
                    hist[s] = hist[s][:min(r, len(hist[s]))]
            elif kind == "cp":
                if not m.hparams.recurrent_layers and o[1] != o[2]:   # a KV cache adds src's cells to dst's own:
                    ctx.memory.seq_rm(o[2], 0, -1)                     # emptied first, as llama.cpp's callers do
                ctx.memory.seq_cp(o[1], o[2])
                hist[o[2]] = list(hist[o[1]])
            elif kind == "keep":
                ctx.memory.seq_keep(o[1])
                hist = [h if i == o[1] else [] for i, h in enumerate(hist)]
            elif kind == "rm":
                assert ctx.memory.seq_rm(o[1], 0, -1)
                hist[o[1]] = []
            elif kind == "clear":
                ctx.memory.clear()
                hist = [[] for _ in range(N_SEQ)]
            elif kind == "checkpoint":
                ctx.memory.checkpoint(o[1])
            elif kind == "save_load":
                blob = ctx.state_bytes()
                ctx.memory.clear()
                ctx.load_state(blob)
                assert ctx.state_bytes() == blob
            elif kind == "move":
                ctx.load_state(ctx.state_bytes(o[1]), seq_id=o[2])
                hist[o[2]] = list(hist[o[1]])
            for s in range(N_SEQ):
                assert ctx.memory.seq_pos_max(s) == len(hist[s]) - 1, (o, s)


# tests/families.py's ``fuzz`` (our conversion) and ``fuzz_lc`` (llama.cpp's file) values, and
# the sliding-window variants of lfm2-tiny (swa_util: window 5 on layer 3, or on layers 1 and 3)
FUZZ = ([(f.name, e) for f in FIXTURES for e in f.fuzz] + [(f"llamacpp/{f.name}", e) for f in FIXTURES for e in f.fuzz_lc]
        + [("swa/lfm2", 3), ("swa/lfm2", 0), ("swa/lfm2-all", 3)])


@pytest.mark.parametrize("name,every", FUZZ)
@settings(max_examples=examples(10, 25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=1, max_size=25))
def test_random_memory_operations_match_recompute(name, every, ops):
    play(model(name), ops, every)


@pytest.mark.parametrize("name", MTP_FIXTURES)
@settings(max_examples=examples(10, 25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=1, max_size=25))
def test_mtp_block_memory_operations_match_recompute(name, ops):
    """The MTP draft's state (toolkit.runtime.mtp: the NextN block as a model of its own, its KV
    cache): the same random operations, each token with a random h row, against a fresh block."""
    from toolkit.runtime.mtp import MtpModel
    key = name + "/mtp"
    if key not in _models:
        _models[key] = MtpModel(model(name))
    play(_models[key], ops, 0)


@pytest.mark.parametrize("name", MTP_FIXTURES)
@settings(max_examples=examples(8, 20), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(masks=st.lists(st.integers(0, 7), min_size=2, max_size=12), k=st.integers(1, 3))
def test_mtp_draft_state_follows_random_accepts(name, masks, k):
    """MtpDraft in a speculative run whose drafts are right or wrong as ``masks`` says (bit j of
    the i-th draft call: draft j is the target's token): after it, the block's cache equals a
    fresh block fed the run's whole history (its drafted positions dropped, each accepted token
    kept with the main model's h)."""
    from toolkit.runtime.generate import generate
    from toolkit.runtime.mtp import MtpModel, open_mtp_draft
    from toolkit.runtime.sampling import Sampler, SamplerParams
    from toolkit.runtime.speculative import generate_speculative
    from toolkit.runtime.tokenizer import Tokenizer
    m = model(name)
    tok = Tokenizer.from_gguf(m.gguf)
    prompt = list(range(3, 14))
    with Context(m, n_ctx=64, n_ubatch=UB) as c0:
        ref = generate(c0, tok, prompt, 24, Sampler(SamplerParams(temp=0)), ignore_eos=True).tokens
    calls = []

    def pick(history, j):
        if j == 0:
            calls.append(len(history))
        i = len(history) - len(prompt) + j
        right = masks[(len(calls) - 1) % len(masks)] >> j & 1
        return ref[i] if right and i < len(ref) else (ref[i] + 1 if i < len(ref) else 0) % m.n_vocab
    with Context(m, n_ctx=64, n_ubatch=UB) as ctx:
        ctx.memory.set_draft_window(k, keep_last=False)
        d = open_mtp_draft(m, ctx, n_ctx=64, n_ubatch=UB)
        d.pick = pick
        r = generate_speculative(ctx, tok, prompt, 24, Sampler(SamplerParams(temp=0)), d, draft_max=k, ignore_eos=True)
        assert r.tokens == ref
        history = prompt + r.tokens
        toks, rows = d._todo(0, history, len(history) - 1)
        got = d.ctx.decode_batch([(toks, 0)], logits="last", embd=[np.stack(rows)])[0][-1]
        d.close()
    with Context(m, n_ctx=64, n_ubatch=UB) as c2:
        _, hs = c2.decode_batch([(history[:-1], 0)], logits="none", hidden=True)
    if name + "/mtp" not in _models:
        _models[name + "/mtp"] = MtpModel(m)
    with Context(_models[name + "/mtp"], n_ctx=64, n_ubatch=UB) as mc:
        want = mc.decode_batch([(history[1:], 0)], logits="last", embd=[hs[0]])[0][-1]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)   # other batchings: not bit-equal
