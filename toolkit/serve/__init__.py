"""serve: an OpenAI-compatible HTTP server (Starlette + uvicorn) over the runtime, as thin over
it as cli/ is: slots and scheduling in :mod:`toolkit.serve.engine`, request bodies and response
objects in :mod:`toolkit.serve.protocol`, routes in :mod:`toolkit.serve.app`.

    svc = load("model.gguf", n_slots=4, n_ctx=4096)
    app = create_app(svc)              # an ASGI app: uvicorn.run(app, host=..., port=...)
    stop_jobs_on_shutdown(server, svc.engine)   # server: a uvicorn.Server of that app
    ...; svc.engine.close()
"""
from __future__ import annotations

import os
import threading

from toolkit.serve.app import Service, create_app  # noqa: F401
from toolkit.serve.engine import Engine  # noqa: F401
from toolkit.serve.job import Job, QueueFull  # noqa: F401


def load(model_path: str, n_slots: int = 4, n_ctx: int = 4096, n_ubatch: int = 512, n_checkpoints: int = 4,
         checkpoint_every: int = 256, queue: int = 64, api_key: str | None = None, max_body: int = 1 << 20,
         chat_template: str | None = None, n_threads: int | None = None, draft_max: int = 0, draft_min: int = 0,
         draft_ngram: int = 3, draft_model: str | None = None, mmap: bool = True, options=None,
         draft_options=None, mtp: bool = False) -> Service:
    """Load the model and start the decode thread.  The chat template is the GGUF's
    (``tokenizer.chat_template``), else ``chat_template`` (a file, ``chatml``, or NAME of a
    ``tokenizer.chat_template.NAME`` key), else ChatML, as llama-server falls back to
    (``Service.template_note`` then says so; toolkit.runtime.chat.chat_template_for).
    ``draft_max`` > 0: speculative decoding per slot (Engine), with drafts from the GGUF
    ``draft_model`` (its weights loaded once; one context, one sequence per slot), the model's
    MTP head (``mtp``: toolkit.runtime.mtp), else prompt lookup.  ``mmap=False``: the weights are
    read into memory (``--no-mmap``).  ``options``: the model's
    :class:`toolkit.runtime.options.RuntimeOptions` (repacking, BF16 GEMM, chunk thresholds;
    None: the defaults), ``draft_options`` the draft model's (None: ``options``).

    Raises:
        InputError (bad file or sizes; a draft model whose vocabulary differs: one line naming
        it), UnsupportedError, ResourceError, as ``toolkit run``.
    """
    from toolkit.runtime import Model
    from toolkit.runtime.chat import chat_template_for
    from toolkit.runtime.grammar import Grammar, ll_tokenizer
    from toolkit.runtime.speculative import open_draft_model
    from toolkit.runtime.tokenizer import Tokenizer
    model = Model(model_path, n_threads=n_threads, mmap=mmap, options=options)
    dm = None
    try:
        if n_ctx == 0:
            n_ctx = int(model.hparams.n_ctx_train) * n_slots
        tok = Tokenizer.from_gguf(model.gguf)
        template, template_note = chat_template_for(model.gguf, chat_template)
        if draft_model is not None:
            dm = open_draft_model(draft_model, tok, n_threads, draft_options if draft_options is not None else options)
        if mtp:
            from toolkit.runtime.mtp import check_mtp
            check_mtp(model)
        engine = Engine(model, tok, n_slots=n_slots, n_ctx=n_ctx, n_ubatch=n_ubatch, n_checkpoints=n_checkpoints,
                        checkpoint_every=checkpoint_every, queue=queue, n_threads=n_threads, draft_max=draft_max,
                        draft_min=draft_min, draft_ngram=draft_ngram, draft_model=dm, mtp=mtp)
    except BaseException:
        if dm is not None:
            dm.close()
        model.close()
        raise

    lltok: list = []                   # llguidance's tokenizer, built on the first schema
    lock = threading.Lock()

    def make_grammar(schema: str):
        with lock:
            if not lltok:
                lltok.append(ll_tokenizer(tok, model.n_vocab))
        return Grammar.from_json_schema(tok, model.n_vocab, schema, what="response_format", lltok=lltok[0])
    svc = Service(engine, tok, template, os.path.basename(model_path), api_key=api_key, max_body=max_body,
                  make_grammar=make_grammar)
    svc.template_note = template_note   # the fallback note (no template in the file), as toolkit chat prints it
    return svc


def stop_jobs_on_shutdown(server, engine: Engine) -> None:
    """Make ``server`` (a uvicorn.Server) end the engine's jobs when its shutdown begins
    (SIGTERM, Ctrl-C, ``should_exit``): streams then end at once with an error event and
    ``data: [DONE]`` instead of running on for uvicorn's graceful period and being cancelled
    part-way (a cut stream and a CancelledError traceback)."""
    orig = server.shutdown

    async def shutdown(sockets=None):
        engine.shutdown()
        await orig(sockets=sockets)
    server.shutdown = shutdown
