"""What the Kimi-Delta-Attention hybrids share (kimi_linear, glm5_next, bailing_hybrid): config
spellings, the KDA layer's tensors, MLA's tensors (with llama.cpp's k_b / v_b split), the
sigmoid-router MoE with shared experts, and the dense MLP (docs/specs/kda-family.md §1).

Sources: transformers 5.24 ``models/kimi_linear`` (configuration_kimi_linear.py: attribute map
and __post_init__; modeling_kimi_linear.py), llama.cpp 0c1e570 ``conversion/kimi_linear.py`` and
``conversion/base.py`` (names, keys, transformations followed).

Glossary: H hidden_size; KDA n heads of D, C = n D, K conv kernel; MLA h heads, dn / dr / dv
(qk_nope / qk_rope / v head dims), rq q_lora_rank, rkv kv_lora_rank; MoE E experts, Fe expert
width, S shared experts.

HF tensor (numpy shape)                          GGUF tensor
KDA  {q,k,v}_proj [C, H]                         blk.i.attn_{q,k,v}
     {q,k,v}_conv1d [C, 1, K]                    blk.i.ssm_conv1d_{q,k,v} [C, 1, K] (ne [K, 1, C, 1])
     f_a_proj [D, H], f_b_proj [C, D]            blk.i.ssm_f_a, blk.i.ssm_f_b (low rank; full rank: f_proj -> ssm_f_a [C, H])
     g_a_proj, g_b_proj                          blk.i.ssm_g_a, blk.i.ssm_g_b (likewise)
     b_proj [n, H]                               blk.i.ssm_beta
     A_log (n elements)                          blk.i.ssm_a = -exp(A_log) (shape as llama.cpp writes it)
     dt_bias [C]                                 blk.i.ssm_dt.bias
     o_norm [D]                                  blk.i.ssm_norm (no +1)
     o_proj [H, C]                               blk.i.attn_output
MLA  q_proj [h(dn+dr), H] or                     blk.i.attn_q
     q_a_proj [rq, H], q_a_layernorm [rq],       blk.i.attn_q_a, attn_q_a_norm,
     q_b_proj [h(dn+dr), rq]                     attn_q_b
     kv_a_proj_with_mqa [rkv+dr, H]              blk.i.attn_kv_a_mqa
     kv_a_layernorm [rkv]                        blk.i.attn_kv_a_norm
     kv_b_proj [h(dn+dv), rkv], per head         blk.i.attn_k_b [h, rkv, dn] (each head's k rows transposed)
       rows [k_nope (dn) | v (dv)]               blk.i.attn_v_b [h, dv, rkv]
     o_proj [H, h dv]                            blk.i.attn_output
     attention_bias: q_a_proj.bias [rq],          blk.i.attn_q_a.bias, attn_kv_a_mqa.bias, attn_output.bias
       kv_a_proj_with_mqa.bias [rkv+dr],          (HF's q_proj, q_b_proj and kv_b_proj have none;
       o_proj.bias [H]                            llama.cpp's MLA graphs load none of them)
MoE  gate.weight [E, H]                          blk.i.ffn_gate_inp (kept F32)
     gate.e_score_correction_bias [E]            blk.i.exp_probs_b.bias
     experts.e.w1 / w3 [Fe, H], w2 [H, Fe]       blk.i.ffn_{gate,up}_exps [E, Fe, H], ffn_down_exps [E, H, Fe]
     shared_experts.{gate,up,down}_proj          blk.i.ffn_{gate,up,down}_shexp
MLP  mlp.{gate,up,down}_proj (or HF 5.24's       blk.i.ffn_{gate,up,down}
     saved block_sparse_moe.{gate,up,down}_proj)
"""
from __future__ import annotations

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.plan import Segment, kv_arr_i32, kv_f32, kv_u32
from toolkit.convert.activation import ffn_act_kv, ssm_act_kv
from toolkit.errors import InputError
from toolkit.gguf_io import Keys

# every config spelling of one value: the checkpoint's and transformers' attribute-map name
# (configuration_kimi_linear.py attribute_map; bailing_hybrid's is the same)
# what the KDA families (kimi-linear, glm5-next, Ling 3) read of their configs, and refuse
KDA_READ = ("vocab_size hidden_size intermediate_size moe_intermediate_size num_hidden_layers num_attention_heads "
            "num_key_value_heads n_shared_experts routed_scaling_factor kv_lora_rank q_lora_rank qk_rope_head_dim "
            "v_head_dim qk_nope_head_dim n_group topk_group num_experts_per_tok norm_topk_prob max_position_embeddings "
            "rms_norm_eps mlp_layer_types layer_types hidden_act attention_bias")
