"""Memory report formatting: bytes by kind as `info --memory`, `run -v` and `serve` print them.

    r = memory_estimate(model, n_ctx=4096, n_checkpoints=4)    # toolkit.runtime (allocates nothing)
    print(format_report(r, 4096, 1))
    r = ctx.memory_report()                                     # what a context allocated

The figures come from the C library (tk_context_memory_estimate, tk_context_memory: the layer
kinds and the memories size them), the weights from the file's tensor table; this module holds
no size of its own.  Kinds:
  weights      the file's tensor bytes (mapped, not copied)
  kv           the attention layers' KV cache (n_ctx cells; a sliding-window layer's holds
               min(n_ctx, n_seq_max x (W + draft + checkpoints x (W - 1)) + n_ubatch) cells)
  recurrent    one recurrent state per sequence (n_seq_max)
  checkpoints  n_checkpoints recurrent snapshots per sequence
  compute      the forward pass's scratch for n_ubatch tokens and the threads
  draft        speculative decoding's window (--draft-max K) of recurrent snapshots; shown only
               when K > 0
Repacking (RuntimeOptions.repack: ``toolkit run``'s default "auto", ``--repack`` "all",
``--no-repack`` "off") is outside the kinds: a heap copy of the Q8_0 / Q4_K / Q6_K / BF16 mat-mul
weights, re-laid at load (quants/repack.h), whose pages of the mapped file are then released;
:func:`repack_estimate` asks the C library what a load would re-lay, :func:`format_repack` prints
it or what a load measured (Model.repack_info).
"""
from __future__ import annotations

KINDS = ("weights", "kv", "recurrent", "checkpoints", "compute")


def _fmt(n: int) -> str:
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= f:
            return f"{n / f:.2f} {unit}"
    return f"{n} B"


def _kinds(r: dict[str, int]) -> tuple[str, ...]:
    return KINDS + (("draft",) if r.get("draft") else ())


def total_bytes(r: dict[str, int]) -> int:
    """The sum of the report's kinds (``kv_k`` / ``kv_v`` are ``kv`` split, not added)."""
    return sum(r[k] for k in _kinds(r))


def format_report(r: dict[str, int], n_ctx: int, n_seq_max: int, kv_types: tuple[str, str] | None = None) -> str:
    """One line per kind and the total, e.g. ``kv          1.50 MiB  (1572864 bytes)``; with
    ``kv_types`` (the K and V cache types, RuntimeOptions.cache_type_k / _v) and a KV cache, the
    kv line ends with the bytes per type: ``K f16 768.00 KiB, V f16 768.00 KiB``."""
    lines = [f"memory (n_ctx = {n_ctx}, n_seq_max = {n_seq_max}):"]
    for k in _kinds(r):
        line = f"  {k:<12}{_fmt(r[k]):>12}  ({r[k]} bytes)"
        if k == "kv" and kv_types and r[k] and "kv_k" in r:
            line += f"  K {kv_types[0]} {_fmt(r['kv_k'])}, V {kv_types[1]} {_fmt(r['kv_v'])}"
        lines.append(line)
    total = total_bytes(r)
    lines.append(f"  {'total':<12}{_fmt(total):>12}  ({total} bytes)")
    return "\n".join(lines)


