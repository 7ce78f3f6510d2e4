"""Tokenizer export: llama.cpp's tokenizer keys plus the verbatim ``tokenizer.huggingface.json``.

Sources, in llama.cpp's order of preference:
  * ``tokenizer.json`` with a BPE model  -> ``tokenizer.ggml.model = "gpt2"``: tokens, token
    types, merges, ``pre`` recognised from the pre-tokenizer's structure (see :func:`detect_pre`).
  * ``tokenizer.model`` (SentencePiece)  -> ``"llama"``: pieces, scores, types (protobuf parsed
    here, no sentencepiece dependency).  Used when there is no BPE tokenizer.json.
Special ids follow gguf-py's ``SpecialVocab``: ``tokenizer_config.json`` (``bos_token`` etc.,
resolved through tokenizer.json's ``added_tokens``) first, ``config.json``'s
``*_token_id`` only for the types still unset.
"""
from __future__ import annotations

import logging
import os
from typing import Any

import gguf

from toolkit.convert.hfdir import HFDir, load_json
from toolkit.convert.plan import KV, kv_arr_f32, kv_arr_i32, kv_arr_str, kv_bool, kv_str, kv_u32
from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import Keys

log = logging.getLogger(__name__)

TT = gguf.TokenType
SPECIAL_TYPES = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")
_ID_KEYS = {"bos": Keys.Tokenizer.BOS_ID, "eos": Keys.Tokenizer.EOS_ID, "unk": Keys.Tokenizer.UNK_ID,
            "sep": Keys.Tokenizer.SEP_ID, "pad": Keys.Tokenizer.PAD_ID, "mask": Keys.Tokenizer.MASK_ID}
# (cls: gguf-py has no key for it any more; SpecialVocab skips it, so do we)
_ADD_KEYS = {"bos": Keys.Tokenizer.ADD_BOS, "eos": Keys.Tokenizer.ADD_EOS, "sep": Keys.Tokenizer.ADD_SEP}

# Pre-tokenizer split regexes as tokenizer.json spells them -> llama.cpp's `pre` name
# (the regexes llama.cpp's llama-vocab.cpp implements for that name).
_GPT2_RE = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
_LLAMA3_RE = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
              "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
_QWEN2_RE = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
             "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
# Qwen3.5: qwen2's with letters + combining marks (\p{M}); llama-vocab.cpp LLAMA_VOCAB_PRE_TYPE_QWEN35
_QWEN35_RE = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
              "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
KNOWN_SPLIT_REGEXES = {_GPT2_RE: "gpt-2", _LLAMA3_RE: "llama-bpe", _QWEN2_RE: "qwen2", _QWEN35_RE: "qwen35"}


def detect_pre(tok: dict[str, Any]) -> str | None:
    """llama.cpp's ``tokenizer.ggml.pre`` name from tokenizer.json's pre_tokenizer structure.

    * ``ByteLevel`` with ``use_regex`` (GPT-2's built-in split regex)                 -> "gpt-2"
    * ``Sequence[Split(Regex R, isolated), ByteLevel(use_regex=false)]`` with R known -> its name
    * ``Sequence[Digits(individual_digits), ByteLevel(use_regex)]`` (StarCoder / Granite code:
      each digit alone, then GPT-2's split; llama.cpp's regexes "\\p{N}" + GPT-2)  -> "starcoder"
    Returns None for anything else (the caller writes "default" and warns).
    """
    pt = tok.get("pre_tokenizer")
    if not isinstance(pt, dict):
        return None
    if pt.get("type") == "ByteLevel":
        return "gpt-2" if pt.get("use_regex", True) else None
    if pt.get("type") == "Sequence":
        items = pt.get("pretokenizers") or []
        if not isinstance(items, list):
            return None
        kinds = [p.get("type") if isinstance(p, dict) else None for p in items]
        if kinds == ["ByteLevel"]:
            return detect_pre({"pre_tokenizer": items[0]})
        if (kinds == ["Digits", "ByteLevel"] and items[0].get("individual_digits")
                and items[1].get("use_regex", True)):
            return "starcoder"
        splits = [p for p in items if isinstance(p, dict) and p.get("type") == "Split"]
        rest = [p for p in items if isinstance(p, dict) and p.get("type") != "Split"]
        if (len(splits) == 1 and all(p.get("type") == "ByteLevel" and not p.get("use_regex", True) for p in rest)
                and splits[0].get("behavior") == "Isolated"):
            rx = (splits[0].get("pattern") or {}).get("Regex")
            return KNOWN_SPLIT_REGEXES.get(rx)
    return None


