"""An inference context: the model's memory (KV / recurrent / hybrid) and decode().

Glossary: T tokens of a call, V vocabulary size (``Model.n_vocab``).

    m = Model("model.gguf")
    ctx = Context(m, n_ctx=4096, n_seq_max=1, n_ubatch=512)
    logits = ctx.decode([1, 2, 3], seq_id=0)          # float32 [1, V] (last token)
    logits = ctx.decode([4, 5], logits="all")          # float32 [2, V]; positions continue
    ctx.memory.seq_rm(0, 3, -1)                        # False: a recurrent state is whole
    ctx = Context(m, n_checkpoints=4, checkpoint_every=256)   # ... unless snapshots exist:
    ctx.memory.rollback(0, 3)                          # -> position to re-feed from, or None
    blob = ctx.state_bytes(); ctx.load_state(blob)     # state files (toolkit/native/memory/state.c)
"""
from __future__ import annotations

import queue
import threading
from typing import Sequence

import numpy as np

from toolkit.binding import NativeHandle, check, exception_for, ffi, last_error, lib
from toolkit.errors import InputError, ResourceError
from toolkit.runtime import interrupt
from toolkit.runtime.model import Model, as_tokens
from toolkit.runtime.options import RuntimeOptions

_LOGITS_MODES = ("last", "all", "none")


class _DecodeThread:
    """The one thread that runs the main thread's native decode calls (``_run_interruptible``),
    started on first use and kept: a call costs a hand-over and a wake-up, not a thread start
    (measured on the demo model, 1 thread: the start was 0.3-1 ms of a 1.5-3 ms token on a
    shared 2-core machine).  Calls come from the main thread only, one at a time."""

    _lock = threading.Lock()
    _jobs: queue.SimpleQueue | None = None

    @classmethod
    def submit(cls, work) -> None:
        with cls._lock:
            if cls._jobs is None:
                cls._jobs = queue.SimpleQueue()
                threading.Thread(target=cls._serve, args=(cls._jobs,), name="toolkit-decode", daemon=True).start()
            cls._jobs.put(work)

    @staticmethod
    def _serve(jobs: queue.SimpleQueue) -> None:
        while True:
            work = jobs.get()
            try:
                work()
            except BaseException:   # noqa: BLE001 - work() reports its own errors; the thread stays
                pass