KDA_REFUSED = {
}

SPELLINGS = {
    "n_routed_experts": ("num_local_experts", "num_experts", "n_routed_experts"),
    "num_experts_per_tok": ("num_experts_per_tok", "num_experts_per_token"),
    "n_shared_experts": ("n_shared_experts", "num_shared_experts"),
    "n_group": ("n_group", "num_expert_group"),
    "norm_topk_prob": ("norm_topk_prob", "moe_renormalize"),
    "max_position_embeddings": ("max_position_embeddings", "model_max_length"),
}


def spelled(cfg, what: str):
    """(the key found, its value) for the first spelling of ``what`` present, or (None, None)."""
    for n in SPELLINGS[what]:
        if cfg.d.get(n) is not None:
            return n, cfg.d[n]
    return None, None


def read_flag(cfg, what: str, default: bool) -> bool:
    key, v = spelled(cfg, what)
    if key is None:
        return default
    if not isinstance(v, bool):
        raise InputError(f"{cfg.path}: key {key!r} = {v!r} must be true or false")
    return v


def read_int(cfg, what: str, default=None, min_value: int = 1) -> int:
    key, _ = spelled(cfg, what)
    if key is None:
        if default is None:
            raise InputError(f"{cfg.path}: missing key {SPELLINGS[what][0]!r}")
        return default
    return cfg.int(key, min_value=min_value)


def layer_list(cfg, key: str, values: list, n_layer: int, allowed: tuple[str, ...]) -> list[str]:
    """``values`` checked as a list of n_layer entries from ``allowed`` (InputError naming ``key``)."""
    if not isinstance(values, list) or len(values) != n_layer:
        raise InputError(f"{cfg.path}: key {key!r} must list {n_layer} entries (num_hidden_layers)")
    for i, t in enumerate(values):
        if t not in allowed:
            raise InputError(f"{cfg.path}: {key}[{i}] = {t!r} is not one of {', '.join(allowed)}")
    return list(values)


def one_based_layers(cfg, lac: dict, n_layer: int) -> list[str]:
    """layer_types from ``linear_attn_config.full_attn_layers`` / ``kda_layers`` (1-based, as
    configuration_kimi_linear.py reads them); each layer must be named exactly once."""
    types: list[str | None] = [None] * n_layer
    for key, t in (("full_attn_layers", "full_attention"), ("kda_layers", "linear_attention")):
        lst = lac.get(key)
        if not isinstance(lst, list):
            raise InputError(f"{cfg.path}: linear_attn_config.{key} must be a list of 1-based layer numbers")
        for v in lst:
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= n_layer:
                raise InputError(f"{cfg.path}: linear_attn_config.{key} names layer {v!r}, not in 1..{n_layer}")
            if types[v - 1] is not None:
                raise InputError(f"{cfg.path}: linear_attn_config names layer {v} twice")
            types[v - 1] = t
    missing = [i + 1 for i, t in enumerate(types) if t is None]
    if missing:
        raise InputError(f"{cfg.path}: linear_attn_config names neither full_attn_layers nor kda_layers for layer {missing[0]}")
    return types   # type: ignore[return-value]


