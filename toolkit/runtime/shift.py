"""Context shift: generation past a full context, as llama-cli ``--context-shift`` does.

    n_discard = context_shift(ctx, seq_id=0, n_keep=4, n_past=64)   # positions now 0..63-n_discard

When a sequence holding ``n_past`` tokens (positions 0 .. n_past-1) fills the context, keep
its first ``n_keep`` tokens, drop the next ``n_discard = (n_past - n_keep) // 2`` and shift the
rest back by ``n_discard`` (ref: llama.cpp tools/completion/completion.cpp, "infinite text
generation via context shifting": seq_rm(n_keep, n_keep + n_discard) then
seq_add(n_keep + n_discard, n_past, -n_discard)).

What the memory does (toolkit/native/memory/memory_kv.c, memory_rs.c; llama.cpp "memory: Hybrid
context shift"):
  KV cache   the cells of the dropped range go; the cached K of the shifted cells is rotated
             on by -n_discard in the model's RoPE mode (NORM or NEOX, partial rotary), so
             attention sees exactly the keys a fresh run at the new positions would compute
             (up to float rounding); V is untouched.  No RoPE (Jamba): positions only.
  recurrent  the state is the state after the last token: the removal does not reach it and
             it stays as it is (it still carries the dropped tokens: "the context is already
             compressed"); only its position bookkeeping moves.  Checkpoints before the kept
             head stay valid, those in the dropped range go, later ones move with the shift.
"""
from __future__ import annotations

from toolkit.errors import InputError


def n_discard_for(n_past: int, n_keep: int) -> int:
    """Tokens a shift drops: half of those after the kept head, (n_past - n_keep) // 2
    (llama-cli's n_left / 2); 0 when nothing can go (n_keep >= n_past - 1)."""
    return max(0, (int(n_past) - int(n_keep)) // 2)


def context_shift(ctx, seq_id: int, n_keep: int, n_past: int) -> int:
    """Drop positions [n_keep, n_keep + d) of ``seq_id`` and move [n_keep + d, n_past) back
    by d = :func:`n_discard_for` (n_past, n_keep).  Returns d (the sequence then holds
    n_past - d tokens, positions contiguous from 0); 0 and nothing changed when d is 0.

    ctx: a toolkit.runtime.Context.  n_keep: tokens kept at the start (clamped to [0, n_past]).

    Raises:
        InputError: the memory refused the removal or the shift (a KV cell shared with another
            sequence); the memory is then as before the refused call.
    """
    n_keep = min(max(int(n_keep), 0), int(n_past))
    d = n_discard_for(n_past, n_keep)
    if d <= 0:
        return 0
    if not ctx.memory.seq_rm(seq_id, n_keep, n_keep + d):
        raise InputError(f"context shift: sequence {seq_id} refused the removal of positions "
                         f"[{n_keep}, {n_keep + d})")
    if not ctx.memory.seq_add(seq_id, n_keep + d, n_past, -d):
        raise InputError(f"context shift: sequence {seq_id} refused the shift of positions "
                         f"[{n_keep + d}, {n_past}) by {-d}")
    return d


def shift_tokens(tokens: list[int], n_keep: int, n_discard: int) -> list[int]:
    """The token list a sequence holds after :func:`context_shift` dropped ``n_discard`` after
    the first ``n_keep``."""
    return list(tokens[:n_keep]) + list(tokens[n_keep + n_discard:])