class Memory:
    """The context's memory (``kv``, ``rs`` or ``hybrid``, chosen by the model's layer kinds).

    Positions are token positions (int); ``p1 < 0`` means "to the end".
    """

    def __init__(self, ctx: "Context"):
        self._ctx = ctx

    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        """Remove positions [p0, p1) of ``seq_id`` (-1: every sequence).

        Returns False and changes nothing when a recurrent state would be cut partway: a
        tail [p0, end) with no checkpoint before p0.  Allowed are the whole sequence, a range
        after its end, a range that ends before its last token (a context shift: the KV cells
        go, a recurrent state stays as it is, still holding those tokens; its checkpoints in
        the range go), and a tail with a checkpoint before p0.  That last case restores the
        checkpoint (the KV cells after it go too), so the sequence may end before p0 - 1:
        ``seq_pos_max`` (or :meth:`rollback`) says where to re-feed from.
        """
        out = ffi.new("int32_t *")
        check(lib.tk_memory_seq_rm(self._ctx.ptr, seq_id, p0, p1, out), "seq_rm")
        return bool(out[0])

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        """Let ``dst`` see ``src``'s cells in [p0, p1) (recurrent state: shared, copied on write,
        with src's checkpoints).  With recurrent layers the state is whole, so ``dst`` becomes a
        copy of all of ``src`` and the range is ignored (a hybrid drops dst's KV cells first)."""
        check(lib.tk_memory_seq_cp(self._ctx.ptr, src, dst, p0, p1), "seq_cp")

    def seq_keep(self, seq_id: int) -> None:
        """Drop every sequence but ``seq_id``."""
        check(lib.tk_memory_seq_keep(self._ctx.ptr, seq_id), "seq_keep")

    def seq_pos_min(self, seq_id: int) -> int:
        """Smallest position held for ``seq_id`` (-1 when empty)."""
        out = ffi.new("int32_t *")
        check(lib.tk_memory_seq_pos_min(self._ctx.ptr, seq_id, out), "seq_pos_min")
        return int(out[0])

    def seq_pos_max(self, seq_id: int) -> int:
        """Largest position held for ``seq_id`` (-1 when empty)."""
        out = ffi.new("int32_t *")
        check(lib.tk_memory_seq_pos_max(self._ctx.ptr, seq_id, out), "seq_pos_max")
        return int(out[0])

    def clear(self) -> None:
        """Forget every sequence (recurrent states zeroed, checkpoints dropped)."""
        lib.tk_memory_clear(self._ctx.ptr)

    # ---- checkpoints, position shift (state.c, memory_rs.c) ------------------------------
    def set_checkpoints(self, n_per_seq: int, every: int = 0) -> None:
        """Keep up to ``n_per_seq`` recurrent snapshots per sequence (0: none), taken at the end
        of every decode call that feeds a sequence more than one token, each time ``pos + 1``
        is a multiple of ``every`` (0: off) and on :meth:`checkpoint`.  Drops the existing ones.
        Bytes: n_seq_max x n_per_seq x one recurrent state (see :meth:`Context.memory_report`).
        """
        check(lib.tk_memory_set_checkpoints(self._ctx.ptr, int(n_per_seq), int(every)), "checkpoints")

    def checkpoint(self, seq_id: int = 0) -> None:
        """Snapshot ``seq_id``'s recurrent state at its current end (no-op without checkpoints)."""
        check(lib.tk_memory_checkpoint(self._ctx.ptr, seq_id), "checkpoint")

    def checkpoints(self, seq_id: int = 0) -> list[int]:
        """Positions of ``seq_id``'s snapshots, ascending."""
        n = ffi.new("int32_t *")
        check(lib.tk_memory_checkpoints(self._ctx.ptr, seq_id, ffi.NULL, 0, n), "checkpoints")
        buf = ffi.new("int32_t[]", max(int(n[0]), 1))
        check(lib.tk_memory_checkpoints(self._ctx.ptr, seq_id, buf, int(n[0]), n), "checkpoints")
        return [int(buf[i]) for i in range(int(n[0]))]

    def rollback(self, seq_id: int, p0: int) -> int | None:
        """Drop positions >= ``p0`` of ``seq_id``; returns the position to re-feed from
        (``seq_pos_max + 1``, <= p0: a recurrent state goes back to its newest checkpoint
        before p0), or None when refused (no such checkpoint; memory unchanged)."""
        if not self.seq_rm(seq_id, p0, -1):
            return None
        return self.seq_pos_max(seq_id) + 1

    def keep_prefix(self, seq_id: int, held: Sequence[int], tokens: Sequence[int], n_max: int | None = None) -> int:
        """Roll ``seq_id``, which holds ``held`` (checked: ``seq_pos_max + 1`` must be its
        length, else the sequence is emptied), back to at most its common prefix with
        ``tokens`` and at most ``n_max`` tokens (a recurrent state goes back to its newest
        checkpoint at or before that point; without one the sequence is emptied).  Returns
        how many tokens of ``held`` it holds now (the caller truncates its list)."""
        n_held = len(held)
        if self.seq_pos_max(seq_id) + 1 != n_held:    # never build on a state we cannot account for
            self.seq_rm(seq_id, 0, -1)
            return 0
        m = min(n_held, len(tokens))
        neq = np.flatnonzero(np.asarray(held[:m], np.int64) != np.asarray(tokens[:m], np.int64))
        k = int(neq[0]) if neq.size else m       # (numpy: a step must not cost O(n) in Python)
        if n_max is not None:
            k = min(k, max(int(n_max), 0))
        if k >= n_held:
            return n_held
        r = self.rollback(seq_id, k) if k > 0 else None
        if r is None:
            self.seq_rm(seq_id, 0, -1)
            return 0
        return r

    def set_draft_window(self, k: int, *, keep_last: bool = True) -> None:
        """Speculative decoding's partial rollback (ref: llama.cpp ``n_rs_seq``): keep, per
        sequence, the recurrent state after each of its last ``k + 1`` tokens decoded in a
        call of at most ``k + 1`` tokens for it (a verify batch), so that
        ``seq_rm(seq, p, -1)`` with ``p - 1`` among them restores exactly the state after
        ``p - 1`` (the KV cells >= p go) and :meth:`rollback` returns ``p``.  0 frees the
        ring.  Bytes: n_seq_max x (k + 1) x one recurrent state (``draft`` in
        :meth:`Context.memory_report`).  The ring is not saved in state blobs.

        ``keep_last=False`` (``TK_SPEC_NO_LAST``) copies no state after a call's last token
        of a sequence (its cell holds it): for a verifying target, which rolls back only
        inside its latest call and keeps that call's first token.  A verify call of n tokens
        then copies n - 1 states, a call without drafts none, and the ring holds k states per
        sequence, not k + 1; a rollback to the end of an earlier call falls back to the
        checkpoints.  A draft model's context keeps the
        default: it rolls back to the ends of earlier calls.

        Raises:
            NativeError: ``k`` outside [0, 256]; ResourceError: out of memory.
        """
        flags = 0 if keep_last else lib.TK_SPEC_NO_LAST
        check(lib.tk_context_set_spec_window_ex(self._ctx.ptr, int(k), flags), "draft window")
        self._ctx.draft_window = int(k)

    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> bool:
        """Shift positions [p0, p1) of ``seq_id`` by ``delta``: KV cells move and their cached
        K is re-rotated in the model's RoPE mode (NORM / NEOX, partial rotary); a recurrent state
        holds no positions, so only its bookkeeping (last and first position, checkpoints in the
        range) moves.  False and nothing changed when refused: a KV cell shared with another
        sequence, a negative or colliding position, a state's last position before its first."""
        out = ffi.new("int32_t *")
        check(lib.tk_memory_seq_add(self._ctx.ptr, seq_id, p0, p1, delta, out), "seq_add")
        return bool(out[0])


