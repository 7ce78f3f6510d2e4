"""Text <-> token ids for a GGUF model, on Hugging Face ``tokenizers``.

Three ways to build one, chosen by :meth:`Tokenizer.from_gguf`:

* ``tokenizer.huggingface.json`` present: the verbatim HF tokenizer (``Tokenizer.from_str``),
  so our ids are exactly HF's.
* ``tokenizer.ggml.model == "gpt2"`` (byte-level BPE, as llama.cpp stores it): vocab + merges
  from the file, the split regexes of ``tokenizer.ggml.pre`` (llama.cpp's names, the patterns
  of ``llm_tokenizer_bpe`` in llama.cpp's ``src/llama-vocab.cpp``) applied one after another
  (each match and each gap between matches becomes a piece), then GPT-2's byte-to-unicode map.
* ``tokenizer.ggml.model == "llama"`` (SentencePiece BPE, llama.cpp's ``llm_tokenizer_spm``):
  text gets a ``▁`` prefix (``add_space_prefix``) and spaces become ``▁``; adjacent symbols are
  merged highest-score-first while the merged text is a vocabulary entry; what is left outside
  the vocabulary falls back to ``<0xXX>`` byte tokens.  Built as a ``tokenizers`` BPE whose
  merge ranks are the merged piece's score (the SentencePiece-extractor construction of HF's
  ``LlamaConverter``).  Differs from llama.cpp only when two *different* merges have exactly the
  same score and overlap (llama.cpp takes the leftmost, the BPE the lower rank).

Special tokens follow llama.cpp's ``tokenizer_st_partition``: tokens of type CONTROL (3) and
UNKNOWN (2) are matched as whole tokens only with ``parse_special=True``; USER_DEFINED (4)
tokens are always matched.  BOS/EOS are added by :meth:`Tokenizer.encode` from the file's
``add_bos_token``/``add_eos_token`` (llama.cpp's defaults when absent), never by the HF
post-processor, so the HF route and the metadata route agree with llama.cpp.

Detokenization works on bytes: every id maps to the bytes it stands for (:meth:`Tokenizer.piece`)
and :class:`TextStream` holds back an incomplete UTF-8 sequence until its last byte arrives.
"""
from __future__ import annotations

import codecs
import json
import logging
from typing import Iterable, Sequence

import numpy as np

from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import GGUFFile, Keys

log = logging.getLogger(__name__)

# llama.cpp's token types (tokenizer.ggml.token_type; gguf.TokenType)
TOKEN_NORMAL = 1
TOKEN_UNKNOWN = 2
TOKEN_CONTROL = 3
TOKEN_USER_DEFINED = 4
TOKEN_UNUSED = 5
TOKEN_BYTE = 6

