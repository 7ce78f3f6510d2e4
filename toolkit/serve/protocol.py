"""The OpenAI request bodies (chat completions, completions) read into a :class:`Request`, and
the response objects built from a finished :class:`~toolkit.serve.engine.Job`.

Field names and meanings are the OpenAI API's (https://platform.openai.com/docs/api-reference)
with llama-server's additions (``top_k``, ``min_p``, ``n_probs``, ``repeat_penalty``,
``ignore_eos``, ``timings``).  A bad field is an :class:`ApiError` (HTTP 400) naming it in
``param``, as OpenAI's error body does.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from toolkit.runtime.sampling import SamplerParams

ROLES = ("system", "developer", "user", "assistant", "tool")


class ApiError(Exception):
    """An error answered as ``{"error": {"message", "type", "param", "code"}}`` with ``status``."""

    def __init__(self, message: str, status: int = 400, param: str | None = None,
                 type_: str = "invalid_request_error", code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.message, self.status, self.param, self.type, self.code = message, status, param, type_, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass
class Request:
    """What a completion request asks for, read and checked (see :func:`read_common`)."""

    stream: bool = False
    include_usage: bool = False
    n_predict: int = -1
    params: SamplerParams = field(default_factory=SamplerParams)
    stop: list[str] = field(default_factory=list)
    n_probs: int = 0          # probability records per position for the runtime (0: none)
    logprobs: bool = False    # return the chosen tokens' log-probabilities
    top: int = 0              # alternatives listed per position (top_logprobs / logprobs / n_probs)
    schema: str | None = None # a JSON schema the output must match (response_format)
    ignore_eos: bool = False
    return_tokens: bool = False   # llama-server's return_tokens: the generated ids in each choice


# Fields that would change the output and are not implemented: refused (400 naming the field)
# when set to anything but their neutral value, never silently ignored.  README lists them.
UNSUPPORTED = {"echo": "the prompt is not echoed", "best_of": "one candidate per request",
               "logit_bias": "no per-token logit bias", "suffix": "no fill-in-the-middle",
               "tools": "no tool calling", "functions": "no function calling",
               # llama-server's own fields (tools/server/README.md)
               "grammar": "no GBNF field; use response_format with a JSON schema",
               "json_schema": "use response_format: {\"type\": \"json_schema\", ...}",
               "mirostat": "no Mirostat sampling", "typical_p": "no locally typical sampling",
               "dynatemp_range": "no dynamic temperature", "xtc_probability": "no XTC sampling",
               "dry_multiplier": "no DRY sampling", "samplers": "the sampler order is fixed"}
# values of those fields that change nothing (besides null, false and empty): llama-server's defaults
NEUTRAL = {"best_of": (1,), "mirostat": (0,), "typical_p": (1,), "dynatemp_range": (0,), "xtc_probability": (0,),
           "dry_multiplier": (0,)}


def _type_name(t) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}.get(t, str(t))


def _a(word: str) -> str:
    """``word`` with its indefinite article: "an integer", "a string"."""
    return ("an " if word[:1] in "aeiou" else "a ") + word


def get(body: dict, key: str, types: tuple, default=None):
    """``body[key]`` when present and not null, checked against ``types`` (bool is never a
    number); ``default`` otherwise.  ApiError naming ``key`` when the type is wrong."""
    v = body.get(key)
    if v is None:
        return default
    ok = isinstance(v, types) and not (isinstance(v, bool) and bool not in types)
    if float in types and isinstance(v, int) and not isinstance(v, bool):
        ok, v = True, float(v)
    if not ok:
        want = " or ".join(_type_name(t) for t in types)
        raise ApiError(f"'{key}' must be {_a(want)}, got {type(v).__name__}", param=key, code="invalid_type")
    if isinstance(v, float) and not math.isfinite(v):
        raise ApiError(f"'{key}' must be a finite number", param=key, code="invalid_value")
    return v


def _in_range(key: str, v, lo, hi):
    if v is not None and not lo <= v <= hi:
        raise ApiError(f"'{key}' = {v} must be in [{lo}, {hi}]", param=key, code="invalid_value")
    return v


def read_common(body: dict, chat: bool) -> Request:
    """The fields chat completions and completions share.  ApiError on a wrong type or value,
    or on a field of :data:`UNSUPPORTED` set to change the output."""
    for key, why in UNSUPPORTED.items():
        v = body.get(key)
        neutral = v is None or v is False or (isinstance(v, (str, list, dict)) and not v) or (
            type(v) in (int, float) and v in NEUTRAL.get(key, ()))
        if not neutral:
            raise ApiError(f"'{key}' is not supported ({why}); omit it", param=key, code="not_supported")
    r = Request()
    r.stream = get(body, "stream", (bool,), False)
    so = get(body, "stream_options", (dict,), {})
    r.include_usage = bool(get(so, "include_usage", (bool,), False))
    get(body, "model", (str,))
    n = get(body, "n", (int,), 1)
    if n != 1:
        raise ApiError("'n' must be 1 (one choice per request)", param="n", code="invalid_value")
    mt = get(body, "max_completion_tokens", (int,)) if chat else None
    mt = mt if mt is not None else get(body, "max_tokens", (int,))
    mt = mt if mt is not None else get(body, "n_predict", (int,), -1)
    r.n_predict = _in_range("max_tokens", mt, -1, 2**31 - 1)
    if r.n_predict == 0:
        raise ApiError("'max_tokens' must be >= 1 (or -1: until the end of generation)", param="max_tokens",
                       code="invalid_value")
    seed = get(body, "seed", (int,))
    r.params = SamplerParams(
        temp=_in_range("temperature", get(body, "temperature", (float,), 1.0 if chat else 0.8), 0.0, 100.0),
        top_k=_in_range("top_k", get(body, "top_k", (int,), 40), 0, 2**31 - 1),
        top_p=_in_range("top_p", get(body, "top_p", (float,), 0.95 if not chat else 1.0), 0.0, 1.0),
        min_p=_in_range("min_p", get(body, "min_p", (float,), 0.05), 0.0, 1.0),
        seed=None if seed is None or seed < 0 else _in_range("seed", seed, 0, 2**64 - 1),
        repeat_penalty=_in_range("repeat_penalty", get(body, "repeat_penalty", (float,), 1.0), 1e-6, 100.0),
        repeat_last_n=_in_range("repeat_last_n", get(body, "repeat_last_n", (int,), 64), -1, 2**31 - 1),
        presence_penalty=_in_range("presence_penalty", get(body, "presence_penalty", (float,), 0.0), -2.0, 2.0),
        frequency_penalty=_in_range("frequency_penalty", get(body, "frequency_penalty", (float,), 0.0), -2.0, 2.0))
    stop = get(body, "stop", (str, list), [])
    stop = [stop] if isinstance(stop, str) else stop
    if not all(isinstance(s, str) for s in stop) or len(stop) > 16:
        raise ApiError("'stop' must be a string or an array of at most 16 strings", param="stop", code="invalid_type")
    r.stop = [s for s in stop if s]
    r.ignore_eos = get(body, "ignore_eos", (bool,), False)
    r.return_tokens = get(body, "return_tokens", (bool,), False)
    _read_logprobs(body, chat, r)
    r.schema = _read_response_format(body)
    return r


def _read_logprobs(body: dict, chat: bool, r: Request) -> None:
    """chat: ``logprobs`` (bool) + ``top_logprobs`` (0..20); completions: ``logprobs`` (int,
    the top count); llama-server's ``n_probs`` for both."""
    if chat:
        r.logprobs = get(body, "logprobs", (bool,), False)
        top = _in_range("top_logprobs", get(body, "top_logprobs", (int,), 0), 0, 20)
        if top and not r.logprobs:
            raise ApiError("'top_logprobs' needs 'logprobs': true", param="top_logprobs", code="invalid_value")
    else:
        top = _in_range("logprobs", get(body, "logprobs", (int,)), 0, 20)
        r.logprobs = top is not None
        top = top or 0
    n_probs = _in_range("n_probs", get(body, "n_probs", (int,), 0), 0, 100)
    r.logprobs = r.logprobs or n_probs > 0
    r.top = max(top, n_probs)
    r.n_probs = max(r.top, 1 if r.logprobs else 0)


