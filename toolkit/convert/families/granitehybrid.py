"""BambaForCausalLM and GraniteMoeHybridForCausalLM (Granite 4.0-H) -> GGUF ``granitehybrid``.

Glossary: D = hidden_size, L = layers, V = vocab rows, H = mamba_n_heads, P = mamba_d_head,
d_inner = mamba_expand * D = H * P, G = mamba_n_groups, N = mamba_d_state, K = mamba_d_conv;
attention: Hq = num_attention_heads, Hkv = num_key_value_heads, hd = D / Hq,
rot = hd * partial_rotary_factor; FFN: F = intermediate_size, Fs = shared_intermediate_size,
E = num_local_experts.

HF tensor (numpy shape)                               GGUF tensor
model.embed_tokens.weight [V, D]                      token_embd.weight
layers.i.input_layernorm.weight [D]                   blk.i.attn_norm.weight
layers.i.pre_ff_layernorm / post_attention_layernorm  blk.i.ffn_norm.weight
recurrent layer: layers.i.mamba.*                     blk.i.ssm_* (as mamba2; mamba_proj_bias: ssm_in / ssm_out .bias,
                                                      ours; mamba_conv_bias false: ssm_conv1d.bias zeros)
attention layer: self_attn.q_proj [Hq hd, D]          blk.i.attn_q.weight  (rows reordered, below)
                 self_attn.k_proj [Hkv hd, D]         blk.i.attn_k.weight  (rows reordered)
                 self_attn.v_proj / o_proj            blk.i.attn_v / attn_output
                 attention_bias: {q,k,v,o}_proj.bias  blk.i.attn_{q,k,v,output}.bias (q / k as their rows)
Bamba FFN: feed_forward.{gate,up,down}_proj           blk.i.ffn_{gate,up,down}.weight (mlp_bias: and .bias)
Granite MoE: block_sparse_moe.router.layer [E, D]     blk.i.ffn_gate_inp.weight
             block_sparse_moe.input_linear [E, 2F, D] blk.i.ffn_gate_exps [E,F,D] (rows :F) + ffn_up_exps (rows F:)
             block_sparse_moe.output_linear [E, D, F] blk.i.ffn_down_exps
             shared_mlp.input_linear [2Fs, D]         blk.i.ffn_gate_shexp + ffn_up_shexp (dense model: ffn_gate + ffn_up)
             shared_mlp.output_linear [D, Fs]         blk.i.ffn_down_shexp (dense model: ffn_down)
model.final_layernorm / model.norm [D]                output_norm.weight
lm_head.weight [V, D]                                 output.weight (omitted when tied)

RoPE: HF rotates halves (i, i + rot/2) within the first rot dims of each head; llama.cpp runs
granitehybrid with NORM RoPE (adjacent pairs) on the first ``rope.dimension_count`` dims.  So
q/k rows are reordered within the first rot rows of every head ((i, i+rot/2) -> (2i, 2i+1))
and ``rope.dimension_count = rot``.  llama.cpp's converter reorders over the whole head and
writes the whole head dim, which is wrong for partial_rotary_factor < 1 (Bamba).
Granite 4.0-H without RoPE (position_embedding_type != "rope") gets
``rope.scaling.finetuned = false`` and q/k rows as HF stores them (there is no rotation to
match; the data then equals llama.cpp's file, whose converter also leaves them, by accident).
"""
from __future__ import annotations

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.base import Family, head_perm
from toolkit.convert.activation import ffn_act_kv, ssm_act_kv
from toolkit.convert.config_keys import ConfigKeys
from toolkit.convert.families.mamba2 import dt_limit_kv, emit_mamba2_mixer
from toolkit.convert.rope_scaling import SCALED_ROPE_TYPES, SCALED_WHY, rope_scaling_kv
from toolkit.convert.plan import Segment, kv_arr_i32, kv_bool, kv_f32, kv_u32
from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import ARCH_GRANITE_HYBRID, Keys

_L = r"model\.layers\.\d+\."


