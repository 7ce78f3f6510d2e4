"""`toolkit quantize IN.gguf [OUT.gguf] TYPE`: llama-quantize's file types, in row bands."""
from __future__ import annotations

import json
import logging
import math
import os
from typing import List, Optional

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from toolkit.cli import report
from toolkit.cli.app import app
from toolkit.errors import InputError

log = logging.getLogger(__name__)


def _parse_tensor_types(items: list[str]) -> list[tuple[str, object]]:
    from toolkit.quantize.types import tensor_type

    out = []
    for it in items:
        pat, sep, typ = it.partition("=")
        if not sep or not pat:
            raise InputError(f"--tensor-type {it!r}: expected REGEX=TYPE (e.g. attn_v=q8_0)")
        if not typ:
            raise InputError(f"--tensor-type {it!r}: missing the type after '='")
        out.append((pat, tensor_type(typ, "tensor type in --tensor-type")))
    return out


def _check_keys(path: str) -> None:
    """Hparam keys that are bad input whatever the tensors (a sliding window of 0 or below),
    before anything is written; a file that does not open is left to the driver's message."""
    from toolkit.arch.readers import check_sliding_window_keys
    from toolkit.errors import ToolkitError
    from toolkit.gguf_io import GGUFFile
    try:
        f = GGUFFile(path)
    except (ToolkitError, OSError, ValueError):
        return
    check_sliding_window_keys(f)


def _nthreads(positional: Optional[str], threads: int) -> int:
    """llama-quantize's positional NTHREADS (``quantize IN OUT TYPE 4``), or -t/--threads;
    InputError when it is not an integer or both are given."""
    if positional is None:
        return threads
    if not positional.isdigit():
        raise InputError(f"NTHREADS {positional!r}: not an integer (toolkit quantize IN.gguf [OUT.gguf] TYPE [NTHREADS])")
    if threads:
        raise InputError(f"NTHREADS {positional} and -t/--threads {threads}: give the threads once")
    return int(positional)


def _is_type(arg: str) -> bool:
    """Whether ``arg`` names a file type or is a numeric id (llama-quantize's try_parse_ftype:
    the argument after IN is the TYPE when it parses as one, else the output name)."""
    from toolkit.quantize.types import file_type
    if arg.strip().isdigit():
        return True
    try:
        file_type(arg)
        return True
    except InputError:
        return False


def default_output(input: str, type: str) -> str:
    """llama-quantize's name for ``quantize IN TYPE``: IN's folder, ``ggml-model-TYPE.gguf``
    (TYPE as llama-quantize spells it: upper case, an alias kept as typed).  An unknown TYPE
    is an InputError listing the valid ones (it may be a mistyped output name)."""
    from toolkit.quantize.types import file_type
    try:
        info = file_type(type)
    except InputError as e:
        raise InputError(f"{e} (with two arguments, the second is the TYPE: toolkit quantize IN.gguf [OUT.gguf] TYPE)") from None
    name = info.name if type.strip().isdigit() else type.upper()   # a numeric id: the type's name, as llama-quantize
    return os.path.join(os.path.dirname(input), f"ggml-model-{name}.gguf")


