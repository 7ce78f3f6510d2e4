"""`toolkit run [-m MODEL.gguf] PROMPT`: generate text with the C runtime.

Text streams to stdout as it is generated, timings go to stderr.  Like llama-cli, the prompt is
echoed before the generated text unless ``--no-display-prompt``; ``--json`` prints one object
instead (nothing streamed).  The prompt is tokenized with the file's BOS rule and with special
tokens (``<|endoftext|>``...) parsed, as llama-cli does.
"""
from __future__ import annotations

import json
import os
import pathlib
import sys
from typing import Optional

import typer

from toolkit.cli.app import app, err_console
from toolkit.cli.argv import process_escapes
from toolkit.cli.runtime_opts import cache_type_option, repack_option, runtime_options
from toolkit.errors import InputError

DEFAULT_MODEL = pathlib.Path(__file__).resolve().parent.parent / "data" / "default.gguf"


def resolve_model(model: Optional[str]) -> str:
    """-m when given, else the packaged default model; InputError when neither exists."""
    if model is not None:
        if not os.path.isfile(model):
            from toolkit.gguf_io.header import missing_file_message
            msg = missing_file_message(model)
            if msg.endswith("no such file"):
                msg = f"{model}: no such model file"
            raise InputError(f"{msg} (-m/--model)")
        return model
    if DEFAULT_MODEL.is_file():
        return str(DEFAULT_MODEL)
    raise InputError(f"no model given and no packaged default model at {DEFAULT_MODEL}; "
                     f"pass one with -m/--model MODEL.gguf")


def decode_prompt(raw: bytes | str) -> str:
    """The prompt as text: bytes (stdin) decoded as UTF-8, an argv string checked for the
    undecodable bytes Python keeps as surrogates (os.fsencode gives the bytes back).

    Raises:
        InputError: "prompt is not valid UTF-8 (byte N)", N the 0-based offset of the first bad byte.
    """
    if isinstance(raw, str):
        try:
            raw.encode("utf-8")
            return raw
        except UnicodeEncodeError:
            raw = raw.encode("utf-8", "surrogateescape")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"prompt is not valid UTF-8 (byte {e.start})") from None


