"""``toolkit bench``: prompt-processing and generation speed, the way llama-bench measures it.

Tests (one row each, llama-bench's names):
    ppN   N random prompt tokens decoded as one batch (ubatches of ``--ubatch``) into an
          empty context; tokens/s = N / wall time of the decode.
    tgN   N tokens decoded one at a time into an empty context; tokens/s = N / wall time.
Each test runs once unmeasured (warm-up: page the weights in, as llama-bench does), then
``-r`` times; the memory is cleared before every run.  avg_ts / stddev_ts are the mean and
sample standard deviation of the per-run tokens/s (llama-bench's definition).

``--json`` prints llama-bench's ``-o json`` schema: a list of objects with model_filename,
model_type, model_size (bytes), model_n_params, n_batch, n_ubatch, n_threads, n_prompt,
n_gen, test_time, avg_ns, stddev_ns, avg_ts, stddev_ts, samples_ns, samples_ts, plus
toolkit's cpu_level / cpu_features / ssd_threshold.
"""
from __future__ import annotations

import datetime
import json
import os
import statistics
import time
from typing import Optional

import numpy as np
import typer

from toolkit.cli.app import app
from toolkit.cli.limits import check_threads
from toolkit.errors import InputError


def _counts(text: str, flag: str) -> list[int]:
    """'512' or '128,512' -> [512] / [128, 512]; every value >= 0."""
    out = []
    for part in text.split(","):
        try:
            v = int(part)
        except ValueError:
            raise InputError(f"{flag} {text!r}: expected integers separated by commas") from None
        if v < 0:
            raise InputError(f"{flag} {text!r}: values must be >= 0")
        out.append(v)
    return out


def _size_label(n_params: int) -> str:
    if n_params >= 1e9:
        return f"{n_params / 1e9:.1f}B"
    return f"{n_params / 1e6:.0f}M" if n_params >= 1e7 else f"{n_params / 1e6:.2f}M"


def run_bench(path: str, n_prompt: list[int], n_gen: list[int], reps: int, threads: Optional[int],
              ubatch: int, warmup: bool = True, seed: int = 1234) -> list[dict]:
    """Measure every pp/tg test on the GGUF at ``path``; one llama-bench JSON object each.

    Raises: InputError (bad file / arguments), NativeError, ResourceError.
    """
    from toolkit.runtime import Context, Model, cpu_info

    m = Model(path, n_threads=threads)
    try:
        n_threads = m.n_threads
        tensors = list(m.gguf)
        size = int(sum(t.nbytes for t in tensors))
        n_params = int(sum(t.n_elements for t in tensors))
        ftype = m.gguf.get("general.file_type")
        types = sorted({t.type.name for t in tensors if len(t.shape) >= 2})
        model_type = f"{m.hparams.arch} {_size_label(n_params)} {'/'.join(types)}"
        rng = np.random.default_rng(seed)
        n_ctx = max([1] + [p for p in n_prompt] + [g for g in n_gen]) + 1
        rows = []
        tests = [(p, 0) for p in n_prompt if p > 0] + [(0, g) for g in n_gen if g > 0]
        with Context(m, n_ctx=n_ctx, n_ubatch=ubatch, n_threads=n_threads) as ctx:
            for p, g in tests:
                toks = rng.integers(0, m.n_vocab, max(p, g)).astype(np.int32)

                def one_run() -> float:
                    ctx.memory.clear()
                    t0 = time.perf_counter_ns()
                    if p:
                        ctx.decode(toks[:p], logits="last")
                    else:
                        for i in range(g):
                            ctx.decode(toks[i:i + 1], logits="last")
                    return float(time.perf_counter_ns() - t0)

                if warmup:
                    one_run()
                samples_ns = [one_run() for _ in range(reps)]
                n = p or g
                samples_ts = [n * 1e9 / s for s in samples_ns]
                rows.append({
                    "build_commit": _git_commit(), "build_number": 0,
                    "cpu_info": _cpu_name(), "gpu_info": "", "backends": "CPU",
                    "model_filename": os.path.abspath(path), "model_type": model_type,
                    "model_size": size, "model_n_params": n_params,
                    "n_batch": max(n_prompt + [1]), "n_ubatch": ubatch, "n_threads": n_threads,
                    "type_k": "f32", "type_v": "f32", "n_gpu_layers": 0, "use_mmap": True,
                    "embeddings": False, "n_prompt": p, "n_gen": g, "n_depth": 0,
                    "test_time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "avg_ns": int(statistics.fmean(samples_ns)),
                    "stddev_ns": int(statistics.stdev(samples_ns)) if reps > 1 else 0,
                    "avg_ts": statistics.fmean(samples_ts),
                    "stddev_ts": statistics.stdev(samples_ts) if reps > 1 else 0.0,
                    "samples_ns": [int(s) for s in samples_ns], "samples_ts": samples_ts,
                    "file_type": ftype, **cpu_info(),
                })
        return rows
    finally:
        m.close()


