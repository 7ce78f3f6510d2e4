"""One request as the scheduler (:mod:`toolkit.serve.engine`) runs it: the Job, the queue's
errors, and what a slot keeps while it runs one (SlotRun: its TokenStep and what was sent)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from toolkit.runtime.sampling import Sampler, SamplerParams
from toolkit.runtime.speculative import draft_sampler
from toolkit.runtime.step import TokenStep

SHUTTING_DOWN = "server shutting down"

# a TokenStep's stop reason -> the job's finish_reason (OpenAI's "stop" / "length")
FINISH = {"eog": "stop", "stop": "stop", "grammar": "stop", "n_predict": "length", "ctx_full": "length"}


class QueueFull(Exception):
    """No slot is free and the wait queue holds ``queue`` jobs already, or the server is
    shutting down (HTTP 503 + Retry-After)."""


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


class SlotRun:
    """The per-job state a slot keeps while it works on a job: its sampler and TokenStep (the
    step's ``tokens`` are the job's), the text sent so far, the prompt tokens left to decode."""

    def __init__(self, job: Job, tok, n_ctx_slot: int, drafting: bool):
        self.job = job
        self.sampler = Sampler(job.params)
        job.seed = self.sampler.seed
        self.step = TokenStep(self.sampler, tok, n_predict=job.n_predict, stop=job.stop, grammar=job.grammar,
                              ignore_eos=job.ignore_eos, n_probs=job.n_probs, n_ctx=n_ctx_slot)
        job.tokens = self.step.tokens
        self.sent = self.probs_sent = self.toks_sent = 0   # characters, n_probs records, ids sent
        self.todo: list[int] = []       # prompt tokens not yet decoded
        self.draft_sampler = draft_sampler(job.params, self.sampler.seed) if drafting else None
        self.next_tok: int | None = None
        for t in job.prompt:
            self.sampler.accept(t)

    def left(self) -> int | None:
        """Tokens the answer may still keep after the next one (None: no n_predict limit)."""
        n = self.job.n_predict
        return n - len(self.step.tokens) - 1 if n >= 0 else None

    def send(self, final: bool) -> None:
        """Send ("text", str, probs, ids) with what was not sent yet, if anything: the text up to
        the first stop string, less (unless ``final``) a tail that may be the start of one.
        Sets ``job.text`` to what was sent."""
        text, job = self.step.text, self.job
        end = len(text)
        if job.stop:
            hit = [i for i in (text.find(x) for x in job.stop) if i >= 0]
            if hit:
                end = min(hit)
            elif not final:
                end = len(text) - _held_back(text, job.stop)
        if end > self.sent or (final and len(job.tokens) > self.toks_sent):
            ev = ("text", text[self.sent:end], self.step.probs[self.probs_sent:], job.tokens[self.toks_sent:])
            self.probs_sent, self.toks_sent = len(self.step.probs), len(job.tokens)
            self.sent = max(end, self.sent)
            job.on_event(ev)
        job.text = text[:self.sent]


class Slot:
    """Sequence ``id`` of the shared context: the tokens its memory holds, and the job it runs."""

    def __init__(self, i: int):
        self.id = i
        self.held: list[int] = []
        self.run: SlotRun | None = None
        self.last_used = 0.0


def _held_back(text: str, stops: list[str]) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of a stop string."""
    best = 0
    for x in stops:
        for n in range(min(len(x) - 1, len(text)), best, -1):
            if text.endswith(x[:n]):
                best = n
                break
    return best
