"""Context shift on the hybrid memory (toolkit/runtime/shift.py; memory_kv.c, memory_rs.c).

- K re-rotation: on an attention-only model (a hybrid fixture whose recurrent layers are
  neutralised: their output projection ssm_out zeroed, so they add nothing to the residual
  stream; attention layers after the first neutralised the same way, see attention_only),
  the logits after a shift equal a fresh run over the kept tokens at their new
  positions within 1e-5, for NORM partial (Bamba, n_rot 8 of 16), NORM full (the same file
  with rope.dimension_count = head_dim), NEOX partial (qwen35 16 of 32, qwen3next 4 of 16),
  no RoPE (Jamba: positions only) and RoPE scaling (Falcon-H1 yarn, OLMo-Hybrid linear)
- every runnable hybrid fixture family decodes 500 tokens in a 64-token context, shifting as
  often as needed: no error, no NaN, the KV positions 0..n-1 exactly once and the recurrent
  state at n-1 after every shift; the state saved after the third shift reloads into a fresh
  context (blob and session file) and continues with bit-identical logits
- generate(context_shift=True) counts its shifts and holds the tokens it says it holds
- a middle removal on pure Mamba is accepted and changes nothing; a tail removal with no
  checkpoint is still refused with memory unchanged
Models: converted at test time from tests/fixtures/hf/* (F32).
"""
from __future__ import annotations

import shutil
import struct

import numpy as np
import pytest

from toolkit.runtime import Context, Model
from toolkit.runtime.shift import context_shift, n_discard_for, shift_tokens
from families import names

pytestmark = pytest.mark.native

HYBRIDS = names("shift")
UB = 16


def toks(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 512, n).astype(np.int32)


def attention_only(src, dst, n_rot: int | None = None):
    """Copy the GGUF ``src`` to ``dst`` with every ``*.ssm_out.weight`` zeroed (the recurrent
    layers then add nothing) and the ``attn_output.weight`` of every attention layer but the
    first zeroed too, and, with ``n_rot``, the architecture's ``rope.dimension_count`` set to
    it.  Returns dst.

    One attention layer is left because a shift is exact only for what it changes: the K
    rotation.  A later attention layer's cached K and V were computed from hidden states that
    had attended to the dropped tokens, so a fresh run differs there (in llama.cpp too); the
    first attention layer's K and V depend on their own token only."""
    import gguf
    shutil.copyfile(src, dst)
    r = gguf.GGUFReader(dst, "r+")
    n, attn = 0, sorted({int(t.name.split(".")[1]) for t in r.tensors if t.name.endswith("attn_output.weight")})
    for t in r.tensors:
        if t.name.endswith("ssm_out.weight") or (t.name.endswith("attn_output.weight") and
                                                  int(t.name.split(".")[1]) != attn[0]):
            t.data[...] = 0
            n += 1
    assert n > 0 and attn
    if n_rot is not None:
        arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
        f = r.fields[f"{arch}.rope.dimension_count"]
        f.parts[f.data[0]][0] = n_rot
    del r
    return dst


def memory_positions(blob: bytes) -> tuple[list[int], list[tuple[int, int]]]:
    """(KV cell positions, recurrent (first, last) positions) of a context state blob
    (layout: toolkit/native/memory/state.c)."""
    kv, rs = [], []
    o = 32
    while o < len(blob) - 4:
        tag, _, n = struct.unpack_from("<IIQ", blob, o)
        q, end = o + 16, o + 16 + n
        if tag == 1:
            n_layer, n_cells = struct.unpack_from("<II", blob, q)
            dims = struct.unpack_from(f"<{n_layer}I", blob, q + 8)
            q += 8 + 4 * n_layer
            # a cell's bytes from the section's size: K and V of `dims` floats each, but a layer
            # kind may keep no V (MLA's latent) or a third array (QSA), which the header does not say
            cell = (end - q) // n_cells if n_cells else 16 + 8 * sum(dims)
            for _ in range(n_cells):
                kv.append(struct.unpack_from("<i", blob, q)[0])
                q += cell
        elif tag == 2:
            n_states, _, cell_n = struct.unpack_from("<IIQ", blob, q)
            q += 16
            for _ in range(n_states):
                last, first = struct.unpack_from("<ii", blob, q)
                rs.append((first, last))
                q += 16 + 4 * cell_n
        o = end
    return kv, rs


