"""`toolkit info FILE.gguf`: architecture, hparams, layer kinds, tensors, tokenizer."""
from __future__ import annotations

import json
from typing import Any, Optional

import typer
from rich.table import Table
from rich.text import Text

from toolkit.cli.app import app


def describe(path: str) -> dict[str, Any]:
    """Everything `info` shows, as plain data (the `--json` output)."""
    from toolkit.arch import HParams, arch_spec
    from toolkit.errors import InputError
    from toolkit.gguf_io import GGUFFile, Keys

    from toolkit.errors import UnsupportedError

    f = GGUFFile(path)
    a = f.get("general.architecture")
    if a is not None and not isinstance(a, str):   # a malformed file, not an architecture we lack
        raise InputError(f"{path}: key 'general.architecture' must be a string, not {type(a).__name__}")
    spec = arch_spec(f.arch)
    hp, cannot = None, None
    if spec is not None and not spec.runs:
        cannot = f"toolkit converts {f.arch} but does not run it"   # convert/info only
    else:
        try:
            hp = HParams.from_gguf(f)
        except UnsupportedError as e:   # an architecture the table lacks: describe the file anyway
            cannot = str(e)
    tensors = [{"name": t.name, "shape": list(t.shape), "type": t.type.name, "bytes": t.nbytes} for t in f]
    toks = f.get(Keys.Tokenizer.LIST)
    merges = f.get(Keys.Tokenizer.MERGES)
    for key, v in ((Keys.Tokenizer.LIST, toks), (Keys.Tokenizer.MERGES, merges)):
        if v is not None and not isinstance(v, list):
            raise InputError(f"{path}: key {key!r} must be an array of strings, not {type(v).__name__}")
    tok = {
        "model": f.get(Keys.Tokenizer.MODEL),
        "pre": f.get(Keys.Tokenizer.PRE),
        "n_tokens": len(toks) if toks is not None else 0,
        "n_merges": len(merges or []),
        "bos_token_id": f.get(Keys.Tokenizer.BOS_ID),
        "eos_token_id": f.get(Keys.Tokenizer.EOS_ID),
        "padding_token_id": f.get(Keys.Tokenizer.PAD_ID),
        "has_huggingface_json": f.get(Keys.Tokenizer.HF_JSON) is not None,
        "eot_token_id": f.get(Keys.Tokenizer.EOT_ID),
        "unknown_token_id": f.get(Keys.Tokenizer.UNK_ID),
        "add_bos_token": f.get(Keys.Tokenizer.ADD_BOS),
        "add_eos_token": f.get(Keys.Tokenizer.ADD_EOS),
        "chat_template": f.get(Keys.Tokenizer.CHAT_TEMPLATE),
    }
    meta = {key: _as_written(v) for key, v in f.metadata().items() if not key.startswith("tokenizer.")}
    return {
        "file": path,
        "architecture": f.arch,
        "runs": hp is not None,
        "cannot_run": cannot,
        "file_type": _file_type(f.get("general.file_type")),
        "n_params": int(sum(t.n_elements for t in f)),
        "hparams": _hparams(hp) if hp else {},
        "layers": [{"index": i, "mixer": kd.name.lower(), "ffn": fk.name.lower()}
                   for i, (kd, fk) in enumerate(zip(hp.layer_kinds, hp.ffn_kinds))] if hp else [],
        "ple": _ple(f),
        "mtp": _mtp(f, hp),
        "metadata": meta,
        "tokenizer": tok,
        "tensors": tensors,
        "n_tensors": len(tensors),
        "n_bytes": sum(t["bytes"] for t in tensors),
    }


def _mtp(f, hp) -> str:
    """Whether the file has an MTP / NextN head (toolkit.runtime.mtp.describe): "none", or its
    blocks and whether --mtp runs them."""
    from toolkit.runtime.mtp import describe as describe_mtp
    if hp is None:
        return "none" if not any(".nextn." in t.name for t in f) else "present (the architecture is not run here)"
    return describe_mtp(f, hp)


def _hparams(hp) -> dict[str, Any]:
    """The hparams the model uses (toolkit.arch.hparams.used_fields), floats as written."""
    from toolkit.arch.hparams import used_fields
    d = hp.to_dict()
    return {k: _as_written(d[k]) for k in used_fields(hp)}


