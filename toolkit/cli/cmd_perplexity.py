"""`toolkit perplexity -m MODEL -f FILE`: perplexity over a text file, KL divergence vs a base model.

Progress goes to stderr: one line updated in place on a terminal, a plain line per chunk when
piped.  ``--json`` adds the shared fields (architecture, wall_s, peak_rss_bytes)."""
from __future__ import annotations

import json
import logging
import sys
from typing import Optional

import typer
from rich.table import Table

from toolkit.cli.app import app
from toolkit.cli.runtime_opts import cache_type_option, repack_option, runtime_options

log = logging.getLogger(__name__)


@app.command()
def perplexity(
    file_arg: Optional[str] = typer.Argument(None, metavar="[FILE]", help="UTF-8 text file to score (or -f FILE)."),
    file_opt: Optional[str] = typer.Option(None, "-f", "--file", help="UTF-8 text file to score (llama-perplexity's -f)."),
    model: str = typer.Option(..., "-m", "--model", help="GGUF model."),
    ctx: int = typer.Option(512, "-c", "--ctx-size", "--ctx", help="Chunk length n_ctx in tokens (even); the second half of each chunk is scored."),
    chunks: int = typer.Option(0, "--chunks", help="Score at most this many chunks (0: all)."),
    kld_base: Optional[str] = typer.Option(None, "--kld-base", help="Base model: a GGUF, or a logits file from --kld-out. Adds KL divergence and top-1 agreement."),
    kld_out: Optional[str] = typer.Option(None, "--kld-out", help="Write this model's scored log-probabilities here (.npz), for a later --kld-base."),
    threads: Optional[int] = typer.Option(None, "--threads", "-t", help="Threads (default: TOOLKIT_THREADS or all cores)."),
    batch: int = typer.Option(2048, "-b", "--batch-size", help="Logical batch (llama.cpp's n_batch): the micro-batch is at most this."),
    ubatch: int = typer.Option(512, "-ub", "--ubatch-size", "--ubatch", help="Micro-batch (llama.cpp's n_ubatch): tokens decoded at once (at most --ctx-size); the compute buffers follow it."),
    no_mmap: bool = typer.Option(False, "--no-mmap", help="Read the whole model into memory instead of mapping the file (llama.cpp's --no-mmap)."),
    repack: Optional[bool] = repack_option(),
    cache_type_k: str = cache_type_option("k"),
    cache_type_v: str = cache_type_option("v"),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Perplexity of MODEL on FILE, the way llama.cpp's llama-perplexity computes it:
    non-overlapping chunks of --ctx tokens, each from an empty memory, the second half of each
    chunk scored; PPL = exp(mean NLL) +/- its standard error.  With --kld-base, also the KL
    divergence KL(base || model) per token (nats) and how often both models' top token agree."""
    from toolkit.cli.report import common_fields, console
    from toolkit.errors import InputError
    from toolkit.runtime.perplexity import perplexity_file

    if (file_arg is None) == (file_opt is None):
        raise InputError("give the text file once: -f FILE (or FILE)")
    file = file_arg if file_arg is not None else file_opt

    if kld_base and kld_out:
        raise InputError("--kld-base and --kld-out: give one or the other")
    from toolkit.cli.limits import check_threads, micro_batch
    check_threads("--threads", threads)
    ubatch = micro_batch(batch, ubatch)
    if chunks < 0:
        raise InputError(f"--chunks {chunks}: must be >= 0 (0: all)")
    if ctx < 4 or ctx % 2:   # the runtime's rule (perplexity.py); too large: the C library names the memory (exit 4)
        raise InputError(f"-c/--ctx-size {ctx}: must be an even number >= 4")
    options = runtime_options(repack, cache_type_k, cache_type_v)

    err = console(stderr=True)
    tty = sys.stderr.isatty()
    bar = None
    if tty and not as_json:   # a terminal: one line updated in place (rich's live display)
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
        bar = Progress(TextColumn("perplexity"), BarColumn(), MofNCompleteColumn(),
                       TextColumn("chunks  PPL {task.fields[ppl]}", markup=False), TimeRemainingColumn(),
                       console=err, transient=True)
        task = bar.add_task("", total=None, ppl="...")

    def progress(i: int, n: int, ppl: float) -> None:
        if bar is not None:
            bar.update(task, completed=i + 1, total=n, ppl=f"{ppl:.4f}")
        elif not tty:        # piped: a plain line per chunk
            err.print(f"chunk {i + 1}/{n} PPL {ppl:.4f}", highlight=False)

    from toolkit.runtime import interrupt
    try:
        if bar is not None:
            bar.start()
        with interrupt.deferred():   # Ctrl-C stops the decode at a safe point (exit 130 / 143)
            res = perplexity_file(model, file, ctx, max_chunks=chunks or None, kld_base=kld_base, kld_out=kld_out,
                                  threads=threads, progress=progress, mmap=not no_mmap, n_ubatch=ubatch,
                                  options=options)
    finally:
        if bar is not None:
            bar.stop()
    if as_json:
        from toolkit.gguf_io import GGUFFile
        typer.echo(json.dumps({**res.to_dict(), **common_fields(GGUFFile(model).arch)}, indent=1))
        return
    out = console()
    t = Table(show_header=False, box=None)
    t.add_row("model", res.model)
    t.add_row("file", f"{res.file}: {res.n_tokens_file} tokens")
    t.add_row("chunks", f"{res.n_chunks} x {res.n_ctx} tokens, {res.n_scored} scored")
    t.add_row("PPL", f"{res.ppl:.4f} +/- {res.ppl_stderr:.4f}")
    t.add_row("speed", f"{res.tokens_per_s:.1f} tokens/s")
    if res.kld is not None:
        k = res.kld
        t.add_row("base", k.base)
        t.add_row("KL divergence", f"{k.mean:.6f} +/- {k.stderr:.6f} nats (median {k.median:.6f}, "
                                   f"99% {k.p99:.6f}, max {k.max:.6f})")
        t.add_row("same top token", f"{100 * k.top1:.3f} +/- {100 * k.top1_stderr:.3f} %")
    if kld_out:
        t.add_row("logits written", kld_out)
    out.print(t)