@app.command(context_settings={"ignore_unknown_options": False})
def run(
    prompt: Optional[str] = typer.Argument(None, metavar="[PROMPT]", help="Prompt text; '-' reads it from stdin; one that starts with '-' goes after '--'."),
    prompt_opt: Optional[str] = typer.Option(None, "-p", "--prompt", help="Prompt text (as llama-cli's -p)."),
    file: Optional[str] = typer.Option(None, "-f", "--file", help="Read the prompt from this UTF-8 file ('-': stdin); one trailing newline is dropped."),
    system: Optional[str] = typer.Option(None, "-sys", "--system-prompt", help="System message, rendered with the model's chat template."),
    escape: bool = typer.Option(True, "--escape/--no-escape", "-e", help="Process \\n \\r \\t \\' \\\" \\\\ \\xHH in PROMPT, -p, -sys and -r (llama.cpp's default; not in -f or stdin text)."),
    conversation: bool = typer.Option(False, "--conversation/--no-conversation", "-cnv/-no-cnv", help="Chat: read user turns from stdin, answer with the chat template (also: toolkit chat); -no-cnv: plain completion (the default here)."),
    single_turn: bool = typer.Option(False, "-st", "--single-turn", help="Chat: answer one user turn (the prompt, else the first line of stdin), then exit (llama-cli's -st)."),
    chat_template: Optional[str] = typer.Option(None, "--chat-template", help="Chat template: a Jinja file, or a name (chatml, or tokenizer.chat_template.NAME in the GGUF)."),
    model: Optional[str] = typer.Option(None, "-m", "--model", help="GGUF model file (default: the packaged model)."),
    n_predict: int = typer.Option(128, "-n", "--n-predict", help="Tokens to generate (-1: until end of generation or a full context)."),
    temp: float = typer.Option(0.8, "--temp", help="Temperature; 0 = greedy (argmax)."),
    top_k: int = typer.Option(40, "--top-k", help="Keep the k most likely tokens (0: off)."),
    top_p: float = typer.Option(0.95, "--top-p", help="Nucleus sampling threshold (1.0: off)."),
    min_p: float = typer.Option(0.05, "--min-p", help="Drop tokens below min_p x the top probability (0: off)."),
    repeat_penalty: float = typer.Option(1.0, "--repeat-penalty", help="Penalize repeated tokens: logit / p (logit x p when <= 0); 1.0: off."),
    repeat_last_n: int = typer.Option(64, "--repeat-last-n", help="Tokens of history the penalties look at (0: off, -1: all)."),
    presence_penalty: float = typer.Option(0.0, "--presence-penalty", help="Subtract this from the logit of every token in the window."),
    frequency_penalty: float = typer.Option(0.0, "--frequency-penalty", help="Subtract this x the token's count in the window."),
    reverse_prompt: list[str] = typer.Option([], "-r", "--reverse-prompt", help="Stop when the generated text ends with this (repeatable); in chat, end the turn."),
    grammar: Optional[str] = typer.Option(None, "--grammar", help="GBNF grammar (llama.cpp's format, start rule 'root') the output must match."),
    grammar_file: Optional[str] = typer.Option(None, "--grammar-file", help="Read the GBNF grammar from this file."),
    json_schema: Optional[str] = typer.Option(None, "-j", "--json-schema", help="JSON schema the output must match (e.g. '{\"type\": \"object\"}')."),
    json_schema_file: Optional[str] = typer.Option(None, "--json-schema-file", help="Read the JSON schema from this file."),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", help="Do not stop at an end-of-generation token (its logit is set to -inf)."),
    n_probs: int = typer.Option(0, "--n-probs", help="With --json: the N most probable tokens of every generated position."),
    seed: int = typer.Option(-1, "--seed", "-s", help="Random seed (-1: random; the seed used is in --json)."),
    ctx_size: int = typer.Option(4096, "-c", "--ctx-size", help="Context size in tokens (0: the model's training context length)."),
    threads: int = typer.Option(0, "-t", "--threads", help="CPU threads (0: TOOLKIT_THREADS, else all cores)."),
    batch: int = typer.Option(2048, "-b", "--batch-size", help="Logical batch (llama.cpp's n_batch): the micro-batch is at most this."),
    ubatch: int = typer.Option(512, "-ub", "--ubatch-size", "--ubatch", help="Micro-batch (llama.cpp's n_ubatch): prompt tokens decoded at once; the compute buffers follow it."),
    no_mmap: bool = typer.Option(False, "--no-mmap", help="Read the whole model into memory instead of mapping the file (llama.cpp's --no-mmap)."),
    repack: Optional[bool] = repack_option(),
    cache_type_k: str = cache_type_option("k"),
    cache_type_v: str = cache_type_option("v"),
    tokens: Optional[str] = typer.Option(None, "--tokens", help="Comma-separated token ids to feed instead of prompt text."),
    logits_out: Optional[str] = typer.Option(None, "--logits-out", help="Write the float32 logits of every prompt position, shape (n_prompt, n_vocab), to this .npy file."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (prompt_tokens, tokens, text, timings, ...) instead of streaming."),
    display_prompt: bool = typer.Option(True, "--display-prompt/--no-display-prompt", help="Echo the prompt before the generated text (llama-cli's default)."),
    session: Optional[str] = typer.Option(None, "--session", help="Session file: reuse the saved state for the prompt prefix it shares, save the state after the run."),
    checkpoints: int = typer.Option(4, "--checkpoints", help="Recurrent-state checkpoints kept per sequence (rollback points for --session and chat; 0: none)."),
    checkpoint_every: int = typer.Option(256, "--checkpoint-every", help="Also checkpoint every N positions (0: only at the end of the prompt)."),
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Print the memory report (weights, KV, recurrent state, checkpoints, compute buffers) to stderr, and the context shifts."),
    context_shift: bool = typer.Option(False, "--context-shift/--no-context-shift", help="When the context is full, drop half of the tokens after --keep and go on (llama-cli's --context-shift)."),
    keep: int = typer.Option(0, "--keep", help="Prompt tokens a context shift keeps (-1: all; a BOS is always kept)."),
    draft_model: Optional[str] = typer.Option(None, "-md", "--draft-model", "--model-draft", help="Speculative decoding: draft with this smaller GGUF (same vocabulary); the output is what the model alone gives (greedy: token for token)."),
    mtp: bool = typer.Option(False, "--mtp", help="Speculative decoding with the model's own MTP / NextN head as the draft (Qwen3-Next, Qwen3.5, GLM-5-Next, Ling 3 files converted with it; --draft-max default 3); the output is what the model alone gives (greedy: token for token)."),
    lookup: bool = typer.Option(False, "--lookup", help="Speculative decoding with prompt-lookup drafts: the tokens that followed the context's last n-gram earlier on (no second model; helps most when the output copies the input)."),
    draft_ngram: Optional[int] = typer.Option(None, "--draft-ngram", help="Longest n-gram a --lookup draft matches (default 3; implies --lookup)."),
    draft_max: Optional[int] = typer.Option(None, "--draft-max", "--draft", "--draft-n", help="Speculative decoding: tokens drafted per step at most (1-256; the recurrent state keeps that many + 1 snapshots per sequence) \\[default: 16]."),
    draft_min: Optional[int] = typer.Option(None, "--draft-min", "--draft-n-min", help="Speculative decoding: a draft shorter than this is not sent (one token is decoded plainly)."),
) -> None:
    """Generate text from a GGUF model: stream it to stdout, timings to stderr."""
    from toolkit.runtime.run import RunOptions
    from toolkit.runtime.sampling import SamplerParams

    from toolkit.cli.limits import micro_batch
    ubatch = micro_batch(batch, ubatch)
    _check_numbers(ctx_size, threads, n_predict, seed, checkpoints, checkpoint_every, n_probs)
    options = runtime_options(repack, cache_type_k, cache_type_v)
    if keep < -1:
        raise InputError(f"--keep must be >= -1 (-1: the whole prompt), got {keep}")
    draft_max, draft_min = check_draft(draft_model, lookup, draft_ngram, draft_max, draft_min, mtp=mtp)
    if single_turn and not conversation:
        raise InputError("-st/--single-turn: only in a conversation (toolkit chat, -cnv)")
    esc = (lambda x, what: process_escapes(x, what)) if escape else (lambda x, what: x)
    if prompt is not None and prompt != "-":
        prompt = esc(decode_prompt(prompt), "PROMPT")
    if prompt_opt is not None:
        prompt_opt = esc(decode_prompt(prompt_opt), "-p/--prompt")
    system = esc(decode_prompt(system), "-sys/--system-prompt") if system is not None else None
    stops = [esc(decode_prompt(r), "-r/--reverse-prompt") for r in reverse_prompt]
    text = _read_prompt(prompt, prompt_opt, file, tokens, conversation)
    params = SamplerParams(temp=temp, top_k=top_k, top_p=top_p, min_p=min_p, seed=None if seed == -1 else seed,
                           repeat_penalty=repeat_penalty, repeat_last_n=repeat_last_n,
                           presence_penalty=presence_penalty, frequency_penalty=frequency_penalty)
    params.validate()
    _check_outputs(logits_out, session, conversation)
    opts = RunOptions(model=resolve_model(model), prompt=text, tokens=tokens, n_predict=n_predict, sampling=params,
                      ctx_size=ctx_size, threads=threads or None, ubatch=ubatch, mmap=not no_mmap, options=options,
                      logits_out=logits_out,
                      session=session, checkpoints=checkpoints, checkpoint_every=checkpoint_every,
                      ignore_eos=ignore_eos, stop=stops, n_probs=n_probs if as_json else 0,
                      system=system, chat_template=chat_template, context_shift=context_shift, keep=keep,
                      draft_model=draft_model, mtp=mtp, lookup=lookup or draft_ngram is not None,
                      draft_ngram=3 if draft_ngram is None else draft_ngram, draft_max=draft_max, draft_min=draft_min,
                      **_grammar_args(grammar, grammar_file, json_schema, json_schema_file))
    if conversation:
        from toolkit.cli.chat_loop import chat_loop
        raise typer.Exit(chat_loop(opts, as_json=as_json, verbose=verbose, single_turn=single_turn,
                                   inputs=tuple(p for p in (file, grammar_file, json_schema_file) if p and p != "-")))
    _run_and_render(opts, as_json, display_prompt, verbose)



def chat(**kw) -> None:
    """Chat with a GGUF model: user turns from stdin (line editing and history on a terminal),
    answers rendered with the chat template and streamed to stdout; /regen /undo /save FILE
    /load FILE /reset /exit.  The same as toolkit run -cnv."""
    run(conversation=True, **kw)


def _chat_signature():
    """run's parameters without -cnv (annotations evaluated: typer reads them from here)."""
    import inspect
    sig = inspect.signature(run, eval_str=True)
    params = [p for p in sig.parameters.values() if p.name != "conversation"]
    for i, p in enumerate(params):
        if p.name == "prompt":   # in chat, PROMPT is the first user turn
            params[i] = p.replace(default=typer.Argument(None, metavar="[PROMPT]", help="The first user turn (optional); '-' reads it from stdin."))
    return sig.replace(parameters=params)


chat.__signature__ = _chat_signature()
chat.__annotations__ = {p.name: p.annotation for p in chat.__signature__.parameters.values()}
app.command("chat", context_settings={"ignore_unknown_options": False})(chat)

def check_draft(draft_model, lookup: bool, draft_ngram, draft_max, draft_min,
                sources: str = "--lookup, --mtp or --draft-model FILE", mtp: bool = False) -> tuple[int, int]:
    """The speculative flags: ranges, one draft source, the draft file exists, a window flag
    without a draft source (exit 2 otherwise; ``sources``: the command's draft flags, for that
    message).  Returns (draft_max, draft_min) with defaults (draft_max 16, 3 with ``mtp``)."""
    source = draft_model is not None or lookup or draft_ngram is not None or mtp
    if not source and (draft_max is not None or draft_min is not None):
        flag = "--draft-max" if draft_max is not None else "--draft-min"
        raise InputError(f"{flag} needs a draft source: {sources}")
    if mtp and (draft_model is not None or lookup or draft_ngram is not None):
        raise InputError("--mtp and --draft-model/--lookup/--draft-ngram: choose one draft source")
    draft_max = (3 if mtp else 16) if draft_max is None else draft_max
    draft_min = 0 if draft_min is None else draft_min
    from toolkit.cli.limits import check_range

    check_range("--draft-max", draft_max, 1, 256)
    if draft_min < 0:
        raise InputError(f"--draft-min must be >= 0, got {draft_min}")
    if draft_min > draft_max:
        raise InputError(f"--draft-min {draft_min} > --draft-max {draft_max}: no draft would ever be sent")
    if draft_ngram is not None and draft_ngram < 1:
        raise InputError(f"--draft-ngram must be >= 1, got {draft_ngram}")
    if draft_model is not None and (lookup or draft_ngram is not None):
        raise InputError("--draft-model and --lookup/--draft-ngram: choose one draft source")
    if draft_model is not None and os.path.isdir(draft_model):
        raise InputError(f"--draft-model {draft_model}: is a directory, not a GGUF file")
    if draft_model is not None and not os.path.isfile(draft_model):
        raise InputError(f"--draft-model {draft_model}: no such file")
    return draft_max, draft_min


def _check_numbers(ctx_size, threads, n_predict, seed, checkpoints, checkpoint_every, n_probs) -> None:
    """The numeric flags' ranges (InputError naming the flag)."""
    from toolkit.cli.limits import MAX_CTX, check_threads
    if ctx_size < 0:   # too large: the C library names the memory it would need (exit 4)
        raise InputError(f"--ctx-size {ctx_size}: must be in [0, {MAX_CTX}] (0: the model's context length)")
    check_threads("--threads", threads, zero_is_auto=True)
    if n_predict < -1:
        raise InputError(f"--n-predict must be >= -1, got {n_predict}")
    if seed < -1:
        raise InputError(f"--seed must be >= -1, got {seed}")
    if checkpoints < 0 or checkpoint_every < 0:
        raise InputError(f"--checkpoints and --checkpoint-every must be >= 0, got {checkpoints}, {checkpoint_every}")
    if n_probs < 0:
        raise InputError(f"--n-probs must be >= 0, got {n_probs}")


def _read_prompt(prompt, prompt_opt, file, tokens, conversation: bool) -> Optional[str]:
    """The prompt text from exactly one of PROMPT, -p, -f (or None with --tokens, or in a
    conversation without one).  Raises InputError for two sources, none, or an unreadable file."""
    given = [n for n, v in (("PROMPT", prompt), ("-p/--prompt", prompt_opt), ("-f/--file", file),
                            ("--tokens", tokens)) if v is not None]
    if len(given) > 1:
        raise InputError(f"give one prompt source, not {' and '.join(given)}")
    if conversation and tokens is not None:
        raise InputError("--tokens: not supported in a conversation (-cnv, toolkit chat): turns are text")
    if not given:
        if conversation:
            return None
        raise InputError("no prompt: give PROMPT, -p TEXT, -f FILE ('-' for stdin) or --tokens 1,2,3")
    if prompt_opt is not None:
        return prompt_opt
    if prompt == "-" or file == "-":
        buf = getattr(sys.stdin, "buffer", None)
        return decode_prompt(buf.read()) if buf is not None else decode_prompt(sys.stdin.read())
    if file is not None:
        try:
            with open(file, "rb") as fh:
                raw = fh.read()
        except OSError as e:
            raise InputError(f"-f/--file {file}: {e.strerror or e}") from None
        text = decode_prompt(raw)
        return text[:-1] if text.endswith("\n") else text   # llama.cpp's -f drops one trailing newline
    return prompt


def _grammar_args(grammar, grammar_file, json_schema, json_schema_file) -> dict:
    """{"grammar": GBNF text} or {"json_schema": schema text} or {} (InputError: two given, an
    unreadable file)."""
    given = [(k, v) for k, v in (("--grammar", grammar), ("--grammar-file", grammar_file),
                                 ("--json-schema", json_schema), ("--json-schema-file", json_schema_file)) if v is not None]
    if len(given) > 1:
        raise InputError(f"give one of --grammar, --grammar-file, --json-schema, --json-schema-file, "
                         f"not {' and '.join(k for k, _ in given)}")
    if not given:
        return {}
    flag, v = given[0]
    if flag.endswith("-file"):
        try:
            with open(v, encoding="utf-8") as fh:
                v = fh.read()
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"{flag} {given[0][1]}: {getattr(e, 'strerror', None) or e}") from None
    return {"json_schema" if "json" in flag else "grammar": v}


