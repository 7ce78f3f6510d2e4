#!/usr/bin/env python3
"""Quantization quality table: size, bits per weight, perplexity, KL divergence vs F32, speed.

For one model (by default the shipped demo model's HF checkpoint) this

1. converts the HF checkpoint to an F32 GGUF (``toolkit convert --outtype f32``), or takes
   ``--f32`` as given;
2. writes every type in ``--types`` with ``toolkit quantize F32.gguf OUT TYPE``;
3. scores the held-out text with each (``toolkit.runtime.perplexity``, llama-perplexity
   protocol: chunks of ``--ctx`` tokens, second half scored), the F32 model's scored
   log-probabilities saved once and used as the KL-divergence base for the others;
4. times prompt processing (from the perplexity run: decoded tokens / decode seconds) and
   token generation (``--tg`` single-token decodes after a 16-token prompt, greedy);
5. prints a markdown table (and ``--json`` writes the numbers).

Bits per weight = 8 * (bytes of all tensors) / (elements of all tensors), over every tensor in
the file (norms and other F32 vectors included), as llama-quantize reports it.

Usage::

    python bench/quality.py                                   # demo model, held-out slice
    python bench/quality.py --hf DIR --text FILE --ctx 512 --chunks 0 --json out.json

Figures depend on the machine (speed) but not on it for PPL/KLD beyond float rounding of the
thread split.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_HF = REPO / "examples" / "demo-hf"
DEFAULT_TEXT = REPO / "bench" / "data" / "stdlib-heldout.txt"
TYPES = ["F32", "BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0", "Q3_K_M", "Q2_K"]


def toolkit(*args: str) -> None:
    """Run the toolkit CLI (the installed one, through this interpreter); fail loudly."""
    cmd = [sys.executable, "-m", "toolkit", *args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr.strip()}")


def file_stats(path: Path) -> tuple[int, float]:
    """(file bytes, bits per weight over all tensors)."""
    from toolkit.gguf_io import GGUFFile

    f = GGUFFile(str(path))
    nbytes = sum(t.nbytes for t in f)
    nel = sum(t.n_elements for t in f)
    return path.stat().st_size, 8.0 * nbytes / nel


def gen_speed(path: Path, n_tg: int, threads: int | None) -> float:
    """Tokens/s of greedy single-token decodes after a 16-token prompt (n_tg tokens timed)."""
    import numpy as np

    from toolkit.runtime import Context, Model

    m = Model(str(path), n_threads=threads)
    ctx = Context(m, n_ctx=16 + n_tg + 1, n_seq_max=1, n_ubatch=16)
    prompt = list(range(2, 18))
    logits = ctx.decode(prompt, seq_id=0, logits="last")
    tok = int(np.argmax(logits[-1]))
    t0 = time.perf_counter()
    for _ in range(n_tg):
        logits = ctx.decode([tok], seq_id=0, logits="last")
        tok = int(np.argmax(logits[-1]))
    return n_tg / (time.perf_counter() - t0)


def render(rows: list[dict], text_name: str) -> str:
    """The markdown table (KL divergence in nats, mean +/- standard error)."""
    ref = rows[0]["ppl"] if rows and rows[0]["type"] == "F32" else None
    out = [f"{rows[0]['n_chunks']} chunks x {rows[0]['n_ctx']} tokens of {text_name}, "
           f"{rows[0]['n_scored']} tokens scored; KL divergence and top-1 agreement vs F32", "",
           "| type | size (MiB) | bits/weight | PPL | ΔPPL vs F32 | KLD vs F32 (nats) | same top-1 | pp tok/s | tg tok/s |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        d = f"{100 * (row['ppl'] / ref - 1):+.2f}%" if ref else "-"
        kld = "0" if row["kld"] == 0 else f"{row['kld']:.2e} ± {row['kld_stderr']:.1e}"
        out.append(f"| {row['type']} | {row['bytes'] / 2**20:.2f} | {row['bpw']:.2f} | {row['ppl']:.3f} ± {row['ppl_stderr']:.3f} "
                   f"| {d} | {kld} | {100 * row['top1']:.2f}% | {row['pp_tok_s']:.0f} | {row['tg_tok_s']:.0f} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hf", type=Path, default=DEFAULT_HF, help="HF checkpoint dir (converted to F32 first)")
    ap.add_argument("--f32", type=Path, default=None, help="use this F32 GGUF instead of converting --hf")
    ap.add_argument("--text", type=Path, default=DEFAULT_TEXT, help="held-out text to score")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=0, help="at most this many chunks (0: all)")
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--tg", type=int, default=64, help="tokens timed for generation speed (0: skip)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--workdir", type=Path, default=None, help="keep the GGUF files here (default: a temp dir)")
    ap.add_argument("--json", dest="json_out", type=Path, default=None)
    ap.add_argument("--render", type=Path, default=None, help="only print the table of a --json file written earlier")
    args = ap.parse_args()
    if args.render is not None:
        d = json.loads(args.render.read_text())
        print(render(d["rows"], Path(d["text"]).name))
        return 0

    from toolkit.runtime.perplexity import perplexity_file

    types = [t.strip().upper() for t in args.types.split(",") if t.strip()]
    tmp = None
    if args.workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="toolkit-quality-")
        work = Path(tmp.name)
    else:
        work = args.workdir
        work.mkdir(parents=True, exist_ok=True)

    f32 = args.f32
    if f32 is None:
        f32 = work / "model-F32.gguf"
        print(f"convert {args.hf} -> {f32}", file=sys.stderr, flush=True)
        toolkit("convert", str(args.hf), str(f32), "--outtype", "f32")
    base_logits = work / "f32-logits.npz"
    rows = []
    chunks = args.chunks or None
    for ty in types:
        path = f32 if ty == "F32" else work / f"model-{ty}.gguf"
        if ty != "F32":
            t0 = time.perf_counter()
            toolkit("quantize", str(f32), str(path), ty)
            q_s = time.perf_counter() - t0
        else:
            q_s = 0.0
        size, bpw = file_stats(path)
        if ty == "F32":
            r = perplexity_file(str(path), str(args.text), args.ctx, max_chunks=chunks, kld_out=str(base_logits),
                                threads=args.threads)
        else:
            r = perplexity_file(str(path), str(args.text), args.ctx, max_chunks=chunks, kld_base=str(base_logits),
                                threads=args.threads)
        tg = gen_speed(path, args.tg, args.threads) if args.tg > 0 else float("nan")
        row = {"type": ty, "bytes": size, "bpw": bpw, "ppl": r.ppl, "ppl_stderr": r.ppl_stderr,
               "kld": r.kld.mean if r.kld else 0.0, "kld_stderr": r.kld.stderr if r.kld else 0.0,
               "top1": r.kld.top1 if r.kld else 1.0, "pp_tok_s": r.tokens_per_s, "tg_tok_s": tg,
               "quantize_s": q_s, "n_scored": r.n_scored, "n_ctx": r.n_ctx, "n_chunks": r.n_chunks}
        rows.append(row)
        print(f"{ty}: PPL {r.ppl:.4f} KLD {row['kld']:.6f}", file=sys.stderr, flush=True)

    print(render(rows, args.text.name))
    if args.json_out:
        args.json_out.write_text(json.dumps({"text": str(args.text), "rows": rows}, indent=1) + "\n")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