def _as_written(v):
    """A float32 key value as the file's writer wrote it (1e-05, not 9.999999747378752e-06):
    the shortest decimal that reads back as the same float32; lists element by element."""
    if isinstance(v, (list, tuple)):
        return [_as_written(x) for x in v]
    if isinstance(v, float):
        import numpy as np
        f32 = np.float32(v)
        if float(f32) == v and np.isfinite(f32):
            return float(str(f32))
    return v


def _file_type(v) -> dict[str, Any] | None:
    """general.file_type as {"id", "name"} (llama.cpp's LLAMA_FTYPE_* name, gguf-py's
    LlamaFileType), or None when the file does not say."""
    if v is None:
        return None
    import gguf
    try:
        name = gguf.LlamaFileType(int(v)).name
    except (ValueError, TypeError):
        name = "unknown"
    return {"id": int(v), "name": name}


def _ple(f) -> dict[str, Any] | None:
    """The per-layer n-gram embedding (qwen4exp PLE): layers, hash constants (exact ints, from
    the UINT64 arrays) and the ``per_layer_token_embd`` table; None when the file has none."""
    from toolkit.gguf_io import Keys

    P = Keys.PerLayerEmbedding
    layers = f.get(P.LAYERS)
    if layers is None:
        return None
    t = f.tensors.get("per_layer_token_embd.weight")
    return {
        "layers": [int(x) for x in layers],
        "ngram_size": f.get(P.NGRAM_SIZE),
        "heads_per_ngram": f.get(P.HEADS_PER_NGRAM),
        "conv_kernel": f.get(P.CONV_KERNEL),
        "eos_token_id": f.get(P.EOS_TOKEN_ID),
        "image_token_id": f.get(P.IMAGE_TOKEN_ID),
        "row_dim": f.get(Keys.LLM.EMBD_LENGTH_PER_LAYER_INP),
        "layer_multipliers": [int(x) for x in f.get(P.LAYER_MULTIPLIERS) or []],
        "head_offsets": [int(x) for x in f.get(P.HEAD_OFFSETS) or []],
        "head_vocab_sizes": [int(x) for x in f.get(P.HEAD_VOCAB_SIZES) or []],
        "table": None if t is None else {"name": t.name, "rows": t.shape[1] if len(t.shape) > 1 else 1,
                                         "row_dim": t.shape[0], "type": t.type.name, "bytes": t.nbytes},
    }


