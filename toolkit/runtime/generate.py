"""The generation loop: prompt prefill, then sample / decode one token at a time.

    result = generate(ctx, tok, prompt_ids, n_predict=64, sampler=Sampler(SamplerParams(temp=0)),
                      on_text=lambda s: print(s, end="", flush=True))

Stops after ``n_predict`` generated tokens (``-1``: no limit), at an end-of-generation token
(eos / eot / eom of the tokenizer; not included in the result), when the context is full, or
on Ctrl-C (KeyboardInterrupt is caught; the result holds what was generated so far).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from toolkit.errors import InputError
from toolkit.runtime.sampling import Sampler
from toolkit.runtime.shift import context_shift as context_shift_, shift_tokens
from toolkit.runtime.step import TokenStep
from toolkit.runtime.tokenizer import Tokenizer


@dataclass
class Timings:
    """Wall-clock timings.  prompt: the prefill decode of all prompt tokens; generation: from the
    end of the prefill to the last sampled token (n_gen samples and n_gen - 1 one-token decodes)."""

    n_prompt: int = 0
    prompt_s: float = 0.0
    n_gen: int = 0
    gen_s: float = 0.0

    @property
    def prompt_tps(self) -> float:
        return self.n_prompt / self.prompt_s if self.prompt_s > 0 else 0.0

    @property
    def gen_tps(self) -> float:
        return self.n_gen / self.gen_s if self.gen_s > 0 else 0.0

    def to_dict(self) -> dict:
        return {"n_prompt": self.n_prompt, "prompt_ms": round(self.prompt_s * 1e3, 3),
                "prompt_tokens_per_s": round(self.prompt_tps, 3),
                "n_gen": self.n_gen, "gen_ms": round(self.gen_s * 1e3, 3),
                "gen_tokens_per_s": round(self.gen_tps, 3)}

    def summary(self) -> str:
        return (f"prompt: {self.n_prompt} tokens in {self.prompt_s * 1e3:.1f} ms ({self.prompt_tps:.2f} t/s) | "
                f"generation: {self.n_gen} tokens in {self.gen_s * 1e3:.1f} ms ({self.gen_tps:.2f} t/s)")


@dataclass
class GenerationResult:
    """prompt_tokens / tokens: ids; text: the generated text (complete UTF-8 only);
    stop_reason: "eog" | "n_predict" | "ctx_full" | "stop" (a ``stop`` string, e.g. -r) |
    "grammar" (the grammar is complete) | "interrupted"; prompt_logits: float32 [n_prompt, n_vocab] when requested, else None;
    probs: with ``n_probs`` > 0, one entry per generated token: {"id", "prob", "top":
    [{"id", "prob"}, ...]}, the probabilities of the softmax over the logits the sampler saw
    (after the penalties, before truncation and temperature), the ``n_probs`` most likely first;
    n_shifts: context shifts done (``context_shift``); held_tokens: the ids the sequence holds
    at the end, in position order (prompt + tokens less what the shifts dropped); spec: with
    speculative decoding, the draft counts (toolkit.runtime.speculative.SpecStats), else None."""

    prompt_tokens: list[int]
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    stop_reason: str = "n_predict"
    timings: Timings = field(default_factory=Timings)
    prompt_logits: np.ndarray | None = None
    probs: list[dict] = field(default_factory=list)
    n_shifts: int = 0
    held_tokens: list[int] = field(default_factory=list)
    spec: object | None = None   # speculative decoding: toolkit.runtime.speculative.SpecStats

    @property
    def interrupted(self) -> bool:
        return self.stop_reason == "interrupted"


def generate(ctx, tokenizer: Tokenizer, prompt_tokens: Sequence[int], n_predict: int, sampler: Sampler,
             on_text: Callable[[str], None] | None = None, *, seq_id: int = 0,
             prompt_logits: bool = False, n_reused: int = 0, split_last: bool = False,
             ignore_eos: bool = False, stop: Sequence[str] = (), n_probs: int = 0,
             grammar=None, context_shift: bool = False, n_keep: int = 0) -> GenerationResult:
    """Feed ``prompt_tokens`` to ``ctx`` (sequence ``seq_id``, which should hold exactly the
    first ``n_reused`` of them), then sample.

    ctx:           a toolkit.runtime.Context (decode(tokens, seq_id, logits) -> float32 logits;
                   n_ctx: context size in tokens)
    n_predict:     maximum generated tokens; -1 = until end-of-generation or a full context
    sampler:       every prompt token is accepted into its penalty window first (as
                   llama-completion does), then each sampled token
    on_text:       called with each new piece of complete UTF-8 text as it is generated
    prompt_logits: also return the logits of every decoded prompt position, float32 [n, n_vocab]
    n_reused:      the first n_reused prompt tokens are already in the sequence (a restored
                   session, a conversation's cached prefix); only the rest are decoded (>= 1)
    split_last:    decode the prompt's last token in a call of its own, so recurrent checkpoints
                   land one token before the end and at the end (the same prompt can then be
                   replayed from a session, or extended); the logits are the same (ubatch
                   splits are bit-identical); ctx needs .memory.checkpoint(seq_id)
    ignore_eos:    never stop at an end-of-generation token: their logits are set to -inf
                   before sampling (llama.cpp's --ignore-eos: a logit bias of -inf on every
                   EOG id, common/common.cpp)
    stop:          strings (llama.cpp's -r/--reverse-prompt): generation stops at the token
                   whose text completes one of them (the whole token is kept in the text)
    n_probs:       record the n most probable tokens of every step (``GenerationResult.probs``)
    grammar:       a toolkit.runtime.grammar.Grammar: tokens it forbids are masked before
                   sampling; generation ends when it is complete (stop_reason "grammar")
    context_shift: when the next token would not fit in n_ctx, keep the first ``n_keep`` held
                   tokens, drop half of the rest and shift the remainder back (llama-cli
                   --context-shift; toolkit.runtime.shift) instead of stopping with "ctx_full"

    Raises:
        InputError: empty prompt, n_predict < -1, or a prompt longer than the context.
    """
    prompt, n_ctx = check_args(ctx, prompt_tokens, n_predict, n_reused)
    step = TokenStep(sampler, tokenizer, n_predict=n_predict, stop=stop, grammar=grammar, ignore_eos=ignore_eos,
                     n_probs=n_probs, on_text=on_text)
    res = GenerationResult(prompt_tokens=prompt, tokens=step.tokens, probs=step.probs)
    n_past, held = 0, list(prompt)
    t0 = time.perf_counter()
    try:
        logits = start(ctx, res, n_reused, seq_id, prompt_logits, split_last, sampler, t0)
        n_past = len(prompt)
        t1 = time.perf_counter()
        while n_predict < 0 or len(res.tokens) < n_predict:
            tok, reason = step(logits[-1])
            res.timings.gen_s = time.perf_counter() - t1
            if reason is not None:
                res.stop_reason = reason
                break
            if n_ctx and n_past >= n_ctx:
                n_past = _shift(ctx, seq_id, n_keep, n_past, held, res) if context_shift else n_past
                if n_past >= n_ctx:
                    res.stop_reason = "ctx_full"
                    break
            held.append(tok)     # before the decode: an interrupt may come after the memory took it
            logits = ctx.decode([tok], seq_id=seq_id, logits="last")
            n_past += 1
        res.timings.gen_s = time.perf_counter() - t1 if res.tokens else 0.0
    except KeyboardInterrupt:
        res.stop_reason = "interrupted"
        if res.timings.n_prompt == 0:
            res.timings.prompt_s = time.perf_counter() - t0
        n_past = n_held_after(ctx, seq_id, len(held))
    finish(res, step)
    res.held_tokens = held[:n_past]
    return res


def finish(res: GenerationResult, step: TokenStep) -> None:
    """The end of an answer: the text the stream held back, ``res.text`` and ``n_gen``."""
    res.text = step.finish()
    res.timings.n_gen = len(res.tokens)


def check_args(ctx, prompt_tokens: Sequence[int], n_predict: int, n_reused: int) -> tuple[list[int], int]:
    """The prompt as a list of ints and ctx's n_ctx (0: unknown).

    Raises:
        InputError: as :func:`generate` (empty or too long prompt, n_predict < -1, n_reused
            outside [0, len(prompt)))."""
    prompt = [int(t) for t in prompt_tokens]
    if not prompt:
        raise InputError("the prompt is empty (no tokens to decode)")
    if n_predict < -1:
        raise InputError(f"--n-predict must be >= -1, got {n_predict}")
    n_ctx = int(getattr(ctx, "n_ctx", 0) or 0)
    if n_ctx and len(prompt) > n_ctx:
        raise InputError(f"the prompt has {len(prompt)} tokens, more than the context size {n_ctx} "
                         f"(raise --ctx-size)")
    if not 0 <= n_reused < len(prompt):
        raise InputError(f"n_reused = {n_reused}: must be in [0, {len(prompt)}) (one prompt token is decoded)")
    return prompt, n_ctx


def start(ctx, res: GenerationResult, n_reused: int, seq_id: int, prompt_logits: bool, split_last: bool,
          sampler: Sampler, t0: float) -> np.ndarray:
    """The prefill of ``res.prompt_tokens`` (timed from t0, prompt logits kept when asked), and
    the prompt tokens into the sampler's penalty window; returns the logits generation starts from."""
    logits = _prefill(ctx, res.prompt_tokens[n_reused:], seq_id, prompt_logits, split_last)
    res.timings.n_prompt = len(res.prompt_tokens) - n_reused
    res.timings.prompt_s = time.perf_counter() - t0
    if prompt_logits:
        res.prompt_logits = np.asarray(logits, dtype=np.float32)
    for t in res.prompt_tokens:
        sampler.accept(t)
    return logits


def n_held_after(ctx, seq_id: int, n_max: int) -> int:
    """Tokens the sequence holds after an interrupt, at most ``n_max``: the memory's count (a
    decode interrupted after it finished holds its token; an aborted one leaves the sequence
    empty)."""
    mem = getattr(ctx, "memory", None)
    return n_max if mem is None else max(0, min(n_max, int(mem.seq_pos_max(seq_id)) + 1))


def _shift(ctx, seq_id: int, n_keep: int, n_past: int, held: list[int], res: GenerationResult) -> int:
    """One context shift of a full sequence (toolkit.runtime.shift.context_shift): updates
    ``held`` in place and ``res.n_shifts``; returns the new n_past (unchanged: nothing to drop)."""
    d = context_shift_(ctx, seq_id, n_keep, n_past)
    if d > 0:
        held[:] = shift_tokens(held, min(max(n_keep, 0), n_past), d)
        res.n_shifts += 1
    return n_past - d


def _prefill(ctx, todo: list[int], seq_id: int, prompt_logits: bool, split_last: bool) -> np.ndarray:
    """Decode the prompt tokens not yet in the sequence; the logits ``generate`` needs."""
    split = split_last and not prompt_logits and len(todo) > 1
    if split:
        ctx.decode(todo[:-1], seq_id=seq_id, logits="none")
        ctx.memory.checkpoint(seq_id)       # (tk_decode takes it too, but not for a call of at most
        todo = todo[-1:]                    # k + 1 tokens with a speculative window k)
    logits = ctx.decode(todo, seq_id=seq_id, logits="all" if prompt_logits else "last")
    if split:
        ctx.memory.checkpoint(seq_id)       # and one at the end of the prompt
    return logits
