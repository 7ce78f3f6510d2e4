"""Tokenizer: llama.cpp's test-tokenizer-0 cases for GPT-2 BPE, a SentencePiece vocab, streaming."""
from __future__ import annotations

import pathlib

import gguf
import pytest

from toolkit.errors import UnsupportedError
from toolkit.gguf_io import GGUFFile, Keys
from toolkit.runtime.tokenizer import (TOKEN_BYTE, TOKEN_CONTROL, TOKEN_NORMAL, TOKEN_UNKNOWN,
                                       TOKEN_USER_DEFINED, Tokenizer)

VOCAB = pathlib.Path(__file__).parent.parent / "fixtures" / "vocab"
GPT2 = VOCAB / "ggml-vocab-gpt-2.gguf"


def read_cases(path: pathlib.Path) -> list[tuple[str, list[int]]]:
    """The .inp/.out pairs the way llama.cpp's tests/test-tokenizer-0.cpp reads them."""
    raw = (path.parent / (path.name + ".inp")).read_bytes().decode("utf-8")
    sep = "\n__ggml_vocab_test__\n"
    inp, pos = [], 0
    while pos < len(raw):
        nxt = raw.find(sep, pos)
        if nxt < 0:
            inp.append(raw[pos:])
            break
        inp.append(raw[pos:nxt])
        pos = nxt + len(sep)
    out = (path.parent / (path.name + ".out")).read_bytes().decode("utf-8").split("\n")
    if out and out[-1] == "":
        out = out[:-1]   # std::getline does not yield the empty string after the final newline
    assert len(inp) == len(out)
    return [(s, [int(x) for x in o.split()]) for s, o in zip(inp, out)]


@pytest.fixture(scope="module")
def gpt2_file() -> GGUFFile:
    return GGUFFile(GPT2)


@pytest.fixture(scope="module")
def gpt2(gpt2_file) -> Tokenizer:
    return Tokenizer.from_gguf(gpt2_file)


def test_gpt2_reproduces_llamacpp_out(gpt2):
    cases = read_cases(GPT2)
    assert len(cases) == 46
    # llama.cpp's harness: common_tokenize(ctx, text, add_special=false, parse_special=false)
    bad = [(s, want, gpt2.encode(s, add_special=False, parse_special=False))
           for s, want in cases if gpt2.encode(s, add_special=False, parse_special=False) != want]
    assert not bad, bad[:3]


def test_gpt2_round_trip(gpt2):
    for s, ids in read_cases(GPT2):
        assert gpt2.decode(ids) == s


def test_gpt2_metadata(gpt2):
    assert gpt2.kind == "gpt2" and gpt2.n_vocab == 50257
    assert gpt2.bos_id == gpt2.eos_id == 50256
    assert gpt2.add_bos is False          # llama.cpp's default for BPE, the file has no add_bos key
    assert gpt2.is_eog(50256) and not gpt2.is_eog(198)
    assert gpt2.encode("Hello") == [15496]  # add_special=True adds nothing here


def test_gpt2_parse_special(gpt2):
    s = "a<|endoftext|>b"
    assert gpt2.encode(s, add_special=False, parse_special=True) == [64, 50256, 65]
    plain = gpt2.encode(s, add_special=False, parse_special=False)
    assert 50256 not in plain and len(plain) > 3
    assert gpt2.decode(plain) == s
    assert gpt2.piece(50256) == b""    # control tokens render as nothing (llama.cpp, special=false)


class WithPre:
    """The GPT-2 vocab file seen with another tokenizer.ggml.pre (a wrapper: parsing the 50k-token
    file once per module keeps the test fast)."""

    def __init__(self, f: GGUFFile, pre: str):
        self._f, self._pre, self.path = f, pre, f.path

    def get(self, key, default=None):
        return self._pre if key == Keys.Tokenizer.PRE else self._f.get(key, default)


def test_pre_patterns_matter(gpt2_file):
    """Calibration: the same vocab with llama3's split patterns fails some of the GPT-2 lines."""
    tok = Tokenizer.from_gguf(WithPre(gpt2_file, "llama-bpe"))
    cases = read_cases(GPT2)
    bad = [s for s, want in cases if tok.encode(s, add_special=False) != want]
    assert bad and "333333333" in bad     # llama3 splits digits in groups of 3
    assert tok.add_bos is True            # llama.cpp's default for llama-bpe


@pytest.mark.parametrize("pre", ["qwen2", "deepseek-llm", "deepseek-coder", "falcon", "starcoder", "gpt-4o",
                                 "tekken", "chameleon", "poro-chat", "viking", "default", "no-such-pre"])
