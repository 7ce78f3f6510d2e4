"""Hostile GGUF files: a structure-aware mutation suite for the GGUF reader and `toolkit info`.

Every mutated file must end in exactly one clean :class:`toolkit.errors.ToolkitError` (or load
fine when the mutation happens to be harmless), never another exception, a hang or a huge
allocation.  Mutations work on the parsed structure (header counts, key/values, string and
array lengths, value types, tensor infos, offsets, alignment, dims that overflow when
multiplied, n_dims > 4, duplicate names, data beyond EOF) and on raw header bytes.

The codec (:class:`G`, :func:`parse`, :data:`MUTATORS`) lives in fuzz_util.py, shared with
tests/reliability/test_fuzz_run.py (Model / `toolkit run` on the same mutations) and tools/fuzz_gguf.py
(the optional, longer atheris target).

Determinism: hypothesis runs with ``derandomize=True``; the mutations draw only from it.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from fuzz_util import (ARR, F32, G, I32, N_EXAMPLES, SEEDS, STR, U32, U64, encode_value, expect_clean, hang_guard,
                       mutated, read_and_describe, record, seed, u64)

FUZZ = settings(derandomize=True, max_examples=N_EXAMPLES * len(SEEDS), deadline=None, database=None,
                suppress_health_check=list(HealthCheck), print_blob=True)


# ==== targets =================================================================================

@pytest.mark.slow
@FUZZ
@given(mutated())
def test_gguf_reader_and_info_on_mutated_files(tmp_path_factory, case):
    what, data = case
    p = tmp_path_factory.mktemp("fz") / "m.gguf"
    p.write_bytes(data)
    e = expect_clean(lambda: read_and_describe(str(p)), what)
    record("GGUF reader + info", "ok" if e is None else type(e).__name__)


# ---- targeted regressions: each names the hostile construct ---------------------------------

def _write(tmp_path, g: G) -> str:
    p = tmp_path / "x.gguf"
    p.write_bytes(g.encode())
    return str(p)


def _err(path: str) -> str:
    from toolkit.errors import InputError
    with pytest.raises(InputError) as ei:
        with hang_guard(10):
            read_and_describe(path)
    return str(ei.value)


@pytest.mark.parametrize("count", [2**16, 2**32, 2**64 - 1])
def test_scalar_array_count_beyond_eof_is_an_error_not_a_hang(tmp_path, count):
    # gguf-py loops over every declared element; past EOF each one reads as zero bytes, so a
    # count of 2**64-1 would loop (and allocate) forever.
    g = seed("mamba")
    tt = next(kv for kv in g.kvs if kv.key == b"tokenizer.ggml.token_type")
    tt.payload = tt.payload[:4] + u64(count) + tt.payload[12:]
    g.kvs.remove(tt)
    g.kvs.append(tt)   # last key, so the huge count runs into the tensor infos and then EOF
    msg = _err(_write(tmp_path, g))
    assert "tokenizer.ggml.token_type" in msg or "array" in msg


def test_dims_whose_product_overflows_are_rejected(tmp_path):
    g = seed("mamba")
    g.tis[0].dims = [2**32, 2**32]      # 2**64 elements: wraps to 0 in uint64 arithmetic
    msg = _err(_write(tmp_path, g))
    assert g.tis[0].name.decode() in msg


def test_more_than_four_dims_is_rejected(tmp_path):
    g = seed("mamba")
    g.tis[1].dims = g.tis[1].dims + [1, 1, 1]
    msg = _err(_write(tmp_path, g))
    assert g.tis[1].name.decode() in msg and "dims" in msg


def test_duplicate_tensor_name_is_rejected(tmp_path):
    g = seed("mamba")
    g.tis[2].name = g.tis[1].name
    assert "duplicate" in _err(_write(tmp_path, g)).lower()


def test_duplicate_key_is_rejected(tmp_path):
    g = seed("mamba")
    g.kvs.append(g.kvs[3])
    assert g.kvs[3].key.decode() in _err(_write(tmp_path, g))


def test_data_beyond_eof_names_tensor_and_bytes(tmp_path):
    g = seed("mamba")
    last = max(g.tis, key=lambda t: t.offset)
    g.tail_cut = 64
    msg = _err(_write(tmp_path, g))
    assert last.name.decode() in msg and "beyond the end" in msg


def test_misaligned_tensor_offset_is_rejected(tmp_path):
    g = seed("mamba")
    g.tis[3].offset += 4    # still inside the file, but not a multiple of general.alignment
    msg = _err(_write(tmp_path, g))
    assert g.tis[3].name.decode() in msg and "align" in msg


def test_row_not_a_multiple_of_block_size_is_rejected(tmp_path):
    g = seed("mamba")
    t = next(t for t in g.tis if t.dims[0] % 32)   # ssm_conv1d: rows of d_conv = 4
    t.ttype = 8   # Q8_0: blocks of 32 (fewer bytes than F32, so the data stays inside the file)
    msg = _err(_write(tmp_path, g))
    assert t.name.decode() in msg


@pytest.mark.parametrize("key,vtype,value", [
    (b"mamba.block_count", STR, b"two"),
    (b"mamba.block_count", ARR, (U32, [2, 2])),
    (b"mamba.embedding_length", F32, float("nan")),
    (b"mamba.ssm.state_size", I32, -16),
    (b"mamba.attention.layer_norm_rms_epsilon", STR, b"1e-5"),
    (b"general.architecture", U32, 7),
    (b"tokenizer.ggml.merges", U32, 3),
    (b"tokenizer.ggml.tokens", STR, b"abc"),
    (b"mamba.ssm.dt_b_c_rms", STR, b"yes"),
    (b"mamba.context_length", U64, 2**40),
])
def test_wrong_value_types_are_input_errors(tmp_path, key, vtype, value):
    g = seed("mamba")
    kv = next(kv for kv in g.kvs if kv.key == key)
    kv.vtype, kv.payload = vtype, encode_value(vtype, value)
    from toolkit.errors import ToolkitError as TE
    with pytest.raises(TE) as ei:
        with hang_guard(10):
            read_and_describe(_write(tmp_path, g))
    assert key.decode() in str(ei.value) or "architecture" in str(ei.value)


def test_seeds_are_valid():
    """The mutation suite starts from files that load: re-encoding a seed is byte-identical."""
    for name, p in SEEDS.items():
        b = p.read_bytes()
        assert seed(name).encode() == b, name