class GraniteHybridFamily(Family):
    hf_archs = ("BambaForCausalLM", "GraniteMoeHybridForCausalLM")
    families = ("Bamba", "Granite 4.0-H")
    arch = ARCH_GRANITE_HYBRID
    hf_configs = ("BambaConfig", "GraniteMoeHybridConfig")
    config_keys = ConfigKeys.of(
        "vocab_size tie_word_embeddings hidden_size intermediate_size num_hidden_layers num_attention_heads "
        "num_key_value_heads rms_norm_eps max_position_embeddings attn_layer_indices layer_types mamba_n_heads "
        "mamba_d_head mamba_n_groups mamba_d_state mamba_d_conv mamba_expand rope_parameters embedding_multiplier "
        "logits_scaling residual_multiplier attention_multiplier num_local_experts num_experts_per_tok "
        "shared_intermediate_size position_embedding_type attention_bias mlp_bias mamba_proj_bias mamba_conv_bias time_step_limit "
        "hidden_act",
        rope_types=SCALED_ROPE_TYPES, rope_why=SCALED_WHY, aliases={"layers_block_type": "layer_types"})
    known = (
        r"model\.embed_tokens\.weight", r"model\.(final_layernorm|norm)\.weight", r"lm_head\.weight",
        _L + r"(input_layernorm|pre_ff_layernorm|post_attention_layernorm)\.weight",
        _L + r"mamba\.(A_log|D|dt_bias|conv1d\.weight|conv1d\.bias|in_proj\.(weight|bias)|norm\.weight|out_proj\.(weight|bias))",
        _L + r"self_attn\.(q_proj|k_proj|v_proj|o_proj)\.(weight|bias)",
        _L + r"feed_forward\.(gate_proj|up_proj|down_proj)\.(weight|bias)",
        _L + r"block_sparse_moe\.(router\.layer|input_linear|output_linear)\.weight",
        _L + r"shared_mlp\.(input_linear|output_linear)\.weight",
    )

    def read_hparams(self) -> None:
        c = self.cfg
        self.bamba = self.hf.arch_name == "BambaForCausalLM"
        self.n_embd = c.int("hidden_size")
        self.n_layer = self.layer_count("num_hidden_layers")
        self.n_vocab = c.int("vocab_size")
        self.eps = c.eps("rms_norm_eps", default=1e-5)
        # biases (BambaMixer / GraniteMoeHybridMambaLayer, the attention, BambaMLP; Granite's
        # shared_mlp has none whatever mlp_bias says)
        self.conv_bias = c.flag("mamba_conv_bias", True)
        self.proj_bias = c.flag("mamba_proj_bias", False)
        self.attn_bias = c.flag("attention_bias", False)
        self.mlp_bias = self.bamba and c.flag("mlp_bias", False)
        # ---- Mamba-2 mixer (keys prefixed mamba_ in config.json) ----
        self.d_conv = c.int("mamba_d_conv", default=4)
        self.d_state = c.int("mamba_d_state", default=128)
        self.n_group = c.int("mamba_n_groups", default=1)
        self.ssm_n_head = c.int("mamba_n_heads")
        expand = c.float("mamba_expand", default=2)
        if expand <= 0:
            raise InputError(f"{c.path}: key 'mamba_expand' = {expand} must be positive")
        self.d_inner = int(expand * self.n_embd)
        dh = c.d.get("mamba_d_head", "auto")
        self.ssm_head_dim = self.d_inner // self.ssm_n_head if dh in (None, "auto") else c.int("mamba_d_head")
        if self.ssm_n_head * self.ssm_head_dim != self.d_inner:
            raise InputError(f"{c.path}: mamba_n_heads {self.ssm_n_head} x mamba_d_head {self.ssm_head_dim} != "
                             f"mamba_expand x hidden_size = {self.d_inner}")
        if self.ssm_n_head % self.n_group:
            raise InputError(f"{c.path}: mamba_n_groups {self.n_group} does not divide mamba_n_heads {self.ssm_n_head}")
        # ---- which layers are attention ----
        attn = c.layer_list(self.n_layer, indices_key="attn_layer_indices", period_key="attn_layer_period",
                            offset_key="attn_layer_offset")
        if attn is None:
            raise InputError(f"{c.path}: no 'layer_types', 'attn_layer_indices' or 'attn_layer_period'/'attn_layer_offset': "
                             f"cannot tell attention layers from Mamba layers")
        self.attn_layers = attn
        # ---- attention ----
        self.n_head = c.int("num_attention_heads")
        self.n_head_kv = c.int("num_key_value_heads", default=self.n_head)
        if self.n_embd % self.n_head:
            raise InputError(f"{c.path}: num_attention_heads {self.n_head} does not divide hidden_size {self.n_embd}")
        self.head_dim = self.n_embd // self.n_head
        if c.d.get("head_dim") not in (None, self.head_dim):
            raise UnsupportedError(f"{c.path}: head_dim {c.d['head_dim']} != hidden_size / num_attention_heads = {self.head_dim}")
        if self.n_head % self.n_head_kv:
            raise InputError(f"{c.path}: num_key_value_heads {self.n_head_kv} does not divide num_attention_heads {self.n_head}")
        self.use_rope = self.bamba or c.d.get("position_embedding_type") == "rope"
        self.rope_theta = c.rope_theta(10000.0)
        prf = c.rope("partial_rotary_factor", 1.0)
        if not isinstance(prf, (int, float)) or not (0 < prf <= 1):
            raise InputError(f"{c.path}: partial_rotary_factor = {prf!r} must be in (0, 1]")
        self.n_rot = int(self.head_dim * prf) if self.use_rope else self.head_dim
        if self.n_rot % 2:
            raise InputError(f"{c.path}: head_dim {self.head_dim} x partial_rotary_factor {prf} = {self.n_rot} is odd")
        # ---- FFN ----
        self.n_ff = c.int("intermediate_size")
        self.n_expert = 0 if self.bamba else c.int("num_local_experts", default=0, min_value=0)
        self.n_expert_used = c.int("num_experts_per_tok", default=0, min_value=0) if self.n_expert else 0
        self.n_ff_shexp = 0 if self.bamba else c.int("shared_intermediate_size")
        if self.n_expert and not (0 < self.n_expert_used <= self.n_expert):
            raise InputError(f"{c.path}: num_experts_per_tok {self.n_expert_used} must be in [1, num_local_experts={self.n_expert}]")

    def n_vocab_rows(self) -> int:
        return self.n_vocab

    def build(self):
        self.read_hparams()
        c, key, p = self.cfg, self.key, self.plan
        attn = set(self.attn_layers)
        ssm_layers = [i for i in range(self.n_layer) if i not in attn]
        if not ssm_layers:
            raise UnsupportedError(f"{c.path}: every layer is attention (a plain Granite model); only hybrids are supported")
        dense_ff = self.n_ff if (self.bamba or self.n_expert) else self.n_ff_shexp
        # llama.cpp's GraniteHybridModel keys (its order), with head_count_kv from the real layer list
        p.kv += [
            kv_u32(key(Keys.LLM.BLOCK_COUNT), self.n_layer),
            kv_u32(key(Keys.LLM.CONTEXT_LENGTH), c.int("max_position_embeddings", default=2**20) if self.use_rope else 2**20),
            kv_u32(key(Keys.LLM.EMBEDDING_LENGTH), self.n_embd),
            kv_u32(key(Keys.LLM.FEED_FORWARD_LENGTH), dense_ff),
            kv_u32(key(Keys.Attention.HEAD_COUNT), self.n_head),
            kv_arr_i32(key(Keys.Attention.HEAD_COUNT_KV), [self.n_head_kv if i in attn else 0 for i in range(self.n_layer)]),
            kv_f32(key(Keys.Rope.FREQ_BASE), self.rope_theta),
            kv_f32(key(Keys.Attention.LAYERNORM_RMS_EPS), self.eps),
        ]
        if self.n_expert:
            p.kv += [kv_u32(key(Keys.LLM.EXPERT_COUNT), self.n_expert),
                     kv_u32(key(Keys.LLM.EXPERT_USED_COUNT), self.n_expert_used)]
        p.kv += [kv_u32(key(Keys.LLM.VOCAB_SIZE), self.n_vocab),
                 kv_u32(key(Keys.Rope.DIMENSION_COUNT), self.n_rot)]
        # Granite multipliers: written when present and non-zero, as llama.cpp does
        for hf_key, gguf_key in (("attention_multiplier", Keys.Attention.SCALE), ("embedding_multiplier", Keys.LLM.EMBEDDING_SCALE),
                                 ("residual_multiplier", Keys.LLM.RESIDUAL_SCALE), ("logits_scaling", Keys.LLM.LOGIT_SCALE)):
            if not self.bamba and c.d.get(hf_key):
                p.kv.append(kv_f32(key(gguf_key), c.float(hf_key)))
        if self.n_expert and self.n_ff_shexp:
            p.kv.append(kv_u32(key(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH), self.n_ff_shexp))
        p.kv += [
            kv_u32(key(Keys.SSM.CONV_KERNEL), self.d_conv),
            kv_u32(key(Keys.SSM.STATE_SIZE), self.d_state),
            kv_u32(key(Keys.SSM.GROUP_COUNT), self.n_group),
            kv_u32(key(Keys.SSM.INNER_SIZE), self.d_inner),
            kv_u32(key(Keys.SSM.TIME_STEP_RANK), self.ssm_n_head),
            kv_bool(key(Keys.Rope.SCALING_FINETUNED), self.use_rope),   # absent would read as RoPE on
            # ours: explicit layer list and Mamba-2 head dim
            kv_arr_i32(key(Keys.Attention.LAYER_INDICES), sorted(attn)),
            kv_u32(key(Keys.SSM.HEAD_DIM), self.ssm_head_dim),
        ] + dt_limit_kv(self)
        if self.use_rope:     # HF runs ROPE_INIT_FUNCTIONS only with its rotary embedding (not "nope")
            p.kv += rope_scaling_kv(c, key)
        # hidden_act: the Mamba conv's act (causal_conv1d_fn activation=) and the MLP / experts' gate
        # (ACT2FN[hidden_act]); the gated norm's is F.silu, fixed.  Each key written only when not silu
        p.kv += ffn_act_kv(c.path, c.d, key) + ssm_act_kv(c.path, c.d, key)

        D = self.n_embd
        self.copy(tn(T.TOKEN_EMBD), "model.embed_tokens.weight", (self.n_vocab, D))
        ffn_norm = "pre_ff_layernorm" if self.bamba else "post_attention_layernorm"
        for i in range(self.n_layer):
            pre = f"model.layers.{i}."
            self.copy(tn(T.ATTN_NORM, i), pre + "input_layernorm.weight", (D,))
            if i in attn:
                self._attention(i, pre + "self_attn.")
            else:
                emit_mamba2_mixer(self, i, pre + "mamba.", D, self.d_inner, self.d_state, self.n_group,
                                  self.ssm_n_head, self.d_conv, self.conv_bias, self.proj_bias)
            self.copy(tn(T.FFN_NORM, i), pre + ffn_norm + ".weight", (D,))
            if self.bamba:
                f = pre + "feed_forward."
                self.copy(tn(T.FFN_GATE, i), f + "gate_proj.weight", (self.n_ff, D))
                self.copy(tn(T.FFN_UP, i), f + "up_proj.weight", (self.n_ff, D))
                self.copy(tn(T.FFN_DOWN, i), f + "down_proj.weight", (D, self.n_ff))
                if self.mlp_bias:   # llama.cpp's ffn_{gate,up,down}.bias (build_ffn's optional biases)
                    for out, src, n in ((T.FFN_GATE, "gate_proj", self.n_ff), (T.FFN_UP, "up_proj", self.n_ff),
                                        (T.FFN_DOWN, "down_proj", D)):
                        self.copy(tn(out, i, ".bias"), f + src + ".bias", (n,), why="mlp_bias is true")
            else:
                self._granite_ffn(i, pre)
        self.copy(tn(T.OUTPUT_NORM), "model.final_layernorm.weight" if self.bamba else "model.norm.weight", (D,))
        self.tied_output("model.embed_tokens.weight", "lm_head.weight", self.n_vocab, D,
                         tie_default=False)
        self.check_leftovers()
        return p

    def _attention(self, i: int, a: str) -> None:
        D, hd = self.n_embd, self.head_dim
        if self.use_rope:
            note = f"rows reordered for NORM RoPE within the first {self.n_rot} of {hd} dims of each head"
            pq, pk = head_perm(self.n_head, hd, self.n_rot), head_perm(self.n_head_kv, hd, self.n_rot)
        else:
            note, pq, pk = "", None, None
        self.copy(tn(T.ATTN_Q, i), a + "q_proj.weight", (self.n_head * hd, D), perm=pq, block=hd, note=note)
        self.copy(tn(T.ATTN_K, i), a + "k_proj.weight", (self.n_head_kv * hd, D), perm=pk, block=hd, note=note)
        self.copy(tn(T.ATTN_V, i), a + "v_proj.weight", (self.n_head_kv * hd, D))
        self.copy(tn(T.ATTN_OUT, i), a + "o_proj.weight", (D, self.n_head * hd))
        if self.attn_bias:   # llama.cpp's bq / bk / bv / bo; q / k elements in the order of the weights' rows
            for out, src, n, perm in ((T.ATTN_Q, "q_proj", self.n_head * hd, pq), (T.ATTN_K, "k_proj", self.n_head_kv * hd, pk),
                                      (T.ATTN_V, "v_proj", self.n_head_kv * hd, None), (T.ATTN_OUT, "o_proj", D, None)):
                self.copy(tn(out, i, ".bias"), a + src + ".bias", (n,), why="attention_bias is true").col_perm = perm

    def _split_rows(self, out_a: str, out_b: str, src: str, n_mat: int, n_rows: int, D: int, stacked: bool) -> None:
        """Split each of the ``n_mat`` [2 n_rows, D] matrices of ``src`` (``stacked``: a
        [n_mat, 2 n_rows, D] tensor, else one [2 n_rows, D] matrix) into its first and second
        halves of rows (JetMoE's fused w1|w3 = gate|up, as llama.cpp's GraniteMoeModel splits it)."""
        shape = (n_mat, 2 * n_rows, D) if stacked else (2 * n_rows, D)
        t = self.take(src, shape)
        out_shape = (n_mat, n_rows, D) if stacked else (n_rows, D)
        for out, half in ((out_a, 0), (out_b, 1)):
            segs = [Segment(t, e * 2 * n_rows + half * n_rows, n_rows) for e in range(n_mat)]
            self.emit(out, out_shape, segs, note=f"{'first' if half == 0 else 'second'} half of the rows of input_linear")

    def _granite_ffn(self, i: int, pre: str) -> None:
        D = self.n_embd
        if self.n_expert:
            E, F = self.n_expert, self.n_ff
            m = pre + "block_sparse_moe."
            self.copy(tn(T.FFN_GATE_INP, i), m + "router.layer.weight", (E, D))
            self._split_rows(tn(T.FFN_GATE_EXP, i), tn(T.FFN_UP_EXP, i), m + "input_linear.weight", E, F, D, stacked=True)
            self.copy(tn(T.FFN_DOWN_EXP, i), m + "output_linear.weight", (E, D, F))
            gate, up, down = T.FFN_GATE_SHEXP, T.FFN_UP_SHEXP, T.FFN_DOWN_SHEXP
        else:
            gate, up, down = T.FFN_GATE, T.FFN_UP, T.FFN_DOWN
        Fs = self.n_ff_shexp
        s = pre + "shared_mlp."
        self._split_rows(tn(gate, i), tn(up, i), s + "input_linear.weight", 1, Fs, D, stacked=False)
        self.copy(tn(down, i), s + "output_linear.weight", (D, Fs))