def test_every_pre_pattern_compiles_and_round_trips(gpt2_file, pre):
    tok = Tokenizer.from_gguf(WithPre(gpt2_file, pre))
    s = "Hello, y'all! 333 3333 нещо 我想在apple工作 🦙.cpp\n\n  x"
    assert tok.decode(tok.encode(s, add_special=False)) == s


def test_streaming_holds_back_split_characters(gpt2):
    s = "🦙 你好, 😶‍🌫️ Äpfel ✅"
    ids = gpt2.encode(s, add_special=False)
    st = gpt2.stream()
    chunks = [st.push(i) for i in ids]
    assert "".join(chunks) + st.flush() == s
    assert all("\ufffd" not in c for c in chunks)
    assert any(c == "" for c in chunks)               # some token carried only part of a character
    # each emitted chunk is a whole-character prefix extension of the text
    acc = ""
    for c in chunks:
        acc += c
        assert s.startswith(acc)
    # bytes of a split character really are spread over tokens
    assert any(len(gpt2.piece(i)) and gpt2.piece(i)[0] >= 0x80 and not _valid_utf8(gpt2.piece(i)) for i in ids)


def _valid_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


# ---------------------------------------------------------------------------------------------
# SentencePiece (tokenizer.ggml.model = "llama")
# ---------------------------------------------------------------------------------------------
SP = "\u2581"


def _spm_vocab() -> tuple[list[str], list[float], list[int]]:
    toks = ["<unk>", "<s>", "</s>"]
    types = [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL]
    scores = [0.0, 0.0, 0.0]
    for b in range(256):
        toks.append(f"<0x{b:02X}>"); types.append(TOKEN_BYTE); scores.append(0.0)
    normal = {
        # piece: score (higher merges first)
        SP: -1.0, "h": -2.0, "e": -2.0, "l": -2.0, "o": -2.0, "w": -2.0, "r": -2.0, "d": -2.0,
        "a": -2.0, "b": -2.0, "c": -2.0,
        "he": -3.0, "ll": -3.5, "llo": -4.0, "hello": -5.0, SP + "hello": -6.0,
        "or": -3.2, "wor": -4.5, "ld": -3.3, "world": -5.5, SP + "world": -6.5,
        # a case where score order, not left-to-right order, decides:
        # "abc" -> "ab" (-9) vs "bc" (-8): llama.cpp merges "bc" first, giving a + bc
        "ab": -9.0, "bc": -8.0, SP + "a": -7.0,
        "你": -3.0,
    }
    for t, s in normal.items():
        toks.append(t); types.append(TOKEN_NORMAL); scores.append(s)
    toks.append("<tool>"); types.append(TOKEN_USER_DEFINED); scores.append(0.0)
    return toks, scores, types


@pytest.fixture(scope="module")
def spm(tmp_path_factory) -> Tokenizer:
    toks, scores, types = _spm_vocab()
    out = tmp_path_factory.mktemp("spm") / "spm.gguf"
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(toks); w.add_token_scores(scores); w.add_token_types(types)
    w.add_bos_token_id(1); w.add_eos_token_id(2); w.add_unk_token_id(0)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_ti_data_to_file(); w.close()
    return Tokenizer.from_gguf(GGUFFile(out))


def _ids(tok: Tokenizer, pieces: list[str]) -> list[int]:
    toks, _, _ = _spm_vocab()
    return [toks.index(p) for p in pieces]


def test_spm_known_splits(spm):
    assert spm.kind == "llama" and spm.add_bos and spm.add_space_prefix
    assert spm.encode("hello world") == [1] + _ids(spm, [SP + "hello", SP + "world"])
    assert spm.encode("hello world", add_special=False) == _ids(spm, [SP + "hello", SP + "world"])
    # highest score first: "bc" (-8) beats "ab" (-9) although "ab" is on the left
    assert spm.encode("abc", add_special=False) == _ids(spm, [SP + "a", "bc"])
    # a character outside the vocab falls back to its UTF-8 bytes
    e_acute = spm.encode("é", add_special=False)
    toks, _, _ = _spm_vocab()
    assert [toks[i] for i in e_acute] == [SP, "<0xC3>", "<0xA9>"]
    assert spm.encode("", add_special=False) == []


