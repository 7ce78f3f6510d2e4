"""`toolkit serve [-m MODEL.gguf]`: an OpenAI-compatible HTTP server (toolkit.serve) on uvicorn.

Flags follow llama-server's (``-m``, ``--host``, ``--port``, ``-np``, ``-c``, ``--api-key``).
The model is loaded before the socket opens; the address goes to stderr (with ``--json``, one
object on stdout: host, port, slots, n_ctx_slot and the shared fields).  Ctrl-C / SIGTERM stop
the server (uvicorn's shutdown): running requests end at once (a stream with an error event
"server shutting down" and [DONE], a non-streamed request with 503), then the decode thread
stops and the context is freed.
"""
from __future__ import annotations

import json
import os
from typing import Optional

import typer

from toolkit.cli.app import app, err_console
from toolkit.cli.cmd_run import resolve_model
from toolkit.cli.runtime_opts import cache_type_option, repack_option, runtime_options
from toolkit.errors import InputError


@app.command(context_settings={"ignore_unknown_options": False})
def serve(
    model: Optional[str] = typer.Option(None, "-m", "--model", help="GGUF model file (default: the packaged model)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (default: loopback only)."),
    port: int = typer.Option(8080, "--port", help="TCP port (0: any free port; the one chosen is printed)."),
    parallel: int = typer.Option(4, "-np", "--parallel", help="Slots: requests decoded at once, one sequence each."),
    ctx_size: int = typer.Option(4096, "-c", "--ctx-size", help="Context size in tokens, shared: each slot gets ctx-size / parallel (0: the model's training length per slot)."),
    batch: int = typer.Option(2048, "-b", "--batch-size", help="Logical batch (llama.cpp's n_batch): the micro-batch is at most this."),
    ubatch: int = typer.Option(512, "-ub", "--ubatch-size", "--ubatch", help="Micro-batch (llama.cpp's n_ubatch): most prompt tokens decoded per step (a prompt chunk); the compute buffers follow it."),
    threads: int = typer.Option(0, "-t", "--threads", help="CPU threads (0: TOOLKIT_THREADS, else all cores)."),
    no_mmap: bool = typer.Option(False, "--no-mmap", help="Read the whole model into memory instead of mapping the file (llama.cpp's --no-mmap)."),
    repack: Optional[bool] = repack_option(),
    cache_type_k: str = cache_type_option("k"),
    cache_type_v: str = cache_type_option("v"),
    repack_draft: Optional[bool] = typer.Option(None, "--repack-draft/--no-repack-draft", show_default=False, help="The same choice for the --draft-model's weights (default: as --repack/--no-repack)."),
    checkpoints: int = typer.Option(4, "--checkpoints", help="Recurrent-state checkpoints kept per slot (the points a new request can resume from)."),
    checkpoint_every: int = typer.Option(256, "--checkpoint-every", help="Also checkpoint every N positions (0: only at prompt and answer ends)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="Require 'Authorization: Bearer KEY' (also read from TOOLKIT_API_KEY)."),
    queue: int = typer.Option(64, "--queue", help="Requests that may wait for a slot when all are busy; beyond it: 503 with Retry-After (0: no waiting, a request is served only while a slot is free)."),
    max_body: int = typer.Option(1 << 20, "--max-body", help="Largest request body in bytes; beyond it: 413."),
    lookup: bool = typer.Option(False, "--lookup", help="Speculative decoding in every slot with prompt-lookup drafts: the tokens that followed the slot's last n-gram earlier on (helps most when answers copy the prompt); the output is what plain decoding gives (greedy: token for token)."),
    draft_ngram: Optional[int] = typer.Option(None, "--draft-ngram", help="Longest n-gram a --lookup draft matches (default 3; implies --lookup)."),
    draft_model: Optional[str] = typer.Option(None, "-md", "--draft-model", "--model-draft", help="Speculative decoding in every slot with drafts from this smaller GGUF (same vocabulary; its weights loaded once, one sequence per slot, the slots' draft steps batched); the output is what the model alone gives (greedy: token for token)."),
    mtp: bool = typer.Option(False, "--mtp", help="Speculative decoding in every slot with the model's own MTP / NextN head as the draft (Qwen3-Next, Qwen3.5, GLM-5-Next, Ling 3 files converted with it; one sequence per slot, the slots' draft steps batched; --draft-max default 3); the output is what the model alone gives (greedy: token for token)."),
    draft_max: Optional[int] = typer.Option(None, "--draft-max", "--draft", "--draft-n", help="Speculative decoding: tokens drafted per slot and step at most (1-256; the recurrent state keeps that many snapshots per slot, the draft model's that many + 1) \\[default: 16]."),
    draft_min: Optional[int] = typer.Option(None, "--draft-min", "--draft-n-min", help="Speculative decoding: a draft shorter than this is not sent (the slot decodes one token plainly)."),
    chat_template: Optional[str] = typer.Option(None, "--chat-template", help="Chat template: a Jinja file, chatml, or NAME of a tokenizer.chat_template.NAME key (default: the GGUF's, else chatml, as llama.cpp; a note says so)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (address, slots, model) on stdout once the server listens."),
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Log every HTTP request (uvicorn's access log) to stderr."),
) -> None:
    """Serve a GGUF model over the OpenAI API: /v1/chat/completions, /v1/completions, /v1/models,
    /health, /metrics, /tokenize, /detokenize (streaming with server-sent events)."""
    from toolkit.cli.limits import MAX_CTX, check_range, check_threads, micro_batch
    check_range("--port", port, 0, 65535)
    check_range("-np/--parallel", parallel, 1, 64)
    check_range("-c/--ctx-size", ctx_size, 0, MAX_CTX)
    ubatch = micro_batch(batch, ubatch)
    check_threads("--threads", threads, zero_is_auto=True)
    check_range("--checkpoints", checkpoints, 0, 1024)
    check_range("--checkpoint-every", checkpoint_every, 0, MAX_CTX)
    check_range("--queue", queue, 0, 1 << 20)
    check_range("--max-body", max_body, 1, 1 << 34)
    from toolkit.cli.cmd_run import check_draft
    draft_max, draft_min = check_draft(draft_model, lookup, draft_ngram, draft_max, draft_min, mtp=mtp)
    speculative = lookup or draft_ngram is not None or draft_model is not None or mtp
    api_key = api_key if api_key is not None else os.environ.get("TOOLKIT_API_KEY") or None
    if api_key is not None and not api_key.strip():
        raise InputError("--api-key: empty key")
    path = resolve_model(model)
    options = runtime_options(repack, cache_type_k, cache_type_v)
    draft_options = runtime_options(repack_draft) if repack_draft is not None else options
    import uvicorn

    from toolkit.serve import create_app, load, stop_jobs_on_shutdown
    sock = _listen(host, port)     # before the model loads: a port in use fails at once
    try:
        err_console.print(f"loading {path}", highlight=False)
        svc = load(path, n_slots=parallel, n_ctx=ctx_size, n_ubatch=ubatch, n_checkpoints=checkpoints,
                   checkpoint_every=checkpoint_every, queue=queue, api_key=api_key, max_body=max_body,
                   chat_template=chat_template, n_threads=threads or None, draft_max=draft_max if speculative else 0,
                   draft_min=draft_min, draft_ngram=3 if draft_ngram is None else draft_ngram, draft_model=draft_model,
                   mmap=not no_mmap, options=options, draft_options=draft_options, mtp=mtp)
    except BaseException:
        sock.close()
        raise
    if getattr(svc, "template_note", None):
        err_console.print(svc.template_note, highlight=False, soft_wrap=True)
    try:
        memory = _memory(svc.engine, checkpoints)
    except BaseException:
        svc.engine.close()
        sock.close()
        raise
    server = uvicorn.Server(uvicorn.Config(create_app(svc), host=host, port=port, log_level="info" if verbose else "warning",
                                           access_log=verbose, timeout_graceful_shutdown=2))
    _announce(server, svc, path, host, as_json, draft_model, memory, svc.engine.model.repack_info,
              _mtp_memory(svc.engine))
    stop_jobs_on_shutdown(server, svc.engine)
    try:
        server.run(sockets=[sock])
    finally:
        svc.engine.close()
        sock.close()


def _listen(host: str, port: int):
    """A listening TCP socket on host:port (bound here, so that an address in use is one line
    naming the flags, exit 2, not uvicorn's log line and exit 3)."""
    import socket
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as e:
        raise InputError(f"--host {host} --port {port}: cannot listen there: {e.strerror or e}") from None
    return sock


def _memory(engine, n_checkpoints: int) -> dict[str, int]:
    """The bytes by kind of the engine's context (toolkit.runtime.memory_estimate, the C figures)."""
    from toolkit.runtime import memory_estimate
    c = engine.ctx
    return memory_estimate(engine.model, c.n_ctx, c.n_seq_max, c.n_ubatch, c.n_threads, n_checkpoints,
                           draft_window=c.draft_window, keep_last=False)   # the slots verify: no state after the last token


def _mtp_memory(engine) -> Optional[dict[str, int]]:
    """With --mtp: the bytes by kind of the MTP head's own context, its weights included (as
    ``info --memory --mtp`` and ``run -v --mtp`` count them); None without --mtp."""
    from toolkit.runtime.mtp import MtpDraft
    draft = getattr(engine.spec, "draft", None) if getattr(engine, "spec", None) is not None else None
    if not isinstance(draft, MtpDraft):
        return None
    r = draft.ctx.memory_report()
    r["weights"] = draft.ctx.model.weight_bytes
    return r


def _announce(server, svc, path: str, host: str, as_json: bool, draft_model: Optional[str] = None,
              memory: Optional[dict] = None, repack: Optional[dict] = None, mtp_memory: Optional[dict] = None) -> None:
    """Print the address once uvicorn listens (its startup hook), to stderr or as --json, with
    the memory of the context (``memory``: bytes by kind), what re-laying the weights took
    (``repack``: Model.repack_info) and, with --mtp, the MTP head's memory (``mtp_memory``:
    bytes by kind, besides ``memory``)."""
    from toolkit.cli import report
    from toolkit.runtime.memory import format_brief, format_repack_brief
    orig = server.startup

    async def startup(sockets=None):
        await orig(sockets=sockets)
        if not server.started:
            return
        port = server.servers[0].sockets[0].getsockname()[1]
        info = {"model": path, "host": host, "port": port, "url": f"http://{host}:{port}",
                "slots": len(svc.engine.slots), "n_ctx_slot": svc.engine.n_ctx_slot, "chat_template": svc.template.name}
        if draft_model is not None:
            info["draft_model"] = draft_model
        if memory is not None:
            info["memory"] = memory
        if repack is not None:
            info["repack"] = repack
        if mtp_memory is not None:
            info["mtp_memory"] = mtp_memory
        if as_json:
            typer.echo(json.dumps(dict(info, **report.common_fields(svc.engine.model.gguf.arch))), nl=True)
        else:
            err_console.print(f"listening on {info['url']} ({info['slots']} slot{'' if info['slots'] == 1 else 's'} of {info['n_ctx_slot']} tokens, "
                              f"chat template: {info['chat_template']}"
                              + (f"; draft model: {draft_model}, up to {svc.engine.draft_max} tokens" if draft_model else "")
                              + (f"; {format_brief(memory)}" if memory is not None else "")
                              + (f"; with --mtp, besides: the MTP head's {format_brief(mtp_memory)}" if mtp_memory is not None else "")
                              + (f"; {format_repack_brief(repack)}" if repack is not None else "")
                              + "); Ctrl-C stops", highlight=False)
    server.startup = startup
