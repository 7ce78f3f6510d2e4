"""Chat templates (the GGUF's ``tokenizer.chat_template``, Jinja2) and a conversation that keeps
its history in the memory hierarchy, so that each turn decodes only its new tokens.

Rendering follows transformers (``PreTrainedTokenizerBase.apply_chat_template`` with
``_compile_jinja_template``): an ``ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True)`` with the ``loopcontrols`` extension, a ``tojson`` filter (json.dumps,
ensure_ascii=False), ``raise_exception`` and ``strftime_now`` globals, and the variables
``messages``, ``add_generation_prompt``, ``bos_token``, ``eos_token``.  The rendered text is
tokenized with special tokens parsed and no BOS added by the tokenizer; a BOS is put in front
only when the tokenizer adds one and the template did not write it (llama.cpp's rule).

    tpl = ChatTemplate.from_gguf(model.gguf)            # None: the file has no template
    ids = tpl.encode(tok, [{"role": "user", "content": "Hi"}], add_generation_prompt=True)

    chat = Chat(ctx, tok, tpl, sampler)                  # one sequence of ``ctx``
    reply = chat.send("Hi", n_predict=64)                # -> ChatTurn(text, n_reused, ...)
    chat.regen(); chat.undo(); chat.save("c.json"); chat.load("c.json"); chat.reset()
"""
from __future__ import annotations

import datetime
import json
import os
from dataclasses import dataclass, field
from typing import Callable

from toolkit.errors import InputError

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content']"
          " + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
BUILTIN = {"chatml": CHATML}
TEMPLATE_KEY = "tokenizer.chat_template"
# the roles /load accepts: the OpenAI roles toolkit serve accepts (toolkit.serve.protocol.ROLES)
_ROLES = ("system", "developer", "user", "assistant", "tool")


