"""The scheduler: N slots on one :class:`toolkit.runtime.Context` (``n_seq_max = N``, slot i is
sequence i), driven by one thread that owns the context.

    eng = Engine(model, n_slots=4, n_ctx=4096)     # starts the decode thread
    job = Job(prompt_ids, n_predict=64, params=SamplerParams(temp=0), on_event=callback)
    eng.submit(job)                                # QueueFull when the wait queue is full
    ...                                            # callback(("text", ...)), ..., ("done", job)
    eng.cancel(job); eng.close()

Each turn of the loop (one *step*):

1. **Admit** waiting jobs into free slots (FIFO).  The slot chosen is the free one whose held
   tokens share the longest prefix with the job's prompt (ties: the least recently used).  The
   slot keeps that prefix: ``Memory.rollback`` drops the KV cells after it and restores the
   recurrent state from the newest checkpoint at or before it; without such a checkpoint the
   sequence is emptied (``seq_rm(seq, 0, -1)``: KV cells gone, recurrent state zeroed).  Only
   the rest of the prompt is decoded (``Job.n_reused`` is what was kept).
2. **Generate**: every slot that has a token to feed (the last prompt token, or the token it
   sampled last step) goes into ONE ``decode_batch`` call, one token per sequence
   (continuous batching); each slot then samples its next token from its own row.
3. **Prefill**: one slot still reading its prompt decodes its next chunk (at most
   ``n_ubatch`` tokens, never the prompt's last token) in a call of its own, round-robin
   among the prefilling slots, so a long prompt never stalls the streams for more than one
   chunk.  A chunk is decoded alone so that how a prompt is split into micro-batches depends
   on that prompt only: the C runtime splits a batch by its shortest sequence
   (``split_next`` in context.c) and a Mamba-2 run of 32+ tokens takes the SSD path, so a
   prompt batched with other sequences would be split differently and its logits could move
   in the last bits.  Generation tokens are one per sequence, which splits the same way
   whatever else is in the batch.

Speculative decoding per slot (``--lookup`` or ``--draft-model``, ``draft_max > 0``): in step 2
a slot that is generating (not feeding its prompt's last token) sends, after its token, up to
``draft_max`` drafts: prompt lookup (:class:`toolkit.runtime.speculative.PromptLookup` over the
slot's tokens), or a draft model's (:class:`toolkit.runtime.speculative.DraftModel`: one
context of the draft model, sequence i for slot i; before the target's call, each generating
slot's draft sequence is brought to the slot's tokens plus its next token -- rolled back past
what the slot rejected, exactly through the draft context's own window -- in one decode call
for all of them, then each draft step is one decode call of one token per slot; prompt chunks
are fed to it as the slot decodes them, in calls of their own); all the slots' rows still go into the one ``decode_batch`` call (``logits="all"``),
each slot keeps its drafts up to the first its sampler would not have chosen
(:func:`toolkit.runtime.speculative.verify_token`: greedy argmax, or the speculative sampling
rule) plus one token of its own, and a slot that rejected some rolls its sequence back through
the context's draft window (``set_draft_window(draft_max, keep_last=False)``: exact, nothing
re-fed).  A row of at most ``draft_max + 1`` tokens runs the token-by-token recurrence and every
mat-mul output has the same float operations whatever the batch, so a slot's greedy output
is the same token for token with or without drafts, and with whatever the other slots send.
The draft sequence of a slot is never trusted beyond what it is checked to hold
(``DraftModel.held`` against ``seq_pos_max``): a new job, a cancelled or failed one, a prefix
reused from a checkpoint only change what it is compared with at the next draft.

Checkpoints (``--checkpoints K``, ``--checkpoint-every E``): the runtime takes one at the end of
every multi-token call (each prompt chunk, so one token before the prompt's end), every E
positions, and the scheduler takes one after the prompt's last token and at the end of each
answer, which is where the next turn of a conversation diverges.

Isolation: a job gets a fresh Sampler (its own seed) and Grammar; its slot holds exactly the
tokens in ``Slot.held`` (checked against the memory's ``seq_pos_max``) and nothing else; a
failed decode empties the batch's sequences (the C runtime does) and the slots forget them.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from toolkit.errors import InputError
from toolkit.runtime import Context
from toolkit.runtime.generate import _ends_with_stop, _Step, GenerationResult
from toolkit.runtime.sampling import Sampler, SamplerParams
from toolkit.runtime.session import common_prefix
from toolkit.runtime.speculative import DraftModel, PromptLookup, draft_sampler, verify_token


log = logging.getLogger(__name__)


class QueueFull(Exception):
    """No slot is free and the wait queue holds ``queue`` jobs already, or the server is
    shutting down (HTTP 503 + Retry-After)."""


SHUTTING_DOWN = "server shutting down"


@dataclass(eq=False)          # a job is itself: ``job in queue`` compares identities
class Job:
    """One request.  ``on_event`` is called on the decode thread with ("text", str, probs, ids)
    for each piece of text (probs: the n_probs records of the tokens it came from, ids: those
    tokens; the last event may carry tokens and no text: a stop string cut them), then
    ("done", job) or ("error", message).  The results are filled in as it runs.

    prompt: token ids (>= 1); n_predict: most tokens to generate (-1: until EOG or the slot's
    context is full); stop: strings that end the answer (not included in the text);
    n_probs: the top tokens to record per generated token; grammar: a runtime Grammar.
    """

    prompt: list[int]
    n_predict: int
    params: SamplerParams
    on_event: Callable[[tuple], None]
    stop: list[str] = field(default_factory=list)
    n_probs: int = 0
    grammar: object = None
    ignore_eos: bool = False
    # results
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str = ""          # "stop" | "length" | "cancelled" | "error" | "shutdown"
    n_reused: int = 0
    slot: int = -1
    seed: int = 0
    t_submit: float = 0.0
    t_start: float = 0.0             # admitted into a slot
    t_prompt: float = 0.0            # first token sampled
    t_end: float = 0.0
    cancelled: bool = False
    n_drafted: int = 0               # speculative decoding: draft tokens sent, and of those kept
    n_accepted: int = 0

    def timings(self) -> dict:
        """llama-server's ``timings`` fields, plus ``cache_n`` (prompt tokens reused)."""
        n_prompt = len(self.prompt) - self.n_reused
        prompt_ms = max(self.t_prompt - self.t_start, 0.0) * 1e3
        gen_ms = max(self.t_end - self.t_prompt, 0.0) * 1e3
        return {"cache_n": self.n_reused, "prompt_n": n_prompt, "prompt_ms": round(prompt_ms, 3),
                "prompt_per_second": round(n_prompt / prompt_ms * 1e3, 3) if prompt_ms > 0 else 0.0,
                "predicted_n": len(self.tokens), "predicted_ms": round(gen_ms, 3),
                "predicted_per_second": round(len(self.tokens) / gen_ms * 1e3, 3) if gen_ms > 0 else 0.0,
                "queue_ms": round(max(self.t_start - self.t_submit, 0.0) * 1e3, 3),
                "draft_n": self.n_drafted, "draft_n_accepted": self.n_accepted}


