"""``toolkit bench``: prompt-processing and generation speed, the way llama-bench measures it.

Tests (one row each, llama-bench's names):
    ppN   N random prompt tokens decoded as one batch (ubatches of ``--ubatch``) into an
          empty context; tokens/s = N / wall time of the decode.
    tgN   N tokens decoded one at a time into an empty context; tokens/s = N / wall time.
    ppN+tgM  (-pg N,M) the N-token prompt then M tokens one at a time, in one timing;
          tokens/s = (N + M) / wall time.
    ``-d D`` (llama-bench's n_depth): D random tokens are decoded into the memory first,
          untimed, and the test runs on top of them (``pp512 @ d4096``); as llama-bench does,
          the memory after the first fill at a depth is saved (the context's state) and
          loaded again before each later run instead of decoding the D tokens again.
    ``--mtp`` (speculative decoding with the model's own MTP / NextN head): each tgN test is
          also run as greedy generation of N tokens after a fixed code prompt, once plainly
          (``tgN greedy``) and once per ``--draft-max`` K with K MTP drafts per verify call
          (``tgN mtpK``); tokens/s = N / wall time of the generation (the prompt untimed).
          The two give the same tokens (checked: a difference is an error); the rows add
          spec_type, n_draft, n_drafted, n_accepted, acceptance and acceptance_at (per draft
          position).  llama-bench has no such test; the names follow llama-speculative's.
Each test runs once unmeasured (warm-up: page the weights in, as llama-bench does), then
``-r`` times; the memory is cleared before every run.  avg_ts / stddev_ts are the mean and
sample standard deviation of the per-run tokens/s (llama-bench's definition).

Every combination of ``-m`` (repeatable), ``-t``, ``-b``, ``-ub``, ``-ctk`` / ``-ctv`` and ``-d``
(comma lists) runs the tests; each row prints as soon as its test finishes (``-o md|csv|json|jsonl``, llama-bench's
printers and field names), so Ctrl-C keeps what was measured.

``-o json`` / ``--json`` prints llama-bench's ``-o json`` schema: a list of objects with model_filename,
model_type, model_size (bytes), model_n_params, n_batch, n_ubatch, n_threads, n_prompt,
n_gen, test_time, avg_ns, stddev_ns, avg_ts, stddev_ts, samples_ns, samples_ts, plus
toolkit's cpu_level / cpu_features / ssd_threshold.
"""
from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
import os
import statistics
import sys
import time
from typing import Iterator, Optional

import numpy as np
import typer

from toolkit.cli.app import app
from toolkit.cli.limits import check_threads
from toolkit.cli.runtime_opts import repack_option, runtime_options
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


def _pair(text: str) -> tuple[int, int]:
    """-pg 'PP,TG' -> (PP, TG), both >= 1 (InputError naming the flag otherwise)."""
    v = _counts(text, "-pg")
    if len(v) != 2 or min(v) < 1:
        raise InputError(f"-pg {text!r}: expected PP,TG, two integers >= 1 (e.g. -pg 512,128)")
    return v[0], v[1]


KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0")   # the KV cache types (llama.cpp's names): toolkit.runtime.options.KV_TYPES


def _kv_types(text: str, flag: str) -> list[str]:
    """'f32' or 'f32,f16' -> the list; each must be one of KV_TYPES."""
    out = [v.strip().lower() for v in text.split(",")]
    for v in out:
        if v not in KV_TYPES:
            raise InputError(f"{flag} {text!r}: {v!r} is not a KV cache type (use one of {', '.join(KV_TYPES)})")
    return out


def _size_label(n_params: int) -> str:
    if n_params >= 1e9:
        return f"{n_params / 1e9:.1f}B"
    return f"{n_params / 1e6:.0f}M" if n_params >= 1e7 else f"{n_params / 1e6:.2f}M"