def _check_int32(model: Model, **params: int) -> None:
    """The C parameters are int32: a larger n_ctx is a KV cache no machine has (ResourceError
    naming its size); any other out-of-range value is an InputError.  Smaller but still too
    large requests are refused by tk_context_new against the machine's RAM."""
    for name, v in params.items():
        if -2**31 <= v < 2**31:
            continue
        hp = model.hparams
        kv = 2 * v * sum(hp.n_head_kv[i] for i in hp.attention_layers) * hp.head_dim * 4
        if name == "n_ctx" and kv:
            raise ResourceError(f"n_ctx = {v}: the KV cache alone would need {kv / 2**30:.1f} GiB")
        raise InputError(f"{name} = {v} is out of range")


def _report_dict(model: Model, r) -> dict[str, int]:
    """A tk_memory_report as the bytes by kind (+ ``weights``, the bytes of the tensors the model
    loads, ``Model.weight_bytes``; ``kv_k`` / ``kv_v``: ``kv`` split into the K rows (with any
    float32 indexer keys) and the V rows, of the cache's types)."""
    return {"weights": int(model.weight_bytes), "kv": int(r.kv_bytes),
            "recurrent": int(r.recurrent_bytes), "checkpoints": int(r.checkpoint_bytes),
            "compute": int(r.compute_bytes), "draft": int(r.draft_bytes),
            "kv_k": int(r.kv_k_bytes), "kv_v": int(r.kv_v_bytes)}


def memory_estimate(model: Model, n_ctx: int = 4096, n_seq_max: int = 1, n_ubatch: int = 512,
                    n_threads: int | None = None, n_checkpoints: int = 0, draft_window: int = 0,
                    keep_last: bool = True, options: RuntimeOptions | None = None) -> dict[str, int]:
    """Bytes by kind that ``Context(model, n_ctx, n_seq_max, n_ubatch, n_threads, n_checkpoints)``
    would allocate, after ``memory.set_draft_window(draft_window, keep_last=keep_last)``: the
    dict :meth:`Context.memory_report` then gives, computed by the C library
    (tk_context_memory_estimate) without allocating any of it.

    Raises:
        NativeError / InputError: parameters the context would refuse (not the machine's RAM);
        UnsupportedError: a draft window for a model whose recurrent state keeps no per-token
        snapshots.
    """
    n_threads = int(n_threads if n_threads is not None else model.n_threads)
    _check_int32(model, n_ctx=int(n_ctx), n_seq_max=int(n_seq_max), n_ubatch=int(n_ubatch), n_threads=n_threads,
                 n_checkpoints=int(n_checkpoints), draft_window=int(draft_window))
    p = ffi.new("tk_context_params *")
    p.n_ctx, p.n_seq_max, p.n_ubatch, p.n_threads = int(n_ctx), int(n_seq_max), int(n_ubatch), n_threads
    (options if options is not None else model.options).fill_context(p)
    r = ffi.new("tk_memory_report *")
    flags = 0 if keep_last else lib.TK_SPEC_NO_LAST
    check(lib.tk_context_memory_estimate(model.ptr, p, int(n_checkpoints), int(draft_window), flags, r), "memory estimate")
    return _report_dict(model, r)