def assert_contiguous(ctx, n_past: int, model: Model) -> None:
    kv, rs = memory_positions(ctx.state_bytes())
    if model.hparams.attention_layers:
        assert sorted(kv) == kv == list(range(n_past))
    if len(model.hparams.attention_layers) < model.hparams.n_layer:
        assert len(rs) == 1 and rs[0][1] == n_past - 1 and 0 <= rs[0][0] <= rs[0][1]
    assert ctx.memory.seq_pos_max(0) == n_past - 1


# ---- K re-rotation -----------------------------------------------------------------------

ROTARY = [("bamba-tiny", None, "norm-partial"), ("bamba-tiny", 16, "norm-full"),
          ("qwen35-tiny", None, "neox-partial"), ("qwen3next-tiny", None, "neox-partial-4"),
          ("jamba-tiny", None, "none"), ("granitehybrid-moe-tiny", None, "none-moe"),
          # RoPE scaling (rope.scaling.*): the cached K turns by delta at the scaled frequencies, and
          # yarn's cos / sin scale is not applied again (tk_attention_rope_shift)
          ("falconh1-yarn-tiny", None, "yarn"), ("olmohybrid-linear-tiny", None, "linear"),
          ("qwen3next-yarn-tiny", None, "yarn-neox-partial"), ("bamba-yarn-tiny", None, "yarn-norm-partial"),
          ("granitehybrid-linear-tiny", None, "linear-moe"), ("laramini-yarn-tiny", None, "yarn-sliding-only")]


@pytest.mark.parametrize("name,n_rot,kind", ROTARY, ids=[r[2] for r in ROTARY])
def test_shift_equals_fresh_run_attention_only(hf_f32, tmp_path, name, n_rot, kind):
    path = attention_only(hf_f32(name), tmp_path / f"{name}.attn.gguf", n_rot)
    t, x = toks(40, 21), toks(6, 22)
    n_keep = 4
    d = n_discard_for(40, n_keep)
    with Model(path) as m:
        hp = m.hparams
        assert (hp.n_rot, hp.use_rope) == ((n_rot or hp.n_rot), not kind.startswith("none"))
        with Context(m, n_ctx=64, n_ubatch=UB) as ctx:
            ctx.decode(t, logits="none")
            assert context_shift(ctx, 0, n_keep, 40) == d == 18
            assert_contiguous(ctx, 40 - d, m)
            got = ctx.decode(x, logits="all")
        with Context(m, n_ctx=64, n_ubatch=UB) as ctx:
            ref = ctx.decode(np.concatenate([t[:n_keep], t[n_keep + d:], x]), logits="all")[-len(x):]
    err = float(np.max(np.abs(got - ref)))
    print(f"{kind}: max |shifted - fresh| = {err:.3g} (tolerance 1e-5)")
    assert err <= 1e-5


LFM3_LAYERS = [("lfm3-tiny", 2, "proportional"), ("lfm3-tiny", 4, "sliding"),
               # rope.scaling.* on the full layer (yarn over the whole head; proportional's factor as linear),
               # and the sliding layer unscaled beside it
               ("lfm3-yarn-tiny", 2, "full-yarn"), ("lfm3-yarn-tiny", 4, "sliding-beside-yarn"),
               ("lfm3-propscale-tiny", 2, "proportional-linear")]