@app.command()
def info(
    model: str = typer.Argument(..., metavar="FILE.gguf", help="GGUF file to describe."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    tensors: bool = typer.Option(True, "--tensors/--no-tensors", help="Show the tensor table."),
    memory: bool = typer.Option(False, "--memory", help="Only the memory a context would need: weights, KV, recurrent state, checkpoints, compute buffers."),
    ctx_size: Optional[int] = typer.Option(None, "-c", "--ctx-size", help="With --memory: context size in tokens (KV cells); 0: the model's context length \\[default: 4096]."),
    parallel: Optional[int] = typer.Option(None, "-np", "--parallel", help="With --memory: sequences decoded in parallel (recurrent states) \\[default: 1]."),
    checkpoints: Optional[int] = typer.Option(None, "--checkpoints", help="With --memory: recurrent checkpoints per sequence \\[default: 4, toolkit run's]."),
    batch: Optional[int] = typer.Option(None, "-b", "--batch-size", help="With --memory: logical batch (llama.cpp's n_batch); the micro-batch is at most this \\[default: 2048]."),
    ubatch: Optional[int] = typer.Option(None, "-ub", "--ubatch-size", "--ubatch", help="With --memory: tokens per micro-batch (compute buffers) \\[default: 512]."),
    draft_max: Optional[int] = typer.Option(None, "--draft-max", help="With --memory: speculative decoding's window (toolkit run / serve --draft-max): K recurrent states per sequence \\[default: 0, none]."),
    mtp: bool = typer.Option(False, "--mtp", help="With --memory: also what --mtp loads and allocates (the MTP head's weights, its KV cache and buffers)."),
    cache_type_k: str = typer.Option("f32", "-ctk", "--cache-type-k", help="With --memory: the KV cache type of K (f32, f16, bf16, q8_0, q4_0; toolkit run's -ctk)."),
    cache_type_v: str = typer.Option("f32", "-ctv", "--cache-type-v", help="With --memory: the KV cache type of V (toolkit run's -ctv)."),
    repack: Optional[bool] = typer.Option(None, "--repack/--no-repack", show_default=False,
                                          help="With --memory: the weights re-laid at load as toolkit run --repack / "
                                               "--no-repack would (default: TOOLKIT_REPACK, else auto)."),
) -> None:
    """Describe a GGUF file: architecture, hparams, which layers are attention or recurrent,
    the tensor table (name, ggml shape, type, bytes) and a tokenizer summary."""
    given = [f for f, v in (("--ctx-size", ctx_size), ("--parallel", parallel), ("--checkpoints", checkpoints),
                            ("--batch-size", batch), ("--ubatch-size", ubatch), ("--draft-max", draft_max),
                            ("--mtp", mtp or None), ("-ctk", None if cache_type_k == "f32" else cache_type_k),
                            ("-ctv", None if cache_type_v == "f32" else cache_type_v),
                            ("--repack/--no-repack", repack)) if v is not None]
    if memory:
        from toolkit.cli.limits import DEFAULT_BATCH, DEFAULT_UBATCH, micro_batch
        ub = micro_batch(DEFAULT_BATCH if batch is None else batch, DEFAULT_UBATCH if ubatch is None else ubatch)
        _memory(model, as_json, 4096 if ctx_size is None else ctx_size, 1 if parallel is None else parallel,
                4 if checkpoints is None else checkpoints, ub,
                draft_max if draft_max is not None else (3 if mtp else 0), mtp, (cache_type_k, cache_type_v), repack)
        return
    if given:
        from toolkit.errors import InputError
        raise InputError(f"{', '.join(given)}: only used with --memory")
    d = describe(model)
    if as_json:
        from toolkit.cli.report import common_fields
        typer.echo(json.dumps({**d, **common_fields()}, indent=1, default=str))
        return
    from toolkit.cli.report import console
    out = console()
    ft = d["file_type"]["name"] if d["file_type"] else "unknown"
    out.print(Text.assemble((d['file'], "bold"), ": architecture ", (str(d['architecture']), "bold"),
                            f", {d['n_tensors']} tensors, {d['n_bytes'] / 2**20:.2f} MiB, {d['n_params']} parameters, "
                            f"file type {ft}"), highlight=False)
    if d["cannot_run"]:
        out.print(f"cannot run: {d['cannot_run']}", highlight=False)
    out.print(f"MTP head: {d['mtp']}", highlight=False)
    if d["hparams"]:
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
    else:   # an architecture toolkit does not run: its key/values as written
        mt = Table(title=f"{d['architecture']} key/values (not run here)", show_header=False)
        for key, v in d["metadata"].items():
            if key.startswith(d["architecture"] + ".") and ".ple." not in key:
                mt.add_row(key, str(v))
        out.print(mt)
    if d["ple"]:
        pl = d["ple"]
        pt = Table(title="PLE (per-layer n-gram embedding)", show_header=False)
        for key in ("layers", "ngram_size", "heads_per_ngram", "conv_kernel", "eos_token_id", "image_token_id", "row_dim"):
            pt.add_row(key, str(pl[key]))
        if pl["table"]:
            tb = pl["table"]
            pt.add_row("table", f"{tb['name']}: {tb['rows']} rows x {tb['row_dim']}, {tb['type']}, {tb['bytes']} bytes")
        for key in ("layer_multipliers", "head_offsets", "head_vocab_sizes"):
            pt.add_row(key + " (u64)", " ".join(str(x) for x in pl[key]))
        out.print(pt)
    tk = Table(title="tokenizer", show_header=False)
    for key, v in d["tokenizer"].items():
        if key != "chat_template":
            tk.add_row(key, str(v))
    out.print(tk)
    tpl = d["tokenizer"]["chat_template"]
    out.print("chat template: " + ("none (toolkit chat and serve fall back to chatml, as llama.cpp does)" if not tpl else ""),
              highlight=False)
    if tpl:
        out.print(tpl, markup=False, highlight=False)
    if tensors:
        tt = Table(title="tensors")
        for c in ("name", "shape", "type", "bytes"):
            tt.add_column(c, justify="right" if c == "bytes" else "left")
        for t in d["tensors"]:
            tt.add_row(t["name"], str(t["shape"]), t["type"], str(t["bytes"]))
        out.print(tt)


def _memory(path: str, as_json: bool, n_ctx: int, n_seq: int, n_ckpt: int, n_ubatch: int, n_draft: int = 0,
            mtp: bool = False, kv_types: tuple[str, str] = ("f32", "f32"), repack: Optional[bool] = None) -> None:
    """`info --memory`: the bytes by kind a context would allocate (toolkit.runtime.memory_estimate,
    the C library's figures; the model is mapped, nothing else is allocated)."""
    from toolkit.errors import InputError
    from toolkit.runtime import Model, memory_estimate
    from toolkit.runtime.memory import format_mla, format_repack, format_report, mla_latent, repack_estimate, total_bytes
    from toolkit.cli.runtime_opts import runtime_options

    bad = [msg for ok, msg in ((n_ctx >= 0, f"--ctx-size {n_ctx}: must be >= 0 (0: the model's context length)"),
                               (1 <= n_seq <= 64, f"--parallel {n_seq}: must be in [1, 64]"),
                               (n_ckpt >= 0, f"--checkpoints {n_ckpt}: must be >= 0"),
                               (n_ubatch > 0, f"--ubatch {n_ubatch}: must be > 0"),
                               (0 <= n_draft <= 256, f"--draft-max {n_draft}: must be in [0, 256]")) if not ok]
    if bad:   # only the failing flags
        raise InputError("; ".join(bad))
    kv_types = tuple(t.strip().lower() for t in kv_types)
    opts = runtime_options(repack, *kv_types)   # InputError for a type that is not one
    with Model(path, check_ram=False) as m:   # UnsupportedError for a convert-only architecture
        hp = m.hparams
        n_ctx = n_ctx or int(hp.n_ctx_train or 4096)   # -c 0: the training context, as toolkit run reads it
        # a verifying target's window (toolkit run / serve: keep_last False), K states per sequence
        r = memory_estimate(m, n_ctx, n_seq, n_ubatch, n_checkpoints=n_ckpt, draft_window=n_draft, keep_last=False,
                            options=opts)
        # what a load re-lays with the default (or TOOLKIT_REPACK) mode: heap, besides the mapped file
        mode = opts.repack
        rp = dict(repack_estimate(m, mode=mode), mode=mode)
        rm = None
        if mtp:                        # the MTP head as --mtp loads it: a model and a context of its own
            from toolkit.runtime.mtp import MtpModel
            with MtpModel(m) as mm:
                rm = memory_estimate(mm, n_ctx, n_seq, n_ubatch, options=opts)
                rp_m = repack_estimate(mm, mode=mode)
            rp = {**rp, "n_tensors": rp["n_tensors"] + rp_m["n_tensors"], "bytes": rp["bytes"] + rp_m["bytes"]}
    mla = mla_latent(hp, n_ctx, kv_types[0], n_ubatch, n_seq)
    if as_json:
        typer.echo(json.dumps({"file": path, "n_ctx": n_ctx, "n_seq_max": n_seq, "checkpoints": n_ckpt,
                               "cache_type_k": kv_types[0], "cache_type_v": kv_types[1],
                               "memory": r, "total": total_bytes(r), "repack": rp,
                               **({"mtp": rm, "mtp_total": total_bytes(rm)} if rm else {}),
                               **({"mla_latent": mla} if mla else {})}, indent=1))
    else:
        typer.echo(f"{path}: {m.gguf.arch}, {len(hp.attention_layers)} attention / {len(hp.recurrent_layers)} recurrent layers")
        typer.echo(format_report(r, n_ctx, n_seq, kv_types))
        if rm:
            typer.echo("with --mtp, besides the total: the MTP head's " + format_report(rm, n_ctx, n_seq, kv_types))
        if mla:
            typer.echo(format_mla(mla))
        if rp["n_tensors"]:
            typer.echo(f"re-laid at load (repack {mode}, at the {rp['level']} kernel level; --no-repack: none), besides "
                       f"the total (their pages of the mapped file are released):\n" + format_repack(rp))
