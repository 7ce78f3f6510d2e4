"""One generation run over a GGUF file, the body of ``toolkit run``: load the model, tokenize the
prompt (or take token ids), restore a session prefix, generate, save the session and the prompt
logits.  Output goes through callbacks; the caller renders the result (text or JSON).

    opts = RunOptions(model="m.gguf", prompt="Hello", n_predict=16, sampling=SamplerParams(temp=0))
    res = run(opts, on_text=lambda s: print(s, end="", flush=True))
    print(res.generation.timings.summary())

Error messages name the ``toolkit run`` flags (``--tokens``, ``--ctx-size``) the options come from.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from toolkit.errors import InputError
from toolkit.gguf_io import atomic_output, check_output
from toolkit.runtime import interrupt
from toolkit.runtime.context import Context
from toolkit.runtime.generate import GenerationResult, generate
from toolkit.runtime.model import Model
from toolkit.runtime.options import RuntimeOptions
from toolkit.runtime.sampling import Sampler, SamplerParams
from toolkit.runtime.step import Verifier
from toolkit.runtime.tokenizer import Tokenizer


@dataclass
class RunOptions:
    """What to run (validated ranges are the caller's job: toolkit/cli/limits.py).

    model:            GGUF file path (must exist)
    prompt:           prompt text (tokenized with the file's BOS rule, special tokens parsed);
                      exactly one of ``prompt`` / ``tokens`` is set
    tokens:           comma- or space-separated token ids fed instead of text ("1,2,3")
    n_predict:        tokens to generate; -1 = until end of generation or a full context
    sampling:         :class:`toolkit.runtime.sampling.SamplerParams` (seed None: random)
    ctx_size:         context size in tokens (>= the prompt's tokens)
    threads:          CPU threads; None = TOOLKIT_THREADS or every CPU
    ubatch:           tokens per micro-batch when decoding the prompt
    logits_out:       write float32 [n_prompt, n_vocab] prompt logits as .npy here, or None
    session:          session file: reuse its saved state for the shared prompt prefix, save
                      the state after the run; None = no session
    checkpoints:      recurrent-state checkpoints kept per sequence
    checkpoint_every: also checkpoint every N positions (0: only at the end of the prompt)
    ignore_eos:       never stop at an end-of-generation token (they are masked out of sampling)
    stop:             reverse prompts: stop once the generated text ends with one of them
    n_probs:          record the n most probable tokens of each generated position
    system:           a system message: the prompt is then rendered with the chat template as
                      [system, user] plus the assistant's opening (needs a template)
    chat_template:    override of the GGUF's template (toolkit.runtime.chat.ChatTemplate.from_gguf)
    grammar:          GBNF text constraining the output (toolkit.runtime.grammar), or None
    json_schema:      JSON schema text constraining the output, or None (not with ``grammar``)
    context_shift:    when the context is full, drop half of the tokens after the first ``keep``
                      and go on (llama-cli --context-shift; toolkit.runtime.shift)
    keep:             prompt tokens the shift keeps (llama-cli --keep: -1 or more than the
                      prompt = the whole prompt; else keep + 1 when the model adds a BOS)
    draft_model:      speculative decoding with this GGUF as the draft (same vocabulary), or None
    mtp:              speculative decoding with the model's own MTP / NextN head as the draft
                      (toolkit.runtime.mtp; the file must have one)
    lookup:           speculative decoding with prompt-lookup drafts (n-grams of the context)
    draft_ngram:      the longest n-gram a lookup draft matches (toolkit.runtime.speculative)
    draft_max, draft_min: tokens drafted per step at most / at least (a shorter draft is not sent)
    options:          :class:`toolkit.runtime.options.RuntimeOptions` of the model (repacking, BF16
                      GEMM, chunk thresholds); default: none of them (the CLI's: from_env())
    draft_options:    the draft model's (None: ``options``)
    ctx_size 0 means the model's training context length (``n_ctx_train``).
    """

    model: str
    prompt: str | None = None
    tokens: str | None = None
    n_predict: int = 128
    sampling: SamplerParams = field(default_factory=SamplerParams)
    ctx_size: int = 4096
    threads: int | None = None
    ubatch: int = 512
    mmap: bool = True           # False: read the weights into memory (--no-mmap)
    options: RuntimeOptions = field(default_factory=RuntimeOptions)
    draft_options: RuntimeOptions | None = None
    logits_out: str | None = None
    session: str | None = None
    checkpoints: int = 4
    checkpoint_every: int = 256
    ignore_eos: bool = False
    stop: list[str] = field(default_factory=list)
    n_probs: int = 0
    system: str | None = None
    chat_template: str | None = None
    grammar: str | None = None
    json_schema: str | None = None
    context_shift: bool = False
    keep: int = 0
    draft_model: str | None = None
    mtp: bool = False
    lookup: bool = False
    draft_ngram: int = 3
    draft_max: int = 16
    draft_min: int = 0


@dataclass
class RunResult:
    """What a run produced.

    generation:   :class:`toolkit.runtime.generate.GenerationResult`: prompt_tokens / tokens
                  (lists of int ids), text, stop_reason ("eog" | "n_predict" | "ctx_full" |
                  "interrupted"), timings (n_prompt, prompt_s, n_gen, gen_s), prompt_logits
                  (float32 [n_prompt, n_vocab] with ``logits_out``, else None)
    sampling:     the sampler's settings with the seed actually used (JSON-ready dict)
    n_vocab:      the model's vocabulary size (logits width)
    n_reused:     prompt tokens restored from the session file (0 without ``session``)
    session_note: why fewer prompt tokens were reused than shared, or "" (with ``session``)
    architecture: the GGUF's general.architecture
    """

    generation: GenerationResult
    sampling: dict
    n_vocab: int
    n_reused: int = 0
    session_note: str = ""
    architecture: str = ""
    spec: dict | None = None


def parse_token_ids(spec: str, n_vocab: int) -> list[int]:
    """"1,2,3" (commas and/or spaces) -> [1, 2, 3].

    Raises:
        InputError: naming --tokens, for a non-integer or out-of-range [0, n_vocab) id, or no id.
    """
    ids = []
    for part in spec.replace(" ", ",").split(","):
        if not part:
            continue
        try:
            v = int(part)
        except ValueError:
            raise InputError(f"--tokens: {part!r} is not an integer token id") from None
        if not 0 <= v < n_vocab:
            raise InputError(f"--tokens: id {v} is outside the vocabulary [0, {n_vocab})")
        ids.append(v)
    if not ids:
        raise InputError("--tokens: no token ids given")
    return ids


def save_npy_atomic(path: str, arr: np.ndarray, inputs: tuple[str, ...] = ()) -> None:
    """Write ``arr`` (any dtype and shape) as .npy at ``path`` through atomic_output (nothing
    half-written is left).

    Raises:
        InputError: ``path`` is one of ``inputs`` (the model: it is never overwritten).
    """
    with atomic_output(path, inputs=inputs) as tmp:
        with open(tmp, "wb") as fh:   # a file object: np.save would append ".npy" to a name
            np.save(fh, arr)


def _prompt_ids(opts: RunOptions, tok: Tokenizer, n_vocab: int, gguf=None) -> list[int]:
    """The prompt's token ids (from ``tokens``, by tokenizing ``prompt``, or the chat template's
    rendering of [system, user] with ``system``), checked to be non-empty and to fit in
    ``ctx_size``; InputError otherwise."""
    if opts.tokens is not None:
        ids = parse_token_ids(opts.tokens, n_vocab)
    elif opts.system is not None:
        from toolkit.runtime.chat import ChatTemplate
        tpl = ChatTemplate.from_gguf(gguf, opts.chat_template)
        if tpl is None:
            raise InputError("-sys/--system-prompt needs a chat template: the model has none "
                             "(give --chat-template NAME|FILE)")
        msgs = [{"role": "system", "content": opts.system}, {"role": "user", "content": opts.prompt}]
        ids = tpl.encode(tok, msgs, add_generation_prompt=True)
    else:
        ids = tok.encode(opts.prompt, add_special=True, parse_special=True)
        if not ids:
            raise InputError("the prompt is empty after tokenization (and the model adds no BOS)")
    if len(ids) > opts.ctx_size:
        raise InputError(f"the prompt has {len(ids)} tokens, more than --ctx-size {opts.ctx_size}")
    return ids


def make_grammar(opts: RunOptions, tok: Tokenizer, n_vocab: int):
    """The toolkit.runtime.grammar.Grammar of ``opts.grammar`` / ``opts.json_schema``, or None."""
    if opts.grammar is None and opts.json_schema is None:
        return None
    from toolkit.runtime.grammar import Grammar
    if opts.grammar is not None:
        return Grammar.from_gbnf(tok, n_vocab, opts.grammar)
    return Grammar.from_json_schema(tok, n_vocab, opts.json_schema)


def context_size(requested: int, m: Model) -> int:
    """``requested`` tokens, or for 0 the model's training context length (``n_ctx_train``,
    GGUF ``{arch}.context_length``; 4096 when the file does not say)."""
    if requested:
        return requested
    return int(getattr(m.hparams, "n_ctx_train", 0) or 4096)


def n_keep_of(keep: int, n_prompt: int, add_bos: bool) -> int:
    """Tokens a context shift keeps (llama.cpp tools/completion/completion.cpp): the whole
    prompt when ``keep`` < 0 or > n_prompt, else keep + 1 with a BOS (always kept)."""
    if keep < 0 or keep > n_prompt:
        return n_prompt
    return keep + int(bool(add_bos))


def _save_outputs(opts: RunOptions, ctx, res: GenerationResult) -> None:
    """After generation: the session file (the tokens the context holds) and the prompt logits."""
    if opts.session is not None:
        from toolkit.runtime.session import save_session
        fed = ctx.memory.seq_pos_max(0) + 1
        held = res.held_tokens if res.n_shifts else res.prompt_tokens + res.tokens
        if fed > 0:
            save_session(ctx, opts.session, held[:fed], inputs=(opts.model,))
    if opts.logits_out is not None and res.prompt_logits is not None:
        save_npy_atomic(opts.logits_out, res.prompt_logits, inputs=(opts.model,))


def run(opts: RunOptions, *, on_text: Callable[[str], None] | None = None,
        on_prompt: Callable[[str], None] | None = None,
        on_report: Callable[[str], None] | None = None) -> RunResult:
    """Load ``opts.model``, generate, save the session / logits files; the model is closed on return.

    on_report: called once with the memory report (weights, KV, recurrent state, checkpoints,
               compute buffers; text) after the context is made; not computed when None
    on_prompt: called once with the prompt's text (as llama-cli echoes it) before generation;
               not computed when None
    on_text:   called with each new piece of complete UTF-8 generated text

    Ctrl-C during generation ends it (``stop_reason == "interrupted"``); the session and
    logits files are still written (when the memory holds tokens: an aborted decode empties
    it).  The whole run is a deferred scope of toolkit.runtime.interrupt: with the CLI's
    handlers a signal stops the C work at a safe point, never in the middle of a free.

    Raises:
        InputError: an output path is the model or a directory, malformed file or token ids,
                    empty or too long prompt, unusable session file.
        NativeError / UnsupportedError / ResourceError: from loading the model or decoding.
    """
    if opts.logits_out is not None:
        check_output(opts.logits_out, inputs=(opts.model,))   # before any work: never the model, never a directory
    if opts.session is not None and os.path.exists(opts.session):
        check_output(opts.session, inputs=(opts.model,))

    with interrupt.deferred():
        return _run(opts, on_text, on_prompt, on_report)


def report_memory(on_report: Callable[[str], None], m: Model, mem: dict[str, int], n_ctx: int) -> None:
    """Hand ``on_report`` the memory report of ``mem`` (bytes by kind: ``memory_estimate`` or
    ``Context.memory_report``) for one sequence of ``n_ctx`` tokens, then ``m``'s re-laid
    weights when it has any (``run -v``, ``chat -v``)."""
    from toolkit.runtime.memory import format_repack, format_report
    on_report(format_report(mem, n_ctx, 1, (m.options.cache_type_k, m.options.cache_type_v)))
    rp = m.repack_info
    if rp["n_tensors"]:
        on_report(format_repack(rp))


def speculative(opts: RunOptions) -> bool:
    """Whether ``opts`` asks for speculative decoding (a draft model, lookup or the MTP head)."""
    return opts.draft_model is not None or opts.lookup or opts.mtp


def make_drafter(opts: RunOptions, tok: Tokenizer, seed: int, on_report=None, model=None, ctx=None):
    """(drafter, draft Model or None) for ``opts.draft_model`` / ``opts.lookup`` / ``opts.mtp``
    (toolkit.runtime.speculative, toolkit.runtime.mtp: the MTP head of ``model`` drafting for
    ``ctx``, whose decodes it follows); the caller closes both.

    Raises:
        InputError: the draft model's vocabulary differs; --mtp on a file without an MTP head.
    """
    from toolkit.runtime.context import memory_estimate
    from toolkit.runtime.memory import format_report
    from toolkit.runtime.speculative import PromptLookup, open_draft_context, open_draft_model

    if opts.mtp:
        from toolkit.runtime.mtp import open_mtp_draft
        draft = open_mtp_draft(model, ctx, n_ctx=opts.ctx_size, n_ubatch=opts.ubatch, n_threads=opts.threads,
                               params=opts.sampling, seed=seed)
        if on_report is not None:
            r = draft.ctx.memory_report()
            r["weights"] = draft.ctx.model.weight_bytes
            kv = (draft.ctx.model.options.cache_type_k, draft.ctx.model.options.cache_type_v)
            on_report("with --mtp, besides the total: the MTP head's " + format_report(r, opts.ctx_size, 1, kv))
        return draft, None
    if opts.draft_model is None:
        return PromptLookup(opts.draft_ngram), None
    dm = open_draft_model(opts.draft_model, tok, opts.threads,
                          opts.draft_options if opts.draft_options is not None else opts.options)
    try:
        draft = open_draft_context(dm, opts.draft_max, n_ctx=opts.ctx_size, n_ubatch=opts.ubatch,
                                   n_threads=opts.threads, params=opts.sampling, seed=seed)
        if on_report is not None:
            r = memory_estimate(dm, opts.ctx_size, 1, opts.ubatch, opts.threads, n_checkpoints=1,
                                draft_window=opts.draft_max)
            on_report("draft model " + format_report(r, opts.ctx_size, 1))
        return draft, dm
    except BaseException:
        dm.close()
        raise


def _speculative(opts: RunOptions, ctx, tok: Tokenizer, prompt_ids, sampler, grammar, on_text, drafter,
                 n_reused: int) -> GenerationResult:
    """generate_speculative with ``drafter`` (make_drafter; toolkit.runtime.speculative)."""
    from toolkit.runtime.speculative import generate_speculative

    return generate_speculative(ctx, tok, prompt_ids, opts.n_predict, sampler, drafter, on_text=on_text,
                                draft_max=opts.draft_max, draft_min=opts.draft_min, n_reused=n_reused,
                                split_last=opts.session is not None, prompt_logits=opts.logits_out is not None,
                                ignore_eos=opts.ignore_eos, stop=opts.stop, n_probs=opts.n_probs, grammar=grammar,
                                context_shift=opts.context_shift, n_keep=n_keep_of(opts.keep, len(prompt_ids), tok.add_bos))


def _run(opts: RunOptions, on_text, on_prompt, on_report) -> RunResult:
    """The body of :func:`run`, in a deferred-interrupt scope."""
    m = Model(opts.model, n_threads=opts.threads, mmap=opts.mmap, options=opts.options)
    drafter, dm = None, None
    try:
        tok = Tokenizer.from_gguf(m.gguf)
        n_vocab = int(m.hparams.n_vocab)
        n_ctx = context_size(opts.ctx_size, m)
        opts.ctx_size = n_ctx
        prompt_ids = _prompt_ids(opts, tok, n_vocab, m.gguf)
        grammar = make_grammar(opts, tok, n_vocab)
        ctx = Context(m, n_ctx=opts.ctx_size, n_seq_max=1, n_ubatch=opts.ubatch, n_threads=opts.threads,
                      n_checkpoints=opts.checkpoints, checkpoint_every=opts.checkpoint_every)
        sampler = Sampler(opts.sampling)
        if speculative(opts):
            if opts.mtp:
                from toolkit.runtime.mtp import check_mtp
                check_mtp(m)                                        # one line, exit 2, before any work
            Verifier.attach(ctx, opts.draft_max, opts.draft_min)   # the window before the report: its draft line
        if on_report is not None:   # the C estimate for these parameters (== ctx.memory_report())
            from toolkit.runtime.context import memory_estimate
            mem = memory_estimate(m, opts.ctx_size, 1, opts.ubatch, opts.threads, opts.checkpoints,
                                  draft_window=opts.draft_max if speculative(opts) else 0, keep_last=False)
            report_memory(on_report, m, mem, opts.ctx_size)
        if speculative(opts):
            # the drafter (and its checks: vocabulary) before any output
            if on_report is not None:
                on_report(f"speculative window: {opts.draft_max} tokens, draft {mem['draft']} bytes")
            drafter, dm = make_drafter(opts, tok, sampler.seed, on_report, model=m, ctx=ctx)
        n_reused, note = 0, ""
        if opts.session is not None:
            from toolkit.runtime.session import restore_session
            n_reused, note = restore_session(ctx, opts.session, prompt_ids)
        if on_prompt is not None:
            on_prompt(tok.decode(prompt_ids) if opts.tokens is None
                      else tok.decode(prompt_ids, strip_space_prefix=False))
        if drafter is not None:
            res = _speculative(opts, ctx, tok, prompt_ids, sampler, grammar, on_text, drafter, n_reused)
        else:
            res = generate(ctx, tok, prompt_ids, opts.n_predict, sampler, on_text=on_text,
                           prompt_logits=opts.logits_out is not None, n_reused=n_reused,
                           split_last=opts.session is not None, ignore_eos=opts.ignore_eos,
                           stop=opts.stop, n_probs=opts.n_probs, grammar=grammar,
                           context_shift=opts.context_shift, n_keep=n_keep_of(opts.keep, len(prompt_ids), tok.add_bos))
        _save_outputs(opts, ctx, res)
        return RunResult(generation=res, sampling=sampler.to_dict(), n_vocab=n_vocab,
                         n_reused=n_reused, session_note=note, architecture=m.hparams.arch,
                         spec=res.spec.to_dict() if res.spec is not None else None)
    finally:
        if drafter is not None:
            drafter.close()
        if dm is not None:
            dm.close()
        m.close()
