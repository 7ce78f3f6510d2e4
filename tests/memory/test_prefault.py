"""tk_context_prefault: the memory a context reports becomes resident at once, its contents
unchanged.  Without it the KV cells, states and checkpoints are untouched pages until sequences
reach them, and a server's RSS rises towards its report in steps (issue 44's soak)."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from toolkit.runtime import Context, Model

pytestmark = pytest.mark.native

QWEN35 = pathlib.Path(__file__).parent.parent / "fixtures" / "llamacpp" / "qwen35-tiny.f32.gguf"


def _rss() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_prefault_makes_the_reported_memory_resident():
    with Model(QWEN35, n_threads=1) as m:
        ctx = Context(m, n_ctx=262144, n_seq_max=4, n_ubatch=64, n_threads=1, n_checkpoints=4, checkpoint_every=64)
        try:
            r = ctx.memory_report()
            lazy = r["kv"] + r["checkpoints"]
            assert lazy > 48 << 20, r          # far above the noise of RSS
            before = _rss()
            ctx.prefault()
            grown = _rss() - before
            assert grown > 0.9 * lazy, (grown, r)
            ctx.prefault()                     # a second call touches nothing new
            assert _rss() - before < grown + (4 << 20)
        finally:
            ctx.close()


def test_prefault_keeps_the_contents():
    toks = np.arange(3, 40, dtype=np.int32)
    with Model(QWEN35, n_threads=1) as m:
        out = []
        for pre in (False, True):
            ctx = Context(m, n_ctx=256, n_seq_max=2, n_ubatch=16, n_threads=1, n_checkpoints=2, checkpoint_every=8)
            try:
                ctx.decode(toks[:30], seq_id=1)
                if pre:
                    ctx.prefault()
                out.append(ctx.decode(toks[30:], seq_id=1, logits="all"))
            finally:
                ctx.close()
        assert np.array_equal(out[0], out[1])