# --------------------------------------------------------------------------------------------
# Pre-tokenizer split patterns by llama.cpp pre name.
# ref: llama.cpp src/llama-vocab.cpp, llama_vocab::impl::load (name -> pre type) and
# llm_tokenizer_bpe::llm_tokenizer_bpe (pre type -> regex_exprs).  Where llama.cpp adapted a
# tokenizer.json pattern for std::regex (e.g. the case-insensitive (?i:'s|...) group), the
# original tokenizer.json pattern is used: oniguruma (HF tokenizers' engine) takes it as is.
# --------------------------------------------------------------------------------------------
_GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"""
_LLAMA3 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
_QWEN2 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
_TEKKEN = (r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"""
           r"""|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"""
           r"""|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
_GPT4O = (r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"""
          r"""|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"""
          r"""|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
# (written with \u escapes where a character has a canonical decomposition, so that no
# editor or copy normalising to NFC can turn a range into an empty one)
_DEEPSEEK_LLM_LETTERS = (
    "A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1f7dᾀ-ᾴᾶ-ᾼ\u1fbe"
    "ῂ-ῄῆ-ῌῐ-\u1fd3ῖ-\u1fdbῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212a-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ"
    "𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃")

PRE_PATTERNS: dict[str, tuple[str, ...]] = {
    "default": (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"),
    "llama3": (_LLAMA3,),
    "gpt-2": (_GPT2,),
    "deepseek-llm": ("[\r\n]", r"\s?[" + _DEEPSEEK_LLM_LETTERS + "]+", r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
                     r"\s+$", "[一-龥ࠀ-一가-퟿]+", r"\p{N}+"),
    "deepseek-coder": ("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[一-龥ࠀ-一가-퟿]+", r"\p{N}"),
    "falcon": (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]"),
    "starcoder": (r"\p{N}", _GPT2),
    "qwen2": (_QWEN2,),
    "poro": (r" ?[^(\s|.,!?…。，、।۔،)]+",),
    "chatglm": (_LLAMA3,),
    "viking": (r" ?[^(\s|.,!?…。，、।۔،)]+", r"\p{N}"),
    "tekken": (_TEKKEN,),
    "chameleon": (r"<sentinel:[0-9]+>", r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", r"([\t\n]|    |  )", r"\p{N}",
                  r"[\p{P}!-/:-@\[-`{-~]", _GPT2),
    "gpt-4o": (_GPT4O,),
}
# llama.cpp's pre names -> the pattern family above (same grouping as its switch statements)
PRE_ALIASES: dict[str, str] = {
    "default": "default",
    **{n: "llama3" for n in ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                               "midm-2.0", "lfm2", "dbrx", "smaug-bpe")},
    **{n: "gpt-2" for n in ("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
                              "a.x-4.0", "mellum", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo",
                              "jais", "exaone4", "trillion", "granite-docling")},
    "deepseek-llm": "deepseek-llm",
    "deepseek-coder": "deepseek-coder",
    "falcon": "falcon",
    **{n: "starcoder" for n in ("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone",
                                  "minerva-7b", "minerva")},
    **{n: "qwen2" for n in ("qwen2", "deepseek-r1-qwen", "kormo", "megrez", "stablelm2")},
    **{n: "poro" for n in ("poro-chat", "poro", "bloom", "gpt3-finnish")},
    **{n: "chatglm" for n in ("chatglm-bpe", "glm4", "chatglm")},
    "viking": "viking",
    "tekken": "tekken",
    "chameleon": "chameleon",
    **{n: "gpt-4o" for n in ("gpt-4o", "llama4", "minimax-m2")},
}
# pre names for which llama.cpp sets ignore_merges (a whole pre-token in the vocab is taken as is)
_IGNORE_MERGES = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "tekken"}
# pre names for which llama.cpp's default add_bos is true (BPE's default is false)
_ADD_BOS_DEFAULT = _IGNORE_MERGES | {"chameleon"}


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (ref: openai/gpt-2 encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_TO_UNICODE = _bytes_to_unicode()
UNICODE_TO_BYTE = {c: b for b, c in BYTE_TO_UNICODE.items()}
SPM_SPACE = "\u2581"  # ▁


def _byte_level_bytes(text: str) -> bytes:
    """Bytes of a byte-level BPE token; characters outside the map are taken as UTF-8."""
    out = bytearray()
    for ch in text:
        b = UNICODE_TO_BYTE.get(ch)
        if b is None:
            out += ch.encode("utf-8")
        else:
            out.append(b)
    return bytes(out)


def _spm_byte(text: str) -> int | None:
    """The byte of a SentencePiece ``<0xXX>`` token, or None."""
    if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
        try:
            return int(text[3:5], 16)
        except ValueError:
            return None
    return None


class Tokenizer:
    """Encode text to ids and map ids back to bytes/text, as llama.cpp does for the same file.

    Attributes:
        kind:        "gpt2" (byte-level BPE), "llama" (SentencePiece) or "hf" (HF json)
        n_vocab:     number of tokens in the vocabulary (``tokenizer.ggml.tokens``)
        bos_id, eos_id, eot_id, eom_id, pad_id, unk_id: ids or None when the file has none
        add_bos, add_eos: whether :meth:`encode` adds them when ``add_special=True``
        eog_ids:     frozenset of end-of-generation ids (eos, eot, eom)
    """

    def __init__(self, hf, kind: str, pieces: list[bytes], token_types: Sequence[int], *,
                 bos_id=None, eos_id=None, eot_id=None, eom_id=None, pad_id=None, unk_id=None,
                 add_bos=False, add_eos=False, add_space_prefix=False):
        self._hf = hf
        self.kind = kind
        self._pieces = pieces
        self.token_types = list(token_types)
        self.n_vocab = len(pieces)
        self.bos_id, self.eos_id, self.eot_id, self.eom_id = bos_id, eos_id, eot_id, eom_id
        self.pad_id, self.unk_id = pad_id, unk_id
        self.add_bos, self.add_eos = bool(add_bos), bool(add_eos)
        self.add_space_prefix = bool(add_space_prefix)
        self.eog_ids = frozenset(i for i in (eos_id, eot_id, eom_id) if i is not None)

    # ---- construction ---------------------------------------------------------------------
    @classmethod
    def from_gguf(cls, f: GGUFFile) -> "Tokenizer":
        """Build the tokenizer described by a GGUF file's ``tokenizer.*`` keys.

        Raises:
            InputError: tokens missing, lists of different lengths, a special id out of range,
                        a malformed ``tokenizer.huggingface.json`` (message names file and key).
            UnsupportedError: a ``tokenizer.ggml.model`` other than gpt2 / llama (without HF json).
        """
        path = f.path
        tokens = f.get(Keys.Tokenizer.LIST)
        hf_json = f.get(Keys.Tokenizer.HF_JSON)
        if tokens is None and hf_json is None:
            raise InputError(f"{path}: no tokenizer in the file (missing key {Keys.Tokenizer.LIST!r})")
        if tokens is not None and (not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens)):
            raise InputError(f"{path}: key {Keys.Tokenizer.LIST!r} must be an array of strings")
        model = f.get(Keys.Tokenizer.MODEL)
        if model is None:
            model = "gpt2" if hf_json is None else "hf"
        pre = f.get(Keys.Tokenizer.PRE)
        types = f.get(Keys.Tokenizer.TOKEN_TYPE)

        if hf_json is not None:
            from tokenizers import Tokenizer as HFTokenizer
            try:
                hf = HFTokenizer.from_str(hf_json)
                spec = json.loads(hf_json)
            except Exception as e:
                raise InputError(f"{path}: key {Keys.Tokenizer.HF_JSON!r} is not a valid tokenizer.json ({e})") from None
            if tokens is None:
                n = hf.get_vocab_size(with_added_tokens=True)
                tokens = [hf.id_to_token(i) or "" for i in range(n)]
            if types is None:
                special = {t["id"] for t in spec.get("added_tokens", []) if t.get("special")}
                added = {t["id"] for t in spec.get("added_tokens", []) if not t.get("special")}
                types = [TOKEN_CONTROL if i in special else TOKEN_USER_DEFINED if i in added else TOKEN_NORMAL
                         for i in range(len(tokens))]
            kind = "hf"
            decode_style = _hf_decode_style(spec)
        else:
            if types is None:
                types = [TOKEN_NORMAL] * len(tokens)
            if not isinstance(types, list) or not all(isinstance(t, int) for t in types):
                raise InputError(f"{path}: key {Keys.Tokenizer.TOKEN_TYPE!r} must be an array of integers")
            if len(types) != len(tokens):
                raise InputError(f"{path}: {Keys.Tokenizer.TOKEN_TYPE!r} has {len(types)} entries, "
                                 f"{Keys.Tokenizer.LIST!r} has {len(tokens)}")
            if model == "gpt2":
                hf = _build_bpe(f, tokens, types, pre)
                decode_style = "byte-level"
            elif model == "llama":
                hf = _build_spm(f, tokens, types)
                decode_style = "spm"
            else:
                raise UnsupportedError(f"{path}: tokenizer model {model!r} ({Keys.Tokenizer.MODEL}) is not supported "
                                       f"without {Keys.Tokenizer.HF_JSON!r}; supported: gpt2, llama")
            kind = model
        if len(types) != len(tokens):
            raise InputError(f"{path}: {Keys.Tokenizer.TOKEN_TYPE!r} has {len(types)} entries, "
                             f"{Keys.Tokenizer.LIST!r} has {len(tokens)}")
        pieces = [_piece_bytes(t, int(ty), decode_style) for t, ty in zip(tokens, types)]

        spm_like = model == "llama" or decode_style == "spm"
        add_bos_default = True if spm_like else (pre in _ADD_BOS_DEFAULT)
        add_space_prefix = bool(f.get(Keys.Tokenizer.ADD_PREFIX, model == "llama"))

        def special(key):
            v = f.get(key)
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise InputError(f"{path}: key {key!r} must be an integer token id, got {v!r}")
            v = int(v)
            if not 0 <= v < len(tokens):
                # llama.cpp ignores an out-of-range special id with a warning; so do we
                log.warning("%s: %s = %d is outside the vocabulary of %d tokens; ignored", path, key, v, len(tokens))
                return None
            return v

        return cls(hf, kind, pieces, types,
                   bos_id=special(Keys.Tokenizer.BOS_ID), eos_id=special(Keys.Tokenizer.EOS_ID),
                   eot_id=special(Keys.Tokenizer.EOT_ID), eom_id=special(Keys.Tokenizer.EOM_ID),
                   pad_id=special(Keys.Tokenizer.PAD_ID), unk_id=special(Keys.Tokenizer.UNK_ID),
                   add_bos=bool(f.get(Keys.Tokenizer.ADD_BOS, add_bos_default)),
                   add_eos=bool(f.get(Keys.Tokenizer.ADD_EOS, False)),
                   add_space_prefix=add_space_prefix and model == "llama")

    # ---- encode ---------------------------------------------------------------------------
    def encode(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of ``text``.

        add_special:   prepend BOS / append EOS when the file asks for it (add_bos/add_eos).
        parse_special: match control tokens (``<|endoftext|>``...) written in the text as single
                       tokens; user-defined tokens are matched either way (llama.cpp's rule).
        """
        self._hf.encode_special_tokens = not parse_special
        ids = self._hf.encode(text, add_special_tokens=False).ids if text else []
        if add_special and self.add_bos and self.bos_id is not None:
            ids = [self.bos_id] + ids
        if add_special and self.add_eos and self.eos_id is not None:
            ids = ids + [self.eos_id]
        return ids

    # ---- decode ---------------------------------------------------------------------------
    def piece(self, token_id: int) -> bytes:
        """The bytes token ``token_id`` stands for (control tokens: b""; out of range: b"")."""
        if 0 <= token_id < self.n_vocab:
            return self._pieces[token_id]
        return b""

    def decode(self, ids: Iterable[int], strip_space_prefix: bool = True) -> str:
        """Text of ``ids`` (invalid UTF-8 -> U+FFFD).  With ``strip_space_prefix`` the space a
        SentencePiece tokenizer put in front of the text (``add_space_prefix``) is removed, so
        ``decode(encode(s, add_special=False)) == s``."""
        ids = list(ids)
        data = b"".join(self.piece(int(i)) for i in ids)
        if strip_space_prefix and self.add_space_prefix and data.startswith(b" "):
            data = data[1:]
        return data.decode("utf-8", errors="replace")

    def is_eog(self, token_id: int) -> bool:
        """True for an end-of-generation token (eos, eot, eom)."""
        return token_id in self.eog_ids

    def stream(self) -> "TextStream":
        """A fresh streaming decoder (see :class:`TextStream`)."""
        return TextStream(self)


