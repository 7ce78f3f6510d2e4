"""Session files: a sequence's memory plus the tokens it holds, for prompt-cache reuse.

    n_reused = restore_session(ctx, "chat.session", prompt_ids)   # 0 when nothing matches
    ... decode prompt_ids[n_reused:] ...
    save_session(ctx, "chat.session", fed_ids)

Layout (little-endian): ``b"TKSESS\\0\\0"``, u32 version (1), u32 n_tokens, i32 tokens[n_tokens],
u32 CRC-32 of everything before it, then a one-sequence state blob of sequence 0 (its own
magic, version, model fingerprint and checksum: toolkit/native/memory/state.c).

Reuse rule: the saved tokens and the new prompt share a prefix of ``k`` tokens; the state is
restored and rolled back to ``min(k, len(prompt) - 1)`` (at least one prompt token is decoded,
for its logits).  A recurrent state rolls back to its newest checkpoint at or before that point
(the gap is re-fed), so ``n_reused`` may be smaller than ``k``.
"""
from __future__ import annotations

import os
import struct
import zlib
from typing import Sequence

from toolkit.errors import InputError, NativeError, ResourceError

MAGIC = b"TKSESS\0\0"
VERSION = 1
_HEAD = struct.Struct("<8sII")


def save_session(ctx, path: str | os.PathLike[str], tokens: Sequence[int], seq_id: int = 0,
                 inputs: tuple[str, ...] = ()) -> int:
    """Write ``tokens`` (the ids sequence ``seq_id`` holds, in order) and its state to ``path``
    through atomic_output.  Returns the bytes written.

    Raises:
        InputError: ``tokens`` does not match the sequence's length, or ``path`` is one of
            ``inputs`` (the model file).
    """
    from toolkit.gguf_io import atomic_output
    n = ctx.memory.seq_pos_max(seq_id) + 1
    if n != len(tokens):
        raise InputError(f"session {path}: sequence {seq_id} holds {n} tokens, {len(tokens)} given")
    body = _HEAD.pack(MAGIC, VERSION, len(tokens)) + struct.pack(f"<{len(tokens)}i", *[int(t) for t in tokens])
    data = body + struct.pack("<I", zlib.crc32(body)) + ctx.state_bytes(seq_id)
    with atomic_output(os.fspath(path), inputs=inputs) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
    return len(data)


