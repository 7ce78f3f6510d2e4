"""Constrained decoding: a GBNF grammar (llama.cpp's format) or a JSON schema, through llguidance
(the Low-level Guidance library; https://github.com/guidance-ai/llguidance; the grammar engine
llama.cpp itself can build with, LLAMA_LLGUIDANCE).

Each step, the tokens the grammar does not allow get a logit of -inf before sampling; the
sampled token advances the matcher.  Generation ends when the grammar is complete (the matcher
stops), or at an end-of-generation token, which the grammar allows only where it accepts.

    g = Grammar.from_gbnf(tok, n_vocab, 'root ::= "yes" | "no"')
    g = Grammar.from_json_schema(tok, n_vocab, '{"type": "object", ...}')
    row = g.mask(row); ...; g.accept(token); g.done()

Vocabulary: token i is the bytes of ``Tokenizer.piece(i)``; control tokens (token type 3) are
marked special, as llguidance's llama.cpp adapter does.
"""
from __future__ import annotations

import json

import numpy as np

from toolkit.errors import InputError


def _llguidance():
    try:
        import llguidance
    except ImportError:   # pragma: no cover - a declared dependency
        raise InputError("--grammar / --json-schema need the llguidance package (pip install llguidance)") from None
    return llguidance


class _Vocab:
    """What llguidance's TokenizerWrapper reads from a tokenizer."""

    def __init__(self, tok, n_vocab: int):
        self._tok = tok
        self.tokens = [tok.piece(i) for i in range(n_vocab)]
        eog = sorted(tok.eog_ids)
        self.eos_token_id = tok.eos_id if tok.eos_id is not None else (eog[0] if eog else 0)
        self.bos_token_id = tok.bos_id
        types = getattr(tok, "token_types", None)
        self.special_token_ids = [i for i in range(n_vocab) if types is not None and i < len(types) and types[i] == 3]

    def __call__(self, text) -> list[int]:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8", "replace")
        return self._tok.encode(text, add_special=False, parse_special=False)


def ll_tokenizer(tok, n_vocab: int):
    """llguidance's view of ``tok`` (n_vocab tokens).  Building it reads every token's bytes;
    a caller that compiles many grammars (toolkit serve) builds it once and passes it on."""
    llg = _llguidance()
    return llg.LLTokenizer(llg.TokenizerWrapper(_Vocab(tok, n_vocab)), n_vocab=n_vocab,
                           eos_token=sorted(tok.eog_ids) or None)


class Grammar:
    """A compiled grammar and its matcher over one vocabulary (n_vocab tokens).  ``lltok``: an
    :func:`ll_tokenizer` of the same tokenizer to reuse (None: built here)."""

    def __init__(self, tok, n_vocab: int, grammar: str, what: str, lltok=None):
        llg = _llguidance()
        lt = lltok if lltok is not None else ll_tokenizer(tok, n_vocab)
        is_err, msgs = llg.LLMatcher.validate_grammar_with_warnings(grammar, lt)
        if is_err:
            raise InputError(f"{what}: {'; '.join(msgs) if msgs else 'invalid grammar'}")
        self.matcher = llg.LLMatcher(lt, grammar, log_level=0)
        if self.matcher.is_error():
            raise InputError(f"{what}: {self.matcher.get_error()}")
        self.n_vocab, self.what = n_vocab, what

    @classmethod
    def from_gbnf(cls, tok, n_vocab: int, text: str, what: str = "--grammar") -> "Grammar":
        """A GBNF grammar (llama.cpp grammars/README.md; the start rule is ``root``)."""
        try:
            g = _llguidance().grammar_from("gbnf", text)
        except ValueError as e:
            raise InputError(f"{what}: {e}") from None
        return cls(tok, n_vocab, g, what)

    @classmethod
    def from_json_schema(cls, tok, n_vocab: int, schema: str, what: str = "--json-schema", lltok=None) -> "Grammar":
        """A JSON schema (text); InputError when it is not JSON.  The output is compact JSON
        (separators ", " and ": ", no free whitespace: llguidance's whitespace_flexible off,
        so a model cannot pad it forever); the schema's own "x-guidance" options win."""
        try:
            json.loads(schema)
        except ValueError as e:
            raise InputError(f"{what}: not JSON: {e}") from None
        try:
            g = _llguidance().LLMatcher.grammar_from_json_schema(
                schema, defaults={"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "})
        except ValueError as e:
            raise InputError(f"{what}: {e}") from None
        return cls(tok, n_vocab, g, what, lltok)

    def mask(self, row: np.ndarray) -> np.ndarray:
        """float32 [n_vocab] logits with the tokens the grammar forbids set to -inf (a copy)."""
        bits = np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint8)
        allowed = np.unpackbits(bits, bitorder="little")[: row.size].astype(bool)
        if allowed.size < row.size:
            allowed = np.concatenate([allowed, np.zeros(row.size - allowed.size, bool)])
        out = np.where(allowed, row, -np.inf).astype(np.float32)
        return out

    def fork(self) -> "Grammar":
        """An independent copy of the matcher in its current state (a draft model advances it
        while drafting; the original only follows the tokens the target keeps)."""
        g = Grammar.__new__(Grammar)
        g.matcher, g.n_vocab, g.what = self.matcher.deep_copy(), self.n_vocab, self.what
        return g

    def n_allowed(self, tokens) -> int:
        """How many of ``tokens`` (a prefix) the grammar accepts from its current state, without
        advancing it."""
        return int(self.matcher.validate_tokens([int(t) for t in tokens])) if len(tokens) else 0

    def accept(self, token: int) -> None:
        """Advance the matcher by ``token`` (InputError if the grammar refuses it: a bug)."""
        if not self.matcher.consume_token(int(token)):
            raise InputError(f"{self.what}: token {token} refused by the grammar ({self.matcher.get_error()})")

    def done(self) -> bool:
        """True when the grammar is complete (nothing more may follow)."""
        return bool(self.matcher.is_stopped())
