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


@app.command()
def run(
    prompt: Optional[str] = typer.Argument(None, help="Prompt text; '-' reads it from stdin."),
    model: Optional[str] = typer.Option(None, "-m", "--model", help="GGUF model file (default: the packaged model)."),
    n_predict: int = typer.Option(128, "-n", "--n-predict", help="Tokens to generate (-1: until end of generation or a full context)."),
    temp: float = typer.Option(0.8, "--temp", help="Temperature; 0 = greedy (argmax)."),
    top_k: int = typer.Option(40, "--top-k", help="Keep the k most likely tokens (0: off)."),
    top_p: float = typer.Option(0.95, "--top-p", help="Nucleus sampling threshold (1.0: off)."),
    min_p: float = typer.Option(0.05, "--min-p", help="Drop tokens below min_p x the top probability (0: off)."),
    seed: int = typer.Option(-1, "--seed", help="Random seed (-1: random; the seed used is in --json)."),
    ctx_size: int = typer.Option(4096, "-c", "--ctx-size", help="Context size in tokens."),
    threads: Optional[int] = typer.Option(None, "-t", "--threads", help="CPU threads (default: TOOLKIT_THREADS or all cores)."),
    ubatch: int = typer.Option(512, "-b", "--ubatch", "-ub", help="Tokens per micro-batch when decoding the prompt."),
    tokens: Optional[str] = typer.Option(None, "--tokens", help="Comma-separated token ids to feed instead of prompt text."),
    logits_out: Optional[str] = typer.Option(None, "--logits-out", help="Write the float32 logits of every prompt position, shape (n_prompt, n_vocab), to this .npy file."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (prompt_tokens, tokens, text, timings, ...) instead of streaming."),
    display_prompt: bool = typer.Option(True, "--display-prompt/--no-display-prompt", help="Echo the prompt before the generated text (llama-cli's default)."),
    session: Optional[str] = typer.Option(None, "--session", help="Session file: reuse the saved state for the prompt prefix it shares, save the state after the run."),
    checkpoints: int = typer.Option(4, "--checkpoints", help="Recurrent-state checkpoints kept per sequence (rollback points for --session; 0: none)."),
    checkpoint_every: int = typer.Option(256, "--checkpoint-every", help="Also checkpoint every N positions (0: only at the end of the prompt)."),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", help="Do not stop at an end-of-generation token (its logit is set to -inf)."),
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Print the memory report (weights, KV, recurrent state, checkpoints, compute buffers) to stderr."),
) -> None:
    """Generate text from a GGUF model: stream it to stdout, timings to stderr."""
    from toolkit.runtime.run import RunOptions
    from toolkit.runtime.sampling import SamplerParams

    # ---- flags that need no model -------------------------------------------------------
    if tokens is not None and prompt is not None:
        raise InputError("give either a PROMPT or --tokens, not both")
    if tokens is None and prompt is None:
        raise InputError("no prompt: give PROMPT (or '-' for stdin) or --tokens 1,2,3")
    from toolkit.cli.limits import MAX_CTX, MAX_UBATCH, check_range, check_threads
    if ctx_size <= 0:   # too large: the C library names the memory it would need (exit 4)
        raise InputError(f"--ctx-size {ctx_size}: must be in [1, {MAX_CTX}]")
    check_range("--ubatch", ubatch, 1, MAX_UBATCH)
    check_threads("--threads", threads)
    if n_predict < -1:
        raise InputError(f"--n-predict must be >= -1, got {n_predict}")
    if seed < -1:
        raise InputError(f"--seed must be >= -1, got {seed}")
    params = SamplerParams(temp=temp, top_k=top_k, top_p=top_p, min_p=min_p, seed=None if seed == -1 else seed)
    params.validate()
    if logits_out is not None:
        d = os.path.dirname(os.path.abspath(logits_out))
        if not os.path.isdir(d):
            raise InputError(f"--logits-out {logits_out}: directory {d} does not exist")
    if checkpoints < 0 or checkpoint_every < 0:
        raise InputError(f"--checkpoints and --checkpoint-every must be >= 0, got {checkpoints}, {checkpoint_every}")
    if session is not None:
        if logits_out is not None:
            raise InputError("--logits-out needs every prompt position decoded; it cannot be combined with --session")
        d = os.path.dirname(os.path.abspath(session))
        if not os.path.isdir(d):
            raise InputError(f"--session {session}: directory {d} does not exist")
    if prompt == "-":
        buf = getattr(sys.stdin, "buffer", None)
        prompt = decode_prompt(buf.read()) if buf is not None else decode_prompt(sys.stdin.read())
    elif prompt is not None:
        prompt = decode_prompt(prompt)
    opts = RunOptions(model=resolve_model(model), prompt=prompt, tokens=tokens, n_predict=n_predict, sampling=params,
                      ctx_size=ctx_size, threads=threads, ubatch=ubatch, logits_out=logits_out, session=session,
                      checkpoints=checkpoints, checkpoint_every=checkpoint_every, ignore_eos=ignore_eos)
    _run_and_render(opts, as_json, display_prompt, verbose)


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
    if res.stop_reason == "ctx_full":
        err_console.print(f"note: the context is full (--ctx-size {opts.ctx_size}): generation stopped after "
                          f"{len(res.tokens)} tokens", highlight=False, soft_wrap=True)
    err_console.print(res.timings.summary(), highlight=False, soft_wrap=True)
    if res.interrupted:
        raise typer.Exit(130)   # main() prints "interrupted"


def _json_object(opts, r) -> dict:
    """The --json object: model, prompt_tokens, tokens, text, stop_reason, timings, sampling,
    n_ctx, n_vocab; session and n_reused with --session; logits_out with --logits-out."""
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
    return obj
