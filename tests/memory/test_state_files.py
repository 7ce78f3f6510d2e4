"""State blobs (tk_state_write / tk_state_read): round trips and rejection.

- a whole-context blob restored into a new context continues every sequence bit for bit,
  checkpoints included; a one-sequence blob restores into another sequence id
- truncated at every offset, any byte flipped, another model's, a newer version, the wrong
  kind, or re-checksummed with bad content: rejected with a message, memory exactly as before
- random mutations with a valid checksum: rejected unchanged, or accepted with the KV and
  recurrent children still agreeing (the accepted state writes and reads back)
"""
from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from toolkit.errors import NativeError, ResourceError
from toolkit.runtime import Context, Model
from families import names

pytestmark = pytest.mark.native

FAMILIES = names("sessions")


@pytest.fixture(scope="module", params=FAMILIES)
def model(request, hf_f32):
    m = Model(hf_f32(request.param))
    yield m
    m.close()


@pytest.fixture(scope="module")
def hybrid(hf_f32):
    m = Model(hf_f32("bamba-tiny"))
    yield m
    m.close()


def toks(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 512, n).astype(np.int32)


def make(model, **kw) -> Context:
    kw = {"n_ctx": 96, "n_seq_max": 3, "n_checkpoints": 3, "checkpoint_every": 5, **kw}
    return Context(model, **kw)


def fill(ctx) -> None:
    ctx.decode(toks(13, 1), seq_id=0, logits="none")
    ctx.decode(toks(7, 2), seq_id=1, logits="none")
    ctx.memory.seq_cp(1, 2)
    ctx.decode(toks(2, 3), seq_id=2, logits="none")


def test_whole_context_round_trip(model):
    cont = [toks(4, 10 + s) for s in range(3)]
    with make(model) as a, make(model) as b:
        fill(a)
        blob = a.state_bytes()
        assert blob[:8] == b"TKSTATE\0" and struct.unpack_from("<I", blob, 8)[0] == 1
        assert zlib.crc32(blob[:-4]) == struct.unpack_from("<I", blob, len(blob) - 4)[0]
        b.decode(toks(5, 9), seq_id=0)                  # overwritten by the restore
        b.load_state(blob)
        assert b.state_bytes() == blob
        for s in range(3):
            assert b.memory.seq_pos_max(s) == a.memory.seq_pos_max(s)
            assert b.memory.checkpoints(s) == a.memory.checkpoints(s)
            assert np.array_equal(b.decode(cont[s], seq_id=s, logits="all"), a.decode(cont[s], seq_id=s, logits="all"))
        # the checkpoints came along: both roll back to the same place and agree again
        assert a.memory.checkpoints(0) == [4, 9, 16]     # thinned: 12, then 14 dropped
        assert a.memory.rollback(0, 14) == b.memory.rollback(0, 14) == 10
        x = toks(3, 20)
        assert np.array_equal(a.decode(x, logits="all"), b.decode(x, logits="all"))


def test_one_sequence_into_another_id(model):
    x = toks(5, 30)
    with make(model) as a, make(model) as b:
        fill(a)
        blob = a.state_bytes(1)
        b.decode(toks(9, 31), seq_id=0, logits="none")  # another sequence stays as it is
        before0 = b.state_bytes(0)
        b.decode(toks(3, 32), seq_id=2, logits="none")  # replaced by the restore
        b.load_state(blob, seq_id=2)
        assert b.state_bytes(0) == before0
        assert b.memory.seq_pos_max(2) == 6 and b.memory.checkpoints(2) == a.memory.checkpoints(1)
        assert b.state_bytes(2) == blob
        assert np.array_equal(b.decode(x, seq_id=2, logits="all"), a.decode(x, seq_id=1, logits="all"))
        with pytest.raises(NativeError, match="whole-context"):
            b.load_state(a.state_bytes(), seq_id=1)
        with pytest.raises(NativeError, match="sequence id"):
            b.load_state(blob)


def rejected(ctx, blob, seq_id=-1, match=None) -> str:
    with pytest.raises((NativeError, ResourceError), match=match) as e:
        ctx.load_state(blob, seq_id=seq_id)
    return str(e.value)


@pytest.mark.slow
@pytest.mark.sanitize   # tk_state_read on every truncation: what ASan is for
def test_truncated_and_flipped_blobs_change_nothing(hybrid):
    with make(hybrid) as src, make(hybrid) as dst:
        fill(src)
        blob = src.state_bytes()
        dst.decode(toks(6, 40), seq_id=1)
        dst.memory.checkpoint(1)
        before = dst.state_bytes()
        view = memoryview(blob)
        for n in range(len(blob)):                      # every truncation
            rejected(dst, view[:n])
            if n % 997 == 0:
                assert dst.state_bytes() == before
        rng = np.random.default_rng(0)
        offsets = list(range(64)) + list(rng.integers(64, len(blob), 400)) + [len(blob) - 1]
        for off in offsets:                             # flipped bytes
            bad = bytearray(blob)
            bad[off] ^= 1 << int(rng.integers(0, 8))
            rejected(dst, bytes(bad))
        assert dst.state_bytes() == before
        assert "checksum" in rejected(dst, blob[:-1] + bytes([blob[-1] ^ 0x80]))
        assert "magic" in rejected(dst, b"XX" + blob[2:])
        assert "shorter" in rejected(dst, blob[:10])
        assert dst.state_bytes() == before