class TextStream:
    """Streaming detokenizer: feed ids one at a time, get back only complete UTF-8 text.

    A character whose bytes arrive in several tokens (byte-level BPE pieces of an emoji,
    SentencePiece ``<0xF0><0x9F>...``) is held back until its last byte arrives; invalid bytes
    become U+FFFD.  ``"".join(stream.push(i) for i in ids) + stream.flush()`` equals
    ``tokenizer.decode(ids, strip_space_prefix=False)``.
    """

    def __init__(self, tok: Tokenizer):
        self._tok = tok
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        return self._dec.decode(self._tok.piece(int(token_id)))

    def flush(self) -> str:
        """Whatever is held back (an incomplete sequence at the end becomes U+FFFD)."""
        return self._dec.decode(b"", final=True)


# --------------------------------------------------------------------------------------------
# builders
# --------------------------------------------------------------------------------------------
def _piece_bytes(text: str, ttype: int, style: str) -> bytes:
    """Bytes of one token as llama.cpp's token_to_piece renders it (special=false)."""
    if ttype == TOKEN_CONTROL or ttype == TOKEN_UNUSED:
        return b""
    if ttype == TOKEN_USER_DEFINED:
        return text.encode("utf-8")
    if style == "byte-level":
        return _byte_level_bytes(text)
    if style == "spm":
        if ttype == TOKEN_UNKNOWN:
            return "\u2585".encode("utf-8")  # ▅, what llama.cpp prints for <unk>
        b = _spm_byte(text)
        if b is not None and ttype in (TOKEN_BYTE, TOKEN_NORMAL):
            return bytes([b])
        return text.replace(SPM_SPACE, " ").encode("utf-8")
    return text.encode("utf-8")


