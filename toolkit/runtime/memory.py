"""Memory report: bytes a context of a model needs, by kind, without allocating it.

    est = estimate(gguf, hparams, n_ctx=4096, n_seq_max=1, n_checkpoints=4)
    print(format_report(est, 4096, 1))

Kinds (bytes, float32 caches; formulas mirror toolkit/native/context.c, memory_kv.c, memory_rs.c):
  weights      sum of the file's tensor bytes (mapped, not copied)
  kv           2 x n_ctx x n_head_kv[l] x head_dim x 4 over the attention layers only
               (a hybrid is not charged KV for its recurrent layers)
  recurrent    n_seq_max x ((d_conv - 1) x conv_dim + d_state x d_inner) x 4 over the recurrent
               layers (conv_dim = d_inner, Mamba-2: d_inner + 2 x n_group x d_state; gated delta
               net: 2 Hk Dk + Hv Dv, and d_state x d_inner = Hv Dk Dv, its state S; LFM2's short
               conv: d_inner = D channels and d_state = 0, its window alone)
  checkpoints  n_seq_max x n_checkpoints x one recurrent state
  draft        speculative decoding's window (--draft-max K) of a verifying target (toolkit run,
               chat, serve: TK_SPEC_NO_LAST): n_seq_max x K x one recurrent state (the snapshot
               ring of memory_rs.c; a draft model's context keeps K + 1); shown only when K > 0
  compute      n_ubatch rows of every forward-pass scratch width (the allocation in context.c;
               a model with parallel layers also has ctx->mix, D wide),
               plus, with Mamba-2 layers, the chunked scan's workspace (ssd.c tk_ssd_workspace_bytes),
               with gated delta net layers n_threads x tk_gdn_work_floats(Dk, Dv) floats (gdn.c)
  zamba2       its hybrid layers count as attention (KV) and as recurrent (Mamba-2 state) layers,
               and widen zx to 2 D, xdbl to the adapter rank, y to max(H hd, F) (mixer_zamba2.c)
  qwen4exp     a QSA layer's KV cells also hold its raw indexer key (n_ctx x di x 4, mixer_qsa.c)
               and it widens zx / xc to Hi di / di; a PLE layer's state adds its conv window
               (Kp - 1) n hcD and history n floats (ple.c); hyper-connections add 4 [U, hcD]
               buffers, [U, max(R, hc)], [U, hc] and [U, Ep] (context.c), and a matmul row may
               be hcD, Ep or R wide
:meth:`toolkit.runtime.Context.memory_report` gives the same kinds as allocated.
"""
from __future__ import annotations

KINDS = ("weights", "kv", "recurrent", "checkpoints", "compute")


def _max_ff(gguf) -> int:
    w = 0
    for t in gguf:
        for suffix in ("ffn_up.weight", "ffn_up_exps.weight", "ffn_up_shexp.weight"):
            if t.name.endswith("." + suffix) and len(t.shape) >= 2:   # not qwen4exp's hc_ffn_up
                w = max(w, int(t.shape[1]))
    return w