# llama.cpp's llama_model_ftype_name (src/llama-model-loader.cpp): the type in llama-bench's
# model column, by general.file_type (gguf.LlamaFileType member names, MOSTLY_ dropped)
FTYPE_NAMES = {
    "ALL_F32": "all F32", "F16": "F16", "BF16": "BF16", "Q4_0": "Q4_0", "Q4_1": "Q4_1", "Q5_0": "Q5_0",
    "Q5_1": "Q5_1", "Q8_0": "Q8_0", "MXFP4_MOE": "MXFP4 MoE", "Q2_K": "Q2_K - Medium", "Q2_K_S": "Q2_K - Small",
    "Q3_K_S": "Q3_K - Small", "Q3_K_M": "Q3_K - Medium", "Q3_K_L": "Q3_K - Large", "Q4_K_S": "Q4_K - Small",
    "Q4_K_M": "Q4_K - Medium", "Q5_K_S": "Q5_K - Small", "Q5_K_M": "Q5_K - Medium", "Q6_K": "Q6_K",
    "TQ1_0": "TQ1_0 - 1.69 bpw ternary", "TQ2_0": "TQ2_0 - 2.06 bpw ternary",
    "IQ2_XXS": "IQ2_XXS - 2.0625 bpw", "IQ2_XS": "IQ2_XS - 2.3125 bpw", "IQ2_S": "IQ2_S - 2.5 bpw",
    "IQ2_M": "IQ2_M - 2.7 bpw", "IQ3_XS": "IQ3_XS - 3.3 bpw", "IQ3_XXS": "IQ3_XXS - 3.0625 bpw",
    "IQ1_S": "IQ1_S - 1.5625 bpw", "IQ1_M": "IQ1_M - 1.75 bpw", "IQ4_NL": "IQ4_NL - 4.5 bpw",
    "IQ4_XS": "IQ4_XS - 4.25 bpw", "IQ3_S": "IQ3_S - 3.4375 bpw", "IQ3_M": "IQ3_S mix - 3.66 bpw",
}
# without general.file_type llama.cpp guesses from the most common tensor type
_GUESS = {"F32": "ALL_F32", "Q2_K": "Q2_K", "Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}


def ftype_name(f) -> str:
    """llama.cpp's name of the file's type (``Q4_K - Medium``), as llama-bench shows it."""
    import gguf
    ft = f.get("general.file_type")
    if ft is not None:
        try:
            name = gguf.LlamaFileType(int(ft) & ~1024).name.replace("MOSTLY_", "")
        except ValueError:
            return "unknown, may not work"
        return FTYPE_NAMES.get(name, "unknown, may not work") + (" (guessed)" if int(ft) & 1024 else "")
    counts: dict[str, int] = {}
    for t in f.tensors.values():
        counts[t.type.name] = counts.get(t.type.name, 0) + 1
    top = max(counts, key=counts.get) if counts else "F32"
    return FTYPE_NAMES.get(_GUESS.get(top, top), "unknown, may not work") + " (guessed)"


def model_desc(f) -> str:
    """llama-bench's model column (llama_model_desc): architecture, size, file type."""
    n_params = int(sum(t.n_elements for t in f.tensors.values()))
    return f"{f.arch} {_size_label(n_params)} {ftype_name(f)}"


def run_bench(path: str, n_prompt: list[int], n_gen: list[int], reps: int, threads: Optional[int],
              ubatch: int, warmup: bool = True, seed: int = 1234, n_batch: int | None = None,
              mmap: bool = True, pg: list[tuple[int, int]] = (), options=None, depths: list[int] = (0,),
              type_k: str = "f32", type_v: str = "f32", mtp: list[int] = ()) -> Iterator[dict]:
    """Measure every pp/tg test on the GGUF at ``path``; yields one llama-bench JSON object per
    test as soon as it is measured (the model stays open between them).  ``n_batch``: tokens
    per decode call of a ppN test and of the depth fill (llama-bench's -b; None: the whole
    prompt in one call), split into ubatches of ``ubatch`` tokens (-ub).  ``mmap=False``: the
    weights are read into memory (llama-bench's -mmp 0).  ``pg``: (PP, TG) tests (llama-bench's
    -pg): a PP-token prompt then TG generated tokens in one timing, tokens/s = (PP + TG) / its
    wall time.  ``options``: the model's :class:`toolkit.runtime.options.RuntimeOptions` (None:
    the defaults, no repacking); each object has ``repack`` (the mode) and ``repack_info``
    (Model.repack_info).  ``depths``: each test runs once per depth D (tokens in the memory
    before the timed part; llama-bench's -d).  ``type_k`` / ``type_v``: the KV cache types
    (llama-bench's -ctk / -ctv: the context's RuntimeOptions.cache_type_k / _v), reported in the
    rows.  ``mtp``: --draft-max values of the ``--mtp`` rows (:func:`mtp_rows`; empty: none), after
    the other tests.

    Raises: InputError (bad file / arguments), NativeError, ResourceError.
    """
    from toolkit.runtime import Context, Model, cpu_info

    m = Model(path, n_threads=threads, mmap=mmap, options=options)
    try:
        if mtp:
            from toolkit.runtime.mtp import check_mtp
            check_mtp(m)
        n_threads = m.n_threads
        tensors = list(m.gguf)
        size = int(sum(t.nbytes for t in tensors))
        n_params = int(sum(t.n_elements for t in tensors))
        ftype = m.gguf.get("general.file_type")
        model_type = model_desc(m.gguf)
        rng = np.random.default_rng(seed)
        pairs = bench_tests(n_prompt, n_gen, pg)
        n_ctx = max(depths) + max([1] + [p + g for p, g in pairs]) + 1
        tests = [(p, g, d) for d in depths for p, g in pairs]
        batch = n_batch or max(n_prompt + [1])
        copts = dataclasses.replace(m.options, cache_type_k=type_k, cache_type_v=type_v)
        with Context(m, n_ctx=n_ctx, n_ubatch=ubatch, n_threads=n_threads, options=copts) as ctx:
            filled: dict[int, bytes] = {}   # depth -> the memory's state after the fill
            for p, g, d in tests:
                toks = rng.integers(0, m.n_vocab, max(p, g)).astype(np.int32)

                def one_run() -> float:
                    ctx.memory.clear()
                    if d:
                        _fill(ctx, d, batch, filled, rng, m.n_vocab)
                    t0 = time.perf_counter_ns()
                    for i in range(0, p, batch):
                        ctx.decode(toks[i:min(i + batch, p)], logits="last")
                    for i in range(g):
                        ctx.decode(toks[i:i + 1], logits="last")
                    return float(time.perf_counter_ns() - t0)

                if warmup:
                    one_run()
                samples_ns = [one_run() for _ in range(reps)]
                yield _result(m, path, model_type, size, n_params, ftype, batch, ubatch, mmap, type_k, type_v,
                              p, g, d, samples_ns)
        if mtp:
            yield from mtp_rows(m, path, (model_type, size, n_params, ftype), n_gen, mtp, reps, warmup, ubatch)
    finally:
        m.close()


def _result(m, path: str, model_type: str, size: int, n_params: int, ftype, batch: int, ubatch: int, mmap: bool,
            type_k: str, type_v: str, p: int, g: int, d: int, samples_ns: list[float], **extra) -> dict:
    """One llama-bench JSON object: the test (p, g, d) timed ``samples_ns``; tokens/s per run
    = (p + g) / its time.  ``extra``: fields added at the end."""
    from toolkit.runtime import cpu_info

    reps = len(samples_ns)
    samples_ts = [(p + g) * 1e9 / s for s in samples_ns]
    return {
        "build_commit": _git_commit(), "build_number": 0,
        "cpu_info": _cpu_name(), "gpu_info": "", "backends": "CPU",
        "model_filename": os.path.abspath(path), "model_type": model_type,
        "model_size": size, "model_n_params": n_params,
        "n_batch": batch, "n_ubatch": ubatch, "n_threads": m.n_threads,
        "type_k": type_k, "type_v": type_v, "n_gpu_layers": 0, "use_mmap": mmap,
        "embeddings": False, "n_prompt": p, "n_gen": g, "n_depth": d,
        "test_time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "avg_ns": int(statistics.fmean(samples_ns)),
        "stddev_ns": int(statistics.stdev(samples_ns)) if reps > 1 else 0,
        "avg_ts": statistics.fmean(samples_ts),
        "stddev_ts": statistics.stdev(samples_ts) if reps > 1 else 0.0,
        "samples_ns": [int(s) for s in samples_ns], "samples_ts": samples_ts,
        "file_type": ftype, "architecture": m.hparams.arch, **cpu_info(m.options),
        "repack": m.options.repack, "repack_info": m.repack_info, **extra,
    }


MTP_PROMPT = "def fibonacci(n):\n"   # --mtp: the greedy generations' prompt


def mtp_rows(m, path: str, desc: tuple, n_gen: list[int], draft_max: list[int], reps: int, warmup: bool,
             ubatch: int) -> Iterator[dict]:
    """--mtp: per tgN test a ``tgN greedy`` row (plain greedy generation after MTP_PROMPT) and
    per K in ``draft_max`` a ``tgN mtpK`` row (the same with K MTP drafts per verify call).
    ``desc``: (model_type, size, n_params, ftype).  Raises ToolkitError when the drafted
    generation's tokens differ from the plain one's (a bug, never expected)."""
    from toolkit.errors import ToolkitError
    from toolkit.runtime import Context
    from toolkit.runtime.generate import generate
    from toolkit.runtime.mtp import open_mtp_draft
    from toolkit.runtime.sampling import Sampler, SamplerParams
    from toolkit.runtime.speculative import generate_speculative
    from toolkit.runtime.tokenizer import Tokenizer

    tok = Tokenizer.from_gguf(m.gguf)
    prompt = tok.encode(MTP_PROMPT, add_special=True, parse_special=True)
    greedy = SamplerParams(temp=0)
    for g in [g for g in n_gen if g > 0]:
        n_ctx = len(prompt) + g + max(draft_max) + 2
        ref = None

        def once(k: int):
            with Context(m, n_ctx=n_ctx, n_ubatch=ubatch, n_threads=m.n_threads) as ctx:
                if not k:
                    return generate(ctx, tok, prompt, g, Sampler(greedy), ignore_eos=True)
                ctx.memory.set_draft_window(k, keep_last=False)
                d = open_mtp_draft(m, ctx, n_ctx=n_ctx, params=greedy)
                try:
                    return generate_speculative(ctx, tok, prompt, g, Sampler(greedy), d, draft_max=k,
                                                ignore_eos=True)
                finally:
                    d.close()
                    ctx.on_hidden = None

        for k in [0] + list(draft_max):
            runs = [once(k) for _ in range(reps + int(warmup))][int(warmup):]
            for r in runs:
                ref = ref if ref is not None else r.tokens
                if r.tokens != ref:
                    raise ToolkitError(f"{path}: tg{g} with --mtp --draft-max {k}: the tokens differ from "
                                       f"plain greedy decoding")
            extra = {"spec_type": "mtp" if k else "none", "n_draft": k}
            if k:
                extra.update(runs[-1].spec.to_dict())
            yield _result(m, path, *desc, len(prompt), ubatch, m.mmap, "f32", "f32", 0, len(r.tokens), 0,
                          [r.timings.gen_s * 1e9 for r in runs], **extra)


def _fill(ctx, depth: int, batch: int, filled: dict, rng, n_vocab: int) -> None:
    """Put ``depth`` tokens into the (cleared) memory of sequence 0, untimed: decoded in calls of
    ``batch`` tokens the first time, the saved state loaded after that (llama-bench's cstate)."""
    if depth in filled:
        ctx.load_state(filled[depth], 0)
        return
    toks = rng.integers(0, n_vocab, depth).astype(np.int32)
    for i in range(0, depth, batch):
        ctx.decode(toks[i:min(i + batch, depth)], logits="last")
    filled.clear()   # one depth's state kept at a time (tests run depth by depth)
    filled[depth] = ctx.state_bytes(0)


def _git_commit() -> str:
    from toolkit import build_commit
    return build_commit()


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


MD_COLUMNS = [("model", 30, "<"), ("size", 10, ">"), ("params", 10, ">"), ("backend", 14, "<"),
              ("threads", 7, ">"), ("n_batch", 7, ">"), ("n_ubatch", 8, ">"), ("type_k", 6, ">"), ("type_v", 6, ">"),
              ("mmap", 4, ">"), ("test", 13, ">"), ("t/s", 20, ">")]


def bench_tests(pp: list[int], tg: list[int], pg=()) -> list[tuple[int, int]]:
    """(n_prompt, n_gen) of every test, in llama-bench's order: the -p tests, the -n tests, the -pg tests."""
    return [(p, 0) for p in pp if p > 0] + [(0, g) for g in tg if g > 0] + [(p, g) for p, g in pg]


def md_cells(r: dict) -> dict[str, str]:
    """A result row's cells in llama-bench's markdown table."""
    return {"model": r["model_type"], "size": f"{r['model_size'] / 2**20:.2f} MiB",
            "params": f"{r['model_n_params'] / 1e6:.2f} M", "backend": f"CPU ({r['cpu_level']})",
            "threads": str(r["n_threads"]), "n_batch": str(r["n_batch"]), "n_ubatch": str(r["n_ubatch"]),
            "mmap": str(int(r["use_mmap"])), "type_k": r["type_k"], "type_v": r["type_v"], "test": test_name(r),
            "t/s": f"{r['avg_ts']:.2f} ± {r['stddev_ts']:.2f}"}


def test_name(r: dict) -> str:
    """llama-bench's test column: ``pp512``, ``tg128``, ``pp512+tg128``, with `` @ d4096`` at a depth."""
    p, g = r["n_prompt"], r["n_gen"]
    name = "+".join(([f"pp{p}"] if p else []) + ([f"tg{g}"] if g else []))
    if "spec_type" in r:
        name += f" {r['spec_type']}{r['n_draft']}" if r["n_draft"] else " greedy"
    return name + (f" @ d{r['n_depth']}" if r.get("n_depth") else "")


def planned_cells(models: list[str], ts: list[int], bs: list[int], ubs: list[int], mmps: list[int],
                  pp: list[int], tg: list[int], pg=(), depths: list[int] = (0,),
                  kv_types: list[tuple[str, str]] = (("f32", "f32"),)) -> list[dict[str, str]]:
    """The markdown cells of every row the bench will print, known before it runs (t/s as the
    widest a typical value needs), so the columns can be as wide as their content."""
    from toolkit.gguf_io import GGUFHeader
    from toolkit.runtime import cpu_info
    from toolkit.runtime.model import default_threads
    level = cpu_info()["cpu_level"]
    rows = []
    for path in models:
        f = GGUFHeader(path)
        tensors = list(f.tensors.values())
        base = {"model_type": model_desc(f), "model_size": sum(t.nbytes for t in tensors),
                "model_n_params": sum(t.n_elements for t in tensors), "cpu_level": level,
                "avg_ts": 99999.99, "stddev_ts": 9999.99}
        for t, b, u, mp, (tk, tv), d in itertools.product(ts, bs, ubs, mmps, kv_types, depths):
            for p, g in bench_tests(pp, tg, pg):
                rows.append(md_cells({**base, "n_threads": t or default_threads(), "n_batch": b or max(pp + [1]),
                                      "n_ubatch": u, "use_mmap": bool(mp), "n_prompt": p, "n_gen": g,
                                      "n_depth": d, "type_k": tk, "type_v": tv}))
    return rows


class Printer:
    """llama-bench's printers (-o md|csv|json|jsonl): a header, one row per finished test
    (flushed at once, so an interrupted bench keeps what it measured), a footer.  Markdown
    columns are as wide as llama-bench's, or as their content (``planned``) where wider."""

    def __init__(self, fmt: str, out, columns: list[str], planned: list[dict[str, str]] = ()):
        self.fmt, self.out, self.n = fmt, out, 0
        self.cols = [(n, max([w, len(n)] + [len(c[n]) for c in planned]), a) for n, w, a in MD_COLUMNS if n in columns]

    def _w(self, s: str) -> None:
        self.out.write(s)
        self.out.flush()

    def header(self) -> None:
        if self.fmt == "md":
            self._w("| " + " | ".join(f"{n:{a}{w}}" for n, w, a in self.cols) + " |\n")
            self._w("| " + " | ".join(("-" * (w - 1) + ":") if a == ">" else "-" * w for n, w, a in self.cols) + " |\n")
        elif self.fmt == "csv":
            self._w(",".join(CSV_FIELDS) + "\n")
        elif self.fmt == "json":
            self._w("[\n")

    def row(self, r: dict) -> None:
        if self.fmt == "md":
            c = md_cells(r)
            self._w("| " + " | ".join(f"{c[n]:{a}{w}}" for n, w, a in self.cols) + " |\n")
        elif self.fmt == "csv":
            self._w(",".join('"' + _csv_value(r.get(k, "")).replace('"', '""') + '"' for k in CSV_FIELDS) + "\n")
        elif self.fmt == "json":
            self._w((",\n" if self.n else "") + json.dumps(r, indent=2, allow_nan=False))
        else:
            self._w(json.dumps(r, allow_nan=False) + "\n")
        self.n += 1

    def footer(self) -> None:
        if self.fmt == "json":
            self._w("\n]\n")


def _csv_value(v) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


CSV_FIELDS = ["build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename", "model_type",
              "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads", "type_k", "type_v",
              "n_gpu_layers", "use_mmap", "embeddings", "n_prompt", "n_gen", "n_depth", "test_time",
              "avg_ns", "stddev_ns", "avg_ts", "stddev_ts"]


@app.command()
def bench(
    model: list[str] = typer.Option([], "-m", "--model", help="GGUF model file (repeat -m for several; default: the packaged model, as run)."),
    n_prompt: str = typer.Option("512", "-p", "--n-prompt", help="Prompt lengths to test (comma-separated; 0: none)."),
    n_gen: str = typer.Option("128", "-n", "--n-gen", help="Generation lengths to test (comma-separated; 0: none)."),
    prompt_gen: list[str] = typer.Option([], "-pg", help="PP,TG: a PP-token prompt then TG generated tokens, timed together (test pp512+tg128; repeatable; llama-bench's -pg)."),
    reps: int = typer.Option(5, "-r", "--repetitions", help="Measured runs per test."),
    threads: str = typer.Option("0", "-t", "--threads", help="CPU threads, comma-separated (0: TOOLKIT_THREADS, else all cores)."),
    n_batch: str = typer.Option("0", "-b", "--batch-size", help="Prompt tokens per decode call, comma-separated (0: the whole prompt)."),
    ubatch: str = typer.Option("512", "-ub", "--ubatch-size", "--ubatch", help="Tokens per micro-batch, comma-separated."),
    mmap: str = typer.Option("1", "-mmp", "--mmap", help="Map the model file (1) or read it into memory (0); "
                             "comma-separated to test both (llama-bench's -mmp)."),
    no_mmap: bool = typer.Option(False, "--no-mmap", help="Same as -mmp 0."),
    repack: Optional[bool] = repack_option(),
    n_depth: str = typer.Option("0", "-d", "--n-depth", help="Tokens decoded into the memory before each test, "
                                "untimed (comma-separated; llama-bench's -d)."),
    cache_type_k: str = typer.Option("f32", "-ctk", "--cache-type-k", help="KV cache type of K, comma-separated "
                                     "(f32, f16, bf16, q8_0, q4_0)."),
    cache_type_v: str = typer.Option("f32", "-ctv", "--cache-type-v", help="KV cache type of V, comma-separated "
                                     "(f32, f16, bf16, q8_0, q4_0)."),
    warmup: bool = typer.Option(True, "--warmup/--no-warmup", help="One unmeasured run per test first."),
    output: str = typer.Option("md", "-o", "--output", help="md (table), csv, json or jsonl, with llama-bench's field names."),
    as_json: bool = typer.Option(False, "--json", help="Same as -o json."),
    mtp: bool = typer.Option(False, "--mtp", help="Also run each tgN as greedy generation, plain (tgN greedy) and "
                             "with the model's MTP / NextN head drafting (tgN mtpK); the file must have the head."),
    draft_max: str = typer.Option("3", "--draft-max", help="--mtp: drafts per verify call, comma-separated."),
) -> None:
    """Prompt-processing (ppN), generation (tgN) and prompt + generation (ppN+tgM, -pg)
    tokens/s, like llama-bench: every combination of -m, -t, -b, -ub, -ctk / -ctv and -d runs
    the -p, -n and -pg tests; rows print as they finish."""
    from toolkit.cli.limits import MAX_UBATCH, check_range
    pp, tg = _counts(n_prompt, "-p"), _counts(n_gen, "-n")
    pg = [_pair(v) for v in prompt_gen]
    ts, bs, ubs = _counts(threads, "-t"), _counts(n_batch, "-b"), _counts(ubatch, "-ub")
    depths = _counts(n_depth, "-d")
    kv_types = list(itertools.product(_kv_types(cache_type_k, "-ctk"), _kv_types(cache_type_v, "-ctv")))
    mmps = [0] if no_mmap else _counts(mmap, "-mmp")
    if any(v > 1 for v in mmps):
        raise InputError(f"-mmp {mmap!r}: expected 0 or 1 (comma-separated)")
    fmt = "json" if as_json else output
    if fmt not in ("md", "csv", "json", "jsonl"):
        raise InputError(f"-o {output}: expected md, csv, json or jsonl")
    if reps < 1:
        raise InputError(f"-r must be >= 1, got {reps}")
    for t in ts:
        check_threads("--threads", t, zero_is_auto=True)
    for u in ubs:
        check_range("--ubatch", u, 1, MAX_UBATCH)
    if not model:   # as run / chat / serve: the packaged default model
        from toolkit.cli.cmd_run import resolve_model
        model = [resolve_model(None)]
    for m in model:
        if not os.path.isfile(m):
            raise InputError(f"{m}: no such file")
    if not any(pp) and not any(tg) and not pg:
        raise InputError("nothing to run: every -p and -n value is 0")
    mtp_k = _counts(draft_max, "--draft-max") if mtp else []
    if any(k < 1 for k in mtp_k):
        raise InputError(f"--draft-max {draft_max!r}: expected values >= 1")
    if mtp and not any(tg):
        raise InputError("--mtp: no tgN test to run it on (-n is 0)")
    options = runtime_options(repack)
    cols = [c for c, *_ in MD_COLUMNS if c not in ("n_batch", "n_ubatch", "mmap", "type_k", "type_v")
            or (c == "n_batch" and (len(bs) > 1 or bs != [0])) or (c == "n_ubatch" and (len(ubs) > 1 or ubs != [512]))
            or (c == "mmap" and mmps != [1])
            or (c in ("type_k", "type_v") and kv_types != [("f32", "f32")])]
    pr = Printer(fmt, sys.stdout, cols, planned_cells(model, ts, bs, ubs, mmps, pp, tg, pg, depths, kv_types)
                 if fmt == "md" else ())
    pr.header()
    from toolkit.runtime import interrupt
    try:
        with interrupt.deferred():   # Ctrl-C stops the decode at a safe point (exit 130 / 143)
            for m, t, b, u, mp, (tk, tv) in itertools.product(model, ts, bs, ubs, mmps, kv_types):
                for row in run_bench(m, pp, tg, reps, t or None, u, warmup, n_batch=b or None, mmap=bool(mp), pg=pg,
                                     options=options, depths=depths, type_k=tk, type_v=tv, mtp=mtp_k):
                    pr.row(row)
    finally:
        pr.footer()   # the rows so far stay a valid document, even when interrupted
    if fmt == "md":
        from toolkit.runtime import cpu_info
        info = cpu_info(options)
        chunked = ", ".join(f"{k.upper() if k != 'lightning' else k} {v or 'never'}"
                            for k, v in info["chunk_thresholds"].items())
        typer.echo(f"\ncpu: {_cpu_name() or 'unknown'}; kernels: {info['cpu_level']} (machine: "
                   f"{info['cpu_level_detected']}; {info['cpu_features']}); chunked forms from (tokens): "
                   f"{chunked}; repack {options.repack}; build {_git_commit()}")