@pytest.mark.parametrize("name,keep_layer,kind", LFM3_LAYERS, ids=[r[2] for r in LFM3_LAYERS])
def test_shift_equals_fresh_run_lfm3_per_layer_rope(hf_f32, tmp_path, name, keep_layer, kind):
    """LFM3: a cached K is re-rotated with its own layer's RoPE: the full layer's proportional
    one (only the first pairs turn) or the sliding layer's base (memory_kv.c seq_add through
    tk_attention_rope).  Only attention layer ``keep_layer`` adds anything (the conv layers'
    out_proj and the other attention layer's output are zeroed), as attention_only does."""
    import gguf
    path = tmp_path / "lfm3.attn.gguf"
    shutil.copyfile(hf_f32(name), path)
    r = gguf.GGUFReader(path, "r+")
    for t in r.tensors:
        if t.name.endswith("shortconv.out_proj.weight") or (t.name.endswith("attn_output.weight") and
                                                             not t.name.startswith(f"blk.{keep_layer}.")):
            t.data[...] = 0
    del r
    t, x = toks(40, 21), toks(6, 22)
    with Model(path) as m:
        with Context(m, n_ctx=64, n_ubatch=UB) as ctx:
            ctx.decode(t, logits="none")
            d = context_shift(ctx, 0, 4, 40)
            got = ctx.decode(x, logits="all")
        with Context(m, n_ctx=64, n_ubatch=UB) as ctx:
            ref = ctx.decode(np.concatenate([t[:4], t[4 + d:], x]), logits="all")[-len(x):]
    err = float(np.max(np.abs(got - ref)))
    print(f"lfm3 {kind}: max |shifted - fresh| = {err:.3g} (tolerance 1e-5)")
    assert err <= 1e-5


def test_recurrent_part_keeps_the_dropped_tokens(hf_f32):
    """Without the neutralising, the state still carries the dropped tokens: not a fresh run."""
    t, x = toks(40, 21), toks(6, 22)
    with Model(hf_f32("bamba-tiny")) as m:
        with Context(m, n_ctx=64, n_ubatch=UB) as ctx:
            ctx.decode(t, logits="none")
            d = context_shift(ctx, 0, 4, 40)
            got = ctx.decode(x, logits="all")
        with Context(m, n_ctx=64, n_ubatch=UB) as ctx:
            ref = ctx.decode(np.concatenate([t[:4], t[4 + d:], x]), logits="all")[-len(x):]
    assert np.max(np.abs(got - ref)) > 1e-3


# ---- long generation in a small context ------------------------------------------------

def _greedy(row: np.ndarray) -> int:
    return int(np.argmax(row))


@pytest.mark.parametrize("name", HYBRIDS + ["mamba2-tiny"])
def test_500_tokens_in_64_with_shifts_and_session(hf_f32, tmp_path, name):
    """As ``toolkit run -c 64 --context-shift --keep 4 -n 500 --ignore-eos`` (greedy; EOS is
    never special here): every shift leaves contiguous memory; the third one is saved."""
    from toolkit.runtime.session import restore_session, save_session
    n_ctx, n_keep, n_gen = 64, 4, 500
    prompt = toks(10, 31)
    params = dict(n_ctx=n_ctx, n_ubatch=UB, n_checkpoints=4, checkpoint_every=16)
    with Model(hf_f32(name)) as m, Context(m, **params) as ctx:
        held = [int(v) for v in prompt]
        row = ctx.decode(prompt)[-1]
        n_past, shifts, saved, after = len(prompt), 0, None, []
        for _ in range(n_gen):
            tok = _greedy(row)
            if n_past >= n_ctx:
                d = context_shift(ctx, 0, n_keep, n_past)
                assert d == (n_past - n_keep) // 2 > 0
                held = shift_tokens(held, n_keep, d)
                n_past -= d
                shifts += 1
                assert_contiguous(ctx, n_past, m)
                if shifts == 3:
                    saved = (ctx.state_bytes(), list(held), tok)
                    save_session(ctx, tmp_path / "s.session", held)
            row = ctx.decode([tok])[-1]
            assert np.isfinite(row).all()
            held.append(tok)
            n_past += 1
            if saved is not None and len(after) < 20:
                after.append(row.copy())
        assert shifts == 1 + (n_gen + len(prompt) - n_ctx - 1) // ((n_ctx - n_keep) // 2)
        assert_contiguous(ctx, n_past, m)
    blob, held3, tok3 = saved
    with Model(hf_f32(name)) as m:
        with Context(m, **params) as ctx:
            ctx.load_state(blob)
            assert ctx.state_bytes() == blob
            again, tok = [], tok3
            for _ in range(len(after)):
                again.append(ctx.decode([tok])[-1])
                tok = _greedy(again[-1])
        assert len(after) == 20 and all(np.array_equal(a, b) for a, b in zip(after, again))
        with Context(m, **params) as ctx:   # the session file: the held tokens and the state
            n_reused, _ = restore_session(ctx, tmp_path / "s.session", held3 + [tok3])
            assert n_reused == len(held3)
            assert np.array_equal(ctx.decode([tok3])[-1], after[0])