def _hf_decode_style(spec: dict) -> str:
    """How a HF tokenizer.json's decoder maps tokens to bytes: byte-level, spm, or plain."""
    def types(node) -> list[str]:
        if not isinstance(node, dict):
            return []
        out = [node.get("type", "")]
        for sub in node.get("decoders") or node.get("pretokenizers") or []:
            out += types(sub)
        return out
    dec = types(spec.get("decoder"))
    if "ByteLevel" in dec or "ByteLevel" in types(spec.get("pre_tokenizer")):
        return "byte-level"
    if "ByteFallback" in dec or "Metaspace" in dec or (spec.get("model") or {}).get("byte_fallback"):
        return "spm"
    return "plain"


def _add_specials(hf, tokens: Sequence[str], types: Sequence[int]) -> None:
    from tokenizers import AddedToken
    special, user = [], []
    for t, ty in zip(tokens, types):
        if not t:
            continue
        if ty in (TOKEN_CONTROL, TOKEN_UNKNOWN):
            special.append(AddedToken(t, special=True, normalized=False))
        elif ty == TOKEN_USER_DEFINED:
            user.append(AddedToken(t, special=False, normalized=False))
    if special:
        hf.add_special_tokens(special)
    if user:
        hf.add_tokens(user)


def _split_merge(m: str, path: str) -> tuple[str, str]:
    # llama.cpp splits at the first space after position 0 (a piece may itself start with one)
    pos = m.find(" ", 1)
    if pos < 0:
        raise InputError(f"{path}: {Keys.Tokenizer.MERGES!r} entry {m!r} is not 'left right'")
    return m[:pos], m[pos + 1:]


