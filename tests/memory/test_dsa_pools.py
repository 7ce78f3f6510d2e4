"""GLM-5-Next's DSA indexer keeps its pooled keys across calls (layers/dsa.c, struct
tk_dsa_pools): a decode pools only the pools completed since the last call, so decode at depth
pools O(1) pools per token instead of all n / kp (issue 42 item 4).  A kept pool is used only
while its cells are still the sequence's cells at its place and no sequence op removed or moved
them (tk_dsa_forget): the bits equal a fresh context's after seq_rm, re-decoding, shifts and a
state reload.  The selection rows and the pools are in the memory estimate (compute)."""
from __future__ import annotations

import numpy as np
import pytest

from toolkit.binding import lib
from toolkit.runtime import Context, Model, memory_estimate

pytestmark = pytest.mark.native

NAME = "glm5next-tiny"
N_CTX = 512


def _n_full(hp) -> int:
    """attention layers that run an indexer of their own (the others share the last one's)"""
    return sum(1 for f, k in zip(hp.dsa_full, hp.layer_kinds) if f and k.name == "MLA")


def _fresh(m, tokens, ub=64):
    with Context(m, n_ctx=N_CTX, n_ubatch=ub) as ctx:
        return ctx.decode(tokens, logits="last")


def test_a_decode_pools_only_the_pools_it_completes(hf_f32):
    with Model(hf_f32(NAME)) as m:
        hp = m.hparams
        kp, nf = hp.dsa_kpool, _n_full(hp)
        assert kp > 0 and nf > 0
        toks = np.random.default_rng(0).integers(0, m.n_vocab, 256 + 3 * kp).astype(np.int32)
        with Context(m, n_ctx=N_CTX, n_ubatch=64) as ctx:
            ctx.decode(toks[:256])
            after_prompt = lib.tk_context_dsa_pooled(ctx.ptr)
            assert after_prompt == nf * (256 // kp)   # each pool once, though 4 ubatches saw them
            for t in toks[256:]:
                ctx.decode([int(t)])
            # 3 kp more tokens complete 3 pools (before: every call pooled all n / kp again)
            assert lib.tk_context_dsa_pooled(ctx.ptr) - after_prompt == nf * 3


@pytest.mark.parametrize("op", ["seq_rm", "shift", "state", "clear"])
def test_kept_pools_give_a_fresh_contexts_bits(hf_f32, op):
    """After an op that removes or moves cells, new tokens reuse the freed cells at the same
    positions: a stale pooled key would then pass the cells check (same cell indices) with other
    contents.  The logits equal those of a fresh context that decoded the same history."""
    with Model(hf_f32(NAME)) as m:
        rng = np.random.default_rng(1)
        a = rng.integers(0, m.n_vocab, 200).astype(np.int32)
        b = rng.integers(0, m.n_vocab, 60).astype(np.int32)
        with Context(m, n_ctx=N_CTX, n_ubatch=64) as ctx:
            ctx.memory.set_checkpoints(4)
            ctx.decode(a[:150])           # a checkpoint at 150: the recurrent layers can go back there
            ctx.decode(a[150:])
            if op == "seq_rm":
                assert ctx.memory.seq_rm(0, 150, -1)
                history = np.concatenate([a[:150], b])
            elif op == "shift":           # drop [40, 72), move the rest down (a context shift)
                assert ctx.memory.seq_rm(0, 40, 72)
                assert ctx.memory.seq_add(0, 72, -1, -32)
                history = None
            elif op == "state":
                blob = ctx.state_bytes(0)
                ctx.decode(b)             # pools over positions 200.. that the reload must drop
                ctx.load_state(blob, 0)
                history = np.concatenate([a, b])
            else:
                ctx.memory.clear()
                history = b
            if history is None:           # shifted keys: a fresh context gets the same cells from the state
                blob = ctx.state_bytes(0)
                got = ctx.decode(b)
                with Context(m, n_ctx=N_CTX, n_ubatch=64) as fresh:
                    fresh.load_state(blob, 0)
                    want = fresh.decode(b)
                assert np.array_equal(got, want), op
                return
            got = ctx.decode(b)
            want = _fresh(m, history)
        assert np.array_equal(got, want), op


def test_the_estimate_counts_the_selection_and_the_pools(hf_f32):
    with Model(hf_f32(NAME)) as m:
        hp = m.hparams
        est = memory_estimate(m, N_CTX, 2, 64, 2)
        with Context(m, n_ctx=N_CTX, n_seq_max=2, n_ubatch=64, n_threads=2) as ctx:
            got = ctx.memory_report()
        assert est == got
        kp, dI = hp.dsa_kpool, hp.idx_head_dim
        pools = _n_full(hp) * 2 * (N_CTX // kp) * (dI * 4 + kp * 4 + 4)
        with Context(m, n_ctx=N_CTX, n_seq_max=1, n_ubatch=64, n_threads=2) as one:
            smaller = one.memory_report()["compute"]
        # a second sequence adds its pools (and their headers) and nothing else of the compute
        assert got["compute"] - smaller >= pools // 2 and got["compute"] > 64 * N_CTX
