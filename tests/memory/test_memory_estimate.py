"""The C memory estimate (tk_context_memory_estimate, toolkit.runtime.memory_estimate) against what
context creation allocates (tk_context_memory, Context.memory_report), on a model of every layer
kind (Mamba-1 (multi-head: Zamba), Mamba-2, attention, gated attention, GDN, short conv, parallel, Zamba2's shared
block, Zamba's, no mixer, QSA, PLE, hyper-connections; dense, MoE and ReLU² FFNs; sliding-window
attention: lfm3-tiny and lfm2-tiny with sliding layers, tests/swa_util.py) and across the
parameters each figure depends on: n_ctx (KV), n_seq_max (states), n_ubatch and threads
(scratch), checkpoints, the speculative window with and without TK_SPEC_NO_LAST (a sliding
layer's KV cells depend on n_seq_max, n_ubatch, checkpoints and the window too).

The two are computed apart: the KV and recurrent figures from the layer kinds by
tk_memory_kv_estimate / tk_memory_rs_estimate, and by the memories as they allocate (their
report); the scratch from context.c's plan, which alloc_scratch also allocates from (a buffer
allocated outside the plan, or a memory sized differently from its estimate, fails here).
"""
from __future__ import annotations

import pathlib

import pytest

from toolkit.errors import NativeError, UnsupportedError
from toolkit.runtime import Context, Model, memory_estimate
from families import names

pytestmark = pytest.mark.native

FIX = pathlib.Path(__file__).parent.parent / "fixtures"
LLAMACPP = names("estimate_lc")
CONVERTED = names("estimate")
# lfm2-tiny with layer 3 a window-5 sliding layer (a full and a sliding KV cache), and with both
# attention layers sliding (the full cache holds positions only)
SLIDING = {"swa/lfm2": (False, False, False, True), "swa/lfm2-all": (False, True, False, True)}
# (n_ctx, n_seq_max, n_ubatch, n_threads, n_checkpoints, draft window, keep_last)
PARAMS = [(300, 3, 64, 2, 2, 0, True), (64, 1, 7, 1, 0, 4, False), (1000, 2, 512, 3, 5, 3, True), (17, 4, 1, 1, 1, 0, True)]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    from toolkit.convert import convert
    d = tmp_path_factory.mktemp("estimate")
    out = {n: FIX / "llamacpp" / f"{n}.f32.gguf" for n in LLAMACPP}
    for n in CONVERTED:
        out[n] = d / f"{n}.f32.gguf"
        convert(str(FIX / "hf" / n), str(out[n]), "f32")
    from swa_util import swa_lfm2
    for n, pattern in SLIDING.items():
        out[n] = pathlib.Path(swa_lfm2(d, 5, pattern))
    out["default"] = pathlib.Path(__file__).parents[2] / "toolkit" / "data" / "default.gguf"
    return out


def allocated(m: Model, n_ctx, n_seq, n_ub, n_thr, n_ckpt, k, keep_last) -> dict[str, int]:
    with Context(m, n_ctx=n_ctx, n_seq_max=n_seq, n_ubatch=n_ub, n_threads=n_thr, n_checkpoints=n_ckpt) as ctx:
        if k:
            ctx.memory.set_draft_window(k, keep_last=keep_last)
        return ctx.memory_report()


def sliding_kv(hp, n_ctx, n_seq, n_ub, n_ckpt, k) -> int:
    """KV bytes of a model with sliding-window layers, written out (README, info --memory):
    a sliding layer holds min(n_ctx, n_seq x (W + k + n_ckpt x (W - 1)) + n_ub) cells."""
    W = hp.n_swa
    swa = min(n_ctx, n_seq * (W + k + n_ckpt * (W - 1)) + n_ub)
    return sum(2 * (swa if hp.swa_layers[i] else n_ctx) * hp.n_head_kv[i] * hp.head_dim * 4 for i in hp.attention_layers)


