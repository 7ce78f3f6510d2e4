"""JambaForCausalLM -> GGUF ``jamba`` (llama.cpp's JambaModel names and keys).

llama.cpp's converter refuses the fixture (it wants a SentencePiece tokenizer); this one
takes the tokenizer from tokenizer.json (or tokenizer.model when there is one).

Glossary: D = hidden_size, d_inner = mamba_expand * D, N = mamba_d_state, K = mamba_d_conv,
R = mamba_dt_rank ("auto": ceil(D / 16)), E = num_experts, F = intermediate_size,
Hq / Hkv attention heads, hd = D / Hq (Jamba attention has no positional encoding).
Attention layers: i % attn_layer_period == attn_layer_offset; MoE layers:
i % expert_layer_period == expert_layer_offset (both turned into explicit lists).

HF tensor (numpy shape)                            GGUF tensor
model.embed_tokens.weight [V, D]                   token_embd.weight
layers.i.input_layernorm / pre_ff_layernorm [D]    blk.i.attn_norm / blk.i.ffn_norm
mamba.in_proj [2 d_inner, D]                       blk.i.ssm_in.weight
mamba.conv1d.weight [d_inner, 1, K] / bias         blk.i.ssm_conv1d.weight [d_inner, K] / .bias
mamba.x_proj [R + 2N, d_inner]                     blk.i.ssm_x.weight
mamba.dt_layernorm [R] / b_layernorm [N] / c_..    blk.i.ssm_dt_norm / ssm_b_norm / ssm_c_norm
mamba.dt_proj [d_inner, R] / bias                  blk.i.ssm_dt.weight / .bias
mamba.A_log [d_inner, N]                           blk.i.ssm_a = -exp(A_log)
mamba.D [d_inner] / out_proj [D, d_inner]          blk.i.ssm_d / ssm_out.weight
self_attn.{q,k,v,o}_proj                           blk.i.attn_{q,k,v,output}.weight (no reorder: no RoPE)
feed_forward.{gate,up,down}_proj (dense layers)    blk.i.ffn_{gate,up,down}.weight
feed_forward.router [E, D]                         blk.i.ffn_gate_inp.weight
feed_forward.experts.e.{gate,up}_proj [F, D]       blk.i.ffn_{gate,up}_exps [E, F, D] (stacked)
feed_forward.experts.e.down_proj [D, F]            blk.i.ffn_down_exps [E, D, F]
model.final_layernorm [D] / lm_head [V, D]         output_norm.weight / output.weight
"""
from __future__ import annotations

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.base import Family
from toolkit.convert.activation import ffn_act_kv, ssm_act_kv
from toolkit.convert.config_keys import ConfigKeys
from toolkit.convert.families.mamba import ceil_div
from toolkit.convert.plan import kv_arr_i32, kv_f32, kv_u32
from toolkit.errors import InputError
from toolkit.gguf_io import ARCH_JAMBA, Keys

_L = r"model\.layers\.\d+\."


