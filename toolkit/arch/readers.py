"""GGUF hparams readers, one per concern; the architecture table says which apply to a family.

Each reader has the signature ``reader(r: KeyReader, hp: HParams, spec: ArchSpec) -> None``:
it reads its ``{arch}.*`` keys through ``r`` (typed, with the schema's error messages), checks
them and fills its fields of ``hp``.  :meth:`toolkit.arch.HParams.from_gguf` runs a row's
readers in the row's order, so the first bad key a file has is the one reported.

All readers raise :class:`toolkit.errors.InputError` naming the file and the key.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from toolkit.arch import fields as F
from toolkit.arch.kinds import FFNKind, LayerKind, Norm
from toolkit.errors import InputError
from toolkit.gguf_io.constants import MINIMAX_RESIDUAL_ALPHA, MINIMAX_RESIDUAL_BETA, Keys, k

if TYPE_CHECKING:  # pragma: no cover
    from toolkit.arch.hparams import HParams
    from toolkit.arch.table import ArchSpec

# value types of the keys: a declared field's (toolkit.arch.fields), and those of the keys no one
# field is read from
_KEY_TYPES = {h.key: h.key_type or h.type for h in F.HPARAMS if h.key}
_FLOAT_KEYS = {k_ for k_, t in _KEY_TYPES.items() if t == "float"} | {Keys.Attention.LAYERNORM_EPS,
                                                                       Keys.Rope.SCALING_FACTOR}
_BOOL_KEYS = {k_ for k_, t in _KEY_TYPES.items() if t == "bool"} | {Keys.KDA.SAFE_GATE, Keys.Rope.SCALING_FINETUNED}
_LIST_KEYS = {Keys.Attention.HEAD_COUNT_KV, Keys.Attention.LAYER_INDICES, Keys.Rope.DIMENSION_SECTIONS,
              Keys.LLM.FEED_FORWARD_LENGTH}
_BOOL_LIST_KEYS = {Keys.Attention.RECURRENT_LAYERS, Keys.Attention.SLIDING_WINDOW_PATTERN, Keys.Attention.Indexer.TYPES}


class KeyReader:
    """Typed access to one file's per-architecture keys (templates of ``Keys``).

    Every hparam is a number (or, for two keys, a per-layer list of ints); a value of another
    GGUF type, or an int that does not fit the C runtime's int32, is bad input.
    """

    def __init__(self, f, arch: str):
        self.f = f          # toolkit.gguf_io.GGUFFile
        self.arch = arch

    def bad(self, key: str, why: str) -> InputError:
        """The InputError for key template ``key``: ``{path}: key '{arch}.…' {why}``."""
        return InputError(f"{self.f.path}: key {k(key, self.arch)!r} {why}")

    def typed(self, key: str, v: Any) -> Any:
        """``v`` if it is a valid value of ``key`` (or None); raises InputError otherwise."""
        if v is None:
            return v
        if key in _BOOL_LIST_KEYS:
            if not isinstance(v, list) or not all(isinstance(x, (bool, int)) for x in v):
                raise self.bad(key, f"= {str(v)[:60]} must be a per-layer list of booleans")
            return [bool(x) for x in v]
        if key in _LIST_KEYS and isinstance(v, list):
            if not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**31 for x in v):
                raise self.bad(key, f"= {str(v)[:60]} must list integers in [0, 2**31)")
            return v
        if key in _BOOL_KEYS:
            ok = isinstance(v, (bool, int))
        elif key in _FLOAT_KEYS:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        else:
            ok = isinstance(v, int) and not isinstance(v, bool) and -2**31 <= v < 2**31
        if not ok:
            raise self.bad(key, f"= {str(v)[:60]!s} ({type(v).__name__}) is not a valid value "
                                f"(expected {'a boolean' if key in _BOOL_KEYS else 'a number' if key in _FLOAT_KEYS else 'an int32'})")
        return v

    def req(self, key: str) -> Any:
        """The typed value of a required key; InputError when missing or mistyped."""
        return self.typed(key, self.f.require(k(key, self.arch)))

    def opt(self, key: str, default: Any) -> Any:
        """The typed value of an optional key, ``default`` when absent; InputError when mistyped."""
        return self.typed(key, self.f.get(k(key, self.arch), default))

    def fill(self, hp: "HParams", *names: str) -> None:
        """Read each named field from its declared key (:data:`toolkit.arch.fields.HPARAMS`): the
        declared ``absent`` value when the key is not there (InputError naming the key when it is
        required), then its type and range checked (InputError naming the key and the range)."""
        for name in names:
            h = F.BY_NAME[name]
            v = self.req(h.key) if h.absent is F.REQUIRED else self.opt(h.key, h.absent)
            if h.zero_is_absent and not v:
                v = h.absent
            v = F.python_type(h)(v)
            why = F.check_value(h, v)
            if why:
                raise self.bad(h.key, why)
            setattr(hp, name, v)


# ---- readers (in the order a row runs them) ------------------------------------------------

def read_common(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """block_count, embedding_length, vocabulary size, context_length, rms epsilon."""
    f = r.f
    n_layer = int(r.req(Keys.LLM.BLOCK_COUNT))
    n_embd = int(r.req(Keys.LLM.EMBEDDING_LENGTH))
    if n_layer <= 0 or n_layer > 4096:
        raise r.bad(Keys.LLM.BLOCK_COUNT, f"= {n_layer} is out of range")
    # MTP / NextN blocks come after the main ones and run only as a draft head: the runtime
    # runs block_count - nextn_predict_layers layers (llama-hparams.cpp; docs/specs/gdn-family.md §1.3, B16)
    n_nextn = int(r.opt(Keys.LLM.NEXTN_PREDICT_LAYERS, 0))
    if not 0 <= n_nextn < n_layer:
        raise r.bad(Keys.LLM.NEXTN_PREDICT_LAYERS, f"= {n_nextn} must be in [0, block_count = {n_layer})")
    n_layer -= n_nextn
    if n_embd <= 0:
        raise r.bad(Keys.LLM.EMBEDDING_LENGTH, f"= {n_embd} is out of range")
    tok = f.tensors.get("token_embd.weight")
    n_vocab = r.opt(Keys.LLM.VOCAB_SIZE, None)
    if n_vocab is None:
        if tok is None:
            raise InputError(f"{f.path}: missing tensor 'token_embd.weight' (needed for the vocabulary size)")
        n_vocab = tok.shape[1] if len(tok.shape) == 2 else 0
    if not 0 < n_vocab < 2**31:
        raise InputError(f"{f.path}: vocabulary size {n_vocab} (token_embd.weight / vocab_size) is out of range")
    hp.n_vocab, hp.n_embd, hp.n_layer = int(n_vocab), n_embd, n_layer
    hp.norm_place = int(spec.norm)      # the row's; a file may lack optional norms (read_lfm3)
    r.fill(hp, "n_ctx_train")
    eps = r.opt(Keys.Attention.LAYERNORM_RMS_EPS, None)
    if eps is None and r.f.get(k(Keys.Attention.LAYERNORM_EPS, r.arch)) is not None:
        # llama.cpp's Nemotron-H files carry only layer_norm_epsilon (its loader falls back too)
        eps = r.opt(Keys.Attention.LAYERNORM_EPS, None)
    hp.rms_eps = float(eps if eps is not None else r.req(Keys.Attention.LAYERNORM_RMS_EPS))


def read_layer_kinds(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """Mixer per layer: the row's recurrent kind, attention where the file says so.

    A hybrid row (``spec.attention_from_file``) takes its attention layers from
    ``attention.recurrent_layers`` (per layer, true = recurrent; MTP entries past n_layer
    ignored) when present, else ``attention.layer_indices``, else the per-layer
    ``attention.head_count_kv`` array (0 = recurrent), else ``full_attention_interval``
    (layer i is attention when (i + 1) % interval == 0; llama.cpp qwen3next.cpp / qwen35.cpp);
    never from the architecture name.
    """
    n_layer = hp.n_layer
    hkv = r.opt(Keys.Attention.HEAD_COUNT_KV, None)
    idx = r.opt(Keys.Attention.LAYER_INDICES, None)
    rec = r.opt(Keys.Attention.RECURRENT_LAYERS, None) if spec.attention_from_file else None
    interval = r.opt(Keys.LLM.FULL_ATTENTION_INTERVAL, None) if spec.attention_from_file else None
    if not spec.attention_from_file:
        attn = set()
    elif rec is not None:
        if len(rec) < n_layer:
            raise r.bad(Keys.Attention.RECURRENT_LAYERS, f"has {len(rec)} entries, fewer than the {n_layer} layers")
        attn = {i for i in range(n_layer) if not rec[i]}
    elif idx is not None:
        idx = list(idx) if isinstance(idx, (list, tuple)) else [idx]
        if any(not (0 <= int(i) < n_layer) for i in idx):
            raise r.bad(Keys.Attention.LAYER_INDICES, f"= {idx} has an index outside [0, {n_layer})")
        attn = {int(i) for i in idx}
    elif isinstance(hkv, (list, tuple)):
        n_block = int(r.req(Keys.LLM.BLOCK_COUNT))   # n_layer + the MTP blocks (their entries ignored here)
        if len(hkv) not in (n_layer, n_block):
            raise r.bad(Keys.Attention.HEAD_COUNT_KV, f"has {len(hkv)} entries, block_count is {n_block}")
        attn = {i for i, v in enumerate(hkv) if int(v) > 0}
    elif interval is not None:
        if interval <= 0:
            raise r.bad(Keys.LLM.FULL_ATTENTION_INTERVAL, f"= {interval} must be > 0")
        attn = {i for i in range(n_layer) if (i + 1) % interval == 0}
    else:
        raise InputError(f"{r.f.path}: hybrid model without {k(Keys.Attention.LAYER_INDICES, r.arch)!r} or a per-layer "
                         f"{k(Keys.Attention.HEAD_COUNT_KV, r.arch)!r} array: cannot tell attention layers from recurrent ones")
    hp.layer_kinds = [LayerKind.ATTENTION if i in attn else spec.recurrent for i in range(n_layer)]
    hp.n_head_kv = [0] * n_layer    # read_attention fills the attention layers'


def read_ssm_act(r: KeyReader, hp: "HParams") -> None:
    """The activation after the mixer's causal conv (Mamba-1 / Mamba-2 / GDN / KDA): ``ssm.activation``
    (ours, an HF ACT2FN name of :data:`FFN_ACTS`; absent: silu, llama.cpp's) into ssm_act."""
    act = r.f.get(k(Keys.SSM.ACTIVATION, r.arch), "silu")
    if not isinstance(act, str) or act not in FFN_ACTS:
        raise r.bad(Keys.SSM.ACTIVATION, f"= {act!r} is not supported ({', '.join(FFN_ACTS)})")
    hp.ssm_act = FFN_ACTS[act]


def read_ssm(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """The recurrent sizes every Mamba layer has: conv kernel, inner size, state size, dt rank;
    the conv's activation (:func:`read_ssm_act`)."""
    r.fill(hp, "d_conv", "d_inner", "d_state", "dt_rank", "dt_b_c_rms")
    read_ssm_act(r, hp)
    # FalconMamba: HF's epsilon of the dt/B/C norms where it differs from rms_eps (our key)
    eps = r.opt(Keys.SSM.DT_B_C_RMS_EPS, None)
    hp.ssm_dt_b_c_eps = hp.rms_eps if eps is None else float(eps)
    if not math.isfinite(hp.ssm_dt_b_c_eps) or hp.ssm_dt_b_c_eps < 0:
        raise r.bad(Keys.SSM.DT_B_C_RMS_EPS, f"= {hp.ssm_dt_b_c_eps} is not a valid epsilon")


def read_shortconv(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """LFM2's short conv (in place of :func:`read_ssm`: the file has no ``ssm.*`` keys):
    K = ``shortconv.l_cache`` (HF conv_L_cache) into d_conv, in [2, 64]; the conv runs over the
    D = n_embd channels, so d_inner = D and d_state = dt_rank = 0 (the recurrent state per layer
    is the conv window, (K - 1) x D floats).  ref: llama.cpp src/models/lfm2.cpp (asserts
    n_shortconv_l_cache > 1)."""
    hp.d_conv = int(r.req(Keys.ShortConv.L_CACHE))
    if not 2 <= hp.d_conv <= 64:
        raise r.bad(Keys.ShortConv.L_CACHE, f"= {hp.d_conv} must be in [2, 64]")
    hp.d_inner, hp.d_state, hp.dt_rank = hp.n_embd, 0, 0


def read_lfm2_moe_routing(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """LFM2-MoE routing, when the file has MoE layers (after :func:`read_ffn`):
    ``expert_gating_func`` (required, llama.cpp reads it; only 2 = sigmoid is run),
    ``expert_weights_norm`` (default true: llama.cpp's lfm2 graph always renormalises) and
    ``expert_weights_scale`` (default 1; 0 means 1, as in llama.cpp's build_moe_ffn).
    Sets moe_sigmoid, moe_weights_norm (+ its eps), moe_weights_scale.  ref: transformers
    Lfm2MoeTopKRouter; llama.cpp src/models/lfm2.cpp build_moe_feed_forward, build_moe_ffn."""
    if FFNKind.MOE not in hp.ffn_kinds:
        return
    gating = int(r.req(Keys.LLM.EXPERT_GATING_FUNC))
    if gating != 2:
        raise r.bad(Keys.LLM.EXPERT_GATING_FUNC, f"= {gating} is not supported for {r.arch} (only 2, sigmoid)")
    hp.moe_sigmoid = True
    hp.moe_weights_norm = bool(r.opt(Keys.LLM.EXPERT_WEIGHTS_NORM, True))
    hp.moe_weights_norm_eps = 1e-6      # Lfm2MoeTopKRouter: weights / (sum + 1e-6)
    scale = float(r.opt(Keys.LLM.EXPERT_WEIGHTS_SCALE, 1.0)) or 1.0
    if not math.isfinite(scale):
        raise r.bad(Keys.LLM.EXPERT_WEIGHTS_SCALE, f"= {scale} is not finite")
    hp.moe_weights_scale = scale


def read_mamba2(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """Mamba-2 heads (= time_step_rank), head dim and B/C groups, checked against d_inner; the
    dt clamp ``ssm.dt_min`` / ``ssm.dt_max`` (ours, absent: none)."""
    hp.n_group = int(r.opt(Keys.SSM.GROUP_COUNT, 1))
    hp.ssm_n_head = hp.dt_rank
    if hp.d_inner % hp.ssm_n_head:
        raise r.bad(Keys.SSM.INNER_SIZE, f"= {hp.d_inner} is not a multiple of the head count {hp.ssm_n_head} (time_step_rank)")
    hp.ssm_head_dim = int(r.opt(Keys.SSM.HEAD_DIM, hp.d_inner // hp.ssm_n_head))
    if hp.ssm_head_dim * hp.ssm_n_head != hp.d_inner:
        raise r.bad(Keys.SSM.HEAD_DIM, f"= {hp.ssm_head_dim} disagrees with inner_size / time_step_rank = {hp.d_inner // hp.ssm_n_head}")
    if hp.n_group <= 0 or hp.ssm_n_head % hp.n_group:
        raise r.bad(Keys.SSM.GROUP_COUNT, f"= {hp.n_group} does not divide the head count {hp.ssm_n_head}")
    r.fill(hp, "ssm_dt_min", "ssm_dt_max")   # HF's dt_limit clamp (ours; absent: none)


def read_norm_before_gate(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """Falcon-H1's ``ssm.norm_before_gate`` (ours; HF ``mamba_norm_before_gate``, absent = false):
    the Mamba-2 gated norm is rmsnorm(y) w * silu(z) instead of rmsnorm(y * silu(z)) w."""
    r.fill(hp, "ssm_norm_before_gate")


def read_gdn(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """Gated delta net heads (docs/specs/gdn-family.md §1.3, §8), onto the recurrent fields:

    Dk = ``ssm.state_size`` (d_state), Dv = ``ssm.value_head_dim`` (ours) else Dk (ssm_head_dim),
    Hk = ``ssm.group_count`` (n_group), Hv = ``ssm.time_step_rank`` (ssm_n_head, = dt_rank),
    K = ``ssm.conv_kernel`` (d_conv); ``ssm.inner_size`` must be Hv * Dv and Hk must divide Hv.
    """
    hp.n_group = int(r.req(Keys.SSM.GROUP_COUNT))
    hp.ssm_n_head = hp.dt_rank
    hp.ssm_head_dim = int(r.opt(Keys.SSM.VALUE_HEAD_DIM, hp.d_state))
    if hp.ssm_head_dim <= 0 or hp.ssm_head_dim > 4096:
        raise r.bad(Keys.SSM.VALUE_HEAD_DIM, f"= {hp.ssm_head_dim} is out of range")
    if hp.d_state > 4096:
        raise r.bad(Keys.SSM.STATE_SIZE, f"= {hp.d_state} (the key head dim) is out of range")
    if hp.n_group <= 0 or hp.ssm_n_head % hp.n_group:
        raise r.bad(Keys.SSM.GROUP_COUNT, f"= {hp.n_group} (K heads) does not divide time_step_rank = "
                                          f"{hp.ssm_n_head} (V heads)")
    if hp.d_inner != hp.ssm_n_head * hp.ssm_head_dim:
        raise r.bad(Keys.SSM.INNER_SIZE, f"= {hp.d_inner} is not time_step_rank x value head dim = "
                                         f"{hp.ssm_n_head} x {hp.ssm_head_dim}")


# OLMo-Hybrid's gated norm epsilon: a constant in HF (FusedRMSNormGated's default, modeling_olmo_hybrid.py:631), not rms_norm_eps
OLMO_HYBRID_GDN_NORM_EPS = 1e-5


def read_olmo_hybrid(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """OLMo-Hybrid's gated delta net (docs/specs/more-hybrids.md §3.3), onto read_gdn's fields:

    Dk = ``ssm.state_size``, Hk = ``ssm.group_count``, Hv = ``ssm.time_step_rank``, Dv =
    ``ssm.inner_size`` / Hv (OLMo's default Dv is 2 Dk; llama.cpp's GDN assumes Dv = Dk), beta
    scale ``ssm.beta_scale`` (ours; absent: 1), the gated norm's epsilon HF's constant 1e-5.
    """
    hp.n_group = int(r.req(Keys.SSM.GROUP_COUNT))
    hp.ssm_n_head = hp.dt_rank
    if hp.n_group <= 0 or hp.ssm_n_head % hp.n_group:
        raise r.bad(Keys.SSM.GROUP_COUNT, f"= {hp.n_group} (K heads) does not divide time_step_rank = "
                                          f"{hp.ssm_n_head} (V heads)")
    if hp.d_inner % hp.ssm_n_head or not 0 < hp.d_inner // hp.ssm_n_head <= 4096:
        raise r.bad(Keys.SSM.INNER_SIZE, f"= {hp.d_inner} is not time_step_rank {hp.ssm_n_head} x a value head dim "
                                         f"in [1, 4096]")
    hp.ssm_head_dim = hp.d_inner // hp.ssm_n_head
    r.fill(hp, "gdn_beta_scale")
    hp.gdn_norm_eps = OLMO_HYBRID_GDN_NORM_EPS


def check_rope_sections(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """``rope.dimension_sections`` (M-RoPE t/h/w/e sections, optional): their sum must be at most
    n_rot / 2.  Text positions are (p, p, p, 0), so within that bound interleaved M-RoPE is NEOX
    RoPE on n_rot dims (docs/specs/gdn-family.md §2.2, B15); nothing else is read from them."""
    sec = r.opt(Keys.Rope.DIMENSION_SECTIONS, None)
    if sec is None or not hp.attention_layers:
        return
    sec = list(sec) if isinstance(sec, (list, tuple)) else [sec]
    if sum(int(x) for x in sec) > hp.n_rot // 2:
        raise r.bad(Keys.Rope.DIMENSION_SECTIONS, f"= {sec} sums to {sum(int(x) for x in sec)}, more than "
                                                  f"rope.dimension_count / 2 = {hp.n_rot // 2}")


def read_attention(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """Heads, KV heads per attention layer, head dim, RoPE (when the row uses it), scale.

    Reads nothing when the file has no attention layer.
    """
    attn = set(hp.attention_layers)
    if not attn:
        return
    n_layer, n_embd = hp.n_layer, hp.n_embd
    hkv = r.opt(Keys.Attention.HEAD_COUNT_KV, None)
    hp.n_head = int(r.req(Keys.Attention.HEAD_COUNT))
    if hp.n_head <= 0 or n_embd % hp.n_head:
        raise r.bad(Keys.Attention.HEAD_COUNT, f"= {hp.n_head} does not divide embedding_length {n_embd}")
    hp.head_dim = int(r.opt(Keys.Attention.KEY_LENGTH, n_embd // hp.n_head))
    if isinstance(hkv, (list, tuple)):
        per = [int(v) for v in hkv]
        if len(per) != n_layer:
            raise r.bad(Keys.Attention.HEAD_COUNT_KV, f"has {len(per)} entries, block_count is {n_layer}")
    else:
        per = [int(hkv if hkv is not None else hp.n_head)] * n_layer
    hp.n_head_kv = [per[i] if i in attn else 0 for i in range(n_layer)]
    for i in attn:
        if hp.n_head_kv[i] <= 0 or hp.n_head % hp.n_head_kv[i]:
            raise r.bad(Keys.Attention.HEAD_COUNT_KV, f"[{i}] = {hp.n_head_kv[i]} must divide head_count {hp.n_head} on attention layer {i}")
    hp.use_rope = bool(r.opt(Keys.Rope.SCALING_FINETUNED, True)) and spec.rope
    hp.n_rot = int(r.opt(Keys.Rope.DIMENSION_COUNT, hp.head_dim)) if hp.use_rope else 0
    if hp.n_rot < 0 or hp.n_rot > hp.head_dim or hp.n_rot % 2:
        raise r.bad(Keys.Rope.DIMENSION_COUNT, f"= {hp.n_rot} must be even and at most the head dim {hp.head_dim}")
    r.fill(hp, "rope_freq_base", "attention_scale")
    if hp.use_rope:
        read_rope_scaling(r, hp)


# rope.scaling.type values (llama.cpp's llama_rope_scaling_type names) -> rope_scaling_type
ROPE_SCALING_TYPES = {"none": 0, "linear": 1, "yarn": 2}


def read_rope_scaling(r: KeyReader, hp: "HParams") -> None:
    """llama.cpp's RoPE scaling keys: ``rope.scaling.type`` ("none" when absent; "linear" or
    "yarn"; "longrope" and other names refused), ``rope.scaling.factor`` (> 0; 0 or absent: 1),
    ``rope.scaling.original_context_length`` (yarn; absent: context_length), yarn's
    ``yarn_beta_fast`` / ``yarn_beta_slow`` and ``rope.scaling.attn_factor``, as llama.cpp reads
    them (llama-model.cpp load_hparams, llama-context.cpp).  Raises InputError naming the key."""
    t = r.f.get(k(Keys.Rope.SCALING_TYPE, r.arch), "none")
    if t not in ROPE_SCALING_TYPES:
        raise r.bad(Keys.Rope.SCALING_TYPE, f"= {str(t)[:40]!r} is not supported (only "
                                            f"{', '.join(repr(n) for n in ROPE_SCALING_TYPES)})")
    hp.rope_scaling_type = ROPE_SCALING_TYPES[t]
    factor = float(r.opt(Keys.Rope.SCALING_FACTOR, 0.0))
    if not (math.isfinite(factor) and factor >= 0):
        raise r.bad(Keys.Rope.SCALING_FACTOR, f"= {factor} must be a finite number > 0")
    hp.rope_freq_scale = 1.0 / factor if factor and hp.rope_scaling_type else 1.0
    ctx = int(r.opt(Keys.Rope.SCALING_ORIG_CTX_LEN, 0)) or hp.n_ctx_train
    if hp.rope_scaling_type == ROPE_SCALING_TYPES["yarn"] and ctx <= 0:
        raise r.bad(Keys.Rope.SCALING_ORIG_CTX_LEN, f"= {ctx} must be > 0 for yarn (and context_length is not set)")
    hp.rope_orig_ctx = max(ctx, 0)
    r.fill(hp, "rope_yarn_beta_fast", "rope_yarn_beta_slow", "rope_attn_factor")


# HF ACT2FN names (transformers 5.24 activations.py ACT2CLS) -> hparams ffn_act (C TK_ACT_*, layers/layer.h)
FFN_ACTS = {"silu": 0, "swish": 0, "gelu": 1, "gelu_python": 1, "gelu_pytorch_tanh": 2, "gelu_new": 2,
            "gelu_fast": 2, "gelu_python_tanh": 2, "relu": 3, "relu2": 4, "quick_gelu": 5, "sigmoid": 6, "tanh": 7}


def read_ffn(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """FFN widths and experts; FFN kind per layer from the tensors (router -> MoE, up -> dense);
    moe_renorm (the row's, off when expert_weights_norm is false); the gate's activation
    ``feed_forward.activation`` (ours, an HF ACT2FN name of :data:`FFN_ACTS`; absent: the row's
    ``ffn_act``, the family's HF default: silu, relu2 Nemotron-H, gelu Zamba / Zamba2,
    gelu_pytorch_tanh RecurrentGemma)."""
    f = r.f
    act = f.get(k(Keys.LLM.FEED_FORWARD_ACTIVATION, r.arch), spec.ffn_act)
    if not isinstance(act, str) or act not in FFN_ACTS:
        raise r.bad(Keys.LLM.FEED_FORWARD_ACTIVATION, f"= {act!r} is not supported ({', '.join(FFN_ACTS)})")
    hp.ffn_act = FFN_ACTS[act]
    ff = r.opt(Keys.LLM.FEED_FORWARD_LENGTH, 0)
    hp.n_ff = int(max(ff, default=0) if isinstance(ff, list) else ff)
    r.fill(hp, "n_expert", "n_expert_used", "n_ff_shexp", "moe_latent_size")
    if hp.n_expert and not (0 < hp.n_expert_used <= hp.n_expert):
        raise r.bad(Keys.LLM.EXPERT_USED_COUNT, f"= {hp.n_expert_used} must be in [1, expert_count={hp.n_expert}]")
    hp.ffn_kinds = []
    for i in range(hp.n_layer):
        if f"blk.{i}.ffn_gate_inp.weight" in f.tensors:
            if not hp.n_expert:
                raise InputError(f"{f.path}: tensor 'blk.{i}.ffn_gate_inp.weight' present but key {k(Keys.LLM.EXPERT_COUNT, r.arch)!r} is missing")
            hp.ffn_kinds.append(FFNKind.MOE)
        elif f"blk.{i}.ffn_up.weight" in f.tensors:
            hp.ffn_kinds.append(spec.dense_ffn)
        else:
            hp.ffn_kinds.append(FFNKind.NONE)
    # softmax-then-top-k routing renormalised as the row says, unless the file's
    # expert_weights_norm is false (HF norm_topk_prob false; llama.cpp's key)
    hp.moe_renorm = bool(spec.moe_softmax_topk and spec.moe_renorm and r.opt(Keys.LLM.EXPERT_WEIGHTS_NORM, True)
                         and FFNKind.MOE in hp.ffn_kinds)


def read_zamba2(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """Zamba2 and Zamba (README "Zamba2 layout", "Zamba layout"): the hybrid layers, the
    shared-block map (the dt floor ssm.dt_min: :func:`read_mamba2`).

    ``shared_block_map`` [block_count] holds -1 on a Mamba-2 layer and, on a hybrid layer, the
    shared block it runs, which must be (its rank among the hybrid layers) % shared_block_count
    (the transformers tie order; the runtime recomputes it).  Sets the hybrid layers' kind
    (``ZAMBA2_SHARED``; zamba: ``ZAMBA_SHARED``), their KV heads, and every other layer's to the
    row's recurrent kind (Mamba-2; zamba: Mamba-1) with no KV.
    Runs after read_layer_kinds (attention.layer_indices: the hybrid layers) and read_attention.
    """
    n_layer = hp.n_layer
    hp.n_shared_block = int(r.req(Keys.Zamba2.SHARED_BLOCK_COUNT))
    if not 0 < hp.n_shared_block <= n_layer:
        raise r.bad(Keys.Zamba2.SHARED_BLOCK_COUNT, f"= {hp.n_shared_block} must be in [1, block_count = {n_layer}]")
    bmap = r.f.require(k(Keys.Zamba2.SHARED_BLOCK_MAP, r.arch))
    if not isinstance(bmap, list) or len(bmap) != n_layer or not all(isinstance(b, int) for b in bmap):
        raise r.bad(Keys.Zamba2.SHARED_BLOCK_MAP, f"must list {n_layer} integers (one per layer), got {str(bmap)[:60]}")
    hybrid = hp.attention_layers
    want = [-1] * n_layer
    for j, i in enumerate(hybrid):
        want[i] = j % hp.n_shared_block
    if bmap != want:
        raise r.bad(Keys.Zamba2.SHARED_BLOCK_MAP, f"= {bmap[:16]} disagrees with attention.layer_indices {hybrid[:16]} "
                    f"and shared_block_count {hp.n_shared_block} (expected {want[:16]})")
    kind = _ZAMBA_HYBRID[spec.recurrent]
    hp.layer_kinds = [kind if i in set(hybrid) else spec.recurrent for i in range(n_layer)]


# the hybrid layer kind of a Zamba row, by its recurrent kind: zamba2 (Mamba-2), zamba (Mamba-1)
_ZAMBA_HYBRID = {LayerKind.MAMBA2: LayerKind.ZAMBA2_SHARED, LayerKind.MAMBA1: LayerKind.ZAMBA_SHARED}


def read_mamba1_heads(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """Zamba v1: ``ssm.head_count`` (ours) Mamba-1 heads, each with its own x_proj / dt_proj over
    inner_size / head_count channels; absent: one head."""
    hp.ssm_n_head = int(r.opt(Keys.SSM.HEAD_COUNT, 1))
    if hp.ssm_n_head <= 0 or hp.d_inner % hp.ssm_n_head:
        raise r.bad(Keys.SSM.HEAD_COUNT, f"= {hp.ssm_n_head} must be > 0 and divide inner_size {hp.d_inner}")
    hp.ssm_head_dim = hp.d_inner // hp.ssm_n_head


def read_nemotron_layers(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """Nemotron-H: each block is one of Mamba-2, attention, or an FFN alone (mixer NONE).

    Attention layers: ``attention.layer_indices`` when present, else the per-layer
    ``attention.head_count_kv`` (> 0).  FFN-only layers: the per-layer ``feed_forward_length``
    (> 0), as llama.cpp's loader reads them (src/models/nemotron-h.cpp: recurrent iff both are 0).
    Runs after :func:`read_layer_kinds` (which gave attention or Mamba-2 to every layer).
    """
    ff = r.opt(Keys.LLM.FEED_FORWARD_LENGTH, None)
    if not isinstance(ff, list) or len(ff) != hp.n_layer:
        raise r.bad(Keys.LLM.FEED_FORWARD_LENGTH, f"= {str(ff)[:60]} must be a per-layer list of {hp.n_layer} entries "
                                                  f"(0 on Mamba-2 and attention layers)")
    for i, n in enumerate(ff):
        if n > 0:
            if hp.layer_kinds[i] == LayerKind.ATTENTION:
                raise r.bad(Keys.LLM.FEED_FORWARD_LENGTH, f"[{i}] = {n} but layer {i} is an attention layer")
            hp.layer_kinds[i] = LayerKind.NONE


def check_nemotron_layers(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """Nemotron-H: an FFN-only layer (feed_forward_length > 0) has ffn_up or a router, and a
    Mamba-2 / attention layer has neither."""
    for i, (kd, fk) in enumerate(zip(hp.layer_kinds, hp.ffn_kinds)):
        if (kd == LayerKind.NONE) != (fk != FFNKind.NONE):
            what = "has no ffn_up / ffn_gate_inp tensor" if kd == LayerKind.NONE else f"is {kd.name.lower()} but has FFN tensors"
            raise InputError(f"{r.f.path}: layer {i} {what} (key {k(Keys.LLM.FEED_FORWARD_LENGTH, r.arch)!r} "
                             f"marks the FFN-only layers)")


def read_moe_routing(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """Nemotron-H MoE routing: sigmoid scores (the row's ``moe_sigmoid``), expert groups, groups
    kept, weight normalisation (NemotronHTopkRouter: weights / (sum + 1e-20)) and scale."""
    if not any(fk == FFNKind.MOE for fk in hp.ffn_kinds):
        return
    hp.moe_sigmoid = spec.moe_sigmoid
    hp.moe_weights_norm_eps = 1e-20
    hp.moe_n_group = int(r.opt(Keys.LLM.EXPERT_GROUP_COUNT, 1))
    hp.moe_topk_group = int(r.opt(Keys.LLM.EXPERT_GROUP_USED_COUNT, hp.moe_n_group))
    if hp.moe_n_group < 1 or hp.moe_n_group > 64 or hp.n_expert % hp.moe_n_group:
        raise r.bad(Keys.LLM.EXPERT_GROUP_COUNT, f"= {hp.moe_n_group} must divide expert_count {hp.n_expert} (at most 64)")
    if not 1 <= hp.moe_topk_group <= hp.moe_n_group:
        raise r.bad(Keys.LLM.EXPERT_GROUP_USED_COUNT, f"= {hp.moe_topk_group} must be in [1, {hp.moe_n_group}]")
    if hp.moe_topk_group * (hp.n_expert // hp.moe_n_group) < hp.n_expert_used:
        raise r.bad(Keys.LLM.EXPERT_GROUP_USED_COUNT, f"= {hp.moe_topk_group} groups of {hp.n_expert // hp.moe_n_group} "
                                                      f"experts hold fewer than expert_used_count {hp.n_expert_used}")
    hp.moe_weights_norm = bool(r.opt(Keys.LLM.EXPERT_WEIGHTS_NORM, False))
    r.fill(hp, "moe_weights_scale")


def read_multipliers(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """Granite's embedding / residual / logit multipliers (0 or absent -> 1)."""
    r.fill(hp, "embedding_scale", "residual_scale", "logit_scale")


def check_rms_eps(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """The epsilon read by read_common must be finite and >= 0 (checked last, as it always was)."""
    if not math.isfinite(hp.rms_eps) or hp.rms_eps < 0:
        raise r.bad(Keys.Attention.LAYERNORM_RMS_EPS, f"= {hp.rms_eps} is not a valid epsilon")


_GATE_ACTS = {"silu": 0, "swish": 0, "sigmoid": 1}


def read_qwen4exp(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """qwen4exp (docs/specs/gdn-family.md §1.8): its attention layers are QSA layers; hyper-connection
    streams; the QSA indexer; the gated delta net's output gate (``ssm.output_gate_type``, ours;
    absent: sigmoid, what llama.cpp hard-codes); the PLE layers and their uint64 hash constants.

    Several PLE layers (HF allows them): ``ple.layers`` lists them and the three constant arrays
    hold one set per layer, in that order (one layer: exactly llama.cpp's keys).

    Raises:
        InputError: a missing or inconsistent key; indexer tensors with every compress ratio 0
            (llama.cpp's converter wrote such files, docs/specs/gdn-family.md B1); a PLE layer that is not a gated
            delta net layer; constant arrays of the wrong length.
    """
    f, L = r.f, hp.n_layer
    hp.layer_kinds = [LayerKind.QSA if kd == LayerKind.ATTENTION else kd for kd in hp.layer_kinds]
    r.fill(hp, "hc_count")
    if hp.hc_count < 2:
        raise r.bad(Keys.HyperConnection.COUNT, f"= {hp.hc_count} must be in [2, 64]")
    act = f.get(k(Keys.SSM.OUTPUT_GATE_TYPE, r.arch), "sigmoid")
    if not isinstance(act, str) or act not in _GATE_ACTS:
        raise r.bad(Keys.SSM.OUTPUT_GATE_TYPE, f"= {act!r} is not supported (silu or sigmoid)")
    hp.gdn_gate_act = _GATE_ACTS[act]
    qsa = [i for i, kd in enumerate(hp.layer_kinds) if kd == LayerKind.QSA]
    if qsa:
        r.fill(hp, "idx_n_head", "idx_head_dim", "idx_top_k")
        ratios = f.get(k(Keys.Attention.COMPRESS_RATIOS, r.arch), None)
        if not isinstance(ratios, list) or len(ratios) < L or not all(isinstance(x, int) and 0 <= x < 2**31 for x in ratios):
            raise r.bad(Keys.Attention.COMPRESS_RATIOS, f"= {str(ratios)[:60]} must list {L} non-negative ints")
        if all(ratios[i] == 0 for i in qsa) and f"blk.{qsa[0]}.indexer.k_proj.weight" in f.tensors:
            raise r.bad(Keys.Attention.COMPRESS_RATIOS, f"is all zero on the indexed attention layers {qsa}, but the file has "
                        f"their indexer tensors (blk.{qsa[0]}.indexer.*): a broken conversion (llama.cpp's converter "
                        f"wrote zeros); reconvert the checkpoint with toolkit convert")
        for i in qsa:
            if ratios[i] <= 0 or hp.idx_top_k <= 0 or hp.idx_top_k % ratios[i]:
                raise r.bad(Keys.Attention.COMPRESS_RATIOS, f"[{i}] = {ratios[i]} must be positive and divide "
                            f"{k(Keys.Attention.Indexer.TOP_K, r.arch)} = {hp.idx_top_k}")
        hp.compress_ratios = [int(x) for x in ratios[:L]]
    layers = f.get(k(Keys.PerLayerEmbedding.LAYERS, r.arch), None)
    if layers is None:
        return
    layers = layers if isinstance(layers, list) else [layers]
    if not layers or not all(isinstance(i, int) and 0 <= i < L for i in layers) or len(set(layers)) != len(layers):
        raise r.bad(Keys.PerLayerEmbedding.LAYERS, f"= {layers} must list distinct layer ids in [0, {L})")
    for i in layers:
        if hp.layer_kinds[i] != LayerKind.GDN:
            raise r.bad(Keys.PerLayerEmbedding.LAYERS, f"names layer {i}, a {hp.layer_kinds[i].name.lower()} layer; "
                        f"PLE runs only on gated delta net (linear attention) layers")
    hp.ple_index = [-1] * L
    for j, i in enumerate(layers):
        hp.ple_index[i] = j
    hp.ple_n_module = len(layers)
    r.fill(hp, "ple_ngram_size", "ple_heads_per_ngram", "ple_conv_kernel")
    n = hp.ple_ngram_size
    hp.ple_eos_token = int(r.req(Keys.PerLayerEmbedding.EOS_TOKEN_ID))
    if not 0 <= hp.ple_eos_token < hp.n_vocab:
        raise r.bad(Keys.PerLayerEmbedding.EOS_TOKEN_ID, f"= {hp.ple_eos_token} is outside the vocabulary of {hp.n_vocab}")
    nh = (n - 1) * hp.ple_heads_per_ngram
    consts = []
    for key, per in ((Keys.PerLayerEmbedding.LAYER_MULTIPLIERS, n), (Keys.PerLayerEmbedding.HEAD_OFFSETS, nh),
                     (Keys.PerLayerEmbedding.HEAD_VOCAB_SIZES, nh)):
        v = f.get(k(key, r.arch), None)
        if v is None:
            raise InputError(f"{f.path}: missing key {k(key, r.arch)!r} (a PLE hash constant; the file has PLE layers {layers})")
        v = v if isinstance(v, list) else [v]
        if len(v) != per * len(layers) or not all(isinstance(x, int) and 0 <= x < 2**64 for x in v):
            raise r.bad(key, f"must list {per} unsigned ints per PLE layer ({len(layers)} layers), got {len(v)}")
        consts.append(v)
    if any(x == 0 for x in consts[2]):
        raise r.bad(Keys.PerLayerEmbedding.HEAD_VOCAB_SIZES, "has a zero head vocabulary size")
    for j in range(len(layers)):
        hp.ple_consts += consts[0][j * n:(j + 1) * n] + consts[1][j * nh:(j + 1) * nh] + consts[2][j * nh:(j + 1) * nh]


def read_sliding_window(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """Sliding-window attention (after :func:`read_layer_kinds`): ``attention.sliding_window``
    = W (a query at position i sees keys j with i - W < j <= i: W tokens including itself, HF
    ``create_sliding_window_causal_mask``) and ``attention.sliding_window_pattern`` (per layer,
    true = sliding; only attention layers may be).  Neither key: no sliding layer.  A pattern
    without a window, a window of 0 or below, or a pattern marking a recurrent layer is bad
    input.  ref: llama.cpp LLM_KV_ATTENTION_SLIDING_WINDOW(_PATTERN), llama_hparams::swa_layers."""
    L = hp.n_layer
    w, pat = _sliding_window_keys(r)
    if w is None:
        return
    if pat is None or len(pat) < L:
        raise r.bad(Keys.Attention.SLIDING_WINDOW_PATTERN, f"must list {L} booleans (one per layer)")
    for i in range(L):
        if pat[i] and hp.layer_kinds[i] != LayerKind.ATTENTION:
            raise r.bad(Keys.Attention.SLIDING_WINDOW_PATTERN, f"marks layer {i} sliding, but it is not an attention layer")
    if any(pat[:L]):
        hp.n_swa = int(w)
        hp.swa_layers = [int(bool(x)) for x in pat[:L]]


def _sliding_window_keys(r: KeyReader) -> tuple[int | None, list[bool] | None]:
    """(window, pattern) as the file has them, (None, None) without; InputError for a window of
    0 or below (or above 2**24), or a pattern without a window."""
    w = r.opt(Keys.Attention.SLIDING_WINDOW, None)
    pat = r.opt(Keys.Attention.SLIDING_WINDOW_PATTERN, None)
    if w is None and pat is not None:
        raise r.bad(Keys.Attention.SLIDING_WINDOW, "is missing, but the file marks sliding-window layers "
                    f"({k(Keys.Attention.SLIDING_WINDOW_PATTERN, r.arch)})")
    if w is not None and not 1 <= w <= (1 << 24):
        raise r.bad(Keys.Attention.SLIDING_WINDOW, f"= {w}: a sliding window must be in [1, 2**24]")
    return w, pat


def check_sliding_window_keys(f) -> None:
    """The sliding-window keys of GGUFFile ``f`` (any architecture), for commands that do not
    read the hparams (quantize): InputError, one line, for a bad window."""
    _sliding_window_keys(KeyReader(f, f.arch))


def read_minimax(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """MiniMax-Text-01 (docs/specs/more-hybrids.md §5): every branch joins as x = alpha * rmsnorm(x) +
    beta * branch; alpha = ``residual_scale`` (llama.cpp's one key) unless ours
    ``residual_alpha`` / ``residual_beta`` ([lightning, attention, FFN]) say otherwise (beta 1).
    The lightning heads are ``attention.head_count`` of ``attention.key_length``, read here when
    the file has no attention layer (read_attention then reads nothing)."""
    import math as _m
    if not hp.attention_layers:
        hp.n_head = int(r.req(Keys.Attention.HEAD_COUNT))
        if hp.n_head <= 0 or hp.n_embd % hp.n_head:
            raise r.bad(Keys.Attention.HEAD_COUNT, f"= {hp.n_head} does not divide embedding_length {hp.n_embd}")
        hp.head_dim = int(r.opt(Keys.Attention.KEY_LENGTH, hp.n_embd // hp.n_head))
        if not 0 < hp.head_dim <= 4096:
            raise r.bad(Keys.Attention.KEY_LENGTH, f"= {hp.head_dim} is out of range")
    a = float(r.opt(Keys.LLM.RESIDUAL_SCALE, 1.0))
    if not _m.isfinite(a):
        raise r.bad(Keys.LLM.RESIDUAL_SCALE, f"= {a} is not finite")
    got = {}
    for key, default in ((MINIMAX_RESIDUAL_ALPHA, [a, a, a]), (MINIMAX_RESIDUAL_BETA, [1.0, 1.0, 1.0])):
        v = r.f.get(k(key, r.arch), None)
        if v is None:
            got[key] = default
            continue
        if (not isinstance(v, list) or len(v) != 3
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and _m.isfinite(x) for x in v)):
            raise r.bad(key, f"= {str(v)[:60]} must be 3 finite numbers (lightning, attention, FFN)")
        got[key] = [float(x) for x in v]
    alpha, beta = got[MINIMAX_RESIDUAL_ALPHA], got[MINIMAX_RESIDUAL_BETA]
    hp.res_alpha_lin, hp.res_alpha_full, hp.res_alpha_mlp = alpha
    hp.res_beta_lin, hp.res_beta_full, hp.res_beta_mlp = beta
    hp.residual_scale = 1.0


def read_lfm3(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """LFM3 (after read_attention and read_sliding_window): ``rope.freq_base_swa`` (the sliding
    layers' base; default rope.freq_base), ``rope.proportional_dimension_count`` (ours: the full
    layers' rotated dims, even, at most rope.dimension_count; default all), and from the tensors
    present the per-head output gate (``blk.N.attn_gate``) and the sandwich norms
    (``blk.N.post_attention_norm`` / ``post_ffw_norm``: the row's sandwich placement, else pre-norm
    blocks).  ref: docs/specs/more-hybrids.md §4."""
    f = r.f
    base = r.opt(Keys.Rope.FREQ_BASE_SWA, None)
    hp.rope_freq_base_swa = float(hp.rope_freq_base if base is None else base)
    if not (math.isfinite(hp.rope_freq_base_swa) and hp.rope_freq_base_swa > 0):
        raise r.bad(Keys.Rope.FREQ_BASE_SWA, f"= {hp.rope_freq_base_swa} must be > 0")
    prop = int(r.opt(Keys.Rope.PROPORTIONAL_DIMS, hp.n_rot))
    if prop < 0 or prop > hp.n_rot or prop % 2:
        raise r.bad(Keys.Rope.PROPORTIONAL_DIMS, f"= {prop} must be even and at most rope.dimension_count {hp.n_rot}")
    hp.rope_prop_rot = prop if prop < hp.n_rot else 0
    attn = hp.attention_layers
    hp.attn_head_gate = int(bool(attn) and f"blk.{attn[0]}.attn_gate.weight" in f.tensors)
    if "blk.0.post_attention_norm.weight" not in f.tensors:
        hp.norm_place = int(Norm.PRE)


def read_rglru(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """RecurrentGemma's RG-LRU sizes (in place of :func:`read_ssm`: docs/specs/more-hybrids.md §6.3):
    ``rglru.width`` (ours; lru_width) into d_inner and ``ssm.conv_kernel`` (K, in [2, 64]) into
    d_conv; d_state = dt_rank = 0 (the state per layer is the conv window, (K - 1) x lru floats,
    and h, lru floats)."""
    hp.d_inner = int(r.req(Keys.RGLRU.WIDTH))
    if not 0 < hp.d_inner <= (1 << 20):
        raise r.bad(Keys.RGLRU.WIDTH, f"= {hp.d_inner} is out of range")
    hp.d_conv = int(r.req(Keys.SSM.CONV_KERNEL))
    if not 2 <= hp.d_conv <= 64:
        raise r.bad(Keys.SSM.CONV_KERNEL, f"= {hp.d_conv} must be in [2, 64]")
    hp.d_state, hp.dt_rank = 0, 0


def read_recurrent_gemma(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """RecurrentGemma (after read_attention; docs/specs/more-hybrids.md §6): every attention layer is a
    sliding-window (local) layer of window ``attention.sliding_window`` (required, >= 1; no
    pattern key: HF has no global layers), the RG-LRU gates' head count ``attention.head_count``
    (read here too when the file has no attention layer) dividing ``rglru.width``, the logit soft
    cap ``final_logit_softcapping`` (the row's ``logit_softcap``; absent: none), the embedding scale ``embedding_scale``
    (bf16(sqrt(n_embd)), HF's bfloat16 normalizer; absent: 1) (attention biases: the row's ``attn_bias``)."""
    if not hp.n_head:
        hp.n_head = int(r.req(Keys.Attention.HEAD_COUNT))
    if hp.n_head <= 0 or hp.d_inner % hp.n_head:
        raise r.bad(Keys.RGLRU.WIDTH, f"= {hp.d_inner} is not a multiple of head_count {hp.n_head} (the RG-LRU "
                                      f"gates are per-head blocks)")
    attn = hp.attention_layers
    w = r.opt(Keys.Attention.SLIDING_WINDOW, None)
    if attn:
        if w is None:
            raise InputError(f"{r.f.path}: missing key {k(Keys.Attention.SLIDING_WINDOW, r.arch)!r} (the local attention's window)")
    if w is not None and not 1 <= w <= (1 << 24):
        raise r.bad(Keys.Attention.SLIDING_WINDOW, f"= {w}: a sliding window must be in [1, 2**24]")
    if attn:
        hp.n_swa = int(w)
        hp.swa_layers = [int(i in set(attn)) for i in range(hp.n_layer)]
    cap = r.opt(Keys.LLM.FINAL_LOGIT_SOFTCAPPING, None) if spec.logit_softcap else None
    if cap is not None and not (math.isfinite(cap) and cap > 0):
        raise r.bad(Keys.LLM.FINAL_LOGIT_SOFTCAPPING, f"= {cap} must be finite and > 0")
    hp.logit_softcap = float(cap or 0.0)
    hp.embedding_scale = float(r.opt(Keys.LLM.EMBEDDING_SCALE, 1.0))
    if not (math.isfinite(hp.embedding_scale) and hp.embedding_scale > 0):
        raise r.bad(Keys.LLM.EMBEDDING_SCALE, f"= {hp.embedding_scale} must be finite and > 0")


def read_kda(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """KDA layers (docs/specs/kda-family.md §1.2, §2.1): the conv kernel (ssm.conv_kernel) and its
    activation (:func:`read_ssm_act`), head dim
    (kda.head_dim), heads (ours kda.head_count, else attention.head_count as llama.cpp), the q/k
    l2-norm epsilon (ours kda.l2_norm_epsilon, else rms_eps as llama.cpp, docs/specs/kda-family.md D4) and the gate's
    lower bound (kda.gate_lower_bound; absent: kimi's unbounded softplus gate)."""
    if LayerKind.KDA not in hp.layer_kinds:
        return
    r.fill(hp, "d_conv", "kda_head_dim")
    read_ssm_act(r, hp)
    hp.kda_n_head = int(r.opt(Keys.KDA.HEAD_COUNT, 0)) or int(r.req(Keys.Attention.HEAD_COUNT))
    if not 0 < hp.kda_n_head <= 65536:
        raise r.bad(Keys.KDA.HEAD_COUNT, f"= {hp.kda_n_head} is out of range")
    hp.kda_l2_eps = float(r.opt(Keys.KDA.L2_NORM_EPS, hp.rms_eps))
    if not math.isfinite(hp.kda_l2_eps) or hp.kda_l2_eps < 0:
        raise r.bad(Keys.KDA.L2_NORM_EPS, f"= {hp.kda_l2_eps} is out of range")
    # 0.0 stands for "no bound" (the softplus gate), so a stored bound must be < 0: a stored 0 would be
    # HF's bounded gate with lb 0 (no decay at all), which the softplus gate is not
    lb = r.opt(Keys.KDA.GATE_LOWER_BOUND, None)
    hp.kda_gate_lower_bound = 0.0 if lb is None else float(lb)
    if lb is not None and not (math.isfinite(hp.kda_gate_lower_bound) and hp.kda_gate_lower_bound < 0):
        raise r.bad(Keys.KDA.GATE_LOWER_BOUND, f"= {hp.kda_gate_lower_bound} must be a negative number")


def read_mla(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """MLA layers (§2.3): the attention layers read_layer_kinds found become MLA; heads
    (attention.head_count), kv_lora_rank, the rope part dr (rope.dimension_count), nope and value
    head dims (key_length_mla - dr, value_length_mla), q-LoRA rank (attention.q_lora_rank; 0: attn_q),
    the q_a / kv_a RMSNorm epsilon (ours attention.mla_norm_epsilon, else rms_eps as llama.cpp, D5).
    No RoPE is applied (kimi-linear: the rope part is shared and unrotated)."""
    if LayerKind.ATTENTION not in hp.layer_kinds:
        return
    hp.layer_kinds = [LayerKind.MLA if kd == LayerKind.ATTENTION else kd for kd in hp.layer_kinds]
    hp.n_head = int(r.req(Keys.Attention.HEAD_COUNT))
    if not 0 < hp.n_head <= 65536:
        raise r.bad(Keys.Attention.HEAD_COUNT, f"= {hp.n_head} is out of range")
    hp.n_head_kv = [1 if kd == LayerKind.MLA else 0 for kd in hp.layer_kinds]
    r.fill(hp, "mla_kv_lora_rank", "mla_dv", "mla_q_lora_rank")
    hp.mla_dr = int(r.opt(Keys.Rope.DIMENSION_COUNT, 0))
    hp.mla_dn = int(r.req(Keys.KDA.KEY_LENGTH_MLA)) - hp.mla_dr
    if not 0 < hp.mla_dn <= 65536:
        raise r.bad(Keys.KDA.KEY_LENGTH_MLA, f"= {hp.mla_dn + hp.mla_dr} is out of range (key_length_mla - rope.dimension_count must be in [1, 65536])")
    if not 0 <= hp.mla_dr <= 65536:
        raise r.bad(Keys.Rope.DIMENSION_COUNT, f"= {hp.mla_dr} is out of range")
    hp.head_dim = hp.mla_dn + hp.mla_dr
    hp.use_rope, hp.n_rot = False, 0
    hp.mla_norm_eps = float(r.opt(Keys.KDA.MLA_NORM_EPS, hp.rms_eps))
    if not math.isfinite(hp.mla_norm_eps) or hp.mla_norm_eps < 0:
        raise r.bad(Keys.KDA.MLA_NORM_EPS, f"= {hp.mla_norm_eps} is out of range")


def read_kda_moe_routing(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """The KDA families' MoE routing (§2.6), when the file has MoE layers: sigmoid scores
    (expert_gating_func 2, required as by llama.cpp), choice bias, groups (expert_group_count,
    expert_group_used_count), renormalisation (expert_weights_norm; absent: true, as llama.cpp's
    kimi-linear graph always does) by sum + 1e-20 (HF), expert_weights_scale."""
    if FFNKind.MOE not in hp.ffn_kinds:
        return
    gating = int(r.req(Keys.LLM.EXPERT_GATING_FUNC))
    if gating != 2:
        raise r.bad(Keys.LLM.EXPERT_GATING_FUNC, f"= {gating} is not supported for {r.arch} (only 2, sigmoid)")
    read_moe_routing(r, hp, spec)
    hp.moe_sigmoid = True
    hp.moe_weights_norm = bool(r.opt(Keys.LLM.EXPERT_WEIGHTS_NORM, True))


def read_glm5_next_extras(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """What GLM-5-Next adds to the KDA family (docs/specs/kda-family.md §1.3, §2.4-2.6): mHC
    (``hyper_connection.*``, any count; llama.cpp's loader accepts only 4), the DSA k-pool indexer
    (``attention.indexer.*``: heads, key length, budget, k-pool, the tail, full / shared per layer;
    ``attention.layer_norm_epsilon`` the indexer key LayerNorm's), the SwiGLU clamps (llama.cpp's
    per-layer ``swiglu_clamp_exp`` / ``swiglu_clamp_shexp``: one value each, as HF's swiglu_limit).

    Raises:
        InputError: a missing key, a count, k-pool or iteration count below 1, a budget that is
            not a multiple of the k-pool, per-layer lists of the wrong length (block_count entries,
            MTP blocks included as llama.cpp writes them, or the main layers'), clamps that differ
            between layers.
    """
    f, L, I = r.f, hp.n_layer, Keys.Attention.Indexer
    r.fill(hp, "hc_count", "hc_sinkhorn_iters", "hc_eps")
    r.fill(hp, "idx_n_head", "idx_head_dim", "idx_top_k", "dsa_kpool")
    if hp.idx_top_k <= 0 or hp.idx_top_k % hp.dsa_kpool:
        raise r.bad(I.TOP_K, f"= {hp.idx_top_k} must be a positive multiple of {k(I.KPOOL, r.arch)} = {hp.dsa_kpool}")
    r.fill(hp, "dsa_select_tail")
    n_block = int(r.req(Keys.LLM.BLOCK_COUNT))    # L + nextn_predict_layers (an MTP block: glm.py)
    types = r.opt(I.TYPES, [True] * L)
    if len(types) not in (L, n_block):
        raise r.bad(I.TYPES, f"has {len(types)} entries, expected {L} (block_count - nextn_predict_layers)")
    hp.dsa_full = [int(t) for t in types[:L]]
    mla = [i for i, kd in enumerate(hp.layer_kinds) if kd == LayerKind.MLA]
    if mla and not hp.dsa_full[mla[0]]:
        raise r.bad(I.TYPES, f"marks layer {mla[0]}, the first attention layer, shared: a shared DSA layer reuses the "
                             f"choice of a full one before it")
    hp.dsa_k_norm_eps = float(r.opt(Keys.Attention.LAYERNORM_EPS, 1e-6))
    if not math.isfinite(hp.dsa_k_norm_eps) or hp.dsa_k_norm_eps < 0:
        raise r.bad(Keys.Attention.LAYERNORM_EPS, f"= {hp.dsa_k_norm_eps} is not a valid epsilon (the indexer key LayerNorm's)")
    if LayerKind.MLA in hp.layer_kinds and any(hp.dsa_full) and hp.mla_q_lora_rank <= 0:
        raise r.bad(Keys.KDA.Q_LORA_RANK, f"= {hp.mla_q_lora_rank}: the DSA indexer reads the q-LoRA latent (needs a rank > 0)")
    if not bool(r.opt(Keys.KDA.SAFE_GATE, True)):     # ours: the softplus gate (HF linear_lower_bound null)
        hp.kda_gate_lower_bound = 0.0
    # the KDA q / k l2-norm: llama.cpp's glm5-next graph uses HF's 1e-6 (glm5-next.cpp:738), not rms_eps
    hp.kda_l2_eps = float(r.opt(Keys.KDA.L2_NORM_EPS, 1e-6))
    for key, attr in ((Keys.KDA.SWIGLU_CLAMP_EXP, "swiglu_clamp_exp"), (Keys.KDA.SWIGLU_CLAMP_SHEXP, "swiglu_clamp_shexp")):
        v = f.get(k(key, r.arch), None)
        if v is None:
            continue
        v = v if isinstance(v, list) else [v] * L
        if len(v) not in (L, n_block) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in v):
            raise r.bad(key, f"= {str(v)[:60]} must list {L} non-negative numbers")
        if len(set(v)) > 1:
            raise r.bad(key, f"= {str(v)[:60]}: a clamp per layer is not supported (HF has one swiglu_limit)")
        setattr(hp, attr, float(v[0]))


def read_bailingmoe3_extras(r: KeyReader, hp: "HParams", spec: "ArchSpec") -> None:
    """What Ling 3 adds to the KDA family (docs/specs/kda-family.md §1.4, §2.1, §2.3): ssm_a holds
    +exp(A_log); ``kda.safe_gate`` false is the softplus gate (llama.cpp refuses it, D3; true: the
    bounded gate at ``kda.gate_lower_bound``); MLA rotates its dr dims (adjacent pairs at
    ``rope.freq_base``, scaled as ``rope.scaling.*`` says: :func:`read_rope_scaling`) and gates each head's output (``attn_gate``)."""
    hp.kda_a_positive = 1
    if not bool(r.opt(Keys.KDA.SAFE_GATE, True)):
        hp.kda_gate_lower_bound = 0.0
    elif LayerKind.KDA in hp.layer_kinds and not hp.kda_gate_lower_bound < 0:
        raise r.bad(Keys.KDA.GATE_LOWER_BOUND, f"= {hp.kda_gate_lower_bound}: the bounded gate (kda.safe_gate) needs "
                    f"a negative bound")
    if LayerKind.MLA in hp.layer_kinds:
        hp.attn_head_gate = 1
        hp.mla_rope = int(hp.mla_dr > 0)
        hp.rope_freq_base = float(r.opt(Keys.Rope.FREQ_BASE, 10000.0))
        if hp.mla_dr % 2 or not hp.rope_freq_base > 0:
            raise r.bad(Keys.Rope.FREQ_BASE, f"= {hp.rope_freq_base} (rope.dimension_count {hp.mla_dr}): RoPE needs an "
                        f"even dimension count and a positive base")
        if hp.mla_rope:
            read_rope_scaling(r, hp)     # rope.scaling.* of the MLA RoPE (mixer_mla.c)
