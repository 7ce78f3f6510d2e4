"""The scheduler: N slots on one :class:`toolkit.runtime.Context` (``n_seq_max = N``, slot i is
sequence i), driven by one thread that owns the context.  It schedules only: what a token does
is :class:`toolkit.runtime.step.TokenStep`'s, how drafts are cut, verified and rolled back
:class:`toolkit.runtime.step.Verifier`'s, as in ``toolkit run`` and ``chat``.

    eng = Engine(model, tok, n_slots=4, n_ctx=4096)   # starts the decode thread
    eng.submit(Job(prompt_ids, n_predict=64, params=SamplerParams(temp=0), on_event=callback))
    ...                                               # callback(("text", ...)), ..., ("done", job)
    eng.cancel(job); eng.close()

Each step of the loop (docs/internals.md, "Serving"): **admit** waiting jobs (FIFO) into the
free slot sharing the longest prefix with the prompt (``Memory.rollback`` keeps it); **generate**:
every slot with a token to feed, plus its drafts, in ONE ``decode_batch`` call; **prefill**: one
slot's next prompt chunk (never its last token) in a call of its own, round-robin, so that a
prompt's micro-batches depend on that prompt only.  Checkpoints: after the prompt's last token
and at the end of each answer (where the next turn diverges).  Isolation: a job has its own
Sampler and Grammar; a slot holds exactly ``Slot.held`` (checked against ``seq_pos_max``).
"""
from __future__ import annotations

import collections
import logging
import threading
import time

import numpy as np

from toolkit.errors import InputError
from toolkit.runtime import Context
from toolkit.runtime.session import common_prefix
from toolkit.runtime.speculative import SeqSpeculation
from toolkit.serve.job import FINISH, SHUTTING_DOWN, Job, QueueFull, Slot, SlotRun

__all__ = ["Engine", "Job", "QueueFull", "SHUTTING_DOWN"]
log = logging.getLogger(__name__)


