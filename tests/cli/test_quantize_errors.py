"""`toolkit quantize` on an input holding inf / NaN: llama-quantize validates every tensor it
quantizes (ggml_validate_row_data) and stops with "quantized data validation failed"; toolkit
wrote such a file (a Q8_0 block of scale inf, an F16 NaN) and exited 0.  Now: one line naming
the file, tensor and row, exit 2, nothing at OUT."""
from __future__ import annotations

import pathlib
import shutil

import gguf
import numpy as np
import pytest

from cli_runner import cli
from toolkit.binding import rows
from toolkit.gguf_io import GGMLType
from toolkit.gguf_io.validate import _F16_SCALES, first_invalid

pytestmark = pytest.mark.native

MODEL = pathlib.Path(__file__).parent.parent / "fixtures" / "llamacpp" / "mamba-tiny.f32.gguf"


def _poisoned(tmp_path, value: float, row: int) -> tuple[pathlib.Path, str]:
    """A copy of MODEL with element 3 of ``row`` of its first 2-D F32 matrix set to ``value``."""
    p = tmp_path / "in.gguf"
    shutil.copy(MODEL, p)
    r = gguf.GGUFReader(str(p))
    t = next(t for t in r.tensors if t.tensor_type == gguf.GGMLQuantizationType.F32 and len(t.shape) == 2
             and int(t.shape[0]) % 32 == 0 and "embd" not in t.name)
    off = int(t.data_offset) + (row * int(t.shape[0]) + 3) * 4
    b = bytearray(p.read_bytes())
    b[off:off + 4] = np.float32(value).tobytes()
    p.write_bytes(bytes(b))
    return p, t.name


@pytest.mark.parametrize("value,ftype", [(np.inf, "Q8_0"), (-np.inf, "Q4_K_M"), (np.nan, "F16"), (np.inf, "BF16")])
def test_non_finite_input_is_refused(monkeypatch, capsys, tmp_path, value, ftype):
    src, name = _poisoned(tmp_path, value, row=2)
    before = src.read_bytes()
    out = tmp_path / "out.gguf"
    rc, _, err = cli(monkeypatch, capsys, "quantize", str(src), str(out), ftype, "--pure")
    line = " ".join(err.split())
    assert rc == 2, err
    assert line.startswith("error:") and "Traceback" not in err
    assert str(src) in line and repr(name) in line and "row 2" in line, line
    assert not out.exists() and sorted(x.name for x in tmp_path.iterdir()) == ["in.gguf"]
    assert src.read_bytes() == before


@pytest.mark.parametrize("t", sorted(_F16_SCALES, key=int), ids=lambda t: GGMLType(t).name)
def test_scale_offsets_are_the_block_scales(t):
    """Each offset the validator reads is a scale: setting it to fp16 inf makes gguf-py's
    dequantization of that block non-finite, and a quantized finite row passes."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(512).astype(np.float32)
    q = np.zeros(1024, np.uint8)
    size, offs = _F16_SCALES[t]
    nb = 512 // gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(int(t))][0]
    q = q[:nb * size]
    rows.convert_rows(int(GGMLType.F32), x.view(np.uint8), int(t), q, 1, 512, 1)
    assert first_invalid(t, q) is None
    for o in offs:
        bad = q.copy()
        bad[size + o:size + o + 2] = np.frombuffer(np.float16(np.inf).tobytes(), np.uint8)   # block 1
        assert first_invalid(t, bad) == (1, "inf")
        deq = gguf.quants.dequantize(bad, gguf.GGMLQuantizationType(int(t))).ravel()
        blk = deq.size // nb
        assert np.isfinite(deq[:blk]).all() and not np.isfinite(deq[blk:2 * blk]).all()