class KDAMixin:
    """Tensor helpers for a :class:`toolkit.convert.base.Family` subclass; the family reads its
    hparams into: n_embd, kda_n_head, kda_head_dim, d_conv; n_head, dn, dr, dv, q_lora_rank,
    kv_lora_rank; n_expert, n_ff_exp, n_shared, n_ff (and self.mlp_name for the dense MLP)."""

    # ---- config / keys ----
    def read_kda_dims(self, c, n_head_default: int) -> dict:
        """self.kda_head_dim / kda_n_head / d_conv from ``linear_attn_config`` (head_dim, num_heads,
        short_conv_kernel_size), which wins over the flat ``linear_head_dim`` / ``linear_num_heads``
        / ``linear_conv_kernel_dim`` (configuration_kimi_linear.py __post_init__); returns
        linear_attn_config ({} when absent)."""
        lac = c.d.get("linear_attn_config") or {}
        if not isinstance(lac, dict):
            raise InputError(f"{c.path}: key 'linear_attn_config' must be an object")

        def lin(sub: str, flat: str, default: int) -> int:
            v = lac.get(sub)
            if v is None:
                return c.int(flat, default=default)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"{c.path}: linear_attn_config.{sub} = {v!r} must be a positive integer")
            return v
        self.kda_head_dim = lin("head_dim", "linear_head_dim", 128)
        self.kda_n_head = lin("num_heads", "linear_num_heads", n_head_default)
        self.d_conv = lin("short_conv_kernel_size", "linear_conv_kernel_dim", 4)
        return lac

    def kda_leading_keys(self, ctx: int, rope_base: float | None = None, group_count: bool = True) -> list:
        """The keys every KDA family writes first, in llama.cpp's order: block_count ..
        expert_gating_func (sigmoid); rope.freq_base after head_count_kv when given (bailingmoe3),
        expert_group_count only with ``group_count`` (kimi-linear leaves it to a key written last).
        head_count_kv per layer: 0 on KDA layers, 1 on attention layers."""
        key = self.key
        kv = [
            kv_u32(key(Keys.LLM.BLOCK_COUNT), self.n_layer),
            kv_u32(key(Keys.LLM.CONTEXT_LENGTH), ctx),
            kv_u32(key(Keys.LLM.EMBEDDING_LENGTH), self.n_embd),
            kv_u32(key(Keys.LLM.FEED_FORWARD_LENGTH), self.n_ff),
            kv_u32(key(Keys.Attention.HEAD_COUNT), self.n_head),
            kv_arr_i32(key(Keys.Attention.HEAD_COUNT_KV), [0 if t == "linear_attention" else 1 for t in self.layer_types]),
        ]
        if rope_base is not None:
            kv.append(kv_f32(key(Keys.Rope.FREQ_BASE), rope_base))
        kv += [
            kv_f32(key(Keys.Attention.LAYERNORM_RMS_EPS), self.eps),
            kv_u32(key(Keys.LLM.EXPERT_COUNT), self.n_expert),
            kv_u32(key(Keys.LLM.EXPERT_USED_COUNT), self.n_expert_used),
        ]
        if group_count:
            kv.append(kv_u32(key(Keys.LLM.EXPERT_GROUP_COUNT), self.n_group))
        kv += [
            kv_u32(key(Keys.LLM.EXPERT_GROUP_USED_COUNT), self.topk_group),
            kv_u32(key(Keys.LLM.EXPERT_GATING_FUNC), 2),   # sigmoid
        ]
        # hidden_act: the q / k / v short convs' act (causal_conv1d_fn activation=) and the MLP / experts'
        # gate (ACT2FN[hidden_act]); the gated norm's is "sigmoid", fixed.  Each key written only when not silu
        kv += ffn_act_kv(self.cfg.path, self.cfg.d, key) + ssm_act_kv(self.cfg.path, self.cfg.d, key)
        return kv

    # ---- KDA ----
    def kda_tensors(self, i: int, a: str, low_rank: bool = True, a_log_shape: tuple[int, ...] | None = None,
                    a_log_op: str = "neg_exp", o_name: str = "o_proj") -> None:
        """Layer i's KDA tensors from prefix ``a`` (e.g. ``model.layers.i.self_attn.``).
        a_log_shape: the GGUF (numpy order) shape of ssm_a (kimi: (1, 1, n, 1), llama.cpp ne [1, n, 1, 1]);
        a_log_op: "neg_exp" (kimi-linear, glm5-next: -exp(A_log)) or "exp" (bailingmoe3: +exp(A_log));
        o_name: the output projection's name (bailing_hybrid: ``dense``)."""
        H, n, D, K = self.n_embd, self.kda_n_head, self.kda_head_dim, self.d_conv
        C = n * D
        why = "linear_attn_config.num_heads x head_dim"
        for p, out in (("q", T.ATTN_Q), ("k", T.ATTN_K), ("v", T.ATTN_V)):
            self.copy(tn(out, i), a + f"{p}_proj.weight", (C, H), why=why)
        for p, out in (("q", T.SSM_CONV1D_Q), ("k", T.SSM_CONV1D_K), ("v", T.SSM_CONV1D_V)):
            self.copy(tn(out, i), a + f"{p}_conv1d.weight", (C, 1, K), out_shape=(1, C, 1, K),
                      why="short_conv_kernel_size", note="(C, 1, K) -> ne [K, 1, C, 1]")
        if low_rank:
            self.copy(tn(T.SSM_F_A, i), a + "f_a_proj.weight", (D, H), why="head_dim")
            self.copy(tn(T.SSM_F_B, i), a + "f_b_proj.weight", (C, D), why=why)
            self.copy(tn(T.SSM_G_A, i), a + "g_a_proj.weight", (D, H), why="head_dim")
            self.copy(tn(T.SSM_G_B, i), a + "g_b_proj.weight", (C, D), why=why)
        else:
            self.copy(tn(T.SSM_F_A, i), a + "f_proj.weight", (C, H), why=why)
            self.copy(tn(T.SSM_G_A, i), a + "g_proj.weight", (C, H), why=why)
        self.copy(tn(T.SSM_BETA, i), a + "b_proj.weight", (n, H), why="linear_attn_config.num_heads")
        t = self.hf.tensors.get(a + "A_log")
        if t is not None and t.n_elements != n:
            raise InputError(f"{t.path}: tensor {a + 'A_log'!r} has shape {list(t.shape)}, config.json implies {n} "
                             f"elements (linear_attn_config.num_heads)")
        self.copy(tn(T.SSM_A, i, suffix=""), a + "A_log", t.shape if t is not None else (n,),
                  out_shape=a_log_shape or (n,), op=a_log_op, note="-exp(A_log)" if a_log_op == "neg_exp" else "exp(A_log)")
        self.copy(tn(T.SSM_DT, i, suffix=".bias"), a + "dt_bias", (C,), why="one bias per channel")
        self.copy(tn(T.SSM_NORM, i), a + "o_norm.weight", (D,), why="head_dim")
        self.copy(tn(T.ATTN_OUT, i), a + o_name + ".weight", (H, C), why=why)

    # ---- MLA ----
    def mla_tensors(self, i: int, a: str, o_name: str = "o_proj", q_scale: float = 1.0) -> None:
        """Layer i's MLA tensors; kv_b_proj split per head into attn_k_b (transposed) and attn_v_b,
        as llama.cpp's converter does (``k_b.transpose(1, 2)``).  ``q_scale`` != 1: attn_q /
        attn_q_b's rows times it (a float32 product), so every score q . k is (Ling 3's yarn
        ``mscale_all_dim`` softmax factor, which llama.cpp's graph has no key for).  HF ``attention_bias``
        (KimiLinearAttention, Glm5NextTextAttention, BailingHybridAttention): q_a_proj's (q-LoRA only),
        kv_a_proj_with_mqa's and the output projection's biases as blk.i.attn_q_a.bias [rq],
        attn_kv_a_mqa.bias [rkv + dr], attn_output.bias [H]."""
        H, h, dn, dr, dv, rkv = self.n_embd, self.n_head, self.dn, self.dr, self.dv, self.kv_lora_rank
        scales = (float(q_scale),) if q_scale != 1.0 else ()
        note = f"rows x {q_scale:.9g} (the softmax scale's mscale_all_dim factor)" if scales else ""
        if self.cfg.flag("attention_bias", False):
            why = "attention_bias is true"
            if self.q_lora_rank is not None:
                self.copy(tn(T.ATTN_Q_A, i, ".bias"), a + "q_a_proj.bias", (self.q_lora_rank,), why=why)
            self.copy(tn(T.ATTN_KV_A_MQA, i, ".bias"), a + "kv_a_proj_with_mqa.bias", (rkv + dr,), why=why)
            self.copy(tn(T.ATTN_OUT, i, ".bias"), a + o_name + ".bias", (H,), why=why)
        if self.q_lora_rank is None:
            t = self.take(a + "q_proj.weight", (h * (dn + dr), H),
                          why="num_attention_heads x (qk_nope_head_dim + qk_rope_head_dim)")
            self.emit(tn(T.ATTN_Q, i), (h * (dn + dr), H), [Segment(t, 0, h * (dn + dr), scales=scales)], note=note)
        else:
            rq = self.q_lora_rank
            self.copy(tn(T.ATTN_Q_A, i), a + "q_a_proj.weight", (rq, H), why="q_lora_rank")
            self.copy(tn(T.ATTN_Q_A_NORM, i), a + "q_a_layernorm.weight", (rq,), why="q_lora_rank")
            t = self.take(a + "q_b_proj.weight", (h * (dn + dr), rq),
                          why="num_attention_heads x (qk_nope_head_dim + qk_rope_head_dim), q_lora_rank")
            self.emit(tn(T.ATTN_Q_B, i), (h * (dn + dr), rq), [Segment(t, 0, h * (dn + dr), scales=scales)], note=note)
        kva = self.hf.tensors.get(a + "kv_a_proj_with_mqa.weight")
        if kva is not None and kva.shape != (rkv + dr, H):
            raise InputError(f"{kva.path}: tensor {a + 'kv_a_proj_with_mqa.weight'!r} has shape {list(kva.shape)}, "
                             f"config.json implies {[rkv + dr, H]} (kv_lora_rank {rkv} + qk_rope_head_dim {dr})")
        self.copy(tn(T.ATTN_KV_A_MQA, i), a + "kv_a_proj_with_mqa.weight", (rkv + dr, H))
        self.copy(tn(T.ATTN_KV_A_NORM, i), a + "kv_a_layernorm.weight", (rkv,), why="kv_lora_rank")
        kvb = self.take(a + "kv_b_proj.weight", (h * (dn + dv), rkv),
                        why="num_attention_heads x (qk_nope_head_dim + v_head_dim), kv_lora_rank")
        self.emit(tn(T.ATTN_K_B, i), (h, rkv, dn),
                  [Segment(kvb, hh * (dn + dv), rkv, tblock=(dn, rkv)) for hh in range(h)],
                  note="kv_b_proj's k_nope rows per head, transposed")
        self.emit(tn(T.ATTN_V_B, i), (h, dv, rkv),
                  [Segment(kvb, hh * (dn + dv) + dn, dv) for hh in range(h)], note="kv_b_proj's v rows per head")
        self.copy(tn(T.ATTN_OUT, i), a + o_name + ".weight", (H, h * dv), why="num_attention_heads x v_head_dim")

    # ---- FFN ----
    def dense_mlp(self, i: int, prefixes: tuple[str, ...]) -> None:
        """The dense SwiGLU from the first prefix that has it (published ``mlp.``, or HF 5.24's
        saved ``block_sparse_moe.``)."""
        H, F = self.n_embd, self.n_ff
        pre = next((p for p in prefixes if self.has(p + "gate_proj.weight")), prefixes[0])
        self.copy(tn(T.FFN_GATE, i), pre + "gate_proj.weight", (F, H), why="intermediate_size (dense layer)")
        self.copy(tn(T.FFN_UP, i), pre + "up_proj.weight", (F, H), why="intermediate_size (dense layer)")
        self.copy(tn(T.FFN_DOWN, i), pre + "down_proj.weight", (H, F), why="intermediate_size (dense layer)")

    def moe(self, i: int, f: str, bias_name: str = "gate.e_score_correction_bias",
            expert_names: tuple[str, str, str] = ("w1", "w3", "w2")) -> None:
        """Router (F32), its choice bias, the routed experts stacked, the shared experts."""
        H, E, Fe = self.n_embd, self.n_expert, self.n_ff_exp
        self.copy(tn(T.FFN_GATE_INP, i), f + "gate.weight", (E, H), why="num_experts")
        self.copy(tn(T.FFN_EXP_PROBS_B, i, suffix=".bias"), f + bias_name, (E,), why="num_experts")
        for out, w, shape in ((T.FFN_GATE_EXP, expert_names[0], (Fe, H)), (T.FFN_UP_EXP, expert_names[1], (Fe, H)),
                              (T.FFN_DOWN_EXP, expert_names[2], (H, Fe))):
            self.stack(tn(out, i), f + "experts.{e}." + w + ".weight", E, shape,
                       why=f"expert {{e}} of layer {i}, moe_intermediate_size", note=f"{E} experts stacked")
        if self.n_shared:
            Fs = self.n_ff_shexp
            s = f + "shared_experts."
            self.copy(tn(T.FFN_GATE_SHEXP, i), s + "gate_proj.weight", (Fs, H), why="shared expert width")
            self.copy(tn(T.FFN_UP_SHEXP, i), s + "up_proj.weight", (Fs, H), why="shared expert width")
            self.copy(tn(T.FFN_DOWN_SHEXP, i), s + "down_proj.weight", (H, Fs), why="shared expert width")