def _looks_special(text: str) -> bool:
    """gguf-py's ``does_token_look_special``: added tokens that should be CONTROL even when
    not flagged special."""
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<｜") and text.endswith("｜>"))
            or (text.startswith("<unused") and text.endswith(">")))


def _merges(path: str, merges: Any) -> list[str]:
    """tokenizer.json merges as GGUF strings "a b"; the pair form (transformers >= 4.45) encodes
    a space inside a part as U+0120 + ... (chr(ord(' ') + 256)), as gguf-py does."""
    if not merges:
        return []
    if all(isinstance(m, str) for m in merges):
        return list(merges)
    if all(isinstance(m, list) for m in merges):
        return [" ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part) for part in pair) for pair in merges]
    raise InputError(f"{path}: key 'model.merges' mixes the string and the pair format")


def special_ids(hf: HFDir, tok: dict[str, Any] | None, n_vocab: int) -> tuple[dict[str, int], dict[str, bool], Any]:
    """(special ids, add_*_token flags, chat template), with gguf-py SpecialVocab's precedence."""
    ids: dict[str, int] = {}
    add: dict[str, bool] = {}

    def set_id(typ: str, tid: Any) -> None:
        if isinstance(tid, bool) or not isinstance(tid, int) or typ in ids:
            return
        if tid < 0:   # e.g. pad_token_id = -1 for "none" (gguf-py raises; a skip loses nothing)
            log.warning("special token %s has a negative id %d: skipped", typ, tid)
            return
        if tid < n_vocab:
            ids[typ] = tid
        else:
            log.warning("special token %s id %d is outside the vocabulary (%d): skipped", typ, tid, n_vocab)

    tc_path = os.path.join(hf.path, "tokenizer_config.json")
    tc = load_json(tc_path) if os.path.isfile(tc_path) else None
    if tc is not None and not isinstance(tc, dict):
        raise InputError(f"{tc_path}: expected a JSON object")
    added = (tok or {}).get("added_tokens") or []
    if tok and tc is not None:
        # TemplateProcessing in the post-processor says whether BOS/EOS are added (gguf-py's
        # "crude parsing": only a special token first/last in the single template counts)
        pp = tok.get("post_processor") or {}
        procs = pp.get("processors", [pp])
        for proc in procs if isinstance(procs, list) else []:
            if not isinstance(proc, dict) or proc.get("type") != "TemplateProcessing":
                continue
            single = proc.get("single")
            if isinstance(single, list) and len(single) > 1:
                first, last = _template_special(single[0]), _template_special(single[-1])
                if first:
                    add["bos"] = first in (_content(tc.get("bos_token")), _content(tc.get("cls_token")))
                if last:
                    add["eos"] = last == _content(tc.get("eos_token"))
    chat_template = None
    if tc is not None:
        chat_template = tc.get("chat_template")
        if chat_template is None:
            jinja = os.path.join(hf.path, "chat_template.jinja")
            if os.path.isfile(jinja):
                with open(jinja, encoding="utf-8") as f:
                    chat_template = f.read()
        for typ in SPECIAL_TYPES:
            flag = tc.get(f"add_{typ}_token")
            if isinstance(flag, bool):
                add[typ] = flag
            content = _content(tc.get(f"{typ}_token"))
            if content is None:
                continue
            set_id(typ, next((a.get("id") for a in added if isinstance(a, dict) and a.get("content") == content), None))
    for typ in SPECIAL_TYPES:
        set_id(typ, hf.config.d.get(f"{typ}_token_id"))
    return ids, add, chat_template


def _template_special(item: Any) -> str | None:
    """The id of a ``{"SpecialToken": {"id": ...}}`` template item, else None."""
    st = item.get("SpecialToken") if isinstance(item, dict) else None
    tid = st.get("id") if isinstance(st, dict) else None
    return tid if isinstance(tid, str) else None


def _content(entry: Any) -> str | None:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict) and isinstance(entry.get("content"), str):
        return entry["content"]
    return None