class Context(NativeHandle):
    """Decode state for up to ``n_seq_max`` sequences of one :class:`Model`.

    Args:
        n_ctx:     KV cells (tokens of all sequences together) for attention layers.
        n_seq_max: sequences (1..64); recurrent layers keep one state per sequence.
        n_ubatch:  most tokens per micro-batch (a batch is split into equal-length
                   per-sequence micro-batches).
        n_threads: worker threads (None: the model's).
        options:   :class:`toolkit.runtime.options.RuntimeOptions` whose chunk thresholds
                   (``ssd_min`` ...) the context runs with (None: the model's ``options``).

    Raises:
        NativeError / ResourceError: bad parameters, out of memory.
    """

    def __init__(self, model: Model, n_ctx: int = 4096, n_seq_max: int = 1, n_ubatch: int = 512,
                 n_threads: int | None = None, n_checkpoints: int = 0, checkpoint_every: int = 0,
                 options: RuntimeOptions | None = None):
        self.model = model
        self.n_ctx, self.n_seq_max, self.n_ubatch = int(n_ctx), int(n_seq_max), int(n_ubatch)
        self.n_threads = int(n_threads if n_threads is not None else model.n_threads)
        self._ptr = ffi.NULL
        self.draft_window = 0
        self.on_hidden = None   # MTP drafts: on_hidden(seq, pos0, h [T, D]) after each decode (toolkit.runtime.mtp)
        _check_int32(model, n_ctx=self.n_ctx, n_seq_max=self.n_seq_max, n_ubatch=self.n_ubatch, n_threads=self.n_threads)
        p = ffi.new("tk_context_params *")
        p.n_ctx, p.n_seq_max, p.n_ubatch, p.n_threads = self.n_ctx, self.n_seq_max, self.n_ubatch, self.n_threads
        (options if options is not None else model.options).fill_context(p)
        out = ffi.new("tk_context **")
        check(lib.tk_context_new(model.ptr, p, out), "context")
        self._ptr = out[0]
        model._contexts.add(self)
        self.memory = Memory(self)
        if n_checkpoints or checkpoint_every:
            self.memory.set_checkpoints(n_checkpoints, checkpoint_every)

    @property
    def ptr(self):
        if self._ptr == ffi.NULL:
            raise InputError("context is closed")
        return self._ptr

    @property
    def n_vocab(self) -> int:
        return self.model.n_vocab

    def close(self) -> None:
        p, self._ptr = self._ptr, ffi.NULL   # forget it first: an exception between the two
        if p != ffi.NULL:                    # lines must not leave a freed pointer to free again
            lib.tk_context_free(p)

    # ---- state files, memory report (state.c) -------------------------------------------
    def state_bytes(self, seq_id: int = -1) -> bytes:
        """The memory as a checksummed blob (layout in toolkit/native/memory/state.c): ``seq_id=-1``
        every sequence, else that one sequence (restorable into any sequence id)."""
        n = ffi.new("uint64_t *")
        check(lib.tk_state_size(self.ptr, seq_id, n), "state")
        buf = bytearray(int(n[0]))
        check(lib.tk_state_write(self.ptr, seq_id, ffi.from_buffer(buf), len(buf), n), "state")
        return bytes(buf[:int(n[0])])

    def load_state(self, blob: bytes, seq_id: int = -1) -> None:
        """Restore a blob from :meth:`state_bytes` (same ``seq_id=-1`` kind, or a one-sequence
        blob into ``seq_id``).

        Raises:
            NativeError: short, corrupt, newer-version or other-model blob (the message says
                which); the memory is then exactly as before the call.
            ResourceError: no room for its KV cells in this context.
        """
        mv = memoryview(blob).cast("B")
        buf = ffi.from_buffer("uint8_t[]", mv) if mv.nbytes else ffi.new("uint8_t[]", 1)
        check(lib.tk_state_read(self.ptr, seq_id, buf, mv.nbytes))   # C messages say "state: ..."

    def memory_report(self) -> dict[str, int]:
        """Bytes allocated by this context: ``kv`` (attention layers only), ``recurrent``,
        ``checkpoints``, ``compute`` (scratch), ``draft`` (the speculative window's ring,
        :meth:`Memory.set_draft_window`); ``weights`` is the model's tensor bytes.
        :func:`memory_estimate` gives the same figures without a context."""
        r = ffi.new("tk_memory_report *")
        check(lib.tk_context_memory(self.ptr, r), "memory report")
        return _report_dict(self.model, r)

    def prefault(self) -> None:
        """Make the memory :meth:`memory_report` counts (KV cells, recurrent states, checkpoints,
        the speculative window set so far) resident now, contents unchanged (tk_context_prefault).
        Its pages are otherwise touched only as sequences first reach them, so a server's RSS
        rises towards the report in steps that look like a leak; llama.cpp clears its KV buffer
        at creation for the same effect.  Costs the report's bytes of RAM at once."""
        check(lib.tk_context_prefault(self.ptr), "prefault")

    # ---- decoding ---------------------------------------------------------------------
    def _run_interruptible(self, call, what: str) -> None:
        """Run a native call on a helper thread so that SIGINT / SIGTERM can stop it.

        With the CLI's handlers (toolkit.runtime.interrupt) the main thread waits in a
        deferred scope: a signal is only recorded, the decode is asked to stop
        (tk_context_abort, repeated until it returns: tk_decode clears a request made before
        it starts) and joined, then KeyboardInterrupt is raised here, a safe point.  Without
        them (library use), KeyboardInterrupt / SystemExit raised in the wait aborts and
        joins the decode before re-raising, so the context is never freed under it.  After
        an abort the batch's sequences are empty (see tk_decode).  tk_last_error() is
        thread-local, so the message is read on the thread that failed.
        """
        res: list = []
        done = threading.Event()   # set by the worker; Thread.is_alive() is not reliable
                                   # after a KeyboardInterrupt inside join() (bpo-45274)
        began = threading.Event()

        def work():
            began.set()
            try:
                st = call()
                res.append((st, last_error() if st != lib.TK_OK else ""))
            except BaseException as e:   # noqa: BLE001 - raised again on the calling thread
                res.append((e, ""))
            finally:
                done.set()

        if threading.current_thread() is not threading.main_thread():
            work()
        elif interrupt.installed():
            interrupt.check()
            with interrupt.deferred():
                _DecodeThread.submit(work)
                while not done.wait(0.05):
                    if interrupt.pending():
                        lib.tk_context_abort(self._ptr)
            interrupt.check()
        else:
            try:
                _DecodeThread.submit(work)
                while not done.wait(0.1):  # wake now and then so a pending SIGINT is handled
                    pass
            except BaseException:
                if not began.wait(1.0):
                    raise
                while not done.is_set():
                    lib.tk_context_abort(self._ptr)
                    done.wait(0.05)
                raise
        st, msg = res[0]
        if isinstance(st, BaseException):
            raise st
        if st != lib.TK_OK:
            raise exception_for(st, f"{what}: {msg}")

    def decode(self, tokens, seq_id: int = 0, logits: str = "last", *, snapshots: bool = False) -> np.ndarray:
        """Feed ``tokens`` (ids, 1-D) to sequence ``seq_id``; positions continue from its end.

        Returns float32 logits: ``logits="last"`` -> [1, V]; ``"all"`` -> [T, V];
        ``"none"`` -> [0, V].  ``snapshots``: with a draft window
        (:meth:`Memory.set_draft_window`), keep the state after each token of a call of at
        most k + 1 tokens so that a rollback inside it is exact (a verify call, a draft
        model's step); other calls (prompt chunks) run as without a window.

        Raises:
            InputError: empty or non-integer tokens, unknown ``logits`` mode.
            NativeError: token id out of range, bad seq_id, KV cache full (ResourceError).
        """
        return self.decode_batch([(tokens, seq_id)], logits=logits, snapshots=snapshots)[0]

    def decode_batch(self, items, logits: str = "last", *, snapshots: bool = False, embd=None,
                     hidden: bool = False):
        """Several sequences in one batch: ``items`` = [(tokens, seq_id), ...].

        Returns one float32 array per item, shaped as in :meth:`decode` (``snapshots`` too).
        ``embd`` (an MTP block's context, toolkit.runtime.mtp; required there): per item float32
        [T, D], the hidden state h each token's step reads.  ``hidden``: return (logits arrays,
        hidden arrays), the latter per item float32 [T, D], each token's final hidden state
        (output_norm'd, what the output head reads).  ``on_hidden`` set: it is called per item
        with (seq_id, first position, hidden [T, D]) after the call.
        """
        if logits not in _LOGITS_MODES:
            raise InputError(f"logits={logits!r}: expected one of {', '.join(_LOGITS_MODES)}")
        items = [(as_tokens(toks), int(seq)) for toks, seq in items]
        if not items or any(t.size == 0 for t, _ in items):
            raise InputError("decode: empty token list")
        seqs = [s for _, s in items]
        if len(set(seqs)) != len(seqs):
            raise InputError(f"decode_batch: a sequence id appears twice in one batch: {seqs}")
        for s in seqs:
            if not 0 <= s < self.n_seq_max:
                raise InputError(f"seq_id {s} outside [0, n_seq_max={self.n_seq_max})")
        tok = np.concatenate([t for t, _ in items]).astype(np.int32)
        seq = np.concatenate([np.full(t.size, s, np.int32) for t, s in items])
        pos = np.concatenate([self.memory.seq_pos_max(s) + 1 + np.arange(t.size, dtype=np.int32) for t, s in items]).astype(np.int32)
        want = np.zeros(tok.size, np.int8)
        counts = []
        o = 0
        for t, _ in items:
            if logits == "all":
                want[o:o + t.size] = 1
                counts.append(t.size)
            elif logits == "last":
                want[o + t.size - 1] = 1
                counts.append(1)
            else:
                counts.append(0)
            o += t.size
        out = np.empty((int(want.sum()), self.n_vocab), np.float32)
        b = ffi.new("tk_batch *")
        b.n_tokens = tok.size
        b.token = ffi.cast("const int32_t *", ffi.from_buffer(tok))
        b.pos = ffi.cast("const int32_t *", ffi.from_buffer(pos))
        b.seq_id = ffi.cast("const int32_t *", ffi.from_buffer(seq))
        b.logits = ffi.cast("const int8_t *", ffi.from_buffer(want))
        b.flags = lib.TK_BATCH_SNAPSHOTS if snapshots else 0
        if embd is not None:
            e = np.ascontiguousarray(np.concatenate([np.asarray(x, np.float32) for x in embd]), dtype=np.float32)
            if e.shape != (tok.size, self.model.hparams.n_embd):
                raise InputError(f"decode: embd has shape {e.shape}, expected ({tok.size}, {self.model.hparams.n_embd})")
            b.embd = ffi.cast("const float *", ffi.from_buffer(e))
        want_h = hidden or self.on_hidden is not None
        if want_h:
            hid = np.empty((tok.size, self.model.hparams.n_embd), np.float32)
            b.hidden_out = ffi.cast("float *", ffi.from_buffer(hid, require_writable=True))
        out_ptr = ffi.cast("float *", ffi.from_buffer(out, require_writable=True)) if out.size else ffi.NULL
        self._run_interruptible(lambda: lib.tk_decode(self.ptr, b, out_ptr), "decode")
        res, hs, r, o = [], [], 0, 0
        for c, (t, s) in zip(counts, items):
            res.append(out[r:r + c])
            r += c
            if want_h:
                hs.append(hid[o:o + t.size])
                if self.on_hidden is not None:
                    self.on_hidden(s, int(pos[o]), hs[-1])
            o += t.size
        return (res, hs) if hidden else res