def test_spm_specials(spm):
    # control tokens only with parse_special; user-defined always; text after a special token
    # gets the space prefix again (llama.cpp's is_prev_special)
    with_special = spm.encode("<s>hello", add_special=False, parse_special=True)
    assert with_special == [1] + _ids(spm, [SP + "hello"])
    plain = spm.encode("<s>hello", add_special=False, parse_special=False)
    assert 1 not in plain
    tool = spm.encode("hello<tool>world", add_special=False)
    assert tool == _ids(spm, [SP + "hello", "<tool>", SP + "world"])


def test_spm_round_trip_and_stream(spm):
    for s in ["hello world", "  hello  ", "é 你 🦙 abc", "hello\nworld"]:
        ids = spm.encode(s, add_special=False)
        assert spm.decode(ids) == s
        st = spm.stream()
        chunks = [st.push(i) for i in ids]
        assert all("\ufffd" not in c for c in chunks)
        assert ("".join(chunks) + st.flush()) == " " + s     # stream keeps the prefix space
    emoji = spm.encode("🦙", add_special=False)
    st = spm.stream()
    assert [st.push(i) for i in emoji] == [" ", "", "", "", "🦙"]   # ▁ + 4 byte tokens


def test_unsupported_model(tmp_path):
    out = tmp_path / "bert.gguf"
    w = gguf.GGUFWriter(str(out), "bert")
    w.add_tokenizer_model("bert")
    w.add_token_list(["[PAD]", "a"])
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_ti_data_to_file(); w.close()
    with pytest.raises(UnsupportedError, match="tokenizer model 'bert'"):
        Tokenizer.from_gguf(GGUFFile(out))


def test_hf_json_route(tmp_path):
    """A GGUF with tokenizer.huggingface.json tokenizes exactly like that json."""
    from tokenizers import Tokenizer as HFTokenizer
    hf_dir = pathlib.Path(__file__).parent.parent / "fixtures" / "hf" / "mamba-tiny"
    js = (hf_dir / "tokenizer.json").read_text(encoding="utf-8")
    ref = HFTokenizer.from_str(js)
    out = tmp_path / "hf.gguf"
    w = gguf.GGUFWriter(str(out), "mamba")
    w.add_tokenizer_model("gpt2")
    w.add_string("tokenizer.huggingface.json", js)
    w.add_eos_token_id(0)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_ti_data_to_file(); w.close()
    tok = Tokenizer.from_gguf(GGUFFile(out))
    s = "Hello, world! 🦙 The quick brown fox.\n  indented"
    assert tok.kind == "hf"
    assert tok.encode(s, add_special=False) == ref.encode(s, add_special_tokens=False).ids
    assert tok.decode(tok.encode(s, add_special=False)) == s
    assert tok.is_eog(0) and tok.piece(0) == b""


def test_metadata_bpe_equals_hf_json_on_the_same_vocab(gpt2):
    """llama.cpp's mamba-tiny GGUF (tokens + merges + pre 'gpt-2', no HF json) tokenizes every
    test string exactly like the checkpoint's own tokenizer.json."""
    from tokenizers import Tokenizer as HFTokenizer
    here = pathlib.Path(__file__).parent.parent / "fixtures"
    tok = Tokenizer.from_gguf(GGUFFile(here / "llamacpp" / "mamba-tiny.f32.gguf"))
    ref = HFTokenizer.from_file(str(here / "hf" / "mamba-tiny" / "tokenizer.json"))
    assert tok.kind == "gpt2"
    for s, _ in read_cases(GPT2):
        assert tok.encode(s, add_special=False) == ref.encode(s, add_special_tokens=False).ids, s


# ---- SentencePiece: our tokenizers-BPE construction vs llama.cpp's bigram algorithm ---------
def llamacpp_spm(text: str, vocab: dict[str, int], scores: list[float], add_space_prefix=True) -> list[int]:
    """A transcription of llama.cpp's llm_tokenizer_spm_session::tokenize (src/llama-vocab.cpp):
    symbols are UTF-8 characters; the adjacent pair whose concatenation is a vocab entry with the
    highest score merges first (ties: leftmost); leftover symbols not in the vocab become <0xXX>."""
    import heapq
    if add_space_prefix:
        text = " " + text
    text = text.replace(" ", SP)
    sym = [[c, i - 1, i + 1] for i, c in enumerate(text)]   # text, prev, next
    if sym:
        sym[-1][2] = -1
    heap: list = []
    rev: dict[str, tuple[int, int]] = {}

    def add(left, right):
        if left < 0 or right < 0:
            return
        t = sym[left][0] + sym[right][0]
        if t not in vocab:
            return
        heapq.heappush(heap, (-scores[vocab[t]], left, right, len(t)))
        rev[t] = (left, right)

    for i in range(1, len(sym)):
        add(i - 1, i)
    while heap:
        _, left, right, size = heapq.heappop(heap)
        ls, rs = sym[left], sym[right]
        if not ls[0] or not rs[0] or len(ls[0]) + len(rs[0]) != size:
            continue
        ls[0] += rs[0]
        rs[0] = ""
        ls[2] = rs[2]
        if rs[2] >= 0:
            sym[rs[2]][1] = left
        add(ls[1], left)
        add(left, ls[2])
    out: list[int] = []
    i = 0 if sym else -1
    while i >= 0:
        t = sym[i][0]
        if t in vocab:
            out.append(vocab[t])
        else:
            out.extend(vocab[f"<0x{b:02X}>"] for b in t.encode("utf-8"))
        i = sym[i][2]
    return out