class ChatTemplate:
    """A compiled chat template.

    source: the Jinja text; name: where it came from ("tokenizer.chat_template", a file, a
    built-in name).
    """

    def __init__(self, source: str, name: str, bos_token: str = "", eos_token: str = ""):
        try:
            import jinja2
            from jinja2.ext import loopcontrols
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError:   # pragma: no cover - a declared dependency
            raise InputError("chat templates need the jinja2 package (pip install jinja2)") from None

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        try:
            self._tpl = env.from_string(source)
        except jinja2.exceptions.TemplateError as e:
            raise InputError(f"chat template ({name}): {e}") from None
        self._errors = jinja2.exceptions.TemplateError
        self.source, self.name = source, name
        self.bos_token, self.eos_token = bos_token, eos_token

    @classmethod
    def from_gguf(cls, gguf, override: str | None = None) -> "ChatTemplate | None":
        """The template of a GGUF (``tokenizer.chat_template``), or ``override``: a file path,
        a built-in name (``chatml``), or NAME of a ``tokenizer.chat_template.NAME`` key.
        None when the file has no template and there is no override.

        Raises:
            InputError: the override is neither a file, a built-in nor a key of the file; the
                template does not compile.
        """
        bos, eos = _special_text(gguf, "bos"), _special_text(gguf, "eos")
        if override is None:
            src = gguf.get(TEMPLATE_KEY)
            return cls(str(src), TEMPLATE_KEY, bos, eos) if src else None
        if os.path.isfile(override):
            try:
                with open(override, encoding="utf-8") as fh:
                    return cls(fh.read(), override, bos, eos)
            except (OSError, UnicodeDecodeError) as e:
                raise InputError(f"--chat-template {override}: {e}") from None
        if override in BUILTIN:
            return cls(BUILTIN[override], override, bos, eos)
        named = gguf.get(f"{TEMPLATE_KEY}.{override}")
        if named:
            return cls(str(named), f"{TEMPLATE_KEY}.{override}", bos, eos)
        raise InputError(f"--chat-template {override}: not a file, not a built-in ({', '.join(BUILTIN)}) "
                         f"and not a {TEMPLATE_KEY}.{override} key of the model")

    def render(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The conversation as text.  Raises InputError when the template refuses it
        (``raise_exception``, e.g. roles out of order)."""
        try:
            return self._tpl.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                    bos_token=self.bos_token, eos_token=self.eos_token)
        except self._errors as e:
            raise InputError(f"chat template ({self.name}): {e}") from None

    def encode(self, tok, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        """Token ids of :meth:`render` (special tokens parsed; BOS as the module says)."""
        ids = tok.encode(self.render(messages, add_generation_prompt), add_special=False, parse_special=True)
        if tok.add_bos and tok.bos_id is not None and (not ids or ids[0] != tok.bos_id):
            ids = [tok.bos_id] + ids
        return ids


def chat_template_for(gguf, override: str | None = None) -> "tuple[ChatTemplate, str | None]":
    """The template a conversation uses, and a note to print when it is a fallback: the
    override (``--chat-template``), else the GGUF's, else ChatML, as llama.cpp falls back to
    (common/chat.cpp: a model without ``tokenizer.chat_template`` gets CHATML_TEMPLATE_SRC), in
    ``toolkit chat`` and ``toolkit serve`` alike.

    Raises:
        InputError: as :meth:`ChatTemplate.from_gguf`.
    """
    tpl = ChatTemplate.from_gguf(gguf, override)
    if tpl is not None:
        return tpl, None
    return (ChatTemplate.from_gguf(gguf, "chatml"),
            f"note: the model has no chat template ({TEMPLATE_KEY}): using chatml, as llama.cpp does; "
            f"--chat-template NAME|FILE gives another")


def _special_text(gguf, which: str) -> str:
    """The text of the file's BOS / EOS token ("" when it has none)."""
    i = gguf.get(f"tokenizer.ggml.{which}_token_id")
    toks = gguf.get("tokenizer.ggml.tokens")
    if i is None or toks is None or not 0 <= int(i) < len(toks):
        return ""
    t = toks[int(i)]
    return t.decode("utf-8", "replace") if isinstance(t, (bytes, bytearray)) else str(t)


@dataclass
class ChatTurn:
    """One answer: text; tokens (ids, the end-of-generation token not included); stop_reason
    (as GenerationResult's); n_prompt: the tokens of the rendered conversation; n_reused: those
    already in the memory (the cached prefix); n_decoded: prompt tokens decoded for this turn;
    probs: GenerationResult.probs (with n_probs); n_shifts: context shifts during the answer
    (generate's ``context_shift``); spec: with speculative decoding, SpecStats.to_dict()."""

    text: str
    tokens: list[int]
    stop_reason: str
    n_prompt: int
    n_reused: int
    n_decoded: int
    timings: dict = field(default_factory=dict)
    probs: list[dict] = field(default_factory=list)
    n_shifts: int = 0
    spec: dict | None = None


class Chat:
    """A conversation on sequence ``seq_id`` of ``ctx``: the messages, and the tokens the memory
    holds for them.  Each turn renders the whole conversation, keeps the longest prefix the
    memory already holds (rolling a recurrent state back to a checkpoint when the new rendering
    diverges inside it: ``Memory.rollback``) and decodes the rest.

    ctx needs checkpoints (``n_checkpoints`` >= 2): generation's split-last leaves one at the end
    of every prompt, from which /regen and /undo restart without re-decoding the history.
    """

    def __init__(self, ctx, tok, template: ChatTemplate, sampler, system: str | None = None, seq_id: int = 0):
        self.ctx, self.tok, self.template, self.sampler, self.seq_id = ctx, tok, template, sampler, seq_id
        self.messages: list[dict] = [{"role": "system", "content": system}] if system else []
        self.held: list[int] = []     # tokens the memory holds for seq_id, in order
        self.shifted = False          # a context shift dropped part of the history from the memory
        self._pre_shifts = 0          # shifts made before this turn's prompt was decoded
        self.inputs: tuple[str, ...] = ()   # files the command reads (draft model, template): /save refuses them
        self.drafter = None           # speculative decoding (toolkit.runtime.speculative): a drafter,
        self.draft_max, self.draft_min = 0, 0   # and ctx's draft window set to draft_max (set_speculative)

    def set_speculative(self, drafter, draft_max: int, draft_min: int = 0) -> None:
        """Answer with speculative decoding: drafts from ``drafter`` (PromptLookup, DraftModel,
        MtpDraft), at most ``draft_max`` per step (the context's draft window is set to it)."""
        from toolkit.runtime.step import Verifier
        Verifier.attach(self.ctx, draft_max, draft_min)   # the window of a verifying target
        self.drafter, self.draft_max, self.draft_min = drafter, int(draft_max), int(draft_min)

    def _append_to_held(self, before: list[dict], n_keep: int) -> list[int]:
        """The prompt of a turn after a context shift (or one whose whole rendering no longer
        fits): what the memory holds, then only the text this turn adds to the rendering, as
        llama-cli's conversation mode does (common_chat_format_single: the rendering with the
        new message, less the rendering without it).  Shifts first when that would not fit.

        Raises:
            InputError: the template's rendering of the conversation so far is not a prefix of
                its rendering with the new message, or the new text alone fills the context.
        """
        from toolkit.runtime.shift import context_shift, shift_tokens
        old = self.template.render(before, add_generation_prompt=False) if before else ""
        new = self.template.render(self.messages, add_generation_prompt=True)
        if not new.startswith(old):
            self.messages = before
            raise InputError("context shift: the chat template does not render this turn as an addition to the "
                             "conversation so far; /reset, or raise --ctx-size")
        delta = self.tok.encode(new[len(old):], add_special=False, parse_special=True)
        n_ctx = self.ctx.n_ctx or 0
        if n_ctx and len(delta) + 1 >= n_ctx // 2:
            self.messages = before
            raise InputError(f"the new message has {len(delta)} tokens, the context {n_ctx}: raise --ctx-size")
        while n_ctx and len(self.held) + len(delta) + 1 >= n_ctx:
            keep = min(max(int(n_keep), 0), len(self.held))
            d = context_shift(self.ctx, self.seq_id, keep, len(self.held))
            if d <= 0:
                break
            self.held = shift_tokens(self.held, keep, d)
            self.shifted = True
            self._pre_shifts += 1
        return self.held + delta

    def _sync(self, ids: list[int]) -> int:
        """Make the memory hold a prefix of ``ids`` (at most len(ids) - 1 tokens); returns its length."""
        self.held = self.held[:self.ctx.memory.keep_prefix(self.seq_id, self.held, ids, len(ids) - 1)]
        return len(self.held)

    def send(self, user: str | None, n_predict: int, on_text: Callable[[str], None] | None = None, **gen) -> ChatTurn:
        """Add a user message (None: answer the conversation as it stands, e.g. after /regen)
        and generate the assistant's answer, which joins the conversation."""
        from toolkit.runtime.generate import generate
        before = list(self.messages)
        self._pre_shifts = 0
        if user is not None:
            self.messages.append({"role": "user", "content": user})
        ids = self.template.encode(self.tok, self.messages, add_generation_prompt=True)
        shift = bool(gen.get("context_shift"))
        if shift and self.held and (self.shifted or (self.ctx.n_ctx and len(ids) >= self.ctx.n_ctx)):
            ids = self._append_to_held(before, gen.get("n_keep", 0))
            n_reused = len(self.held)
        else:
            if self.ctx.n_ctx and len(ids) >= self.ctx.n_ctx:
                self.messages.pop()
                raise InputError(f"the conversation has {len(ids)} tokens, the context {self.ctx.n_ctx}: "
                                 + ("raise --ctx-size" if shift else "/reset, --context-shift, or raise --ctx-size"))
            n_reused = self._sync(ids)
        self.sampler.reset()
        if self.drafter is not None:
            from toolkit.runtime.speculative import generate_speculative
            res = generate_speculative(self.ctx, self.tok, ids, n_predict, self.sampler, self.drafter, on_text,
                                       seq_id=self.seq_id, n_reused=n_reused, split_last=True,
                                       draft_max=self.draft_max, draft_min=self.draft_min, **gen)
        else:
            res = generate(self.ctx, self.tok, ids, n_predict, self.sampler, on_text, seq_id=self.seq_id,
                           n_reused=n_reused, split_last=True, **gen)
        fed = self.ctx.memory.seq_pos_max(self.seq_id) + 1
        self.held = (res.held_tokens if res.n_shifts else ids + res.tokens)[:fed]   # a shift dropped some
        self.shifted = self.shifted or res.n_shifts > 0
        if fed > len(ids):
            self.ctx.memory.checkpoint(self.seq_id)   # the next turn starts from the end of this answer
        self.messages.append({"role": "assistant", "content": res.text})
        return ChatTurn(text=res.text, tokens=res.tokens, stop_reason=res.stop_reason, n_prompt=len(ids),
                        n_reused=n_reused, n_decoded=len(ids) - n_reused, timings=res.timings.to_dict(),
                        probs=res.probs, n_shifts=res.n_shifts + self._pre_shifts,
                        spec=res.spec.to_dict() if res.spec is not None else None)

    def regen(self, n_predict: int, on_text=None, **gen) -> ChatTurn:
        """Drop the last answer and answer again (InputError when there is none)."""
        if not self.messages or self.messages[-1]["role"] != "assistant":
            raise InputError("/regen: no answer to regenerate")
        if self.shifted:
            raise InputError("/regen: not after a context shift (the memory no longer holds the whole "
                             "conversation); /reset")
        self.messages.pop()
        return self.send(None, n_predict, on_text, **gen)

    def undo(self) -> None:
        """Drop the last user message and its answer (InputError when there is none, or after a
        context shift)."""
        if self.shifted:
            raise InputError("/undo: not after a context shift (the memory no longer holds the whole "
                             "conversation); /reset")
        while self.messages and self.messages[-1]["role"] == "assistant":
            self.messages.pop()
        if not self.messages or self.messages[-1]["role"] != "user":
            raise InputError("/undo: nothing to undo")
        self.messages.pop()

    def reset(self) -> None:
        """Forget every message but the system one; empty the sequence."""
        self.messages = [m for m in self.messages if m["role"] == "system"]
        self.ctx.memory.seq_rm(self.seq_id, 0, -1)
        self.held = []
        self.shifted = False

    def save(self, path: str) -> None:
        """Write the messages as JSON ({"messages": [...]}) through a temp file renamed at the end.
        InputError when ``path`` is the model's file or one of ``self.inputs``."""
        from toolkit.gguf_io import atomic_output
        model = getattr(getattr(self.ctx, "model", None), "path", None)
        with atomic_output(path, inputs=self.inputs + ((model,) if model else ())) as tmp:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump({"messages": self.messages}, fh, ensure_ascii=False, indent=1)

    def load(self, path: str) -> None:
        """Replace the messages by those of a :meth:`save` file (the memory keeps what it
        shares with them).  Raises InputError for an unreadable or malformed file."""
        what = f"/load {path}"
        try:
            with open(path, encoding="utf-8") as fh:
                d = json.load(fh)
        except FileNotFoundError:
            raise InputError(f"{what}: no such file") from None
        except OSError as e:
            raise InputError(f"{what}: {e.strerror or e}") from None
        except UnicodeDecodeError as e:
            raise InputError(f"{what}: not UTF-8 text (byte {e.start})") from None
        except (ValueError, RecursionError) as e:
            raise InputError(f"{what}: not JSON ({e})") from None
        msgs = d.get("messages") if isinstance(d, dict) else None
        if not isinstance(msgs, list):
            raise InputError(f'{what}: expected {{"messages": [{{"role": ..., "content": ...}}, ...]}} as /save '
                             f"writes it")
        for i, m in enumerate(msgs):
            if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
                raise InputError(f"{what}: message {i}: needs a role and a content string, got {m!r:.80}")
            if m["role"] not in _ROLES:
                raise InputError(f"{what}: message {i}: role {m['role']!r:.40} is not one of {', '.join(_ROLES)}")
        self.messages = [{"role": m["role"], "content": m["content"]} for m in msgs]
