"""`toolkit convert HF_DIR [OUT.gguf]`: stream a Hugging Face checkpoint into a GGUF file."""
from __future__ import annotations

import json
import sys
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from toolkit.cli.app import app
from toolkit.cli.report import console

_err = console(stderr=True)


def _progress_factory(enabled: bool):
    """A rich progress bar in bytes on stderr (only when stderr is a terminal)."""
    if not enabled:
        return None, None
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    prog = Progress(TextColumn("converting"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                    TimeRemainingColumn(), console=_err, transient=True)

    def factory(total: int):
        task = prog.add_task("convert", total=total)
        prog.start()
        return lambda n: prog.advance(task, n)

    return prog, factory


def _why(reason: str) -> str:
    return f" ({reason})" if reason else ""


def _list_archs(as_json: bool) -> None:
    """`convert --list-archs`: the converter registry as a table (or JSON rows)."""
    from toolkit.convert.families import arch_table
    rows = arch_table()
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
        return
    t = Table(title="toolkit convert: HF architectures")
    for c in ("HF architecture (config.json)", "family", "GGUF architecture", "llama.cpp loads it"):
        t.add_column(c)
    for r in rows:
        t.add_row(r["hf_architecture"], r["family"], r["gguf_architecture"],
                  "yes" if r["llama_cpp"] else "no (toolkit's own layout)")
    console().print(t)


@app.command()
def convert(
    hf_dir: Optional[str] = typer.Argument(None, metavar="HF_DIR", help="Hugging Face checkpoint directory (config.json, safetensors, tokenizer)."),
    out: Optional[str] = typer.Argument(None, metavar="[OUT.gguf]", show_default=False,
                                        help="GGUF file to write (atomically: nothing is left on error). Default, or a "
                                        "directory: llama.cpp's name, {Name}-{size}-{OUTTYPE}.gguf, in HF_DIR (or "
                                        "that directory). {ftype} in the name becomes the type."),
    outtype: str = typer.Option("auto", "--outtype", help="f32, f16, bf16, q8_0, or auto (llama.cpp's: bf16 if the "
                                "first matrix is BF16, else f16; bf16 where f16 would overflow). "
                                "Norms, biases, ssm_a/ssm_d, ssm_conv1d and routers stay F32."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (hparams, tensor map, types) without writing."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary (or the plan) as one JSON object."),
    no_mtp: bool = typer.Option(False, "--no-mtp", help="Leave out the MTP / NextN draft head (HF mtp.* tensors, or "
                                "the NextN layers stored after the main ones); a checkpoint without one needs no flag."),
    list_archs: bool = typer.Option(False, "--list-archs", help="List each HF architecture, its family, the GGUF "
                                    "architecture it becomes and whether llama.cpp loads the result, then exit."),
) -> None:
    """Convert a Hugging Face checkpoint to GGUF, one band of rows resident at a time:
    {families} (--list-archs: the architecture names)."""
    from toolkit.errors import InputError

    if list_archs:
        _list_archs(as_json)
        return
    if hf_dir is None:
        raise InputError("missing argument HF_DIR (toolkit convert -h shows the usage; --list-archs lists the architectures)")
    from toolkit.convert import OUTTYPES, convert as do_convert, make_plan, out_path, plan_to_dict

    outtype = outtype.lower()   # F16 = f16, as quantize accepts any case
    if outtype not in OUTTYPES:
        raise InputError(f"--outtype {outtype!r}: must be one of {', '.join(OUTTYPES)}")
    plan = make_plan(hf_dir, outtype, no_mtp=no_mtp)
    if dry_run:
        d = plan_to_dict(plan)
        d["out"] = out_path(plan, out)
        if as_json:
            typer.echo(json.dumps(d, indent=1, default=str))
            return
        con = console()
        con.print(Text.assemble((hf_dir, "bold"), f": {d['hf_architecture']} -> GGUF architecture ",
                                (d["architecture"], "bold"),
                                f", outtype {d['outtype']}{_why(d['outtype_reason'])}, {d['n_tensors']} tensors, "
                                f"{d['n_bytes'] / 2**20:.2f} MiB, would write ", (d["out"], "bold"),
                                " (dry run: nothing written)"), highlight=False)
        kt = Table(title="key/values", show_header=False)
        for key, v in d["kv"].items():
            kt.add_row(key, str(v))
        con.print(kt)
        tt = Table(title="tensors")
        for c in ("GGUF name", "shape (ggml)", "type", "bytes", "from", "transform"):
            tt.add_column(c, justify="right" if c == "bytes" else "left")
        for t in d["tensors"]:
            tt.add_row(t["name"], str(t["shape"]), t["type"], str(t["bytes"]), ", ".join(t["sources"]), t["transform"])
        con.print(tt)
        for o in d["omitted"]:
            con.print(f"omitted {o['name']}: {o['why']}")
        return
    prog, factory = _progress_factory(sys.stderr.isatty() and not as_json)
    try:
        s = do_convert(hf_dir, out, outtype, progress_factory=factory, plan=plan)
    finally:
        if prog is not None:
            prog.stop()
    if s.outtype_reason and not as_json:   # what the default picked, and why (stderr: stdout stays the summary)
        _err.print(Text(f"outtype {s.outtype} ({s.outtype_reason}; --outtype names another)"), highlight=False)
    if as_json:   # README's shared names: `architecture` (as --dry-run and the other commands say)
        from toolkit.cli.report import common_fields
        d = s.to_dict()
        d["wall_s"] = common_fields()["wall_s"]   # the command's, not only the writing's
        typer.echo(json.dumps({"architecture": d.pop("arch"), **d}, indent=1))
        return
    console().print(Text.assemble("wrote ", (str(s.out), "bold"), f": {s.arch}, {s.outtype}, {s.n_tensors} tensors, "
                    f"{s.n_bytes / 2**20:.1f} MiB of tensor data ({s.file_bytes / 2**20:.1f} MiB file), "
                    f"{s.wall_s:.2f} s, peak memory {s.peak_rss_bytes / 2**20:.0f} MiB"), highlight=False)