class JambaFamily(Family):
    hf_archs = ("JambaForCausalLM",)
    hf_configs = ("JambaConfig",)
    config_keys = ConfigKeys.of(
        "vocab_size tie_word_embeddings hidden_size intermediate_size num_hidden_layers num_attention_heads "
        "num_key_value_heads rms_norm_eps max_position_embeddings num_experts_per_tok num_experts expert_layer_period "
        "expert_layer_offset attn_layer_period attn_layer_offset mamba_d_state mamba_d_conv mamba_expand mamba_dt_rank "
        "mamba_conv_bias mamba_proj_bias hidden_act",
        aliases={"num_local_experts": "num_experts"})
    families = ("Jamba",)
    arch = ARCH_JAMBA
    known = (
        r"model\.embed_tokens\.weight", r"model\.final_layernorm\.weight", r"lm_head\.weight",
        _L + r"(input_layernorm|pre_ff_layernorm)\.weight",
        _L + r"mamba\.(A_log|D|conv1d\.weight|conv1d\.bias|in_proj\.(weight|bias)|x_proj\.weight|dt_proj\.weight|"
             r"dt_proj\.bias|out_proj\.(weight|bias)|dt_layernorm\.weight|b_layernorm\.weight|c_layernorm\.weight)",
        _L + r"self_attn\.(q_proj|k_proj|v_proj|o_proj)\.weight",
        _L + r"feed_forward\.(gate_proj|up_proj|down_proj|router)\.weight",
        _L + r"feed_forward\.experts\.\d+\.(gate_proj|up_proj|down_proj)\.weight",
    )

    def read_hparams(self) -> None:
        c = self.cfg
        self.n_embd = c.int("hidden_size")
        self.n_layer = self.layer_count("num_hidden_layers")
        self.n_vocab = c.int("vocab_size")
        self.eps = c.eps("rms_norm_eps", default=1e-6)
        self.d_conv = c.int("mamba_d_conv", default=4)
        self.d_state = c.int("mamba_d_state", default=16)
        self.d_inner = c.int("mamba_expand", default=2) * self.n_embd
        r = c.d.get("mamba_dt_rank", "auto")
        self.dt_rank = ceil_div(self.n_embd, 16) if r in (None, "auto") else c.int("mamba_dt_rank")
        self.conv_bias = c.flag("mamba_conv_bias", True)
        self.proj_bias = c.flag("mamba_proj_bias", False)   # in_proj / out_proj biases (ssm_in / ssm_out .bias, ours)
        self.n_head = c.int("num_attention_heads")
        self.n_head_kv = c.int("num_key_value_heads", default=self.n_head)
        if self.n_embd % self.n_head or self.n_head % self.n_head_kv:
            raise InputError(f"{c.path}: num_attention_heads {self.n_head} / num_key_value_heads {self.n_head_kv} "
                             f"do not divide hidden_size {self.n_embd}")
        self.head_dim = self.n_embd // self.n_head
        self.n_ff = c.int("intermediate_size")
        self.n_expert = c.int("num_experts", default=1)
        self.n_expert_used = c.int("num_experts_per_tok", default=1)
        attn = c.layer_list(self.n_layer, types_key="", indices_key="attn_layer_indices",
                            period_key="attn_layer_period", offset_key="attn_layer_offset")
        if attn is None:
            raise InputError(f"{c.path}: no 'attn_layer_period'/'attn_layer_offset' (or 'attn_layer_indices')")
        self.attn_layers = attn
        moe = c.layer_list(self.n_layer, types_key="", indices_key="", period_key="expert_layer_period",
                           offset_key="expert_layer_offset")
        self.moe_layers = (moe or []) if self.n_expert > 1 else []
        if self.n_expert > 1 and not (0 < self.n_expert_used <= self.n_expert):
            raise InputError(f"{c.path}: num_experts_per_tok {self.n_expert_used} must be in [1, num_experts={self.n_expert}]")

    def n_vocab_rows(self) -> int:
        return self.n_vocab

    def build(self):
        self.read_hparams()
        c, key, p = self.cfg, self.key, self.plan
        attn, moe = set(self.attn_layers), set(self.moe_layers)
        p.kv += [
            kv_u32(key(Keys.LLM.BLOCK_COUNT), self.n_layer),
            kv_u32(key(Keys.LLM.CONTEXT_LENGTH), c.int("max_position_embeddings", default=2**20)),
            kv_u32(key(Keys.LLM.EMBEDDING_LENGTH), self.n_embd),
            kv_u32(key(Keys.LLM.FEED_FORWARD_LENGTH), self.n_ff),
            kv_u32(key(Keys.Attention.HEAD_COUNT), self.n_head),
            kv_arr_i32(key(Keys.Attention.HEAD_COUNT_KV), [self.n_head_kv if i in attn else 0 for i in range(self.n_layer)]),
            kv_u32(key(Keys.SSM.CONV_KERNEL), self.d_conv),
            kv_u32(key(Keys.SSM.INNER_SIZE), self.d_inner),
            kv_u32(key(Keys.SSM.STATE_SIZE), self.d_state),
            kv_u32(key(Keys.SSM.TIME_STEP_RANK), self.dt_rank),
            kv_f32(key(Keys.Attention.LAYERNORM_RMS_EPS), self.eps),
            kv_u32(key(Keys.LLM.EXPERT_COUNT), self.n_expert if moe else 0),
            kv_u32(key(Keys.LLM.EXPERT_USED_COUNT), self.n_expert_used if moe else 0),
            kv_arr_i32(key(Keys.Attention.LAYER_INDICES), sorted(attn)),   # ours
        ]
        # hidden_act: the Mamba conv's act (causal_conv1d_fn activation=) and the MLP / experts' gate
        # (ACT2FN[hidden_act]); the gate z's is F.silu, fixed.  Each key written only when not silu
        p.kv += ffn_act_kv(c.path, c.d, key) + ssm_act_kv(c.path, c.d, key)
        D, di, N, K, R, F = self.n_embd, self.d_inner, self.d_state, self.d_conv, self.dt_rank, self.n_ff
        hd = self.head_dim
        self.copy(tn(T.TOKEN_EMBD), "model.embed_tokens.weight", (self.n_vocab, D))
        for i in range(self.n_layer):
            pre = f"model.layers.{i}."
            self.copy(tn(T.ATTN_NORM, i), pre + "input_layernorm.weight", (D,))
            if i in attn:
                a = pre + "self_attn."
                self.copy(tn(T.ATTN_Q, i), a + "q_proj.weight", (self.n_head * hd, D))
                self.copy(tn(T.ATTN_K, i), a + "k_proj.weight", (self.n_head_kv * hd, D))
                self.copy(tn(T.ATTN_V, i), a + "v_proj.weight", (self.n_head_kv * hd, D))
                self.copy(tn(T.ATTN_OUT, i), a + "o_proj.weight", (D, self.n_head * hd))
            else:
                m = pre + "mamba."
                self.copy(tn(T.SSM_IN, i), m + "in_proj.weight", (2 * di, D))
                if self.proj_bias:
                    self.copy(tn(T.SSM_IN, i, ".bias"), m + "in_proj.bias", (2 * di,), why="mamba_proj_bias is true")
                self.copy(tn(T.SSM_CONV1D, i), m + "conv1d.weight", (di, 1, K), (di, K), note="squeeze [C,1,K] -> [C,K]")
                if self.conv_bias:
                    self.copy(tn(T.SSM_CONV1D, i, ".bias"), m + "conv1d.bias", (di,))
                self.copy(tn(T.SSM_X, i), m + "x_proj.weight", (R + 2 * N, di))
                self.copy(tn(T.SSM_DT_NORM, i), m + "dt_layernorm.weight", (R,))
                self.copy(tn(T.SSM_B_NORM, i), m + "b_layernorm.weight", (N,))
                self.copy(tn(T.SSM_C_NORM, i), m + "c_layernorm.weight", (N,))
                self.copy(tn(T.SSM_DT, i), m + "dt_proj.weight", (di, R))
                self.copy(tn(T.SSM_DT, i, ".bias"), m + "dt_proj.bias", (di,))
                self.copy(tn(T.SSM_A, i, ""), m + "A_log", (di, N), op="neg_exp", note="A = -exp(A_log)")
                self.copy(tn(T.SSM_D, i, ""), m + "D", (di,))
                self.copy(tn(T.SSM_OUT, i), m + "out_proj.weight", (D, di))
                if self.proj_bias:
                    self.copy(tn(T.SSM_OUT, i, ".bias"), m + "out_proj.bias", (D,), why="mamba_proj_bias is true")
            self.copy(tn(T.FFN_NORM, i), pre + "pre_ff_layernorm.weight", (D,))
            f = pre + "feed_forward."
            if i in moe:
                E = self.n_expert
                self.copy(tn(T.FFN_GATE_INP, i), f + "router.weight", (E, D))
                for out, w, shape in ((T.FFN_GATE_EXP, "gate_proj", (F, D)), (T.FFN_UP_EXP, "up_proj", (F, D)),
                                      (T.FFN_DOWN_EXP, "down_proj", (D, F))):
                    self.stack(tn(out, i), f + "experts.{e}." + w + ".weight", E, shape,
                               why=f"expert {{e}} of MoE layer {i}", note=f"{E} experts stacked")
            else:
                # Mini-Jamba stores a dense layer's FFN as experts.0 (llama.cpp renames it the same way)
                dense = f if self.has(f + "gate_proj.weight") else f + "experts.0."
                self.copy(tn(T.FFN_GATE, i), dense + "gate_proj.weight", (F, D))
                self.copy(tn(T.FFN_UP, i), dense + "up_proj.weight", (F, D))
                self.copy(tn(T.FFN_DOWN, i), dense + "down_proj.weight", (D, F))
        self.copy(tn(T.OUTPUT_NORM), "model.final_layernorm.weight", (D,))
        self.tied_output("model.embed_tokens.weight", "lm_head.weight", self.n_vocab, D, tie_default=False)
        self.check_leftovers()
        return p
