"""The chunked forms' workspace (GDN, KDA, lightning's block form) is planned and allocated only
when a run of up to n_ubatch tokens can reach the form's threshold (layers/layer.h,
tk_chunked_work_bytes): at threshold 0 ("never", GDN's and KDA's default) or above n_ubatch
the context holds none, the estimate says so, and the kernels run their recurrence.  With the
form on, the compute figure grows to hold n_threads x the per-thread workspace (ctx->work, which
the blocked attention's workspace shares: the larger of the two), and the estimate still equals
what the context allocates."""
from __future__ import annotations

import numpy as np
import pytest

from families import BY_NAME, having
from toolkit.binding import lib
from toolkit.runtime import Context, Model, memory_estimate

pytestmark = pytest.mark.native

N_CTX, N_SEQ, N_THR = 128, 1, 2

# layer kind -> (threshold getter, setter, per-thread workspace floats from the model's hparams,
# the RuntimeOptions field of a context's own threshold)
KINDS = {
    "GDN": (lib.tk_gdn_threshold, lib.tk_gdn_set_threshold,
            lambda hp: lib.tk_gdn_work_floats(hp.d_state, hp.ssm_head_dim), "gdn_min"),
    "KDA": (lib.tk_kda_threshold, lib.tk_kda_set_threshold,
            lambda hp: lib.tk_kda_work_floats(hp.kda_head_dim, hp.kda_head_dim), "kda_min"),
    "LIGHTNING": (lib.tk_lightning_threshold, lib.tk_lightning_set_threshold,
                  lambda hp: lib.tk_lightning_work_floats(hp.head_dim), "lightning_min"),
}


def _kind(f) -> str:
    (k,) = [k for k in KINDS if k in f.layers]    # a "chunked" row has one chunked kind
    return k


ROWS = having("chunked")      # tests/families.py
NAMES = [f.name for f in ROWS]


@pytest.fixture(scope="module")
def paths(hf_f32):
    return {f.name: f.f32(hf_f32) for f in ROWS}


def attn_work(hp) -> int:
    """Bytes of the blocked attention's workspace (kernels/attn.c tk_attn_work_bytes), which the
    chunked forms share (ctx->work holds the largest of the two: they run in different layers)."""
    if hp.mla_kv_lora_rank:
        rkv, dr = hp.mla_kv_lora_rank, hp.mla_dr
        return int(lib.tk_attn_work_bytes(hp.n_head, 1, rkv + dr, rkv, N_THR))
    return max([0] + [int(lib.tk_attn_work_bytes(hp.n_head, kv, hp.head_dim, hp.head_dim, N_THR))
                      for kv in hp.n_head_kv if kv > 0])


def compute_bytes(m, n_ub):
    """(estimate, allocated) compute bytes of a context of n_ubatch n_ub"""
    est = memory_estimate(m, N_CTX, N_SEQ, n_ub, N_THR)
    with Context(m, n_ctx=N_CTX, n_seq_max=N_SEQ, n_ubatch=n_ub, n_threads=N_THR) as ctx:
        got = ctx.memory_report()
    assert est == got
    return est["compute"]


@pytest.mark.parametrize("name", NAMES)
def test_workspace_only_when_the_threshold_can_use_it(paths, name):
    get, set_, per_thread, _ = KINDS[_kind(BY_NAME[name])]
    before = get()
    try:
        with Model(paths[name]) as m:
            ws = N_THR * per_thread(m.hparams) * 4
            assert ws > 0
            set_(0)
            never = compute_bytes(m, 64)
            set_(1)
            on = compute_bytes(m, 64)
            set_(65)                    # above n_ubatch: no run can reach it
            unreachable = compute_bytes(m, 64)
            set_(64)
            reachable = compute_bytes(m, 64)
            a = attn_work(m.hparams)
        assert on - never == max(ws, a) - a and (on > never or ws <= a), (name, on, never, ws, a)
        assert unreachable == never and reachable == on
    finally:
        set_(before)


def test_the_recurrence_runs_without_the_workspace(paths):
    """A threshold turned on after the context was made (so it holds no workspace) leaves the
    recurrence in force: the same logits as at threshold 0, bit for bit (with the workspace,
    threshold 1 would run the chunked form: other bits)."""
    name = next(f.name for f in ROWS if _kind(f) == "GDN")
    get, set_, _, _ = KINDS["GDN"]
    before = get()
    tok = list(range(1, 40))
    try:
        with Model(paths[name]) as m:
            res = []
            for late in (False, True):
                set_(0)
                with Context(m, n_ctx=N_CTX, n_seq_max=N_SEQ, n_ubatch=64, n_threads=N_THR) as ctx:
                    if late:
                        set_(1)
                    res.append(ctx.decode(tok, logits="all"))
        assert np.array_equal(res[0], res[1])
    finally:
        set_(before)


@pytest.mark.parametrize("name", NAMES)
def test_the_contexts_own_threshold_plans_the_workspace(paths, name):
    """A context's threshold (RuntimeOptions -> tk_context_params, the CLI's TOOLKIT_*_MIN) plans
    the workspace as the process default does: with the default at 0 ("never"), options that turn
    the form on from 1 token give the context (and its estimate) the workspace, 0 ("never")
    none.  Failed before: the plan read only the process default, so such a context had no
    workspace and silently ran the recurrence."""
    from toolkit.runtime.options import RuntimeOptions
    get, set_, per_thread, field = KINDS[_kind(BY_NAME[name])]
    before = get()
    try:
        set_(0)
        with Model(paths[name]) as m:
            ws = N_THR * per_thread(m.hparams) * 4
            a = attn_work(m.hparams)
            never = compute_bytes(m, 64)
        with Model(paths[name], options=RuntimeOptions(**{field: 1})) as m:
            on = compute_bytes(m, 64)
        with Model(paths[name], options=RuntimeOptions(**{field: 0})) as m:
            off = compute_bytes(m, 64)
        assert on - never == max(ws, a) - a and (on > never or ws <= a) and off == never, (name, on, never, off, ws, a)
    finally:
        set_(before)
