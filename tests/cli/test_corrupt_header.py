"""One flipped bit in a GGUF header's tensor count (issue 44, section 2, item 3).

Fewer tensor infos than the file holds moved the data section into the tensor-info bytes:
``run`` reported a non-finite weight, ``quantize`` a NaN scale, and ``info`` exited 0 listing
fewer tensors.  Now the tensor infos are checked against the data section (gguf.cpp's offset
rule, and the data's size against the file's) and every command says "corrupt header"."""
from __future__ import annotations

import pathlib
import struct

import pytest

from cli_runner import cli

MODEL = pathlib.Path(__file__).parent.parent / "fixtures" / "llamacpp" / "mamba-tiny.f32.gguf"


def _flipped(tmp_path, bit: int) -> pathlib.Path:
    """MODEL with bit ``bit`` of its tensor count (u64 at byte 8) flipped."""
    b = bytearray(MODEL.read_bytes())
    b[8 + bit // 8] ^= 1 << (bit % 8)
    p = tmp_path / f"flip{bit}.gguf"
    p.write_bytes(bytes(b))
    return p


def _corrupt_line(rc: int, err: str, path: pathlib.Path) -> None:
    line = " ".join(err.split())
    assert rc == 2, err
    assert line.startswith("error:") and str(path) in line and "corrupt" in line and "header" in line, line
    assert "non-finite" not in line and "NaN" not in line, line


@pytest.mark.parametrize("bit", range(8))
def test_info_refuses_flipped_tensor_count(monkeypatch, capsys, tmp_path, bit):
    p = _flipped(tmp_path, bit)
    rc, out, err = cli(monkeypatch, capsys, "info", str(p))
    _corrupt_line(rc, err, p)


@pytest.mark.native
@pytest.mark.parametrize("bit", [1, 2])   # 22 -> 20 and 22 -> 18 tensors: the header still parses
def test_run_and_quantize_refuse_flipped_tensor_count(monkeypatch, capsys, tmp_path, bit):
    p = _flipped(tmp_path, bit)
    assert struct.unpack_from("<Q", p.read_bytes(), 8)[0] < struct.unpack_from("<Q", MODEL.read_bytes(), 8)[0]
    rc, _, err = cli(monkeypatch, capsys, "run", "-m", str(p), "-p", "hi", "-n", "1")
    _corrupt_line(rc, err, p)
    out = tmp_path / "q.gguf"
    rc, _, err = cli(monkeypatch, capsys, "quantize", str(p), str(out), "Q8_0")
    _corrupt_line(rc, err, p)
    assert not out.exists()


def test_offsets_out_of_order_are_corrupt(tmp_path):
    """Two tensors' data offsets swapped: each is in the file, but not where gguf.cpp puts it."""
    from toolkit.errors import InputError
    from toolkit.gguf_io.header import GGUFHeader
    h = GGUFHeader(MODEL)
    a, b = list(h.tensors.values())[:2]
    raw = bytearray(MODEL.read_bytes())
    rel_a, rel_b = a.offset - h.data_offset, b.offset - h.data_offset

    def offset_at(t) -> int:   # a tensor info: name length u64, name, n_dims u32, ne u64 x n, type u32, offset u64
        name = t.name.encode()
        at = raw.index(struct.pack("<Q", len(name)) + name, 0, h.data_offset) + 8 + len(name)
        at += 4 + 8 * len(t.shape) + 4
        assert struct.unpack_from("<Q", raw, at)[0] == t.offset - h.data_offset
        return at
    at_a, at_b = offset_at(a), offset_at(b)
    raw[at_a:at_a + 8], raw[at_b:at_b + 8] = struct.pack("<Q", rel_b), struct.pack("<Q", rel_a)
    p = tmp_path / "swapped.gguf"
    p.write_bytes(bytes(raw))
    with pytest.raises(InputError, match=f"corrupt header: tensor '{a.name}' has data offset {rel_b}, expected {rel_a}"):
        GGUFHeader(p)