def _check_outputs(logits_out, session, conversation: bool) -> None:
    """--logits-out and --session: their directory exists and is writable (checked before any
    work: a run must not end in a file it cannot write), and they are not combined wrongly."""
    if conversation:   # chat keeps its conversation in memory; these would be silently unused
        for flag, v in (("--session", session), ("--logits-out", logits_out)):
            if v is not None:
                raise InputError(f"{flag}: not supported in a conversation (-cnv, toolkit chat); "
                                 f"/save FILE keeps the messages")
    if logits_out is not None:
        _writable_dir("--logits-out", logits_out)
    if session is not None:
        if logits_out is not None:
            raise InputError("--logits-out needs every prompt position decoded; it cannot be combined with --session")
        _writable_dir("--session", session)
        if os.path.exists(session) and not os.access(session, os.W_OK):
            raise InputError(f"--session {session}: the file is not writable")


def _writable_dir(flag: str, path: str) -> None:
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise InputError(f"{flag} {path}: " + (f"{d} is not a directory" if os.path.exists(d) else f"directory {d} does not exist"))
    if not os.access(d, os.W_OK | os.X_OK):
        raise InputError(f"{flag} {path}: directory {d} is not writable")
    if not os.path.isdir(path):   # access() says yes to root on /sys, a read-only mount...: try a file
        from toolkit.gguf_io import check_output
        try:
            check_output(path, probe=True)
        except InputError as e:
            raise InputError(f"{flag} {e}") from None