class _Run:
    """The per-job state a slot keeps while it works on a job."""

    def __init__(self, job: Job, tok):
        self.job, self.tok = job, tok
        self.sampler = Sampler(job.params)
        job.seed = self.sampler.seed
        self.step = _Step(self.sampler, tok, job.ignore_eos, job.n_probs, job.grammar)
        self.res = GenerationResult(prompt_tokens=job.prompt)
        self.stream = tok.stream()
        self.pieces: list[str] = []     # every piece of generated text
        self.sent = 0                   # characters of "".join(pieces) already sent
        self.probs_sent = 0             # n_probs records already sent
        self.toks_sent = 0              # token ids already sent
        self.todo: list[int] = []       # prompt tokens not yet decoded
        self.draft_sampler: Sampler | None = None   # --draft-model: the draft's (speculative.draft_sampler)
        self.next_tok: int | None = None
        for t in job.prompt:
            self.sampler.accept(t)


class Slot:
    """Sequence ``id`` of the shared context: the tokens its memory holds, and the job it runs."""

    def __init__(self, i: int):
        self.id = i
        self.held: list[int] = []
        self.run: _Run | None = None
        self.last_used = 0.0


class Engine:
    """Slots, the wait queue and the decode thread over one model.

    Args:
        model: a toolkit.runtime.Model; tok: its Tokenizer.
        n_slots: parallel sequences (``-np``); n_ctx: KV cells of the context, shared, each slot
            may hold ``n_ctx // n_slots`` tokens (llama-server's ``-c`` / ``-np`` rule).
        n_ubatch: most tokens per prompt chunk; n_checkpoints / checkpoint_every: recurrent
            snapshots per slot and their period in positions (0: off).
        queue: most jobs waiting for a slot beyond the free slots (``submit`` raises QueueFull
            beyond it; 0: a job is taken only while a slot is free for it).
        draft_max: speculative decoding with drafts of at most this many tokens per slot and
            step (0: off; the context keeps draft_max snapshots per slot): prompt lookup, or
            ``draft_model``'s; draft_min: a shorter draft is not sent; draft_ngram: the longest
            n-gram a lookup draft matches.
        draft_model: a toolkit.runtime.Model sharing ``model``'s vocabulary (the caller checks:
            speculative.open_draft_model), or None.  It gets one context of its own, one sequence
            per slot (same n_ctx, n_ubatch, checkpoints; window draft_max with the last token
            kept); :meth:`close` closes that context and the model.

    Raises:
        InputError / ResourceError: from Context (bad sizes, out of memory), a draft_model with
            draft_max 0; UnsupportedError: draft_max > 0 for a model (target or draft) whose
            recurrent state keeps no per-token snapshots.
    """

    def __init__(self, model, tok, n_slots: int = 4, n_ctx: int = 4096, n_ubatch: int = 512,
                 n_checkpoints: int = 4, checkpoint_every: int = 256, queue: int = 64, n_threads: int | None = None,
                 draft_max: int = 0, draft_min: int = 0, draft_ngram: int = 3, draft_model=None):
        if n_slots < 1 or n_slots > 64:
            raise InputError(f"-np/--parallel = {n_slots}: must be in [1, 64]")
        if n_ctx < n_slots * 8:
            raise InputError(f"-c/--ctx-size = {n_ctx}: too small for {n_slots} slots (at least 8 tokens each)")
        if draft_model is not None and draft_max <= 0:
            raise InputError("--draft-model needs --draft-max >= 1")
        self.tok, self.model = tok, model
        self.ctx = Context(model, n_ctx=n_ctx, n_seq_max=n_slots, n_ubatch=n_ubatch, n_threads=n_threads,
                           n_checkpoints=n_checkpoints, checkpoint_every=checkpoint_every)
        self.n_ctx_slot = n_ctx // n_slots
        self.draft_max, self.draft_min = int(draft_max), int(draft_min)
        self.lookup = PromptLookup(draft_ngram) if draft_max > 0 and draft_model is None else None
        self.draft: DraftModel | None = None          # --draft-model: one sequence per slot
        self._draft_model = draft_model
        if draft_max > 0:
            try:
                self.ctx.memory.set_draft_window(draft_max, keep_last=False)   # the slots verify
                if draft_model is not None:
                    dctx = Context(draft_model, n_ctx=n_ctx, n_seq_max=n_slots, n_ubatch=n_ubatch,
                                   n_threads=n_threads, n_checkpoints=n_checkpoints, checkpoint_every=checkpoint_every)
                    try:
                        dctx.memory.set_draft_window(draft_max)   # keep_last: it rolls back to earlier calls' ends
                    except BaseException:
                        dctx.close()
                        raise
                    self.draft = DraftModel(dctx)
            except BaseException:
                self.ctx.close()
                raise
        self.n_ubatch, self.queue_max = n_ubatch, queue
        self.slots = [Slot(i) for i in range(n_slots)]
        self.waiting: collections.deque[Job] = collections.deque()
        self.metrics = collections.Counter()
        self._cv = threading.Condition()
        self._stop = False
        self._shutdown = False       # shutdown(): running jobs end, submit refuses
        self._rr = 0
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
        if self.draft is not None:
            self.draft.close()
            self._draft_model.close()
            self.draft = None

    def stats(self) -> dict:
        """Counters for /metrics, plus the slots busy and the queue length now."""
        with self._cv:
            return dict(self.metrics, slots_busy=sum(s.run is not None for s in self.slots),
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
                self._drop_cancelled()
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
        for s in self.slots:
            if s.run is not None:
                jobs.append(s.run.job)
                self._release(s, "shutdown")
        for job in jobs:
            job.finish_reason = "shutdown"
            if not job.cancelled:
                job.on_event(("error", SHUTTING_DOWN))

    def _fail_all(self, msg: str) -> None:
        """End every running job with an error and forget the slots' memory (the state of a
        step that failed part-way is unknown)."""
        for s in self.slots:
            if s.run is not None:
                run = s.run
                self._release(s, "error")
                run.job.on_event(("error", msg))
            s.held = []
        self.ctx.memory.clear()
        if self.draft is not None:
            self.draft.forget_all()

    def _drop_cancelled(self) -> None:
        for s in self.slots:
            if s.run is not None and s.run.job.cancelled:
                self.metrics["cancelled"] += 1
                self._release(s, "cancelled")

    def _admit(self) -> None:
        """Move waiting jobs into free slots, reusing the longest cached prefix."""
        while self.waiting:
            free = [s for s in self.slots if s.run is None]
            if not free:
                return
            job = self.waiting.popleft()
            slot = max(free, key=lambda s: (common_prefix(s.held, job.prompt), -s.last_used))
            job.slot, job.t_start = slot.id, time.perf_counter()
            job.n_reused = self._keep_prefix(slot, job.prompt)
            run = _Run(job, self.tok)
            run.todo = list(job.prompt[job.n_reused:])
            if self.draft is not None:
                run.draft_sampler = draft_sampler(job.params, run.sampler.seed)
            slot.run = run
            self.metrics["requests"] += 1
            self.metrics["prompt_tokens"] += len(job.prompt)
            self.metrics["prompt_tokens_reused"] += job.n_reused

    def _keep_prefix(self, slot: Slot, prompt: list[int]) -> int:
        """Make the slot's memory hold a prefix of ``prompt`` (at most len - 1 tokens: the last
        prompt token is always decoded, for its logits); returns its length."""
        mem = self.ctx.memory
        k = min(common_prefix(slot.held, prompt), len(prompt) - 1)
        if k < len(slot.held):
            r = mem.rollback(slot.id, k) if k > 0 else None
            if r is None:
                mem.seq_rm(slot.id, 0, -1)
                r = 0
            slot.held = slot.held[:r]
        held = mem.seq_pos_max(slot.id) + 1
        if held != len(slot.held):   # never decode on top of a state we cannot account for
            mem.seq_rm(slot.id, 0, -1)
            slot.held = []
        return len(slot.held)

    def _decode(self, items: list[tuple[Slot, list[int]]], logits: str, snapshots: bool = False) -> list[np.ndarray] | None:
        """One decode_batch call (``snapshots``: a generate step, whose drafts a slot may roll
        back; prompt chunks run and checkpoint as without a draft window); on failure every job
        in it ends with an error (the runtime has emptied their sequences) and None is returned."""
        try:
            return self.ctx.decode_batch([(toks, s.id) for s, toks in items], logits=logits, snapshots=snapshots)
        except Exception as e:   # noqa: BLE001 - one failed batch must not stop the server
            for s, _ in items:
                s.held = []
                run = s.run
                self._release(s, "error")
                run.job.on_event(("error", f"decode failed: {e}"))
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
            n0 = len(s.held)
            s.held += toks
            run = s.run
            if run.todo:                      # that was the prompt's last token
                run.todo = []
                self.ctx.memory.checkpoint(s.id)
                run.job.t_prompt = time.perf_counter()
            if len(toks) == 1:
                self._sample(s, row[-1])
            else:
                self._verify(s, toks, row, n0, drafts[s.id][1])

    def _draft_room(self, s: Slot) -> int:
        """Most drafts the slot may send after its next token now: draft_max, within the slot's
        context and n_predict; 0 while it feeds its prompt's last token or without drafts."""
        run = s.run
        if (self.lookup is None and self.draft is None) or run.todo:
            return 0
        k = min(self.draft_max, self.n_ctx_slot - len(s.held) - 2)
        if run.job.n_predict >= 0:
            k = min(k, run.job.n_predict - len(run.job.tokens) - 1)
        return max(k, 0)

    def _drafts(self, gen: list[Slot]) -> dict[int, tuple[list[int], list | None]]:
        """Per generating slot id, the drafts to send after its next token and their q (None: a
        deterministic lookup draft; else per token (ids, probs)): at most _draft_room, none when
        shorter than draft_min, cut at the first token the slot's grammar (if any) refuses (a
        draft model drafts under a fork of it).  A draft model drafts for all the slots at once (one decode call
        per draft step, DraftModel.draft_batch); if that fails, no slot sends drafts this step
        (the draft's sequences are emptied and re-fed later: only speed is lost)."""
        out: dict[int, tuple[list[int], list | None]] = {s.id: ([], None) for s in gen}
        want = [(s, k) for s in gen if (k := self._draft_room(s)) >= max(self.draft_min, 1)]
        if not want:
            return out
        if self.draft is not None:
            try:
                got = self.draft.draft_batch([(s.id, s.held + [s.run.next_tok], k, s.run.draft_sampler,
                                               s.run.job.grammar) for s, k in want])
            except Exception:   # noqa: BLE001 - the target's answer does not depend on the draft
                log.exception("serve: draft model step failed; this step sends no drafts")
                self.draft.forget_all()
                self.metrics["draft_errors"] += 1
                return out
        else:
            got = [(self.lookup.draft(s.held + [s.run.next_tok], k)[0][:k], None) for s, k in want]
        for (s, k), (toks, q) in zip(want, got):
            g = s.run.job.grammar        # in the state after next_tok: a draft it refuses could never be kept
            if g is not None and toks:
                toks = toks[:g.n_allowed(toks)]
                q = q[:len(toks)] if q is not None else None
            if len(toks) >= max(self.draft_min, 1):
                out[s.id] = (toks[:k], q)
        return out

    def _verify(self, s: Slot, toks: list[int], rows: np.ndarray, n0: int, qs: list | None) -> None:
        """A row that carried drafts (toks = the slot's token + drafts, decoded from position
        n0; rows: their logits; qs: the drafts' distributions, None for lookup drafts): keep the
        drafts the slot's sampler accepts and one token of its own, roll the sequence back past
        the rest (a draft model's sequence follows at its next draft: DraftModel rolls it back
        to what the slot holds)."""
        run, job = s.run, s.run.job
        drafts = toks[1:]
        job.n_drafted += len(drafts)
        self.metrics["draft_tokens"] += len(drafts)
        used, reason = 0, None
        for i in range(len(drafts) + 1):
            used = i + 1
            d = drafts[i] if i < len(drafts) else None
            q = qs[i] if qs is not None and d is not None else None
            tok, ok = verify_token(run.step, run.sampler, rows[i], d, q, self.model.n_vocab, run.res)
            self.metrics["tokens_generated"] += 1
            if ok:
                job.n_accepted += 1
                self.metrics["draft_tokens_accepted"] += 1
            reason = self._take(s, tok, n0 + used)
            if reason is not None or not ok:
                break
        if used < len(toks):
            p0 = n0 + used
            if self.ctx.memory.rollback(s.id, p0) != p0:
                raise RuntimeError(f"slot {s.id}: speculative rollback to position {p0} refused")
            del s.held[p0:]
        if reason is not None:
            return self._finish(s, reason)
        run.next_tok = tok
        self._send(run, final=False)

    def _prefill_step(self) -> None:
        pre = [s for s in self.slots if s.run is not None and len(s.run.todo) > 1]
        if not pre:
            for s in self.slots:          # a prompt of one new token joins the next generate step
                if s.run is not None and s.run.todo and s.run.next_tok is None:
                    s.run.next_tok = s.run.todo[0]
            return
        pre.sort(key=lambda s: (s.id - self._rr) % len(self.slots))
        s = pre[0]
        self._rr = s.id + 1
        run = s.run
        chunk = run.todo[:min(len(run.todo) - 1, self.n_ubatch)]
        if self._decode([(s, chunk)], "none") is None:
            return
        s.held += chunk
        self._draft_feed(s)
        run.todo = run.todo[len(chunk):]
        if len(run.todo) == 1:
            run.next_tok = run.todo[0]
        for o in self.slots:
            if o.run is not None and len(o.run.todo) == 1:
                o.run.next_tok = o.run.todo[0]

    def _draft_feed(self, s: Slot) -> None:
        """The draft model's sequence of the slot follows a prompt chunk: the same tokens in a
        call of their own, as the target's (so a draft equal to the target holds the same bits);
        on failure it is emptied (re-fed at its next draft)."""
        if self.draft is None:
            return
        try:
            self.draft.feed(s.id, s.held)
        except Exception:   # noqa: BLE001 - the target's answer does not depend on the draft
            log.exception("serve: draft model prompt chunk failed")
            self.metrics["draft_errors"] += 1

    def _sample(self, s: Slot, row: np.ndarray) -> None:
        """Sample the slot's next token from ``row`` and send what it completes."""
        run = s.run
        tok = run.step(row, run.res)
        self.metrics["tokens_generated"] += 1
        reason = self._take(s, tok, len(s.held))
        if reason is not None:
            return self._finish(s, reason)
        run.next_tok = tok
        self._send(run, final=False)

    def _take(self, s: Slot, tok: int, n_held: int) -> str | None:
        """A sampled token into the job (an end-of-generation token is not kept); the finish
        reason it ends the job with, or None.  n_held: tokens the slot's memory will hold."""
        run, job = s.run, s.run.job
        if self.tok.is_eog(tok):
            return "stop"
        job.tokens.append(tok)
        run.pieces.append(run.stream.push(tok))
        if job.stop and _ends_with_stop(run.pieces, job.stop):
            return "stop"
        if job.grammar is not None and job.grammar.done():
            return "stop"
        if 0 <= job.n_predict <= len(job.tokens):
            return "length"
        if n_held + 1 >= self.n_ctx_slot:
            return "length"
        return None

    def _send(self, run: _Run, final: bool) -> None:
        """Send the text not sent yet, less a tail that may be the start of a stop string."""
        text = "".join(run.pieces)
        end = len(text)
        if run.job.stop:
            hit = [i for i in (text.find(x) for x in run.job.stop) if i >= 0]
            if hit:
                end = min(hit)
            elif not final:
                end = len(text) - _held_back(text, run.job.stop)
        if end > run.sent or (final and len(run.job.tokens) > run.toks_sent):
            probs = run.res.probs[run.probs_sent:]
            ids = run.job.tokens[run.toks_sent:]
            run.probs_sent, run.toks_sent = len(run.res.probs), len(run.job.tokens)
            run.job.on_event(("text", text[run.sent:end], probs, ids))
            run.sent = max(end, run.sent)
        run.job.text = text[:run.sent]

    def _finish(self, s: Slot, reason: str) -> None:
        run = s.run
        run.pieces.append(run.stream.flush())
        self._send(run, final=True)
        fed = len(s.held)
        if fed > len(run.job.prompt):
            self.ctx.memory.checkpoint(s.id)   # the next turn diverges here
            if self.draft is not None:         # the draft's sequence too, where it agrees with the slot
                try:
                    self.draft.trim(s.id, s.held)
                    if len(self.draft.held[s.id]) > len(run.job.prompt):
                        self.draft.checkpoint(s.id)
                except Exception:   # noqa: BLE001
                    log.exception("serve: draft model checkpoint failed")
                    self.draft.forget(s.id)
        self._release(s, reason)
        run.job.on_event(("done", run.job))

    def _release(self, s: Slot, reason: str) -> None:
        job = s.run.job
        job.finish_reason, job.t_end = reason, time.perf_counter()
        if not job.t_prompt:
            job.t_prompt = job.t_end
        s.run = None
        s.last_used = time.perf_counter()


def _held_back(text: str, stops: list[str]) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of a stop string."""
    best = 0
    for x in stops:
        for n in range(min(len(x) - 1, len(text)), best, -1):
            if text.endswith(x[:n]):
                best = n
                break
    return best