class Engine:
    """Slots, the wait queue and the decode thread over one model (``model``, a runtime Model;
    ``tok``, its Tokenizer).  ``n_slots`` sequences share ``n_ctx`` cells, ``n_ctx // n_slots``
    each (llama-server's ``-c`` / ``-np``); ``n_ubatch``: most tokens per prompt chunk;
    ``n_checkpoints`` / ``checkpoint_every``: recurrent snapshots per slot; ``queue``: jobs that
    may wait beyond the free slots (QueueFull beyond).  ``draft_max`` > 0: speculative decoding
    with prompt lookup (``draft_ngram``), the model's MTP head (``mtp``) or ``draft_model`` (a Model with the same vocabulary,
    one context of its own, closed by :meth:`close`); ``draft_min``: a shorter draft is not sent.

    Raises:
        InputError / ResourceError: bad sizes, out of memory, a draft_model with draft_max 0;
            UnsupportedError: draft_max > 0 for a model keeping no per-token snapshots.
    """

    def __init__(self, model, tok, n_slots: int = 4, n_ctx: int = 4096, n_ubatch: int = 512,
                 n_checkpoints: int = 4, checkpoint_every: int = 256, queue: int = 64, n_threads: int | None = None,
                 draft_max: int = 0, draft_min: int = 0, draft_ngram: int = 3, draft_model=None, mtp: bool = False):
        if n_slots < 1 or n_slots > 64:
            raise InputError(f"-np/--parallel = {n_slots}: must be in [1, 64]")
        if n_ctx < n_slots * 8:
            raise InputError(f"-c/--ctx-size = {n_ctx}: too small for {n_slots} slots (at least 8 tokens each)")
        if draft_model is not None and draft_max <= 0:
            raise InputError("--draft-model needs --draft-max >= 1")
        self.tok, self.model = tok, model
        sizes = dict(n_ctx=n_ctx, n_seq_max=n_slots, n_ubatch=n_ubatch, n_threads=n_threads,
                     n_checkpoints=n_checkpoints, checkpoint_every=checkpoint_every)
        self.ctx = Context(model, **sizes)
        self.n_ctx_slot = n_ctx // n_slots
        self.draft_max = int(draft_max)
        try:
            self.spec = (SeqSpeculation(self.ctx, draft_max, draft_min, draft_ngram, draft_model, sizes, mtp=mtp)
                         if draft_max > 0 else None)
        except BaseException:
            self.ctx.close()
            raise
        # resident now, not as slots first reach their cells: RSS stays flat under load (llama.cpp clears its KV)
        self.ctx.prefault()
        self.n_ubatch, self.queue_max, self._rr = n_ubatch, queue, 0
        self.slots = [Slot(i) for i in range(n_slots)]
        self.waiting: collections.deque[Job] = collections.deque()
        self.metrics = collections.Counter()
        self._cv = threading.Condition()
        self._stop = False
        self._shutdown = False       # shutdown(): running jobs end, submit refuses
        self._thread = threading.Thread(target=self._loop, name="toolkit-serve-decode", daemon=True)
        self._thread.start()

    # ---- the HTTP side (any thread) -----------------------------------------------------
    def submit(self, job: Job) -> None:
        """Queue ``job``.  Raises QueueFull when no slot is free for it and ``queue`` jobs wait
        already (or after :meth:`shutdown`), InputError when the prompt is empty or does not fit
        a slot's context."""
        if not job.prompt:
            raise InputError("the prompt is empty (no tokens to decode)")
        if len(job.prompt) >= self.n_ctx_slot:
            raise InputError(f"the prompt has {len(job.prompt)} tokens, the context of a slot "
                             f"{self.n_ctx_slot} (-c / -np): shorten it or raise --ctx-size")
        with self._cv:
            if self._shutdown:
                raise QueueFull(SHUTTING_DOWN)
            free = sum(s.run is None for s in self.slots)    # jobs admitted at the next step
            if len(self.waiting) >= free + self.queue_max:
                raise QueueFull(f"{len(self.waiting) - free} requests wait for a slot already (--queue {self.queue_max})")
            job.t_submit = time.perf_counter()
            self.waiting.append(job)
            self._cv.notify()

    def cancel(self, job: Job) -> None:
        """Stop ``job`` (its client left): it leaves the queue, or its slot is freed at the next
        step; no further events."""
        with self._cv:
            job.cancelled = True
            if job in self.waiting:
                self.waiting.remove(job)
            self._cv.notify()

    def shutdown(self) -> None:
        """The server is stopping: every running or waiting job ends at the next step with
        ("error", SHUTTING_DOWN) (finish_reason "shutdown"), and ``submit`` raises QueueFull.
        Returns at once; the decode thread keeps running until :meth:`close`."""
        with self._cv:
            self._shutdown = True
            self._cv.notify()

    def close(self) -> None:
        """Stop the decode thread (waiting and running jobs end with "cancelled") and free the context."""
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._thread.join()
        self.ctx.close()
        if self.spec is not None:
            self.spec.close()

    def stats(self) -> dict:
        """Counters for /metrics, plus the slots busy and the queue length now."""
        with self._cv:
            errors = {"draft_errors": self.spec.n_errors} if self.spec is not None and self.spec.n_errors else {}
            return dict(self.metrics, **errors, slots_busy=sum(s.run is not None for s in self.slots),
                        slots=len(self.slots), queue=len(self.waiting))


    # ---- the decode thread --------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._stop and not self.waiting and all(s.run is None for s in self.slots):
                    self._cv.wait()
                if self._stop:
                    break
                if self._shutdown:
                    self._end_all()
                    continue
                for s in self.slots:
                    if s.run is not None and s.run.job.cancelled:
                        self.metrics["cancelled"] += 1
                        self._release(s, "cancelled")
                self._admit()
            try:
                self._generate_step()
                self._prefill_step()
            except Exception as e:   # noqa: BLE001 - a bug in one step must not stop the server
                log.exception("serve: decode loop step failed")
                self._fail_all(f"internal error: {e}")
        for s in self.slots:         # closing: no events (the HTTP side is going away)
            if s.run is not None:
                self._release(s, "cancelled")
        for job in self.waiting:
            job.finish_reason = "cancelled"

    def _end_all(self) -> None:
        """shutdown(): end every job, waiting or running, with an error event (under the lock)."""
        jobs = list(self.waiting)
        self.waiting.clear()
        jobs += [self._release(s, "shutdown") for s in self.slots if s.run is not None]
        for job in jobs:
            job.finish_reason = "shutdown"
            if not job.cancelled:
                job.on_event(("error", SHUTTING_DOWN))

    def _fail_all(self, msg: str) -> None:
        """End every running job with an error and forget the slots' memory (the state of a
        step that failed part-way is unknown)."""
        for s in self.slots:
            if s.run is not None:
                self._fail(s, msg)
            s.held = []
        self.ctx.memory.clear()
        if self.spec is not None:
            self.spec.forget_all()

    def _admit(self) -> None:
        """Move waiting jobs into free slots, reusing the longest cached prefix."""
        while self.waiting:
            free = [s for s in self.slots if s.run is None]
            if not free:
                return
            job = self.waiting.popleft()
            slot = max(free, key=lambda s: (common_prefix(s.held, job.prompt), -s.last_used))
            job.slot, job.t_start = slot.id, time.perf_counter()
            slot.held = slot.held[:self.ctx.memory.keep_prefix(slot.id, slot.held, job.prompt, len(job.prompt) - 1)]
            job.n_reused = len(slot.held)
            slot.run = SlotRun(job, self.tok, self.n_ctx_slot, self.spec is not None and self.spec.draft is not None)
            slot.run.todo = list(job.prompt[job.n_reused:])
            self.metrics.update(requests=1, prompt_tokens=len(job.prompt), prompt_tokens_reused=job.n_reused)

    def _decode(self, items: list[tuple[Slot, list[int]]], logits: str, snapshots: bool = False) -> list[np.ndarray] | None:
        """One decode_batch call (``snapshots``: a generate step's, which may roll back); None
        when it failed: its jobs end with an error (the runtime emptied their sequences)."""
        try:
            return self.ctx.decode_batch([(toks, s.id) for s, toks in items], logits=logits, snapshots=snapshots)
        except Exception as e:   # noqa: BLE001 - one failed batch must not stop the server
            for s, _ in items:
                s.held = []
                self._fail(s, f"decode failed: {e}")
            self.metrics["decode_errors"] += 1
            return None

    def _generate_step(self) -> None:
        gen = [s for s in self.slots if s.run is not None and s.run.next_tok is not None]
        if not gen:
            return
        drafts = self._drafts(gen)
        items = [(s, [s.run.next_tok] + drafts[s.id][0]) for s in gen]
        rows = self._decode(items, "all" if any(len(toks) > 1 for _, toks in items) else "last", snapshots=True)
        if rows is None:
            return
        for (s, toks), row in zip(items, rows):
            n0, run, job = len(s.held), s.run, s.run.job
            s.held += toks
            if run.todo:                      # that was the prompt's last token
                run.todo = []
                self.ctx.memory.checkpoint(s.id)
                job.t_prompt = time.perf_counter()
            if len(toks) == 1:
                tok, reason = run.step(row[-1], n0 + 1)
                self.metrics["tokens_generated"] += 1
            else:
                v = self.spec.verifier.verify(run.step, s.id, n0, toks, row, drafts[s.id][1])
                del s.held[n0 + v.n_kept:]
                tok, reason = v.tok, v.reason
                job.n_drafted += len(toks) - 1
                job.n_accepted += v.n_accepted
                self.metrics.update(tokens_generated=v.n_kept, draft_tokens=len(toks) - 1,
                                    draft_tokens_accepted=v.n_accepted)
            if reason is not None:
                self._finish(s, FINISH[reason])
            else:
                run.next_tok = tok
                run.send(final=False)

    def _drafts(self, gen: list[Slot]) -> dict[int, tuple[list[int], list | None]]:
        """Per generating slot id, (drafts, q) to send after its next token (SeqSpeculation.drafts:
        one draft-model call per draft step for all the slots; none this step if it fails)."""
        out: dict[int, tuple[list[int], list | None]] = {s.id: ([], None) for s in gen}
        if self.spec is None:
            return out
        v = self.spec.verifier
        want = [(s, k) for s in gen if not s.run.todo   # not while a slot feeds its prompt's last token
                and (k := v.room(self.n_ctx_slot - len(s.held) - 2, s.run.left())) >= v.k_min]
        got = self.spec.drafts([(s.id, s.held + [s.run.next_tok], k, s.run.draft_sampler, s.run.job.grammar)
                                for s, k in want])
        return out | {s.id: d for (s, _), d in zip(want, got or [])}

    def _prefill_step(self) -> None:
        pre = [s for s in self.slots if s.run is not None and len(s.run.todo) > 1]
        if pre:
            s = min(pre, key=lambda s: (s.id - self._rr) % len(self.slots))
            self._rr = s.id + 1
            run = s.run
            chunk = run.todo[:min(len(run.todo) - 1, self.n_ubatch)]
            if self._decode([(s, chunk)], "none") is None:
                return
            s.held += chunk
            run.todo = run.todo[len(chunk):]
            if self.spec is not None:     # a draft model's sequence follows, in a call of its own
                self.spec.feed(s.id, s.held)
        for o in self.slots:          # a prompt with one token left joins the next generate step
            if o.run is not None and len(o.run.todo) == 1 and (pre or o.run.next_tok is None):
                o.run.next_tok = o.run.todo[0]

    def _finish(self, s: Slot, reason: str) -> None:
        run = s.run
        run.step.finish()
        run.send(final=True)
        if len(s.held) > len(run.job.prompt):
            self.ctx.memory.checkpoint(s.id)   # the next turn diverges here
            if self.spec is not None:          # the draft's sequence too, where it agrees with the slot
                self.spec.settle(s.id, s.held, len(run.job.prompt))
        self._release(s, reason)
        run.job.on_event(("done", run.job))

    def _fail(self, s: Slot, msg: str) -> None:
        job = self._release(s, "error")
        job.on_event(("error", msg))

    def _release(self, s: Slot, reason: str) -> Job:
        job = s.run.job
        job.finish_reason, job.t_end = reason, time.perf_counter()
        if not job.t_prompt:
            job.t_prompt = job.t_end
        s.run = None
        s.last_used = time.perf_counter()
        return job