# ---- removal rules, checkpoints across a shift -------------------------------------------

@pytest.mark.parametrize("name", ["mamba-tiny", "mamba2-tiny"])
def test_middle_removal_on_pure_mamba_changes_nothing(hf_f32, name):
    a, x = toks(30, 41), toks(5, 42)
    with Model(hf_f32(name)) as m:
        with Context(m, n_ctx=64, n_ubatch=UB) as ctx:
            ctx.decode(a, logits="none")
            blob = ctx.state_bytes()
            assert ctx.memory.seq_rm(0, 4, 20)            # ends before the last token: accepted
            assert ctx.state_bytes() == blob               # the state and its position as they were
            assert not ctx.memory.seq_rm(0, 10, -1)        # a tail without a checkpoint: refused
            assert ctx.state_bytes() == blob
            got = ctx.decode(x, logits="all")
        with Context(m, n_ctx=64, n_ubatch=UB) as ctx:
            ref = ctx.decode(np.concatenate([a, x]), logits="all")[-len(x):]
    assert np.array_equal(got, ref)


@pytest.mark.parametrize("name", ["bamba-tiny", "qwen35-tiny", "mamba2-tiny"])
def test_checkpoints_across_a_shift(hf_f32, name):
    """Checkpoints before the kept head stay, those in the dropped range go, later ones move
    with the shift; rolling back to a moved one leaves both children at the same position and
    the KV cells contiguous."""
    a, x = toks(40, 51), toks(6, 52)
    with Model(hf_f32(name)) as m, Context(m, n_ctx=64, n_ubatch=UB, n_checkpoints=8, checkpoint_every=8) as ctx:
        ctx.decode(a, logits="none")
        assert ctx.memory.checkpoints(0) == [7, 15, 23, 31, 39]
        assert context_shift(ctx, 0, 10, 40) == 15       # drop [10, 25), 25.. -> 10..
        assert ctx.memory.checkpoints(0) == [7, 16, 24]  # 7 kept, 15 and 23 gone, 31 and 39 moved
        assert_contiguous(ctx, 25, m)
        assert ctx.memory.rollback(0, 20) == 17          # newest checkpoint before 20 is 16
        assert_contiguous(ctx, 17, m)
        assert np.isfinite(ctx.decode(x, logits="all")).all()
        assert ctx.memory.rollback(0, 9) == 8            # the kept head's checkpoint: exact
        got = ctx.decode(x, logits="all")
    with Model(hf_f32(name)) as m, Context(m, n_ctx=64, n_ubatch=UB) as ctx:
        assert np.array_equal(got, ctx.decode(np.concatenate([a[:8], x]), logits="all")[-len(x):])


def test_generate_shifts_and_holds_what_it_says(hf_f32):
    from toolkit.runtime.generate import generate
    from toolkit.runtime.sampling import Sampler, SamplerParams
    from toolkit.runtime.tokenizer import Tokenizer

    with Model(hf_f32("qwen35-tiny")) as m, Context(m, n_ctx=32, n_ubatch=UB) as ctx:
        tok = Tokenizer.from_gguf(m.gguf)
        prompt = [int(t) for t in toks(8, 61)]
        res = generate(ctx, tok, prompt, 100, Sampler(SamplerParams(temp=0)), ignore_eos=True,
                       context_shift=True, n_keep=3)
        assert res.stop_reason == "n_predict" and len(res.tokens) == 100
        # the 33rd token needs a shift: 32 -> 32 - 14 = 18, then one every 14 tokens
        assert res.n_shifts == 1 + (8 + 99 - 32 - 1) // 14
        assert len(res.held_tokens) == ctx.memory.seq_pos_max(0) + 1
        assert res.held_tokens[:3] == prompt[:3] and res.held_tokens[-5:] == res.tokens[-6:-1]
        assert_contiguous(ctx, len(res.held_tokens), m)
    with Model(hf_f32("qwen35-tiny")) as m, Context(m, n_ctx=32, n_ubatch=UB) as ctx:
        res = generate(ctx, Tokenizer.from_gguf(m.gguf), prompt, 100, Sampler(SamplerParams(temp=0)), ignore_eos=True)
        assert res.stop_reason == "ctx_full" and res.n_shifts == 0