def tokenizer_kv(hf: HFDir, n_vocab: int, warnings: list[str]) -> list[KV]:
    """All tokenizer keys for a checkpoint whose embedding has ``n_vocab`` rows.

    Raises:
        InputError: no tokenizer files, malformed JSON, more tokens than embedding rows.
        UnsupportedError: a tokenizer.json model other than BPE with no tokenizer.model.
    """
    tj_path = hf.file("tokenizer.json")
    sp_path = hf.file("tokenizer.model")
    tok = _checked_tokenizer_json(tj_path, load_json(tj_path)) if tj_path else None
    model_type = ((tok or {}).get("model") or {}).get("type")
    byte_fallback = bool(((tok or {}).get("model") or {}).get("byte_fallback"))
    if tok is not None and model_type == "BPE" and not byte_fallback:
        out = _bpe_kv(tj_path, tok, n_vocab, warnings)
    elif sp_path:
        out = _sentencepiece_kv(sp_path, hf, tok, n_vocab)
    elif tok is not None:
        what = "a SentencePiece-style BPE (byte_fallback) without tokenizer.model" if byte_fallback else f"model {model_type!r}"
        raise UnsupportedError(f"{tj_path}: tokenizer {what} is not supported; supported: byte-level BPE "
                               f"tokenizer.json, or a SentencePiece tokenizer.model")
    else:
        raise InputError(f"{hf.path}: no tokenizer.json or tokenizer.model")
    ids, add, chat = special_ids(hf, tok, n_vocab)
    for typ, tid in ids.items():
        if typ in _ID_KEYS:
            out.append(kv_u32(_ID_KEYS[typ], tid))
    for typ, flag in add.items():
        if typ in _ADD_KEYS:
            out.append(kv_bool(_ADD_KEYS[typ], flag))
    if isinstance(chat, str):
        out.append(kv_str(Keys.Tokenizer.CHAT_TEMPLATE, chat))
    if tj_path:
        # verbatim, so our runtime can tokenize exactly like HF (llama.cpp ignores this key)
        with open(tj_path, encoding="utf-8") as f:
            out.append(kv_str(Keys.Tokenizer.HF_JSON, f.read()))
    return out


def _checked_tokenizer_json(path: str, tok: Any) -> dict[str, Any]:
    """Check the parts of tokenizer.json we read have the types the format gives them.

    Raises:
        InputError: a wrong kind of value (names the file and the key).
    """
    def bad(key: str, want: str) -> InputError:
        return InputError(f"{path}: key {key!r} must be {want}")

    if not isinstance(tok, dict):
        raise InputError(f"{path}: expected a JSON object")
    for key in ("model", "pre_tokenizer", "post_processor", "normalizer", "decoder"):
        if tok.get(key) is not None and not isinstance(tok[key], dict):
            raise bad(key, "an object")
    at = tok.get("added_tokens")
    if at is not None and (not isinstance(at, list) or not all(
            isinstance(a, dict) and isinstance(a.get("id"), int) and not isinstance(a.get("id"), bool)
            and a["id"] >= 0 and isinstance(a.get("content"), str) for a in at)):
        raise bad("added_tokens", "a list of {id: int >= 0, content: str}")
    model = tok.get("model") or {}
    if model.get("type") == "BPE":
        vocab = model.get("vocab")
        if not isinstance(vocab, dict) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                  for i in vocab.values()):
            raise bad("model.vocab", "an object of token -> id (int >= 0)")
        merges = model.get("merges", [])
        if not isinstance(merges, list) or not all(
                isinstance(m, str) or (isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m))
                for m in merges):
            raise bad("model.merges", 'a list of "a b" strings or [a, b] pairs')
    return tok


def _bpe_kv(path: str, tok: dict[str, Any], n_vocab: int, warnings: list[str]) -> list[KV]:
    model = tok["model"]
    vocab = model["vocab"]
    rev: dict[int, str] = {}
    for text, i in vocab.items():
        rev[i] = text
    added = {}
    for a in tok.get("added_tokens") or []:
        if isinstance(a, dict) and isinstance(a.get("id"), int) and isinstance(a.get("content"), str):
            rev[a["id"]] = a["content"]
            added[a["id"]] = a
    if rev and max(rev) >= n_vocab:
        raise InputError(f"{path}: token id {max(rev)} does not fit the embedding's {n_vocab} rows")
    tokens: list[str] = []
    types: list[int] = []
    for i in range(n_vocab):
        if i not in rev:
            tokens.append(f"[PAD{i}]")        # llama.cpp's filler for ids the tokenizer lacks
            types.append(int(TT.UNUSED))
            continue
        text = rev[i]
        if i in added:
            if added[i].get("special") or _looks_special(text):
                types.append(int(TT.CONTROL))
            else:
                text = text.replace("\u2581", " ")   # pre-normalise user-defined spaces (gguf-py, for Gemma)
                types.append(int(TT.USER_DEFINED))
        else:
            types.append(int(TT.NORMAL))
        tokens.append(text)
    pre = detect_pre(tok)
    if pre is None:
        msg = (f"{path}: pre-tokenizer not recognised; writing tokenizer.ggml.pre = 'default' (llama.cpp may "
               f"tokenize differently; toolkit's runtime uses the verbatim tokenizer.huggingface.json)")
        log.warning(msg)
        warnings.append(msg)
        pre = "default"
    return [
        kv_str(Keys.Tokenizer.MODEL, "gpt2"),
        kv_str(Keys.Tokenizer.PRE, pre),
        kv_arr_str(Keys.Tokenizer.LIST, tokens),
        kv_arr_i32(Keys.Tokenizer.TOKEN_TYPE, types),
        kv_arr_str(Keys.Tokenizer.MERGES, _merges(path, model.get("merges"))),
    ]


