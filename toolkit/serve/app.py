"""The HTTP side: a Starlette app over an :class:`~toolkit.serve.engine.Engine`.

Routes (OpenAI API and llama-server):

    POST /v1/chat/completions   messages -> the GGUF's chat template -> a job; SSE when "stream"
    POST /v1/completions        prompt (text or token ids) -> a job
    GET  /v1/models             the one model
    GET  /health                {"status": "ok"} (no API key needed)
    GET  /metrics               Prometheus text: requests, tokens, reuse, slots busy, queue
    POST /tokenize, /detokenize {"content"} -> {"tokens"}, {"tokens"} -> {"content"}

Errors are OpenAI's body ``{"error": {"message", "type", "param", "code"}}``: 400 bad JSON or
field (``param`` names it), 401 wrong or missing API key, 404, 413 body over ``max_body``
bytes, 499 (counted in /metrics, never seen) when the client left, 503 + ``Retry-After`` when the
wait queue is full or the server is shutting down.  A client that disconnects (streaming or not)
cancels its job: it leaves the queue, or its slot is free at the next decode step.  On shutdown
(:meth:`Engine.shutdown`, see :func:`toolkit.serve.stop_jobs_on_shutdown`) every job ends at
once: a stream with an error event ``server shutting down`` and ``data: [DONE]``, a
non-streamed request with 503.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import uuid

from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from toolkit.errors import ToolkitError
from toolkit.serve import protocol
from toolkit.serve.engine import Engine
from toolkit.serve.job import SHUTTING_DOWN, Job, QueueFull
from toolkit.serve.protocol import ApiError

log = logging.getLogger(__name__)

class Service:
    """What the routes share: the engine, tokenizer, chat template and settings."""

    def __init__(self, engine: Engine, tok, template, model_name: str, api_key: str | None = None,
                 max_body: int = 1 << 20, make_grammar=None):
        self.engine, self.tok, self.template, self.model_name = engine, tok, template, model_name
        self.api_key, self.max_body, self.make_grammar = api_key, max_body, make_grammar
        self.created = int(time.time())
        self.http = {}      # (route, status) -> count

    # ---- request plumbing -----------------------------------------------------------------
    def check_key(self, req: HttpRequest) -> None:
        if not self.api_key:
            return
        auth = req.headers.get("authorization", "")
        given = auth[7:] if auth.lower().startswith("bearer ") else req.headers.get("x-api-key", "")
        if not hmac.compare_digest(given.encode(), self.api_key.encode()):
            raise ApiError("invalid API key (Authorization: Bearer KEY)", 401, type_="authentication_error",
                           code="invalid_api_key")

    async def read_json(self, req: HttpRequest) -> dict:
        """The body as a JSON object; 413 past ``max_body`` bytes (declared or sent), 400 when
        it is not UTF-8 JSON or not an object."""
        declared = req.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > self.max_body:
            raise ApiError(f"request body of {declared} bytes is over the limit of {self.max_body} (--max-body)",
                           413, code="body_too_large")
        buf = bytearray()
        async for chunk in req.stream():
            buf += chunk
            if len(buf) > self.max_body:
                raise ApiError(f"request body is over the limit of {self.max_body} bytes (--max-body)", 413,
                               code="body_too_large")
        try:
            body = json.loads(bytes(buf).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ApiError(f"request body is not valid JSON: {e}", code="invalid_json") from None
        if not isinstance(body, dict):
            raise ApiError("request body must be a JSON object", code="invalid_json")
        return body

    def job(self, prompt: list[int], r: protocol.Request, on_event) -> Job:
        grammar = None
        if r.schema is not None:
            if self.make_grammar is None:
                raise ApiError("response_format: constrained decoding is not available", param="response_format")
            try:
                grammar = self.make_grammar(r.schema)
            except ToolkitError as e:
                raise ApiError(str(e), param="response_format", code="invalid_value") from None
        return Job(prompt=prompt, n_predict=r.n_predict, params=r.params, on_event=on_event, stop=r.stop,
                   n_probs=r.n_probs, grammar=grammar, ignore_eos=r.ignore_eos)


async def run_job(svc: Service, req: HttpRequest, prompt: list[int], r: protocol.Request, param: str):
    """Submit a job; yields its events (("text", str, probs) ..., then ("done", job) or
    ("error", msg)) as they come.  The job is cancelled when the consumer stops early or the
    client disconnects."""
    loop = asyncio.get_running_loop()
    q: asyncio.Queue = asyncio.Queue()
    def on_event(ev) -> None:         # on the decode thread
        try:
            loop.call_soon_threadsafe(q.put_nowait, ev)
        except RuntimeError:          # the event loop is closed: the server is stopping
            pass
    job = await asyncio.to_thread(svc.job, prompt, r, on_event)
    try:
        svc.engine.submit(job)
    except QueueFull as e:
        if str(e) == SHUTTING_DOWN:
            raise _shutting_down() from None
        raise ApiError(f"server busy: {e}; retry later", 503, type_="server_error", code="queue_full",
                       headers={"Retry-After": "1"}) from None
    except ToolkitError as e:
        raise ApiError(str(e), param=param, code="context_length_exceeded") from None
    gone = asyncio.ensure_future(_disconnected(req))
    try:
        while True:
            get = asyncio.ensure_future(q.get())
            done, _ = await asyncio.wait({get, gone}, return_when=asyncio.FIRST_COMPLETED)
            if get not in done:
                get.cancel()
                return
            ev = get.result()
            yield ev
            if ev[0] in ("done", "error"):
                return
    finally:
        gone.cancel()
        if not job.finish_reason:
            svc.engine.cancel(job)


async def _disconnected(req: HttpRequest) -> None:
    """Returns when the client has gone (the body is read already, so the next ASGI message is
    the disconnect)."""
    while True:
        msg = await req.receive()
        if msg["type"] == "http.disconnect":
            return


def _shutting_down() -> ApiError:
    return ApiError(SHUTTING_DOWN, 503, type_="server_error", code="server_shutting_down", headers={"Retry-After": "1"})


def _error(e: ApiError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


class SSE:
    """A text/event-stream response from an async iterator of dicts (each sent as one
    ``data: JSON`` event), ended by ``data: [DONE]``.  It never reads the request: the job's
    own watcher (run_job) sees the disconnect; a failed send ends the iteration (and so
    cancels the job)."""

    def __init__(self, events):
        self.events = events

    async def __call__(self, scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream; charset=utf-8"),
                                (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]})
        try:
            async for ev in self.events:
                data = json.dumps(ev, ensure_ascii=False, separators=(",", ":"))
                await send({"type": "http.response.body", "body": f"data: {data}\n\n".encode(), "more_body": True})
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
        except OSError:      # the client went away while we wrote
            pass
        finally:
            await self.events.aclose()


def _chunk_base(kind: str, rid: str, svc: Service) -> dict:
    return {"id": rid, "object": kind, "created": int(time.time()), "model": svc.model_name,
            "system_fingerprint": f"toolkit-{svc.engine.ctx.n_seq_max}"}


def _extras(job: Job) -> dict:
    return {"usage": protocol.usage(job), "timings": job.timings()}


async def _stream(svc: Service, events, chat: bool, r: protocol.Request, rid: str):
    """The SSE objects of a streamed chat completion / completion."""
    kind = "chat.completion.chunk" if chat else "text_completion"
    first = True
    async for ev in events:
        if ev[0] == "error":
            code = "server_shutting_down" if ev[1] == SHUTTING_DOWN else None
            yield {"error": {"message": ev[1], "type": "server_error", "param": None, "code": code}}
            return
        base = _chunk_base(kind, rid, svc)
        if r.include_usage:   # OpenAI: usage is null on every chunk but the last (choices [], usage)
            base["usage"] = None
        if ev[0] == "text":
            _, text, probs, ids = ev
            choice = {"index": 0, "finish_reason": None}
            if r.return_tokens:
                choice["tokens"] = ids
            if chat:
                choice["delta"] = {"role": "assistant", "content": text} if first else {"content": text}
            else:
                choice["text"] = text
            if r.logprobs:
                choice["logprobs"] = (protocol.chat_logprobs if chat else protocol.completion_logprobs)(probs, svc.tok, r.top)
            first = False
            yield dict(base, choices=[choice])
        else:
            job = ev[1]
            choice = {"index": 0, "finish_reason": protocol.finish_reason(job)}
            if chat:
                choice["delta"] = {}
            else:
                choice["text"] = ""
            if r.include_usage:   # usage once, in its own final chunk; counted twice when also here
                yield dict(base, choices=[choice], timings=job.timings())
                yield dict(_chunk_base(kind, rid, svc), choices=[], usage=protocol.usage(job))
            else:
                yield dict(base, choices=[choice], **_extras(job))


async def _collect(events) -> tuple[Job | None, list[dict], str | None]:
    """The job, its probability records and None; or None, records and the error message
    ("cancelled" when the client left first)."""
    probs: list[dict] = []
    async for ev in events:
        if ev[0] == "text":
            probs += ev[2]
        elif ev[0] == "done":
            return ev[1], probs, None
        else:
            return None, probs, ev[1]
    return None, probs, "cancelled"


def _client_left() -> ApiError:
    return ApiError("client disconnected", 499, code="client_disconnected")


async def _complete(svc: Service, req: HttpRequest, prompt: list[int], r: protocol.Request, chat: bool, param: str):
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
    if not prompt:
        raise ApiError(f"'{param}': the prompt is empty (no tokens to decode)", param=param, code="invalid_value")
    events = run_job(svc, req, prompt, r, param)
    if r.stream:
        try:
            first = await events.__anext__()     # a queue-full / context error is still an HTTP error
        except StopAsyncIteration:               # the client left before the first token
            return _error(_client_left())

        async def again():
            yield first
            async for ev in events:
                yield ev
        return SSE(_stream(svc, again(), chat, r, rid))
    job, probs, err = await _collect(events)
    if job is None:
        if err == "cancelled":       # nobody reads this answer; /metrics counts it as 499
            raise _client_left()
        if err == SHUTTING_DOWN:
            raise _shutting_down()
        raise ApiError(f"generation failed: {err}", 500, type_="server_error")
    choice = {"index": 0, "finish_reason": protocol.finish_reason(job), "logprobs": None}
    if r.return_tokens:
        choice["tokens"] = job.tokens
    if chat:
        choice["message"] = {"role": "assistant", "content": job.text}
        if r.logprobs:
            choice["logprobs"] = protocol.chat_logprobs(probs, svc.tok, r.top)
    else:
        choice["text"] = job.text
        if r.logprobs:
            choice["logprobs"] = protocol.completion_logprobs(probs, svc.tok, r.top)
    out = dict(_chunk_base("chat.completion" if chat else "text_completion", rid, svc), choices=[choice], **_extras(job))
    return JSONResponse(out)


# ---- routes ---------------------------------------------------------------------------------
def _route(svc: Service, name: str, auth: bool = True):
    """Wrap a handler: API key, ApiError -> its JSON body, request counts by status."""
    def deco(fn):
        async def endpoint(req: HttpRequest):
            try:
                if auth:
                    svc.check_key(req)
                resp = await fn(req)
            except ApiError as e:
                resp = _error(e)
            except ToolkitError as e:
                resp = _error(ApiError(str(e)))
            except Exception as e:   # noqa: BLE001 - a bug: an OpenAI-style 500, logged, server up
                log.exception("serve: %s failed", name)
                resp = _error(ApiError(f"internal error: {type(e).__name__}: {e}", 500, type_="server_error"))
            key = (name, resp.status_code if hasattr(resp, "status_code") else 200)
            svc.http[key] = svc.http.get(key, 0) + 1
            return resp
        return endpoint
    return deco


def create_app(svc: Service) -> Starlette:
    """The Starlette app of ``svc`` (see the module docstring for the routes)."""

    @_route(svc, "chat_completions")
    async def chat_completions(req):
        body = await svc.read_json(req)
        r = protocol.read_common(body, chat=True)
        msgs = protocol.read_messages(body)
        prompt = await asyncio.to_thread(svc.template.encode, svc.tok, msgs, True)
        return await _complete(svc, req, prompt, r, chat=True, param="messages")

    @_route(svc, "completions")
    async def completions(req):
        body = await svc.read_json(req)
        r = protocol.read_common(body, chat=False)
        prompt = protocol.read_prompt(body, svc.tok)
        if any(not 0 <= t < svc.engine.model.n_vocab for t in prompt):
            raise ApiError(f"'prompt': a token id outside [0, {svc.engine.model.n_vocab})", param="prompt",
                           code="invalid_value")
        return await _complete(svc, req, prompt, r, chat=False, param="prompt")

    @_route(svc, "models")
    async def models(req):
        st = svc.engine.stats()
        return JSONResponse({"object": "list", "data": [{
            "id": svc.model_name, "object": "model", "created": svc.created, "owned_by": "toolkit",
            "meta": {"n_vocab": svc.engine.model.n_vocab, "n_ctx_slot": svc.engine.n_ctx_slot, "slots": st["slots"]}}]})

    @_route(svc, "health", auth=False)
    async def health(req):
        return JSONResponse({"status": "ok"})

    @_route(svc, "metrics", auth=False)
    async def metrics(req):
        return PlainTextResponse(prometheus(svc), media_type="text/plain; version=0.0.4")

    @_route(svc, "tokenize")
    async def tokenize(req):
        body = await svc.read_json(req)
        text = protocol.get(body, "content", (str,))
        if text is None:
            raise ApiError("'content' (a string) is required", param="content", code="missing")
        special = protocol.get(body, "add_special", (bool,), False)
        ids = svc.tok.encode(text, add_special=special, parse_special=True)
        if protocol.get(body, "with_pieces", (bool,), False):
            return JSONResponse({"tokens": [{"id": i, "piece": svc.tok.piece(i).decode("utf-8", "replace")} for i in ids]})
        return JSONResponse({"tokens": ids})

    @_route(svc, "detokenize")
    async def detokenize(req):
        body = await svc.read_json(req)
        ids = protocol.get(body, "tokens", (list,))
        if ids is None:
            raise ApiError("'tokens' (an array of token ids) is required", param="tokens", code="missing")
        n = svc.engine.model.n_vocab
        if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < n for t in ids):
            raise ApiError(f"'tokens' must be an array of token ids in [0, {n})", param="tokens", code="invalid_value")
        return JSONResponse({"content": svc.tok.decode(ids, strip_space_prefix=False)})

    async def not_found(req, exc):
        status = getattr(exc, "status_code", 404)
        if status == 405:        # the route exists for another method: say which (Allow, as starlette sets it)
            allow = (getattr(exc, "headers", None) or {}).get("Allow", "")
            e = ApiError(f"{req.method} {req.url.path}: method not allowed (use {allow or 'another method'})", 405,
                         code="method_not_allowed", headers={"Allow": allow} if allow else None)
        else:
            e = ApiError(f"{req.method} {req.url.path}: no such route", status, code="not_found")
        return _error(e)

    routes = [Route("/v1/chat/completions", chat_completions, methods=["POST"]),
              Route("/chat/completions", chat_completions, methods=["POST"]),
              Route("/v1/completions", completions, methods=["POST"]),
              Route("/completions", completions, methods=["POST"]),
              Route("/v1/models", models, methods=["GET"]), Route("/models", models, methods=["GET"]),
              Route("/health", health, methods=["GET"]), Route("/metrics", metrics, methods=["GET"]),
              Route("/tokenize", tokenize, methods=["POST"]), Route("/detokenize", detokenize, methods=["POST"])]
    return Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found})


def prometheus(svc: Service) -> str:
    """The /metrics text (Prometheus exposition format 0.0.4)."""
    st = svc.engine.stats()
    rows = [("requests_total", "counter", "requests admitted into a slot", st.get("requests", 0)),
            ("requests_cancelled_total", "counter", "requests whose client left before the end", st.get("cancelled", 0)),
            ("prompt_tokens_total", "counter", "prompt tokens of admitted requests", st.get("prompt_tokens", 0)),
            ("prompt_tokens_reused_total", "counter", "prompt tokens kept from a slot's memory (not decoded)",
             st.get("prompt_tokens_reused", 0)),
            ("tokens_generated_total", "counter", "tokens sampled", st.get("tokens_generated", 0)),
            ("draft_tokens_total", "counter", "speculative decoding: draft tokens sent (--lookup, --draft-model, --mtp)", st.get("draft_tokens", 0)),
            ("draft_tokens_accepted_total", "counter", "speculative decoding: draft tokens kept (--lookup, --draft-model, --mtp)",
             st.get("draft_tokens_accepted", 0)),
            ("decode_errors_total", "counter", "decode calls that failed", st.get("decode_errors", 0)),
            ("draft_errors_total", "counter", "draft model (--draft-model) or MTP head (--mtp) calls that failed (that step sent no drafts; answers unchanged)",
             st.get("draft_errors", 0)),
            ("slots_busy", "gauge", "slots running a request", st["slots_busy"]),
            ("slots", "gauge", "slots (-np)", st["slots"]),
            ("queue_length", "gauge", "requests waiting for a slot", st["queue"])]
    out = []
    for name, kind, help_, v in rows:
        out += [f"# HELP toolkit_{name} {help_}", f"# TYPE toolkit_{name} {kind}", f"toolkit_{name} {v}"]
    out += ["# HELP toolkit_http_responses_total HTTP responses by route and status",
            "# TYPE toolkit_http_responses_total counter"]
    for (route, status), n in sorted(svc.http.items()):
        out.append(f'toolkit_http_responses_total{{route="{route}",status="{status}"}} {n}')
    return "\n".join(out) + "\n"