def _read_response_format(body: dict) -> str | None:
    """The JSON schema of ``response_format`` ({"type": "json_schema", "json_schema": {"schema":
    ...}} or {"type": "json_object"}), as text; None for "text" or no field."""
    import json
    rf = get(body, "response_format", (dict,))
    if rf is None:
        return None
    kind = get(rf, "type", (str,), "text")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = rf.get("schema") or {"type": "object"}
    elif kind == "json_schema":
        js = get(rf, "json_schema", (dict,))
        schema = js.get("schema") if js else None
        if not isinstance(schema, dict):
            raise ApiError("'response_format.json_schema.schema' must be an object", param="response_format",
                           code="invalid_type")
    else:
        raise ApiError(f"'response_format.type' = {kind!r}: expected text, json_object or json_schema",
                       param="response_format", code="invalid_value")
    return json.dumps(schema)


def read_messages(body: dict) -> list[dict]:
    """``messages``: a non-empty array of {"role", "content"}; content a string or an array of
    {"type": "text", "text"} parts (joined).  ApiError naming the message at fault."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ApiError("'messages' must be a non-empty array", param="messages",
                       code="invalid_type" if msgs is not None else "missing")
    out = []
    for i, m in enumerate(msgs):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise ApiError(f"'{where}' must be an object", param=where, code="invalid_type")
        role = m.get("role")
        if role not in ROLES:
            raise ApiError(f"'{where}.role' = {role!r}: expected one of {', '.join(ROLES)}",
                           param=f"{where}.role", code="invalid_value")
        content = m.get("content")
        if content is None and role == "assistant":
            content = ""
        if isinstance(content, list):
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
                raise ApiError(f"'{where}.content': only text parts ({{\"type\": \"text\", \"text\": ...}}) are supported",
                               param=f"{where}.content", code="invalid_value")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise ApiError(f"'{where}.content' must be a string or an array of text parts",
                           param=f"{where}.content", code="invalid_type")
        out.append({"role": role, "content": content})
    return out


def read_prompt(body: dict, tok) -> list[int]:
    """``prompt`` of /v1/completions: a string (tokenized as ``toolkit run`` does: BOS as the
    file says, special tokens parsed), an array of token ids, or an array of one string."""
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]
    if isinstance(p, str):
        return tok.encode(p, add_special=True, parse_special=True)
    if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        return [int(t) for t in p]
    raise ApiError("'prompt' must be a string, an array of token ids or an array of one string",
                   param="prompt", code="invalid_type" if p is not None else "missing")


def finish_reason(job) -> str:
    return "length" if job.finish_reason == "length" else "stop"


def usage(job) -> dict:
    """OpenAI's usage object; ``prompt_tokens_details.cached_tokens``: prompt tokens reused from
    the slot's memory (not decoded again)."""
    n_p, n_c = len(job.prompt), len(job.tokens)
    return {"prompt_tokens": n_p, "completion_tokens": n_c, "total_tokens": n_p + n_c,
            "prompt_tokens_details": {"cached_tokens": job.n_reused}}


def chat_logprobs(probs: list[dict], tok, top: int) -> dict:
    """Chat ``logprobs``: {"content": [{"token", "logprob", "bytes", "top_logprobs"}]}."""
    def one(i: int, p: float) -> dict:
        b = tok.piece(i)
        return {"token": b.decode("utf-8", "replace"), "logprob": _log(p), "bytes": list(b)}
    return {"content": [dict(one(r["id"], r["prob"]), top_logprobs=[one(t["id"], t["prob"]) for t in r["top"][:top]])
                        for r in probs]}


def completion_logprobs(probs: list[dict], tok, top: int) -> dict:
    """Legacy completions ``logprobs``: tokens, token_logprobs, top_logprobs (token -> logprob)."""
    pieces = [tok.piece(r["id"]).decode("utf-8", "replace") for r in probs]
    return {"tokens": pieces, "token_logprobs": [_log(r["prob"]) for r in probs],
            "top_logprobs": [{tok.piece(t["id"]).decode("utf-8", "replace"): _log(t["prob"]) for t in r["top"][:top]}
                             for r in probs]}


def _log(p: float) -> float:
    return math.log(p) if p > 0 else -9999.0
