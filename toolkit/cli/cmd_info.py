"""`toolkit info FILE.gguf`: architecture, hparams, layer kinds, tensors, tokenizer."""
from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from toolkit.cli.app import app


def describe(path: str) -> dict[str, Any]:
    """Everything `info` shows, as plain data (the `--json` output)."""
    from toolkit.arch import HParams
    from toolkit.errors import InputError
    from toolkit.gguf_io import GGUFFile, Keys

    f = GGUFFile(path)
    hp = HParams.from_gguf(f)
    tensors = [{"name": t.name, "shape": list(t.shape), "type": t.type.name, "bytes": t.nbytes} for t in f]
    toks = f.get(Keys.Tokenizer.LIST)
    merges = f.get(Keys.Tokenizer.MERGES)
    for key, v in ((Keys.Tokenizer.LIST, toks), (Keys.Tokenizer.MERGES, merges)):
        if v is not None and not isinstance(v, list):
            raise InputError(f"{path}: key {key!r} must be an array of strings, not a {type(v).__name__}")
    tok = {
        "model": f.get(Keys.Tokenizer.MODEL),
        "pre": f.get(Keys.Tokenizer.PRE),
        "n_tokens": len(toks) if toks is not None else 0,
        "n_merges": len(merges or []),
        "bos_token_id": f.get(Keys.Tokenizer.BOS_ID),
        "eos_token_id": f.get(Keys.Tokenizer.EOS_ID),
        "padding_token_id": f.get(Keys.Tokenizer.PAD_ID),
        "has_huggingface_json": f.get(Keys.Tokenizer.HF_JSON) is not None,
    }
    meta = {key: v for key, v in f.metadata().items() if not key.startswith("tokenizer.")}
    return {
        "file": path,
        "architecture": hp.arch,
        "hparams": hp.to_dict(),
        "layers": [{"index": i, "mixer": kd.name.lower(), "ffn": fk.name.lower()}
                   for i, (kd, fk) in enumerate(zip(hp.layer_kinds, hp.ffn_kinds))],
        "metadata": meta,
        "tokenizer": tok,
        "tensors": tensors,
        "n_tensors": len(tensors),
        "n_bytes": sum(t["bytes"] for t in tensors),
    }


@app.command()
def info(
    model: str = typer.Argument(..., help="GGUF file to describe."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    tensors: bool = typer.Option(True, "--tensors/--no-tensors", help="Show the tensor table."),
) -> None:
    """Describe a GGUF file: architecture, hparams, which layers are attention or recurrent,
    the tensor table (name, ggml shape, type, bytes) and a tokenizer summary."""
    d = describe(model)
    if as_json:
        typer.echo(json.dumps(d, indent=1, default=str))
        return
    out = Console()
    out.print(f"[bold]{d['file']}[/]: architecture [bold]{d['architecture']}[/], "
              f"{d['n_tensors']} tensors, {d['n_bytes'] / 2**20:.2f} MiB")
    hp = Table(title="hparams", show_header=False)
    for key, v in d["hparams"].items():
        if key in ("layer_kinds", "ffn_kinds", "n_head_kv"):
            continue
        hp.add_row(key, str(v))
    out.print(hp)
    lt = Table(title="layers")
    lt.add_column("layer", justify="right"); lt.add_column("mixer"); lt.add_column("ffn"); lt.add_column("n_head_kv", justify="right")
    for L, kv in zip(d["layers"], d["hparams"]["n_head_kv"]):
        lt.add_row(str(L["index"]), L["mixer"], L["ffn"], str(kv))
    out.print(lt)
    tk = Table(title="tokenizer", show_header=False)
    for key, v in d["tokenizer"].items():
        tk.add_row(key, str(v))
    out.print(tk)
    if tensors:
        tt = Table(title="tensors")
        for c in ("name", "shape", "type", "bytes"):
            tt.add_column(c, justify="right" if c == "bytes" else "left")
        for t in d["tensors"]:
            tt.add_row(t["name"], str(t["shape"]), t["type"], str(t["bytes"]))
        out.print(tt)