def _git_commit() -> str:
    try:
        import subprocess
        here = os.path.dirname(os.path.abspath(__file__))
        r = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5)
        return r.stdout.strip() if r.returncode == 0 else "unknown"
    except (OSError, ValueError, TimeoutError):
        return "unknown"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def format_table(rows: list[dict]) -> str:
    """llama-bench's markdown table."""
    head = ["model", "size", "params", "backend", "threads", "test", "t/s"]
    body = []
    for r in rows:
        test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
        body.append([r["model_type"], f"{r['model_size'] / 2**20:.2f} MiB", f"{r['model_n_params'] / 1e6:.2f} M",
                     f"CPU ({r['cpu_level']})", str(r["n_threads"]), test,
                     f"{r['avg_ts']:.2f} ± {r['stddev_ts']:.2f}"])
    w = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    right = {"size", "params", "threads", "test", "t/s"}

    def line(cells):
        return "| " + " | ".join(c.rjust(w[i]) if head[i] in right else c.ljust(w[i]) for i, c in enumerate(cells)) + " |"

    sep = "| " + " | ".join(("-" * (w[i] - 1) + ":") if h in right else "-" * w[i] for i, h in enumerate(head)) + " |"
    return "\n".join([line(head), sep] + [line(b) for b in body])


@app.command()
def bench(
    model: str = typer.Option(..., "-m", "--model", help="GGUF model file."),
    n_prompt: str = typer.Option("512", "-p", "--n-prompt", help="Prompt lengths to test (comma-separated; 0: none)."),
    n_gen: str = typer.Option("128", "-n", "--n-gen", help="Generation lengths to test (comma-separated; 0: none)."),
    reps: int = typer.Option(5, "-r", "--repetitions", help="Measured runs per test."),
    threads: Optional[int] = typer.Option(None, "-t", "--threads", help="CPU threads (default: TOOLKIT_THREADS or all cores)."),
    ubatch: int = typer.Option(512, "-ub", "--ubatch", help="Tokens per micro-batch for prompt processing."),
    warmup: bool = typer.Option(True, "--warmup/--no-warmup", help="One unmeasured run per test first."),
    as_json: bool = typer.Option(False, "--json", help="Print llama-bench's -o json schema instead of the table."),
) -> None:
    """Prompt-processing (ppN) and generation (tgN) tokens/s, like llama-bench."""
    pp, tg = _counts(n_prompt, "-p"), _counts(n_gen, "-n")
    if reps < 1:
        raise InputError(f"-r must be >= 1, got {reps}")
    check_threads("--threads", threads)
    if ubatch <= 0:
        raise InputError(f"--ubatch must be > 0, got {ubatch}")
    if not os.path.isfile(model):
        raise InputError(f"{model}: no such file")
    if not any(pp) and not any(tg):
        raise InputError("nothing to run: every -p and -n value is 0")
    from toolkit.runtime import interrupt
    with interrupt.deferred():   # Ctrl-C stops the decode at a safe point (exit 130 / 143)
        rows = run_bench(model, pp, tg, reps, threads, ubatch, warmup)
    if as_json:
        typer.echo(json.dumps(rows, indent=2, allow_nan=False))
    else:
        from toolkit.runtime import cpu_info
        info = cpu_info()
        typer.echo(format_table(rows))
        typer.echo(f"\ncpu: {_cpu_name() or 'unknown'}; kernels: {info['cpu_level']} (machine: "
                   f"{info['cpu_level_detected']}; {info['cpu_features']}); Mamba-2 SSD from "
                   f"{info['ssd_threshold']} tokens; build {rows[0]['build_commit'] if rows else '?'}")