def estimate(gguf, hp, n_ctx: int, n_seq_max: int = 1, n_checkpoints: int = 0, n_ubatch: int = 512,
             n_threads: int = 1, draft_window: int = 0) -> dict[str, int]:
    """Bytes by kind (see the module docstring) for a context of ``n_ctx`` cells and
    ``n_seq_max`` sequences of the model ``gguf`` (GGUFFile) / ``hp`` (HParams)."""
    from toolkit.arch import FFNKind, LayerKind, arch_spec
    attn = hp.attention_layers
    rec = hp.recurrent_layers
    # a parallel layer (Falcon-H1) is a Mamba-2 mixer beside an attention one
    has_m2 = any(hp.layer_kinds[i] in (LayerKind.MAMBA2, LayerKind.PARALLEL, LayerKind.ZAMBA2_SHARED) for i in rec)
    has_par = any(kd == LayerKind.PARALLEL for kd in hp.layer_kinds)
    has_z2 = LayerKind.ZAMBA2_SHARED in hp.layer_kinds
    has_gdn = any(hp.layer_kinds[i] == LayerKind.GDN for i in rec)
    has_sc = any(hp.layer_kinds[i] == LayerKind.SHORTCONV for i in rec)
    D, DI, N = hp.n_embd, hp.d_inner, hp.d_state
    conv_dim = DI + 2 * hp.n_group * N if has_m2 else DI
    if has_gdn:     # mixer_gdn.c: q, k (Hk x Dk each) and v (Hv x Dv = d_inner) channels
        conv_dim = 2 * hp.n_group * N + DI
    kv = sum(2 * n_ctx * hp.n_head_kv[i] * hp.head_dim * 4 for i in attn)
    qsa = [i for i in attn if hp.layer_kinds[i] == LayerKind.QSA]
    kv += len(qsa) * n_ctx * hp.idx_head_dim * 4
    state = len(rec) * ((hp.d_conv - 1) * conv_dim + N * DI) * 4
    HD = hp.hc_count * D if hp.hc_count > 1 else 0
    n_ple = sum(1 for x in hp.ple_index if x >= 0)
    state += n_ple * ((hp.ple_conv_kernel - 1) * hp.ple_ngram_size * HD + hp.ple_ngram_size) * 4
    max_ff = _max_ff(gguf)
    zx = xc = xd = dtr = dt = y = q = kvw = 0
    if has_gdn:     # gdn_scratch: zx, xc [C]; xdbl, dtr [2 Hv]; dt (z), y [Hv Dv]
        zx, xc, xd, dtr, dt, y = conv_dim, conv_dim, 2 * hp.ssm_n_head, 2 * hp.ssm_n_head, DI, DI
    elif has_sc:    # mixer_shortconv.c sc_scratch: zx [3D] (B | C | x), xc [D] B*x, y [D]
        zx, xc, y = 3 * D, D, D
    elif rec:
        zx = max(2 * DI + 2 * hp.n_group * N + hp.ssm_n_head if has_m2 else 2 * DI, 2 * DI)
        xc, xd, dtr, dt, y = conv_dim, hp.dt_rank + 2 * N, hp.dt_rank, DI, DI
    if attn:        # q (and att) hold [q_h | gate_h] per head with a gated q
        q = hp.n_head * hp.head_dim * (2 if arch_spec(hp.arch).attn_q_gate else 1)
        kvw = max(hp.n_head_kv[i] for i in attn) * hp.head_dim
    if has_z2:      # mixer_zamba2.c z2_scratch: zx [2D], xdbl [r], y [max(H hd, F)]
        zx, xd, y = max(zx, 2 * D), max(xd, _adapter_rank(gguf)), max(y, hp.n_head * hp.head_dim, max_ff)
    if qsa:         # mixer_qsa.c qsa_scratch: indexer queries in zx, raw keys in xc
        zx, xc = max(zx, hp.idx_n_head * hp.idx_head_dim), max(xc, hp.idx_head_dim)
    U = n_ubatch
    row_n = max(D, DI, q, max_ff, hp.dt_rank) + 1
    R = Ep = 0
    if HD:          # residual_hc.c / ple.c: the low rank R and the gathered PLE row Ep
        R = max([int(t.shape[1]) for t in gguf if t.name.endswith(("hc_down.weight", "hc_attn_down.weight",
                                                                     "hc_ffn_down.weight"))] or [0])
        table = gguf.tensors.get("per_layer_token_embd.weight")
        if n_ple and table is not None:
            Ep = int(table.shape[0]) * (hp.ple_ngram_size - 1) * hp.ple_heads_per_ngram
        row_n = max(row_n, max(HD, Ep, R) + 1)
    vec_n = max(n_ctx, hp.n_expert, hp.ssm_n_head, 1)
    widths = [U * D] * 3 + [U * zx, U * xc, U * xd, U * dtr, U * dt, U * y, U * q, U * kvw, U * kvw, U * q,
                            U * max_ff, U * max_ff, row_n * n_threads, vec_n * n_threads]
    if any(kd == FFNKind.MOE for kd in hp.ffn_kinds):
        # ffn_moe.c's scratch (context.c moe_width): gathered tokens and outputs [D] each,
        # router logits [E], routing weights, experts and grouped slots [k] each
        widths.append(U * (2 * D + hp.n_expert + 3 * hp.n_expert_used))
    if has_par:     # ctx->mix [U, D]: the attention half's output (allocated only for such models)
        widths.append(U * D)
    if HD:          # hx, hn, hg, pc [U, hcD]; hl [U, max(R, hc)]; hi [U, hc]; pe [U, Ep]
        widths += [U * HD] * 3 + [U * max(R, hp.hc_count), U * hp.hc_count, U * max(Ep, 1), U * HD]
    # activation rows of the integer mat-mul path (ops.c tk_mm_act_bytes): Q8_K, 292 bytes
    # per 256 values, or bf16, 2 bytes per value, where the BF16 x BF16 kernel can run
    from toolkit.binding import cpu
    act = max(U * max(-(-row_n // 256) * 292, 2 * row_n if cpu.has_avx512bf16() else 0), 1)
    return {"weights": int(sum(t.nbytes for t in gguf)), "kv": int(kv), "recurrent": int(n_seq_max * state),
            "checkpoints": int(n_seq_max * n_checkpoints * state),
            "draft": int(n_seq_max * draft_window * state) if draft_window > 0 else 0,
            "compute": int(sum(max(w, 1) * 4 for w in widths) + act + (_ssd_workspace(hp, U, n_threads) if has_m2 else 0)
                           + (_gdn_workspace(hp, n_threads) if has_gdn else 0))}


def _adapter_rank(gguf) -> int:
    """The LoRA rank r of zamba2's adapters (blk.N.ffn_lora_a [D, r]), 0 without them."""
    return max((int(t.shape[1]) for t in gguf if t.name.endswith("ffn_lora_a.weight")), default=0)


def _gdn_workspace(hp, n_threads: int) -> int:
    """Bytes of the delta rule's workspace: n_threads x tk_gdn_work_floats(Dk, Dv) floats
    (gdn.c; asked of the C library, whose chunked form sets the size)."""
    from toolkit.binding import lib
    return max(n_threads, 1) * int(lib.tk_gdn_work_floats(hp.d_state, hp.ssm_head_dim)) * 4


def _ssd_workspace(hp, n_ubatch: int, n_threads: int) -> int:
    """Bytes of the Mamba-2 chunked scan's workspace (ssd.c tk_ssd_workspace_bytes): per thread
    2 L P + N P + 7 L + 16 + 5 N floats, per (chunk of L = 64 tokens, group) L^2 + 2 L N floats."""
    L, P, N = 64, hp.ssm_head_dim, hp.d_state
    if n_ubatch <= 0 or P <= 0 or N <= 0 or hp.n_group <= 0:
        return 0
    per_thread = 2 * L * P + N * P + 7 * L + 16 + 5 * N
    per_chunk = L * L + 2 * L * N
    return (max(n_threads, 1) * per_thread + -(-n_ubatch // L) * hp.n_group * per_chunk) * 4


def _fmt(n: int) -> str:
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= f:
            return f"{n / f:.2f} {unit}"
    return f"{n} B"


def format_report(r: dict[str, int], n_ctx: int, n_seq_max: int) -> str:
    """One line per kind and the total, e.g. ``kv          1.50 MiB  (1572864 bytes)``."""
    lines = [f"memory (n_ctx = {n_ctx}, n_seq_max = {n_seq_max}):"]
    kinds = KINDS + (("draft",) if r.get("draft") else ())
    for k in kinds:
        lines.append(f"  {k:<12}{_fmt(r[k]):>12}  ({r[k]} bytes)")
    total = sum(r[k] for k in kinds)
    lines.append(f"  {'total':<12}{_fmt(total):>12}  ({total} bytes)")
    return "\n".join(lines)