def _run_and_render(opts, as_json: bool, display_prompt: bool, verbose: bool) -> None:
    """Run ``opts`` (a toolkit.runtime.run.RunOptions): stream the prompt echo and the text to
    stdout (or print one JSON object), the notes and timings to stderr; exit 130 on Ctrl-C."""
    from toolkit.runtime.run import run as run_model

    out = sys.stdout

    def write(s: str) -> None:
        out.write(s)
        out.flush()

    def on_text(s: str) -> None:
        if not as_json:
            write(s)

    def on_report(s: str) -> None:
        err_console.print(s, highlight=False, soft_wrap=True)

    r = run_model(opts, on_text=on_text, on_prompt=write if not as_json and display_prompt else None,
                  on_report=on_report if verbose else None)
    res = r.generation
    if as_json:
        out.write(json.dumps(_json_object(opts, r), ensure_ascii=False) + "\n")
    else:
        out.write("\n")
    out.flush()
    if opts.session is not None:
        err_console.print(f"session: reused {r.n_reused} of {len(res.prompt_tokens)} prompt tokens"
                          + (f" ({r.session_note})" if r.session_note else ""), highlight=False, soft_wrap=True)
    if verbose and opts.context_shift:
        err_console.print(f"context shifts: {res.n_shifts}", highlight=False, soft_wrap=True)
    if res.stop_reason == "ctx_full":
        err_console.print(f"note: the context is full (--ctx-size {opts.ctx_size}): generation stopped after "
                          f"{len(res.tokens)} tokens", highlight=False, soft_wrap=True)
    err_console.print(res.timings.summary(), highlight=False, soft_wrap=True)
    if r.spec is not None:
        s = r.spec
        msg = (f"speculative: accepted {s['n_accepted']} of {s['n_drafted']} drafted tokens ({100 * s['acceptance']:.1f}%) "
               f"in {s['n_verify']} verify calls" if s["n_drafted"] else
               "speculative: no draft was found" + (f" ({s['n_verify']} calls decoded one token each)" if s["n_verify"] else ""))
        err_console.print(msg, highlight=False, soft_wrap=True)
    if res.interrupted:
        raise typer.Exit(130)   # main() prints "interrupted"