def test_spm_matches_llamacpp_algorithm_on_random_vocabs(tmp_path):
    import numpy as np
    alphabet = ["a", "b", "c", "d", SP]
    n_ok = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
        types = [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL] + [TOKEN_BYTE] * 256
        pieces = set(alphabet)
        while len(pieces) < 40:
            pieces.add("".join(rng.choice(alphabet, size=int(rng.integers(2, 5)))))
        pieces = sorted(pieces)
        toks += pieces
        types += [TOKEN_NORMAL] * len(pieces)
        scores = [0.0] * 259 + list(rng.permutation(len(pieces)).astype(float) * -1.0 - 1.0)  # distinct
        out = tmp_path / f"spm{seed}.gguf"
        w = gguf.GGUFWriter(str(out), "llama")
        w.add_tokenizer_model("llama")
        w.add_token_list(toks); w.add_token_scores(scores); w.add_token_types(types)
        w.add_bos_token_id(1); w.add_eos_token_id(2); w.add_unk_token_id(0)
        w.write_header_to_file(); w.write_kv_data_to_file(); w.write_ti_data_to_file(); w.close()
        tok = Tokenizer.from_gguf(GGUFFile(out))
        vocab = {t: i for i, t in enumerate(toks)}
        for _ in range(10):
            chars = rng.choice(["a", "b", "c", "d", " ", "é"], size=int(rng.integers(1, 30)))
            s = "".join(chars)
            want = llamacpp_spm(s, vocab, scores)
            assert tok.encode(s, add_special=False) == want, (seed, s)
            assert tok.decode(want) == s
            n_ok += 1
    assert n_ok == 400


def _vocab_file(tmp_path, name, **kv) -> pathlib.Path:
    out = tmp_path / f"{name}.gguf"
    w = gguf.GGUFWriter(str(out), "gpt2")
    w.add_tokenizer_model(kv.pop("model", "gpt2"))
    for key, (kind, val) in kv.items():
        getattr(w, kind)(key.replace("__", "."), val)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_ti_data_to_file(); w.close()
    return out


@pytest.mark.parametrize("kv,msg", [
    (dict(tokenizer__ggml__tokens=("add_array", ["a", "b"]), tokenizer__ggml__token_type=("add_array", [1]),
          tokenizer__ggml__merges=("add_array", [])), "has 1 entries"),
    (dict(tokenizer__ggml__tokens=("add_array", ["a", "b", "ab"]),
          tokenizer__ggml__merges=("add_array", ["ab"])), "is not 'left right'"),
    (dict(tokenizer__ggml__tokens=("add_array", [1, 2])), "array of strings"),
    (dict(tokenizer__ggml__tokens=("add_array", ["a", "b", "ab"]), tokenizer__ggml__merges=("add_array", ["a b"]),
          tokenizer__ggml__bos_token_id=("add_string", "x")), "integer token id"),
    (dict(tokenizer__ggml__tokens=("add_array", ["a"])), "without 'tokenizer.ggml.merges'"),
    (dict(tokenizer__huggingface__json=("add_string", "{not json")), "not a valid tokenizer.json"),
    (dict(model="llama", tokenizer__ggml__tokens=("add_array", ["a", "b"]),
          tokenizer__ggml__scores=("add_array", [0.0])), "has 1 entries"),
])
def test_malformed_tokenizer_metadata_is_input_error(tmp_path, kv, msg):
    from toolkit.errors import InputError
    path = _vocab_file(tmp_path, "bad", **kv)
    with pytest.raises(InputError, match=msg) as e:
        Tokenizer.from_gguf(GGUFFile(path))
    assert str(path) in str(e.value)
