"""Invariants of the memory hierarchy and the batch split, in F32.

- chunked prefill (ubatches of 1, 3, 7, all; or separate decode calls) == one-shot, bit for bit
- four sequences decoded in one batch each match their solo run (1e-6)
- a sequence reusing a freed slot starts from zero state
- a partial seq_rm refused by the recurrent cache leaves the KV cache unchanged
- seq_cp shares a state that is copied on write
Models: llama.cpp's mamba-tiny / mamba2-tiny (recurrent only) and bamba-tiny (hybrid:
Mamba-2 + attention; its RoPE layout does not matter for these invariants).
"""
from __future__ import annotations

import numpy as np
import pytest

from toolkit.errors import InputError, NativeError, ResourceError
from toolkit.runtime import Context, Model

pytestmark = pytest.mark.native

MODELS = ["mamba-tiny.f32.gguf", "mamba2-tiny.f32.gguf", "bamba-tiny.f32.gguf"]


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    import pathlib
    path = pathlib.Path(__file__).parent.parent / "fixtures" / "llamacpp" / request.param
    m = Model(path)
    yield m
    m.close()


@pytest.fixture(scope="module")
def hybrid():
    import pathlib
    m = Model(pathlib.Path(__file__).parent.parent / "fixtures" / "llamacpp" / "bamba-tiny.f32.gguf")
    yield m
    m.close()


def prompt(n: int = 24, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 512, n).astype(np.int32)


def solo(model, toks, **kw) -> np.ndarray:
    with Context(model, n_ctx=128, **kw) as ctx:
        return ctx.decode(toks, logits="all")


@pytest.mark.parametrize("n_ubatch", [1, 3, 7, 24])
def test_ubatch_split_is_bit_identical(model, n_ubatch):
    toks = prompt()
    ref = solo(model, toks, n_ubatch=512)
    got = solo(model, toks, n_ubatch=n_ubatch)
    assert np.array_equal(got, ref), f"n_ubatch={n_ubatch}: max diff {np.abs(got - ref).max():.3e}"


def test_separate_decode_calls_are_bit_identical(model):
    toks = prompt()
    ref = solo(model, toks)
    with Context(model, n_ctx=128) as ctx:
        parts = [ctx.decode(toks[a:b], logits="all") for a, b in ((0, 5), (5, 6), (6, 17), (17, 24))]
        assert ctx.memory.seq_pos_max(0) == 23
    assert np.array_equal(np.concatenate(parts), ref)


def test_four_sequences_in_one_batch_match_solo(model):
    prompts = [prompt(24, 1), prompt(7, 2), prompt(13, 3), prompt(1, 4)]
    with Context(model, n_ctx=128, n_seq_max=4, n_ubatch=16) as ctx:
        got = ctx.decode_batch([(p, s) for s, p in enumerate(prompts)], logits="all")
        nxt = [prompt(3, 10 + s) for s in range(4)]
        got2 = ctx.decode_batch([(p, s) for s, p in enumerate(nxt)], logits="all")
    for s, p in enumerate(prompts):
        ref = solo(model, np.concatenate([p, nxt[s]]))
        both = np.concatenate([got[s], got2[s]])
        err = np.abs(both - ref).max() / np.abs(ref).max()
        assert err < 1e-6, f"seq {s}: {err:.3e}"


def test_freed_slot_starts_from_zero_state(model):
    a, b = prompt(20, 5), prompt(9, 6)
    ref = solo(model, b)
    with Context(model, n_ctx=128, n_seq_max=2) as ctx:
        ctx.decode(a, seq_id=0)
        ctx.decode(prompt(4, 7), seq_id=1)
        assert ctx.memory.seq_rm(0, 0, -1)            # the whole sequence: allowed
        assert ctx.memory.seq_pos_max(0) == -1
        assert np.array_equal(ctx.decode(b, seq_id=0, logits="all"), ref)
        ctx.memory.seq_keep(0)                        # frees seq 1's cell
        assert ctx.memory.seq_pos_max(1) == -1
        assert np.array_equal(ctx.decode(b, seq_id=1, logits="all"), ref)
        ctx.memory.clear()
        assert np.array_equal(ctx.decode(b, seq_id=0, logits="all"), ref)


def test_partial_seq_rm_refused_and_memory_unchanged(model):
    toks = prompt(12, 8)
    ref = solo(model, toks)
    with Context(model, n_ctx=128) as ctx:
        ctx.decode(toks[:10])
        pmin, pmax = ctx.memory.seq_pos_min(0), ctx.memory.seq_pos_max(0)
        assert not ctx.memory.seq_rm(0, 5, -1)        # would cut the recurrent state
        assert not ctx.memory.seq_rm(0, 5, 11)        # a finite range over the end too
        # (a range ending before the last token is accepted: tests/memory/test_context_shift.py)
        assert not ctx.memory.seq_rm(0, 9, -1)        # even the last token alone
        assert not ctx.memory.seq_rm(-1, 3, -1)
        assert ctx.memory.seq_rm(0, 10, -1)           # after the end: nothing to remove
        assert (ctx.memory.seq_pos_min(0), ctx.memory.seq_pos_max(0)) == (pmin, pmax)
        # the KV cache (hybrid) and the state are untouched: decoding continues exactly
        got = ctx.decode(toks[10:], logits="all")
    assert np.array_equal(got, ref[10:])