@app.command()
def quantize(
    input: str = typer.Argument(..., metavar="IN.gguf", help="Input GGUF (F32, F16, BF16, or quantized with --allow-requantize)."),
    output: Optional[str] = typer.Argument(None, metavar="[OUT.gguf]", help="Output GGUF (written atomically; must differ "
                                           "from the input). Omitted: IN's folder, ggml-model-TYPE.gguf, as llama-quantize names it."),
    type: Optional[str] = typer.Argument(None, metavar="TYPE", help="File type: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_S Q3_K_M "
                                         "Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K IQ4_NL IQ4_XS (aliases Q3_K Q4_K Q5_K), or llama-quantize's numeric id "
                                         "(e.g. 7 = Q8_0, 2 = Q4_0, 15 = Q4_K_M)."),
    nthreads: Optional[str] = typer.Argument(None, metavar="[NTHREADS]", help="Threads, as llama-quantize's last "
                                             "argument (the same as -t)."),
    tensor_type: Optional[List[str]] = typer.Option(None, "--tensor-type", help="REGEX=TYPE: tensors whose name matches "
                                                    "REGEX get ggml type TYPE (repeatable; first match wins)."),
    token_embedding_type: Optional[str] = typer.Option(None, "--token-embedding-type", help="ggml type of token_embd "
                                                       "(and per_layer_token_embd)."),
    output_tensor_type: Optional[str] = typer.Option(None, "--output-tensor-type", help="ggml type of output.weight."),
    pure: bool = typer.Option(False, "--pure", help="No mixture rules: every quantizable tensor gets the default type."),
    leave_output_tensor: bool = typer.Option(False, "--leave-output-tensor", help="Keep output.weight unquantized."),
    allow_requantize: bool = typer.Option(False, "--allow-requantize", help="Allow already-quantized input tensors."),
    threads: int = typer.Option(0, "-t", "--threads", help="Threads (0 = TOOLKIT_THREADS or all CPUs)."),
    band_mb: float = typer.Option(256.0, "--band-mb", help="MiB of float32 rows staged per band."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the per-tensor plan and the resulting size; write nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (plan and summary) on stdout."),
    imatrix: Optional[str] = typer.Option(None, "--imatrix", help="llama.cpp importance matrix (GGUF from "
                                          "llama-imatrix): ggml's weighted quantizers, as llama-quantize --imatrix."),
) -> None:
    """Quantize a GGUF model the way llama-quantize does (same per-tensor types, same bytes),
    reading and writing in bands of whole rows so memory stays bounded."""
    from toolkit.quantize import Options, quantize_file
    from toolkit.quantize.types import file_type, tensor_type as parse_type

    if nthreads is None and type is not None and type.isdigit() and output is not None and _is_type(output):
        nthreads, type = type, None   # `quantize IN TYPE NTHREADS`: no output name, as llama-quantize allows
    if type is None:   # `quantize IN TYPE`: llama-quantize's default output name
        if output is None:
            raise InputError("missing argument TYPE (toolkit quantize -h shows the usage)")
        type, output = output, default_output(input, output)
    threads = _nthreads(nthreads, threads)
    file_type(type)  # unknown type -> InputError listing the valid ones, before opening anything
    from toolkit.cli.limits import check_threads
    check_threads("--threads", threads, zero_is_auto=True)
    if not (math.isfinite(band_mb) and 0 < band_mb <= 2**20):
        raise InputError(f"--band-mb {band_mb}: must be a number of MiB in (0, 1048576]")
    if not dry_run and os.path.abspath(input) == os.path.abspath(output):
        raise InputError(f"{output}: output would overwrite the input")
    _check_keys(input)
    opts = Options(
        pure=pure,
        quantize_output_tensor=not leave_output_tensor,
        output_tensor_type=parse_type(output_tensor_type, "--output-tensor-type") if output_tensor_type else None,
        token_embedding_type=parse_type(token_embedding_type, "--token-embedding-type") if token_embedding_type else None,
        tensor_types=_parse_tensor_types(tensor_type or []),
    )
    err = report.console(stderr=True)
    show_bar = not as_json and not dry_run and err.is_terminal
    if show_bar:
        with Progress(TextColumn("[bold]quantize[/]"), BarColumn(), TextColumn("{task.percentage:>5.1f}%"),
                      TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.description}", markup=False),
                      console=err, transient=True) as bar:
            task = bar.add_task("", total=1)

            def progress(done: int, total: int, name: str) -> None:
                bar.update(task, completed=done, total=total, description=name)

            s = quantize_file(input, output, type, opts, n_threads=threads or None, band_mb=band_mb,
                              allow_requantize=allow_requantize, progress=progress, imatrix=imatrix)
    else:
        s = quantize_file(input, output, type, opts, n_threads=threads or None, band_mb=band_mb,
                          allow_requantize=allow_requantize, dry_run=dry_run, imatrix=imatrix)
    # fallbacks and unmatched --tensor-type patterns were logged as warnings (stderr) by the driver
    d = s.to_dict()
    if as_json:
        from toolkit.cli.report import common_fields
        d.update(common_fields())   # wall_s: the command's, not the driver's; peak_rss_bytes: README's name (peak_rss_mb stays)
        typer.echo(json.dumps(d, indent=1))
        return
    out = report.console()
    if dry_run:
        t = Table(title=f"plan: {s.plan.ftype.name}")
        for c in ("name", "shape", "type", "->", "MiB before", "MiB after"):
            t.add_column(c, justify="right" if c.startswith("MiB") else "left")
        for tp in s.plan.tensors:
            t.add_row(tp.name, str(list(tp.shape)), tp.src_type.name, tp.dst_type.name,
                      f"{tp.src_bytes / 2**20:.3f}", f"{tp.dst_bytes / 2**20:.3f}")
        out.print(t)
    out.print(Text.assemble(f"{'would write' if dry_run else 'wrote'} ", (output, "bold"), f" ({s.plan.ftype.name}): "
              f"{d['size_before'] / 2**20:.2f} MiB ({d['bpw_before']:.2f} bpw) -> "
              f"{d['size_after'] / 2**20:.2f} MiB ({d['bpw_after']:.2f} bpw)"
              + ("" if dry_run else f" in {s.wall_s:.2f} s, {s.n_threads} threads, peak RSS {s.peak_rss_mb:.0f} MiB")),
              highlight=False)