# ---- SentencePiece -------------------------------------------------------------------------
def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes):
    """Iterate (field number, wire type, value) of one protobuf message (value: int or bytes)."""
    import struct
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        fn, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = _varint(buf, pos)
        elif wt == 1:
            v, pos = buf[pos:pos + 8], pos + 8
        elif wt == 2:
            n, pos = _varint(buf, pos)
            v, pos = buf[pos:pos + n], pos + n
        elif wt == 5:
            v = struct.unpack("<f", buf[pos:pos + 4])[0]
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
        if pos > len(buf):
            raise ValueError("truncated message")
        yield fn, wt, v


def parse_sentencepiece(path: str) -> list[tuple[str, float, int]]:
    """(piece, score, type) of every piece in a SentencePiece ``ModelProto`` (field 1, repeated
    ``SentencePiece {1: piece, 2: score, 3: type}``; type NORMAL=1 UNKNOWN=2 CONTROL=3
    USER_DEFINED=4 UNUSED=5 BYTE=6, the same numbers as GGUF token types).
    Ref: sentencepiece/src/sentencepiece_model.proto.

    Raises:
        InputError: not a parseable ModelProto (names the file).
    """
    with open(path, "rb") as f:
        data = f.read()
    pieces = []
    try:
        for fn, wt, v in _fields(data):
            if fn != 1 or wt != 2:
                continue
            piece, score, typ = None, 0.0, 1
            for f2, w2, v2 in _fields(v):
                if f2 == 1 and w2 == 2:
                    piece = v2.decode("utf-8")
                elif f2 == 2 and w2 == 5:
                    score = float(v2)
                elif f2 == 3 and w2 == 0:
                    typ = int(v2)
            if piece is None:
                raise ValueError("piece without text")
            pieces.append((piece, score, typ))
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not a valid SentencePiece model ({e})") from None
    if not pieces:
        raise InputError(f"{path}: SentencePiece model has no pieces")
    return pieces


def _sentencepiece_kv(path: str, hf: HFDir, tok: dict[str, Any] | None, n_vocab: int) -> list[KV]:
    """llama.cpp's ``_set_vocab_sentencepiece``: pieces, scores, types; ids the model lacks are
    ``[PAD{i}]`` (UNUSED, score -1000); added tokens (added_tokens.json) are USER_DEFINED."""
    pieces = parse_sentencepiece(path)
    if len(pieces) > n_vocab:
        raise InputError(f"{path}: {len(pieces)} pieces do not fit the embedding's {n_vocab} rows")
    tokens = [f"[PAD{i}]" for i in range(n_vocab)]
    scores = [-1000.0] * n_vocab
    types = [int(TT.UNUSED)] * n_vocab
    for i, (p, s, t) in enumerate(pieces):
        tokens[i], scores[i], types[i] = p, s, t if 1 <= t <= 6 else int(TT.NORMAL)
    at = hf.file("added_tokens.json")
    if at:
        extra = load_json(at)
        if not isinstance(extra, dict):
            raise InputError(f"{at}: expected a JSON object of token -> id")
        for text, i in extra.items():
            if isinstance(i, int) and 0 <= i < n_vocab:
                tokens[i], scores[i], types[i] = text, -1000.0, int(TT.USER_DEFINED)
    for a in (tok or {}).get("added_tokens") or []:
        i = a.get("id") if isinstance(a, dict) else None
        if isinstance(i, int) and 0 <= i < n_vocab and len(pieces) <= i:
            tokens[i], scores[i] = a.get("content", tokens[i]), -1000.0
            types[i] = int(TT.CONTROL) if a.get("special") else int(TT.USER_DEFINED)
    return [
        kv_str(Keys.Tokenizer.MODEL, "llama"),
        kv_str(Keys.Tokenizer.PRE, "default"),
        kv_arr_str(Keys.Tokenizer.LIST, tokens),
        kv_arr_f32(Keys.Tokenizer.SCORES, scores),
        kv_arr_i32(Keys.Tokenizer.TOKEN_TYPE, types),
    ]


