"""`toolkit run` and `toolkit info` (the CLI, in process) on hostile GGUF files.

The same structure-aware mutations as tests/reliability/test_fuzz_gguf.py (fuzz_util.py); each run must exit 0 (the
mutation was harmless) or 2/3/4 with one line on stderr, never 1 (an unexpected exception),
a signal, a hang or a huge allocation.  CI repeats this file under ASan + UBSan.
"""
from __future__ import annotations

import resource

import pytest
from hypothesis import HealthCheck, given, settings

import fuzz_util as T
from fuzz_util import N_EXAMPLES, SEEDS, cli, mutated, record

pytestmark = pytest.mark.native

RUN_ARGS = ["--tokens", "1,2,3", "-n", "2", "--temp", "0", "-c", "64", "-t", "1", "--json"]


def check_exit(what: str, argv: list[str]) -> int:
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code, out, err = cli(argv)
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    assert code in (0, 2, 3, 4), f"{what}: exit {code}\n{err[-2000:]}"
    if code:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:"), f"{what}: stderr is not one error line: {err!r}"
    assert grew < 512, f"{what}: peak RSS grew by {grew:.0f} MiB"
    return code


@pytest.mark.slow
@pytest.mark.sanitize   # mutated files through the C loader and quantizers
@settings(derandomize=True, max_examples=N_EXAMPLES * len(SEEDS) // 2, deadline=None, database=None,
          suppress_health_check=list(HealthCheck), print_blob=True)
@given(mutated())
def test_run_and_info_on_mutated_files(tmp_path_factory, case):
    what, data = case
    p = tmp_path_factory.mktemp("fr") / "m.gguf"
    p.write_bytes(data)
    code = check_exit(what, ["run", "-m", str(p)] + RUN_ARGS)
    record("toolkit run (CLI)", f"exit {code}")
    code = check_exit(what, ["info", str(p), "--json"])
    record("toolkit info (CLI)", f"exit {code}")


@settings(derandomize=True, max_examples=max(10, N_EXAMPLES // 3), deadline=None, database=None,
          suppress_health_check=list(HealthCheck), print_blob=True)
@given(mutated(seeds=("mamba",)))
def test_run_with_text_prompt_on_mutated_files(tmp_path_factory, case):
    # a text prompt goes through the tokenizer built from the (mutated) tokenizer keys
    what, data = case
    p = tmp_path_factory.mktemp("fr") / "m.gguf"
    p.write_bytes(data)
    code = check_exit(what, ["run", "-m", str(p), "hello world", "-n", "2", "--temp", "0", "-c", "64", "-t", "1"])
    record("toolkit run, text prompt (CLI)", f"exit {code}")


@pytest.mark.slow
@pytest.mark.sanitize   # mutated files through the C loader and quantizers
@settings(derandomize=True, max_examples=N_EXAMPLES * len(SEEDS) // 3, deadline=None, database=None,
          suppress_health_check=list(HealthCheck), print_blob=True)
@given(mutated())
def test_quantize_on_mutated_files(tmp_path_factory, case):
    # the row-band driver reads tensor bytes with pread at the offsets the header gives
    what, data = case
    d = tmp_path_factory.mktemp("fq")
    p, out = d / "m.gguf", d / "q.gguf"
    p.write_bytes(data)
    code = check_exit(what, ["quantize", str(p), str(out), "Q8_0", "-t", "1", "--allow-requantize"])
    record("toolkit quantize (CLI)", f"exit {code}")
    if code:
        assert not out.exists(), f"{what}: failed quantize left {out}"
    else:
        from toolkit.gguf_io import GGUFFile
        GGUFFile(out)
    assert not [q for q in d.iterdir() if q.name.endswith(".part")]


# tokenizer keys of mamba-tiny (gpt2 BPE) given hostile values; the run uses a text prompt
TOKENIZER_EDITS = [
    (b"tokenizer.ggml.model", T.STR, b"nonesuch"),
    (b"tokenizer.ggml.model", T.U32, 1),
    (b"tokenizer.ggml.pre", T.STR, b"\xff\xfe"),
    (b"tokenizer.ggml.pre", T.STR, b"nonesuch"),
    (b"tokenizer.ggml.tokens", T.STR, b"abc"),
    (b"tokenizer.ggml.tokens", T.ARR, (T.STR, [])),
    (b"tokenizer.ggml.tokens", T.ARR, (T.STR, [b"a", b"b"])),
    (b"tokenizer.ggml.tokens", T.ARR, (T.U32, [1, 2, 3])),
    (b"tokenizer.ggml.token_type", T.ARR, (T.I32, [1])),
    (b"tokenizer.ggml.token_type", T.ARR, (T.I32, [99] * 512)),
    (b"tokenizer.ggml.token_type", T.STR, b"x"),
    (b"tokenizer.ggml.merges", T.ARR, (T.STR, [b"nospace", b"a b c", b""])),
    (b"tokenizer.ggml.merges", T.ARR, (T.STR, [b"\xc4\xa0 zz"] * 3)),
    (b"tokenizer.ggml.merges", T.U32, 7),
    (b"tokenizer.ggml.bos_token_id", T.U32, 2**32 - 1),
    (b"tokenizer.ggml.bos_token_id", T.I32, -5),
    (b"tokenizer.ggml.bos_token_id", T.STR, b"1"),
    (b"tokenizer.ggml.eos_token_id", T.U32, 512),
    (b"tokenizer.ggml.padding_token_id", T.F32, float("nan")),
]


@pytest.mark.parametrize("key,vtype,value", TOKENIZER_EDITS, ids=lambda v: repr(v)[:30])
def test_run_with_hostile_tokenizer_keys(tmp_path, key, vtype, value):
    g = T.seed("mamba")
    kv = next((kv for kv in g.kvs if kv.key == key), None)
    if kv is None:
        kv = T.KV(key, vtype, b"")
        g.kvs.append(kv)
    kv.vtype, kv.payload = vtype, T.encode_value(vtype, value)
    p = tmp_path / "t.gguf"
    p.write_bytes(g.encode())
    code = check_exit(key.decode(), ["run", "-m", str(p), "hello world <|endoftext|> héllo", "-n", "3", "--temp", "0",
                                     "-c", "64", "-t", "1"])
    record("toolkit run, hostile tokenizer keys (CLI)", f"exit {code}")


def test_unmutated_seeds_run(tmp_path):
    """Calibration: the seeds themselves run (exit 0), so failures above come from the mutations."""
    for name, p in SEEDS.items():
        code, out, err = cli(["run", "-m", str(p)] + RUN_ARGS)
        assert code == 0, (name, err)
