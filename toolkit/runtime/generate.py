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
    stop_reason: "eog" | "n_predict" | "ctx_full" | "interrupted";
    prompt_logits: float32 [n_prompt, n_vocab] when requested, else None;
    n_shifts: context shifts done (``context_shift``); held_tokens: the ids the sequence holds
    at the end, in position order (prompt + tokens less what the shifts dropped)."""

    prompt_tokens: list[int]
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    stop_reason: str = "n_predict"
    timings: Timings = field(default_factory=Timings)
    prompt_logits: np.ndarray | None = None
    n_shifts: int = 0
    held_tokens: list[int] = field(default_factory=list)

    @property
    def interrupted(self) -> bool:
        return self.stop_reason == "interrupted"


def generate(ctx, tokenizer: Tokenizer, prompt_tokens: Sequence[int], n_predict: int, sampler: Sampler,
             on_text: Callable[[str], None] | None = None, *, seq_id: int = 0,
             prompt_logits: bool = False, n_reused: int = 0, split_last: bool = False,
             context_shift: bool = False, n_keep: int = 0) -> GenerationResult:
    """Feed ``prompt_tokens`` to ``ctx`` (sequence ``seq_id``, which should be empty), then sample.

    ctx:           a toolkit.runtime.Context (decode(tokens, seq_id, logits) -> float32 logits;
                   n_ctx: context size in tokens)
    n_predict:     maximum generated tokens; -1 = until end-of-generation or a full context
    on_text:       called with each new piece of complete UTF-8 text as it is generated
    prompt_logits: also return the logits of every decoded prompt position, float32 [n, n_vocab]
    n_reused:      the first n_reused prompt tokens are already in the sequence (a restored
                   session, toolkit.runtime.session); only the rest are decoded (at least one)
    split_last:    decode the prompt's last token in a call of its own, so recurrent checkpoints
                   land one token before the end and at the end (the same prompt can then be
                   replayed from a session, or extended); the logits are the same (ubatch
                   splits are bit-identical); ctx needs .memory.checkpoint(seq_id)
    context_shift: when the next token would not fit in n_ctx, keep the first ``n_keep`` held
                   tokens, drop half of the rest and shift the remainder back (llama-cli
                   --context-shift; toolkit.runtime.shift) instead of stopping with "ctx_full"

    Raises:
        InputError: empty prompt, n_predict < -1, or a prompt longer than the context.
    """
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
    res = GenerationResult(prompt_tokens=prompt)
    stream = tokenizer.stream()
    pieces: list[str] = []

    def emit(s: str) -> None:
        if s:
            pieces.append(s)
            if on_text is not None:
                on_text(s)

    n_past = 0
    held = list(prompt)
    t0 = time.perf_counter()
    try:
        todo = prompt[n_reused:]
        split = split_last and not prompt_logits and len(todo) > 1
        if split:
            ctx.decode(todo[:-1], seq_id=seq_id, logits="none")
            todo = todo[-1:]
        logits = ctx.decode(todo, seq_id=seq_id, logits="all" if prompt_logits else "last")
        if split:
            ctx.memory.checkpoint(seq_id)       # and one at the end of the prompt
        res.timings.n_prompt = len(prompt) - n_reused
        res.timings.prompt_s = time.perf_counter() - t0
        if prompt_logits:
            res.prompt_logits = np.asarray(logits, dtype=np.float32)
        n_past = len(prompt)
        t1 = time.perf_counter()
        while n_predict < 0 or len(res.tokens) < n_predict:
            tok = sampler.sample(logits[-1])
            if tokenizer.is_eog(tok):
                res.stop_reason = "eog"
                break
            res.tokens.append(tok)
            res.timings.n_gen = len(res.tokens)
            res.timings.gen_s = time.perf_counter() - t1
            emit(stream.push(tok))
            if n_predict >= 0 and len(res.tokens) >= n_predict:
                res.stop_reason = "n_predict"
                break
            if n_ctx and n_past >= n_ctx:
                d = context_shift_(ctx, seq_id, n_keep, n_past) if context_shift else 0
                if d <= 0:
                    res.stop_reason = "ctx_full"
                    break
                held = shift_tokens(held, min(max(n_keep, 0), n_past), d)
                n_past -= d
                res.n_shifts += 1
            logits = ctx.decode([tok], seq_id=seq_id, logits="last")
            held.append(tok)
            n_past += 1
        res.timings.gen_s = time.perf_counter() - t1 if res.tokens else 0.0
    except KeyboardInterrupt:
        res.stop_reason = "interrupted"
        if res.timings.n_prompt == 0:
            res.timings.prompt_s = time.perf_counter() - t0
    emit(stream.flush())
    res.text = "".join(pieces)
    res.held_tokens = held[:n_past]
    return res