def test_generate_interrupted_after_a_decode_holds_what_the_memory_holds(hf_f32, tmp_path):
    """Ctrl-C that lands after a generation decode finished (the memory took the token) but
    before generate() counted it: held_tokens must still match the memory, or saving the
    session after a shift fails ("sequence 0 holds 39 tokens, 38 given")."""
    from toolkit.runtime.generate import generate
    from toolkit.runtime.sampling import Sampler, SamplerParams
    from toolkit.runtime.session import save_session
    from toolkit.runtime.tokenizer import Tokenizer

    with Model(hf_f32("qwen35-tiny")) as m, Context(m, n_ctx=32, n_ubatch=UB) as ctx:
        real, calls = ctx.decode, []

        def decode_then_interrupt(tokens, **kw):
            out = real(tokens, **kw)
            calls.append(len(tokens))
            if len(calls) == 40:          # past the first shifts (one every 14 tokens from 32)
                raise KeyboardInterrupt
            return out

        ctx.decode = decode_then_interrupt
        prompt = [int(t) for t in toks(8, 62)]
        res = generate(ctx, Tokenizer.from_gguf(m.gguf), prompt, 100, Sampler(SamplerParams(temp=0)),
                       ignore_eos=True, context_shift=True, n_keep=3)
        assert res.stop_reason == "interrupted" and res.n_shifts >= 1
        assert len(res.held_tokens) == ctx.memory.seq_pos_max(0) + 1
        assert res.held_tokens[-1] == res.tokens[-1]
        save_session(ctx, tmp_path / "s.session", res.held_tokens)


@pytest.mark.parametrize("name,scaling", [("bailinghybrid-tiny", 0), ("bailinghybrid-yarn-tiny", 2)])
def test_shift_equals_fresh_run_ling3_mla_rope(hf_f32, tmp_path, name, scaling):
    """Ling 3 (bailingmoe3): MLA caches k_rot after its interleaved RoPE, so a shift rotates the
    cached k_rot (memory_kv.c kv_seq_add, hp.mla_rope), at rope.scaling.*'s frequencies without the
    yarn cos / sin factor again (bailinghybrid-yarn-tiny).  As attention_only() does for the other
    families: every KDA layer's and every MLA layer's but the first one's attn_output zeroed, so
    the shifted run must equal a fresh run of the kept tokens.  Seen failing with the k_rot
    rotation turned off (max |diff| 0.15 against 1e-5)."""
    import gguf
    path = tmp_path / "ling.attn.gguf"
    shutil.copyfile(hf_f32(name), path)
    r = gguf.GGUFReader(path, "r+")
    for t in r.tensors:
        if t.name.endswith("attn_output.weight") and t.name.split(".")[1] != "1":   # layer 1: the first MLA
            t.data[...] = 0
    del r
    t, x = toks(40, 31), toks(6, 32)
    n_keep = 4
    d = n_discard_for(40, n_keep)
    with Model(path) as m:
        assert m.hparams.mla_rope == 1 and m.hparams.attention_layers == [1, 3]
        assert m.hparams.rope_scaling_type == scaling
        with Context(m, n_ctx=64, n_ubatch=UB) as ctx:
            ctx.decode(t, logits="none")
            assert context_shift(ctx, 0, n_keep, 40) == d == 18
            got = ctx.decode(x, logits="all")
        with Context(m, n_ctx=64, n_ubatch=UB) as ctx:
            ref = ctx.decode(np.concatenate([t[:n_keep], t[n_keep + d:], x]), logits="all")[-len(x):]
    err = float(np.max(np.abs(got - ref)))
    print(f"{name} mla rope: max |shifted - fresh| = {err:.3g} (tolerance 1e-5)")
    assert err <= 1e-5