def test_hybrid_refusal_leaves_kv_cells(hybrid):
    """In the hybrid the KV child could drop [5, 10) on its own; the recurrent child refuses,
    so nothing changes: the attention layers still see positions 5..9."""
    toks = prompt(12, 9)
    ref = solo(hybrid, toks)
    with Context(hybrid, n_ctx=64) as ctx:
        ctx.decode(toks[:10])
        assert not ctx.memory.seq_rm(0, 5, 10)
        assert ctx.memory.seq_pos_min(0) == 9 and ctx.memory.seq_pos_max(0) == 9
        assert np.array_equal(ctx.decode(toks[10:], logits="all"), ref[10:])


def test_seq_cp_shares_then_copies_on_write(model):
    p, x, y = prompt(10, 11), prompt(2, 12), prompt(3, 13)
    ref_x = solo(model, np.concatenate([p, x]))
    ref_y = solo(model, np.concatenate([p, y]))
    with Context(model, n_ctx=128, n_seq_max=3) as ctx:
        ctx.decode(p, seq_id=0)
        ctx.memory.seq_cp(0, 1)
        ctx.memory.seq_cp(0, 2)
        assert ctx.memory.seq_pos_max(1) == 9
        gy = ctx.decode(y, seq_id=1, logits="all")    # seq 1 advances: its state is copied first
        gx = ctx.decode(x, seq_id=0, logits="all")    # seq 0 still sees the shared prefix only
        gx2 = ctx.decode(x, seq_id=2, logits="all")
    assert np.array_equal(gy, ref_y[10:])
    assert np.array_equal(gx, ref_x[10:])
    assert np.array_equal(gx2, ref_x[10:])


# ---- errors ------------------------------------------------------------------------------

def test_bad_tokens_and_sequences(model):
    with Context(model, n_ctx=16, n_seq_max=2) as ctx:
        with pytest.raises(NativeError, match="token id 512"):
            ctx.decode([1, 512])
        assert ctx.memory.seq_pos_max(0) == -1        # nothing was run
        with pytest.raises(InputError):
            ctx.decode([1], seq_id=2)
        with pytest.raises(InputError):
            ctx.decode([])
        with pytest.raises(InputError):
            ctx.decode([1], logits="some")
        with pytest.raises(NativeError):
            ctx.memory.seq_cp(0, 5)


def test_kv_cache_full_is_a_resource_error(hybrid):
    with Context(hybrid, n_ctx=8) as ctx:
        ctx.decode(prompt(6))
        with pytest.raises(ResourceError, match="KV cache full"):
            ctx.decode(prompt(3))
        assert ctx.memory.seq_pos_max(0) == 5         # refused before any change
        ctx.decode(prompt(2))


def test_bad_context_params(model):
    for kw in ({"n_seq_max": 0}, {"n_seq_max": 65}, {"n_ubatch": 0}, {"n_ctx": 0}):
        with pytest.raises(NativeError):
            Context(model, **kw)


def test_model_close_closes_contexts(fixtures):
    m = Model(fixtures / "llamacpp" / "mamba-tiny.f32.gguf")
    ctx = Context(m, n_ctx=8)
    m.close()
    with pytest.raises(InputError, match="closed"):
        ctx.decode([1])


@pytest.mark.parametrize("n_threads", [2, 3])
def test_thread_count_does_not_change_logits(model, n_threads):
    toks = prompt(20, 14)
    assert np.array_equal(solo(model, toks, n_threads=n_threads), solo(model, toks, n_threads=1))


def test_ctrl_c_aborts_decode_and_drops_the_sequence(hybrid):
    """Ctrl-C (here: _thread.interrupt_main) during a long decode stops it at the next layer;
    the sequence is dropped whole and the context stays usable."""
    import _thread
    import signal
    import threading
    import time
    toks = prompt(3000, 15)
    # interrupt_main does nothing unless Python handles SIGINT: set its own handler for this
    # test (seen once in a full CI run: DID NOT RAISE, not reproduced alone; the messages
    # below say which part failed if it comes back)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    fired = []
    try:
        with Context(hybrid, n_ctx=4096, n_ubatch=1, n_threads=1) as ctx:   # 1 thread: a longer decode
            timer = threading.Timer(0.2, lambda: (fired.append(time.perf_counter()), _thread.interrupt_main()))
            t0 = time.perf_counter()
            timer.start()
            try:
                ctx.decode(toks)
            except KeyboardInterrupt:
                pass
            else:
                pytest.fail(f"decode returned after {time.perf_counter() - t0:.2f} s; the interrupt "
                            f"{'fired at %.2f s' % (fired[0] - t0) if fired else 'had not fired'}; "
                            f"SIGINT handler before the test: {before!r}")
            timer.join()
            assert time.perf_counter() - t0 < 5.0
            assert ctx.memory.seq_pos_max(0) == -1
            assert np.array_equal(ctx.decode(toks[:9], logits="all"), solo(hybrid, toks[:9]))
    finally:
        signal.signal(signal.SIGINT, before)


def test_logits_none_still_advances(model):
    toks = prompt(10, 16)
    ref = solo(model, toks)
    with Context(model, n_ctx=64) as ctx:
        out = ctx.decode(toks[:6], logits="none")
        assert out.shape == (0, model.n_vocab)
        assert ctx.memory.seq_pos_max(0) == 5
        assert np.array_equal(ctx.decode(toks[6:], logits="all"), ref[6:])