def _json_object(opts, r) -> dict:
    """The --json object: model, prompt_tokens, tokens, text, stop_reason, timings, sampling,
    n_ctx, n_vocab, and the shared architecture / wall_s / peak_rss_bytes; session and n_reused
    with --session; n_shifts (context shifts done) with --context-shift; logits_out with --logits-out; probs
    with --n-probs (per generated token: id, prob, top [{id, prob}], from the logits the
    sampler saw: softmax after the penalties, before truncation and temperature)."""
    res = r.generation
    obj = {
        "model": opts.model,
        "prompt_tokens": res.prompt_tokens,
        "tokens": res.tokens,
        "text": res.text,
        "stop_reason": res.stop_reason,
        "timings": res.timings.to_dict(),
        "sampling": r.sampling,
        "n_ctx": opts.ctx_size,
        "n_vocab": r.n_vocab,
    }
    if opts.session is not None:
        obj["session"] = opts.session
        obj["n_reused"] = r.n_reused
    if opts.logits_out is not None:
        obj["logits_out"] = opts.logits_out
    if opts.n_probs:
        obj["probs"] = res.probs
    if opts.context_shift:
        obj["n_shifts"] = res.n_shifts
    if r.spec is not None:
        obj["speculative"] = r.spec
    from toolkit.cli.report import common_fields
    obj.update(common_fields(r.architecture))
    return obj