# (values, bytes) of one block of each KV cache type (ggml's layouts: quants/quants.h)
KV_BLOCK = {"f32": (1, 4), "f16": (1, 2), "bf16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18)}


def mla_latent(hp, n_ctx: int, type_k: str = "f32", n_ubatch: int = 512, n_seq: int = 1) -> dict | None:
    """What the MLA layers' latent cache (mixer_mla.c: ``kv_lora_rank + qk_rope_head_dim`` values
    a token, of the K cache's type ``type_k``) takes against caching K and V (``n_head (dn + dr +
    dv)`` values a token, the same type), for n_ctx cells; None for a model without MLA layers.
    ``{"layers", "type", "floats_per_token", "kv_floats_per_token", "bytes", "kv_bytes"}``; with
    DSA (GLM-5-Next) also its float32 indexer keys (``dsa_*``, in kv) and, in compute, the selection
    rows (``dsa_selection_bytes``: n_ubatch x n_ctx bytes, dsa.c's ctx->dsa_sel) and the kept pooled
    keys (``dsa_pools_bytes``: per full layer and sequence, n_ctx / kpool pools of index_head_dim
    floats, their kpool cells and last position)."""
    from toolkit.arch import LayerKind
    n = sum(1 for kd in hp.layer_kinds if kd == LayerKind.MLA)
    if not n:
        return None
    vals, nb = KV_BLOCK[type_k]
    lat = hp.mla_kv_lora_rank + hp.mla_dr
    full = hp.n_head * (hp.mla_dn + hp.mla_dr + hp.mla_dv)
    d = {"layers": n, "type": type_k, "floats_per_token": lat, "kv_floats_per_token": full,
         "bytes": n * (lat // vals * nb) * n_ctx, "kv_bytes": n * full * nb * n_ctx // vals}
    if hp.dsa_full:            # GLM-5-Next: the DSA indexer's [k_I | gamma] beside the latent, on its full layers
        nf = sum(1 for i, kd in enumerate(hp.layer_kinds) if kd == LayerKind.MLA and hp.dsa_full[i])
        cap = n_ctx // hp.dsa_kpool if hp.dsa_kpool > 0 else 0
        d.update(dsa_layers=nf, dsa_floats_per_token=2 * hp.idx_head_dim, dsa_bytes=nf * 2 * hp.idx_head_dim * n_ctx * 4,
                 dsa_selection_bytes=n_ubatch * n_ctx,
                 dsa_pools_bytes=nf * n_seq * cap * (hp.idx_head_dim * 4 + hp.dsa_kpool * 4 + 4))
    return d


def format_mla(d: dict[str, int]) -> str:
    """``info --memory``'s line on the MLA latent cache and what it saves."""
    t = d.get("type", "f32")
    return (f"  kv holds the MLA latent: {d['layers']} layer(s) x {d['floats_per_token']} {t} values a token "
            f"(kv_lora_rank + qk_rope_head_dim), {_fmt(d['bytes'])}; caching K and V "
            f"({d['kv_floats_per_token']} values a token) would take {_fmt(d['kv_bytes'])}: "
            f"{d['kv_bytes'] / d['bytes']:.1f}x less" +
            (f"\n  kv also holds the DSA indexer's keys: {d['dsa_layers']} layer(s) x {d['dsa_floats_per_token']} floats "
             f"a token ([k_I | gamma], float32 with any -ctk), {_fmt(d['dsa_bytes'])}" if "dsa_layers" in d else "") +
            (f"\n  compute holds the DSA selection rows (n_ubatch x n_ctx bytes), {_fmt(d['dsa_selection_bytes'])}, and "
             f"the kept pooled keys, {_fmt(d['dsa_pools_bytes'])}" if "dsa_selection_bytes" in d else ""))


def format_brief(r: dict[str, int]) -> str:
    """The total and its non-zero kinds on one line, e.g. ``memory 1.20 GiB: weights 1.00 GiB,
    kv 192.00 MiB, compute 8.00 MiB``."""
    total = sum(r[k] for k in _kinds(r))
    return f"memory {_fmt(total)}: " + ", ".join(f"{k} {_fmt(r[k])}" for k in _kinds(r) if r[k])


def repack_types(level: int | None = None, mode: str = "all") -> tuple[str, ...]:
    """The types re-laid at a kernel level (default: the level in force) in a repack mode
    (RuntimeOptions.repack): "all" those with a repacked kernel (repack.c tk_repack_fast: avx512
    Q8_0 / Q4_0 / IQ4_NL / Q4_K / Q5_K / Q6_K / IQ4_XS / BF16; avx2 the same but Q6_K; BF16 with K even;
    none elsewhere), "auto"
    those whose re-laid form wins (tk_repack_auto), "off" none."""
    import gguf as _gguf

    from toolkit.binding import lib
    level = lib.tk_cpu_level() if level is None else level
    test = {"all": lib.tk_repack_fast, "auto": lib.tk_repack_auto}.get(mode)
    return tuple(t.name for t in _gguf.GGMLQuantizationType if test and test(int(t), level))


_REPACK_MODES = {"off": 0, "auto": 1, "all": 2}   # toolkit.h tk_repack_mode


def repack_estimate(model, mode: str = "auto", level: int | None = None) -> dict:
    """Tensors and bytes a load of ``model`` (a :class:`toolkit.runtime.Model`) re-lays in repack
    ``mode`` ("off", "auto", "all": RuntimeOptions.repack) at kernel ``level`` (default: the level
    in force), as the C library's load decides (toolkit.h tk_model_repack_plan: the bound mat-mul
    weights the mode re-lays there, a weight bound twice once; a NextN (MTP) block's tensors are
    not bound by the main model: ``--mtp`` loads them as a model of their own, toolkit.runtime.mtp
    MtpModel, which this takes too).  ``{"n_tensors", "bytes",
    "level"}`` (level: the kernel level's name).  Raises ValueError for another mode."""
    from toolkit.binding import ffi, lib
    if mode not in _REPACK_MODES:
        raise ValueError(f"repack mode {mode!r}: expected one of {', '.join(_REPACK_MODES)}")
    level = lib.tk_cpu_level() if level is None else level
    info = ffi.new("tk_repack_info *")
    lib.tk_model_repack_plan(model.ptr, _REPACK_MODES[mode], level, info)
    return {"n_tensors": int(info.n_tensors), "bytes": int(info.bytes),
            "level": ffi.string(lib.tk_cpu_level_name(level)).decode()}


def format_repack(rp: dict) -> str:
    """``repacked    12.34 MiB  (N bytes, T tensors, re-laid in X ms; 11.00 MiB of the file released)``
    (the time and the release when ``rp`` has them: Model.repack_info)"""
    s = f"  {'repacked':<12}{_fmt(rp['bytes']):>12}  ({rp['bytes']} bytes, {rp['n_tensors']} tensors"
    if "ms" in rp:
        s += f", re-laid in {rp['ms']:.0f} ms"
    if "released" in rp:
        s += f"; {_fmt(rp['released'])} of the file released"
    return s + ")"


def format_repack_brief(rp: dict) -> str:
    """``repacked 12.34 MiB (T tensors) in X ms``, or ``no repacking`` (Model.repack_info)."""
    if not rp.get("n_tensors"):
        return "no repacking"
    return f"repacked {_fmt(rp['bytes'])} ({rp['n_tensors']} tensors) in {rp['ms']:.0f} ms"
