"""The fixtures with an MTP / NextN head: every checkpoint under tests/fixtures/hf whose
safetensors carry ``mtp.*`` tensors (Qwen3-Next / Qwen3.5) or a DeepSeek-style NextN layer's
``layers.N.eh_proj`` (GLM-5-Next) (the table the --mtp tests run over, so a fixture given a
head is tested without editing them)."""
from __future__ import annotations

import json
import pathlib
import struct

HF = pathlib.Path(__file__).resolve().parent / "fixtures" / "hf"


def _has_mtp(d: pathlib.Path) -> bool:
    for f in d.glob("*.safetensors"):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            if any(k.startswith(("mtp.", "model.mtp.")) or k.endswith(".eh_proj.weight") for k in json.loads(fh.read(n))):
                return True
    return False


MTP_FIXTURES = sorted(d.name for d in HF.iterdir() if d.is_dir() and _has_mtp(d))