def recrc(b: bytearray) -> bytes:
    struct.pack_into("<I", b, len(b) - 4, zlib.crc32(bytes(b[:-4])))
    return bytes(b)


def test_other_model_newer_version_and_bad_content(hybrid, hf_f32):
    other = Model(hf_f32("granitehybrid-moe-tiny"))
    with make(hybrid) as src, make(hybrid) as dst, make(other) as ctx_o:
        fill(src)
        blob = src.state_bytes()
        before = dst.state_bytes()
        assert "another model" in rejected(ctx_o, blob)
        b = bytearray(blob)
        struct.pack_into("<I", b, 8, 2)
        assert "newer" in rejected(dst, recrc(b))
        # KV section: 32-byte header, section header 16, n_layer, n_cells, kv_dim[n_layer]
        n_layer = hybrid.hparams.n_layer
        cell0 = 32 + 16 + 8 + 4 * n_layer
        b = bytearray(blob)
        struct.pack_into("<i", b, cell0, 500)           # first cell of seq 0 at position 500
        assert "out of order" in rejected(dst, recrc(b))
        b = bytearray(blob)
        struct.pack_into("<Q", b, cell0 + 8, 1 << 9)    # a sequence id >= n_seq_max
        assert "sequence set" in rejected(dst, recrc(b))
        with Context(hybrid, n_ctx=8, n_seq_max=3) as small:
            assert "room" in rejected(small, blob)
        assert dst.state_bytes() == before
    other.close()


@pytest.mark.slow
@pytest.mark.sanitize
def test_mutations_with_valid_checksum_never_disagree(hybrid):
    """Random byte changes, checksum recomputed: the reader must refuse (memory unchanged) or
    accept a state whose two children agree (its own blob reads back in a fresh context)."""
    rng = np.random.default_rng(1)
    with make(hybrid) as src, make(hybrid) as dst:
        fill(src)
        blob = src.state_bytes()
        # bias towards the structured parts: headers, positions, sequence sets
        hot = list(range(0, 32 + 16 + 8 + 4 * hybrid.hparams.n_layer + 16))
        accepted = 0
        for i in range(300):
            b = bytearray(blob)
            for _ in range(int(rng.integers(1, 4))):
                off = int(rng.choice(hot)) if rng.random() < 0.5 else int(rng.integers(0, len(b) - 4))
                b[off] = int(rng.integers(0, 256))
            before = dst.state_bytes()
            try:
                dst.load_state(recrc(b))
            except (NativeError, ResourceError):
                assert dst.state_bytes() == before
                continue
            accepted += 1
            with make(hybrid) as chk:
                chk.load_state(dst.state_bytes())       # coherent: reads back
                for s in range(3):
                    assert dst.memory.seq_pos_max(s) == chk.memory.seq_pos_max(s)
        assert accepted > 0                             # float payload changes are legal


def test_api_misuse_is_an_error_not_a_crash(hybrid):
    from toolkit.binding import ffi, lib
    with make(hybrid) as ctx:
        fill(ctx)
        n = ffi.new("uint64_t *")
        assert lib.tk_state_size(ctx.ptr, 3, n) != lib.TK_OK          # seq >= n_seq_max
        assert lib.tk_state_size(ctx.ptr, -1, n) == lib.TK_OK
        small = ffi.new("uint8_t[]", 16)
        assert lib.tk_state_write(ctx.ptr, -1, small, 16, n) != lib.TK_OK
        assert lib.tk_state_read(ctx.ptr, 7, small, 16) != lib.TK_OK
        assert lib.tk_state_read(ctx.ptr, -1, ffi.NULL, 0) != lib.TK_OK
        with pytest.raises(NativeError, match="checkpoints"):
            ctx.memory.set_checkpoints(-1)
        with pytest.raises(NativeError):
            ctx.memory.checkpoint(5)
        done = ffi.new("int32_t *")
        assert lib.tk_memory_seq_add(ctx.ptr, 9, 0, -1, 1, done) != lib.TK_OK
        rep = ffi.new("tk_memory_report *")
        assert lib.tk_context_memory(ffi.NULL, rep) != lib.TK_OK
        # nothing above changed the memory
        blob = ctx.state_bytes()
        with make(hybrid) as ref:
            fill(ref)
            assert ref.state_bytes() == blob
