"""Each KV cache type's error against Hugging Face's logits on the parity fixtures.

    python bench/kv_types_hf.py [--fixtures qwen35-tiny,qwen35-small,bamba-small,qwen4exp-tiny] [--markdown]

For every fixture (tests/fixtures/hf/NAME: converted to an f32 GGUF in a temporary directory) and
every cache type (-ctk = -ctv: f32, f16, bf16, q8_0, q4_0), the prompt of its reference.npz is
decoded in one call, and the logits of every position are compared with the reference's: relative
L2 error (||ours - HF|| / ||HF||, float64) and top-1 agreement (the share of positions whose argmax
is HF's).  A type the model cannot hold (block types on heads that are not a multiple of 32 wide;
MLA latent rows not a multiple of 32 wide) is reported as refused.  Deterministic: no timing.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from toolkit.convert import convert  # noqa: E402
from toolkit.errors import ToolkitError  # noqa: E402
from toolkit.runtime import Context, Model  # noqa: E402
from toolkit.runtime.options import KV_TYPES, RuntimeOptions  # noqa: E402

DEFAULT = "qwen35-tiny,qwen35-small,bamba-small,qwen4exp-tiny"


def rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b.astype(np.float64)))


def measure(path: str, ref) -> dict[str, tuple[float, float] | str]:
    toks = ref["tokens"].astype(np.int32)
    out: dict[str, tuple[float, float] | str] = {}
    with Model(path, n_threads=2) as m:
        for t in KV_TYPES:
            try:
                with Context(m, n_ctx=max(128, len(toks) + 32), n_threads=2,
                             options=RuntimeOptions(cache_type_k=t, cache_type_v=t)) as c:
                    lg = c.decode(toks, logits="all")
            except ToolkitError as e:
                out[t] = f"refused ({e})"
                continue
            out[t] = (rel_l2(lg, ref["logits"]), float((lg.argmax(1) == ref["logits"].argmax(1)).mean()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fixtures", default=DEFAULT, help=f"comma-separated names under tests/fixtures/hf (default {DEFAULT})")
    ap.add_argument("--markdown", action="store_true", help="one markdown table")
    args = ap.parse_args()
    names = [n for n in args.fixtures.split(",") if n]
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in names:
            src = ROOT / "tests" / "fixtures" / "hf" / name
            gguf = pathlib.Path(d) / f"{name}.f32.gguf"
            convert(str(src), str(gguf), "f32")
            ref = np.load(src / "reference.npz")
            rows.append((name, len(ref["tokens"]), measure(str(gguf), ref)))
    if args.markdown:
        print("| fixture (tokens) | " + " | ".join(KV_TYPES) + " |")
        print("|---|" + "---|" * len(KV_TYPES))
        for name, n, r in rows:
            cells = [v if isinstance(v, str) else f"{v[0]:.2e}, top-1 {v[1]:.3f}" for v in r.values()]
            print(f"| {name} ({n}) | " + " | ".join("refused" if c.startswith("refused") else c for c in cells) + " |")
    else:
        for name, n, r in rows:
            for t, v in r.items():
                print(f"{name:16} {t:5} " + (v if isinstance(v, str) else f"rel L2 {v[0]:.3e}  top-1 {v[1]:.3f}  ({n} tokens)"))


if __name__ == "__main__":
    main()