@pytest.mark.parametrize("name", LLAMACPP + CONVERTED + list(SLIDING) + ["default"])
def test_estimate_equals_the_allocated_report(paths, name):
    with Model(paths[name]) as m:
        hp = m.hparams
        for n_ctx, n_seq, n_ub, n_thr, n_ckpt, k, keep_last in PARAMS:
            est = memory_estimate(m, n_ctx, n_seq, n_ub, n_thr, n_ckpt, draft_window=k, keep_last=keep_last)
            got = allocated(m, n_ctx, n_seq, n_ub, n_thr, n_ckpt, k, keep_last)
            assert est == got, (name, n_ctx, n_seq, n_ub, n_thr, n_ckpt, k, keep_last)
            # the figures move with what they depend on (an estimate that ignored its inputs would
            # still equal a report it was made from)
            assert (est["kv"] > 0) == bool(hp.attention_layers) and (est["recurrent"] > 0) == bool(hp.recurrent_layers)
            assert est["checkpoints"] == n_ckpt * est["recurrent"]
            assert est["draft"] == (k + keep_last if k else 0) * est["recurrent"]
        small = memory_estimate(m, 64, 1, 8, 1)
        assert memory_estimate(m, 64, 1, 64, 1)["compute"] > small["compute"]
        if hp.swa_layers:      # the sliding layers' cells do not follow n_ctx
            for n_ctx, n_seq, n_ub, n_thr, n_ckpt, k, keep_last in PARAMS + [(64, 1, 8, 1, 0, 0, True), (128, 1, 8, 1, 0, 0, True)]:
                assert memory_estimate(m, n_ctx, n_seq, n_ub, n_thr, n_ckpt, draft_window=k)["kv"] == \
                    sliding_kv(hp, n_ctx, n_seq, n_ub, n_ckpt, k), (name, n_ctx, n_seq, n_ub, n_ckpt, k)
        elif hp.attention_layers:
            assert memory_estimate(m, 128, 1, 8, 1)["kv"] == 2 * small["kv"]


def test_estimate_refuses_what_the_context_refuses(paths):
    with Model(paths["bamba-tiny"]) as m:
        for kw, msg in (({"n_checkpoints": 1025}, "checkpoints = 1025"), ({"draft_window": 257}, "speculative window = 257"),
                        ({"n_seq_max": 65}, "n_seq_max = 65"), ({"n_ubatch": 0}, "n_ubatch = 0"),
                        ({"n_ctx": 2**24 + 1}, "n_ctx = 16777217"), ({"n_threads": 257}, "n_threads = 257"),
                        ({"n_checkpoints": -1}, "checkpoints = -1")):
            with pytest.raises(NativeError, match=msg):
                memory_estimate(m, **kw)


def test_estimate_needs_no_room_for_the_context(paths):
    """Nothing is allocated: the largest context is a figure (where tk_context_new refuses it
    against the machine's RAM, from the same estimate, naming its size)."""
    import os
    from toolkit.errors import ResourceError
    with Model(paths["qwen4exp-tiny"]) as m:
        big = memory_estimate(m, 2**24, 64, 65536, 256, 1024, draft_window=256)
        assert big["checkpoints"] == 1024 * big["recurrent"] and big["kv"] == 2**24 // 64 * memory_estimate(m, 64)["kv"]
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        if big["kv"] + big["recurrent"] + big["compute"] > ram:   # else the context would be made: not here
            with pytest.raises(ResourceError, match="context needs"):
                Context(m, n_ctx=2**24, n_seq_max=64, n_ubatch=65536, n_threads=256)


def test_unsupported_window_is_refused_alike():
    """tk_memory_rs_estimate refuses a window as set_spec_window does (every piece of today's
    kinds snapshots per token, so this only checks that a window of 0 is never refused)."""
    with Model(FIX / "llamacpp" / "mamba-tiny.f32.gguf") as m:
        try:
            memory_estimate(m, 64, draft_window=2)
        except UnsupportedError as e:     # pragma: no cover - no such kind today
            with Context(m, n_ctx=64) as ctx, pytest.raises(UnsupportedError, match=str(e).split(":")[0]):
                ctx.memory.set_draft_window(2)
        assert memory_estimate(m, 64, draft_window=0)["draft"] == 0