def _build_bpe(f: GGUFFile, tokens: Sequence[str], types: Sequence[int], pre: str | None):
    from tokenizers import Regex, Tokenizer as HFTokenizer, decoders, models, pre_tokenizers
    merges_raw = f.get(Keys.Tokenizer.MERGES)
    if merges_raw is None:
        raise InputError(f"{f.path}: BPE tokenizer without {Keys.Tokenizer.MERGES!r}")
    family = PRE_ALIASES.get(pre or "")
    if family is None:
        log.warning("%s: pre-tokenizer %r (%s) is not known; using llama.cpp's 'default' split patterns",
                    f.path, pre, Keys.Tokenizer.PRE)
        family = "default"
    vocab = {t: i for i, t in enumerate(tokens)}
    if not isinstance(merges_raw, list) or not all(isinstance(m, str) for m in merges_raw):
        raise InputError(f"{f.path}: key {Keys.Tokenizer.MERGES!r} must be an array of strings")
    merges = [_split_merge(m, f.path) for m in merges_raw]
    try:
        model = models.BPE(vocab=vocab, merges=merges, ignore_merges=(pre in _IGNORE_MERGES))
    except Exception as e:  # tokenizers raises a bare Exception, e.g. a merge of out-of-vocabulary tokens
        raise InputError(f"{f.path}: key {Keys.Tokenizer.MERGES!r} does not fit {Keys.Tokenizer.LIST!r} ({e})") from None
    hf = HFTokenizer(model)
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(p), behavior="isolated") for p in PRE_PATTERNS[family]]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    hf.decoder = decoders.ByteLevel()
    _add_specials(hf, tokens, types)
    return hf


def _build_spm(f: GGUFFile, tokens: Sequence[str], types: Sequence[int]):
    from tokenizers import Tokenizer as HFTokenizer, decoders, models, normalizers
    scores = f.get(Keys.Tokenizer.SCORES)
    if scores is None:
        scores = [0.0] * len(tokens)
    if not isinstance(scores, list) or not all(isinstance(x, (int, float)) for x in scores):
        raise InputError(f"{f.path}: key {Keys.Tokenizer.SCORES!r} must be an array of numbers")
    if len(scores) != len(tokens):
        raise InputError(f"{f.path}: {Keys.Tokenizer.SCORES!r} has {len(scores)} entries, "
                         f"{Keys.Tokenizer.LIST!r} has {len(tokens)}")
    vocab = {t: i for i, t in enumerate(tokens)}
    score = np.asarray(scores, dtype=np.float32)
    # Every split of a vocabulary entry into two vocabulary entries is a merge; llama.cpp merges
    # the adjacent pair whose concatenation has the highest score first (ties: leftmost), so the
    # rank of a merge is the position of its result in descending-score order.
    cands: list[tuple[float, int, str, str]] = []
    for t, i in vocab.items():
        for k in range(1, len(t)):
            left, right = t[:k], t[k:]
            if left in vocab and right in vocab:
                cands.append((-float(score[i]), i, left, right))
    cands.sort(key=lambda c: (c[0], c[1]))
    unk = f.get(Keys.Tokenizer.UNK_ID)
    unk_tok = tokens[int(unk)] if unk is not None and 0 <= int(unk) < len(tokens) else None
    model = models.BPE(vocab=vocab, merges=[(a, b) for _, _, a, b in cands], unk_token=unk_tok,
                       fuse_unk=True, byte_fallback=True)
    hf = HFTokenizer(model)
    add_prefix = bool(f.get(Keys.Tokenizer.ADD_PREFIX, True))
    norm = [normalizers.Replace(" ", SPM_SPACE)]
    if add_prefix:
        norm.insert(0, normalizers.Prepend(SPM_SPACE))
    hf.normalizer = normalizers.Sequence(norm)
    hf.decoder = decoders.Sequence([decoders.Replace(SPM_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()])
    _add_specials(hf, tokens, types)
    return hf