def read_session(path: str | os.PathLike[str]) -> tuple[list[int], bytes]:
    """(tokens, state blob) of a session file.

    Raises:
        InputError: unreadable, not a session file, newer version, truncated or corrupt
            token list (the state blob is checked when it is restored).
    """
    p = os.fspath(path)
    try:
        with open(p, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise InputError(f"session {p}: {e.strerror or e}") from None
    if len(data) < _HEAD.size + 4 or data[:8] != MAGIC:
        raise InputError(f"session {p}: not a toolkit session file")
    _, version, n = _HEAD.unpack_from(data)
    if version != VERSION:
        raise InputError(f"session {p}: format version {version}, this build reads {VERSION}")
    end = _HEAD.size + 4 * n
    if len(data) < end + 4:
        raise InputError(f"session {p}: truncated ({len(data)} bytes, token list needs {end + 4})")
    (crc,) = struct.unpack_from("<I", data, end)
    if zlib.crc32(data[:end]) != crc:
        raise InputError(f"session {p}: token list checksum mismatch (corrupt)")
    tokens = list(struct.unpack_from(f"<{n}i", data, _HEAD.size))
    return tokens, data[end + 4:]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def restore_session(ctx, path, prompt: Sequence[int], seq_id: int = 0) -> tuple[int, str]:
    """Restore the session at ``path`` into ``seq_id`` (which is emptied first) and roll it back
    to the part ``prompt`` shares.  Returns (n_reused, note): the first ``n_reused`` prompt
    tokens are in the memory; ``note`` says why nothing was reused ("" when something was).
    A missing file reuses nothing; one too large for this context reuses nothing and the note
    names the reason (the memory of ``seq_id`` is then empty).  The whole file is checked even
    when the prompt shares nothing with it.

    Raises:
        InputError: the file exists but is not a readable session file, it is truncated or
            corrupt (token list or state blob), or it was written for another model: the
            caller must not overwrite it.
    """
    ctx.memory.seq_rm(seq_id, 0, -1)
    if not os.path.exists(os.fspath(path)):
        return 0, "no session file yet"
    tokens, blob = read_session(path)
    try:
        ctx.load_state(blob, seq_id=seq_id)   # checks the whole blob before it changes anything
    except ResourceError as e:
        return 0, f"state not restored: {e}"
    except NativeError as e:
        if "written for another model" in str(e):   # state.c checks the fingerprint after the checksum
            raise InputError(f"session {os.fspath(path)}: written for another model; it is left as "
                             f"it is (give another --session file, or delete this one)") from None
        raise InputError(f"session {os.fspath(path)}: {e}") from None
    held = ctx.memory.seq_pos_max(seq_id) + 1
    if held != len(tokens):
        ctx.memory.seq_rm(seq_id, 0, -1)
        raise InputError(f"session {os.fspath(path)}: the state holds {held} tokens, "
                         f"the token list {len(tokens)} (corrupt)")
    k = common_prefix(tokens, prompt)
    target = min(k, len(prompt) - 1)
    if target <= 0:
        ctx.memory.seq_rm(seq_id, 0, -1)
        return 0, "the prompt shares no prefix with the session"
    r = ctx.memory.rollback(seq_id, target)
    if r is None or r <= 0:
        ctx.memory.seq_rm(seq_id, 0, -1)
        return 0, f"no checkpoint at or before the shared prefix of {k} tokens"
    return r, ""


class Conversation:
    """A multi-turn token history on one sequence, with rewinds (regenerate an answer, edit a
    turn) that reuse the memory instead of recomputing it.

        conv = Conversation(ctx)                 # ctx made with n_checkpoints >= 4 or so
        lg = conv.feed(user_ids)                 # float32 [len(user_ids), V]
        lg = conv.feed([tok])                    # one generated token at a time
        lg = conv.rewind(p, logits=True)         # back to tokens[:p]; [1, V] logits of p - 1

    feed() of several tokens decodes the last one in a call of its own and checkpoints after
    it, so the recurrent state has snapshots one token before and at the end of every turn;
    rewind(p) rolls back to the newest snapshot before p (before p - 1 with logits=True) and
    re-feeds the gap; with no usable snapshot it recomputes the sequence from position 0
    (``n_recomputed`` counts those tokens).  Logits equal a fresh run of the same history bit
    for bit (tests/memory/test_multiturn.py).
    """

    def __init__(self, ctx, seq_id: int = 0):
        self.ctx, self.seq_id = ctx, int(seq_id)
        self.tokens: list[int] = []
        self.n_recomputed = 0
        ctx.memory.seq_rm(self.seq_id, 0, -1)

    def feed(self, tokens: Sequence[int]):
        """Append ``tokens``; returns their float32 logits [len(tokens), V]."""
        import numpy as np
        toks = [int(t) for t in tokens]
        if not toks:
            raise InputError("Conversation.feed: no tokens")
        if len(toks) == 1:
            out = self.ctx.decode(toks, seq_id=self.seq_id, logits="all")
        else:
            a = self.ctx.decode(toks[:-1], seq_id=self.seq_id, logits="all")   # checkpoint at the end
            b = self.ctx.decode(toks[-1:], seq_id=self.seq_id, logits="all")
            self.ctx.memory.checkpoint(self.seq_id)
            out = np.concatenate([a, b])
        self.tokens += toks
        return out

    def rewind(self, p: int, logits: bool = False):
        """Keep ``tokens[:p]`` and drop the rest.  With ``logits=True`` (p >= 1) returns the
        float32 [1, V] logits of position p - 1 (what the next token is sampled from)."""
        if not 0 <= p <= len(self.tokens) or (logits and p == 0):
            raise InputError(f"Conversation.rewind({p}): outside [{1 if logits else 0}, {len(self.tokens)}]")
        target = p - 1 if logits else p
        r = self.ctx.memory.rollback(self.seq_id, target)
        if r is None:
            self.ctx.memory.seq_rm(self.seq_id, 0, -1)
            r = 0
            self.n_recomputed += target
        keep, gap = self.tokens[:r], self.tokens[r:p]
        self.tokens = keep
        out = None
        if gap:
            out = self.feed(gap)[-1:]
        return out if logits else None
