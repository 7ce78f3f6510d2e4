"""KimiLinearForCausalLM -> GGUF ``kimi-linear`` (llama.cpp's names, keys and transformations;
docs/specs/kda-family.md §1.1-1.2, tensors in :mod:`toolkit.convert.families.kda`).

Sources: transformers 5.24 ``models/kimi_linear`` (config keys, attribute-map spellings, the
layer / MLP schedules of ``__post_init__``, saved names); llama.cpp 0c1e570
``conversion/kimi_linear.py`` + ``base.py`` (keys written, tensor layouts).

config.json is read as it is, in either form: the published one (``linear_attn_config`` with
1-based ``full_attn_layers`` / ``kda_layers``, ``first_k_dense_replace``, ``n_group``, ...) or
transformers 5.24's (``layer_types``, ``mlp_layer_types``, ``linear_head_dim``,
``num_expert_group``, ``moe_renormalize``, ...).  The dense MLP may be saved as ``mlp.*``
(published) or ``block_sparse_moe.*`` (transformers 5.24's save_pretrained).

Keys: llama.cpp's (``attention.head_count_kv`` per layer 1 on MLA / 0 on KDA layers,
``kda.head_dim``, ``attention.kv_lora_rank``, ``key_length_mla`` ...), plus, only where
llama.cpp's file cannot say the value (a file without them reads what llama.cpp assumes):
``expert_group_count`` (n_group > 1; llama.cpp's converter looks for ``n_group`` and finds
``num_expert_group``), ``expert_weights_norm`` = false (llama.cpp always renormalises),
``kda.head_count`` (KDA heads != attention heads), ``kda.l2_norm_epsilon`` and
``attention.mla_norm_epsilon`` (HF's fixed 1e-6 where llama.cpp uses rms_norm_eps).
"""
from __future__ import annotations

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.base import Family
from toolkit.convert.families.kda import KDA_READ, KDA_REFUSED, KDAMixin, layer_list, one_based_layers, read_flag, read_int, spelled
from toolkit.convert.plan import kv_bool, kv_f32, kv_u32
from toolkit.convert.config_keys import ConfigKeys
from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import Keys
from toolkit.gguf_io.constants import ARCH_KIMI_LINEAR

_L = r"model\.layers\.\d+\."
HF_EPS = 1e-6    # HF's fixed epsilon of the KDA q/k l2-norm and the MLA q_a / kv_a RMSNorms


class KimiLinearFamily(KDAMixin, Family):
    """Kimi-Linear: KDA layers and NoPE MLA layers, a dense SwiGLU on the leading layers, then a
    sigmoid-routed MoE with shared experts."""

    hf_archs = ("KimiLinearForCausalLM",)
    hf_configs = ("KimiLinearConfig",)
    config_keys = ConfigKeys.of(
        KDA_READ + " num_local_experts linear_head_dim linear_num_heads linear_conv_kernel_dim",
        irrelevant={"tie_word_embeddings": "ignored by HF's kimi_linear: the saved lm_head is the output"},
        refused=KDA_REFUSED)
    families = ("Kimi-Linear",)
    arch = ARCH_KIMI_LINEAR
    known = (r"model\.embed_tokens\.weight", r"model\.norm\.weight", r"lm_head\.weight",
             _L + r"(?:input_layernorm|post_attention_layernorm)\.weight",
             _L + r"self_attn\.(?:q|k|v|o|b|f_a|f_b|g_a|g_b|q_a|q_b|kv_a_proj_with_mqa|kv_b)(?:_proj)?\.weight",
             _L + r"self_attn\.(?:q|k|v)_conv1d\.weight",
             _L + r"self_attn\.(?:A_log|dt_bias|o_norm\.weight|q_a_layernorm\.weight|kv_a_layernorm\.weight)",
             _L + r"self_attn\.(?:q_a_proj|kv_a_proj_with_mqa|o_proj)\.bias",     # attention_bias
             _L + r"(?:mlp|block_sparse_moe)\.(?:gate|up|down)_proj\.weight",
             _L + r"block_sparse_moe\.gate\.(?:weight|e_score_correction_bias)",
             _L + r"block_sparse_moe\.experts\.\d+\.w[123]\.weight",
             _L + r"block_sparse_moe\.shared_experts\.(?:gate|up|down)_proj\.weight")

    def read_hparams(self) -> None:
        c = self.cfg
        self.n_embd = c.int("hidden_size")
        self.n_layer = self.layer_count("num_hidden_layers")
        self.n_vocab = c.int("vocab_size")
        self.eps = c.eps("rms_norm_eps", default=1e-5)
        if c.d.get("moe_router_activation_func", "sigmoid") != "sigmoid":   # remote code's key, no HF field
            raise UnsupportedError(f"{c.path}: moe_router_activation_func = {c.d['moe_router_activation_func']!r} is not "
                                   f"supported (only 'sigmoid')")
        # ---- KDA (linear_attn_config wins over linear_*, configuration_kimi_linear.py __post_init__) ----
        lac = self.read_kda_dims(c, n_head_default=32)
        # ---- MLA ----
        self.n_head = c.int("num_attention_heads", default=32)
        n_kv = c.int("num_key_value_heads", default=self.n_head)
        if n_kv != self.n_head:
            raise InputError(f"{c.path}: num_key_value_heads {n_kv} must equal num_attention_heads {self.n_head} "
                             f"(kv_b_proj makes one key and value per head)")
        self.q_lora_rank = c.int("q_lora_rank") if c.d.get("q_lora_rank") is not None else None
        self.kv_lora_rank = c.int("kv_lora_rank", default=512)
        self.dn = c.int("qk_nope_head_dim", default=128)
        self.dr = c.int("qk_rope_head_dim", default=64, min_value=0)
        self.dv = c.int("v_head_dim", default=128)
        # ---- FFN ----
        self.n_ff = c.int("intermediate_size", default=9216)
        self.n_ff_exp = c.int("moe_intermediate_size", default=1024)
        self.n_expert = read_int(c, "n_routed_experts", default=256)
        self.n_expert_used = read_int(c, "num_experts_per_tok", default=8)
        self.n_shared = read_int(c, "n_shared_experts", default=1, min_value=0)
        self.n_ff_shexp = self.n_ff_exp * self.n_shared
        self.n_group = read_int(c, "n_group", default=1)
        self.topk_group = c.int("topk_group", default=1)
        self.norm_topk = read_flag(c, "norm_topk_prob", True)
        self.scale = c.float("routed_scaling_factor", default=2.446)
        gkey = spelled(c, "n_group")[0] or "n_group"
        if self.topk_group > self.n_group:
            raise InputError(f"{c.path}: topk_group {self.topk_group} is larger than {gkey} {self.n_group}")
        if self.n_expert % self.n_group or self.n_expert // self.n_group < 2:
            raise InputError(f"{c.path}: {gkey} {self.n_group} must divide the {self.n_expert} experts into groups of "
                             f"at least 2 (a group's score is its two best experts)")
        if self.n_expert_used > self.topk_group * (self.n_expert // self.n_group):
            raise InputError(f"{c.path}: num_experts_per_tok {self.n_expert_used} is more than the "
                             f"{self.topk_group * (self.n_expert // self.n_group)} experts of the topk_group groups kept")
        # ---- schedules ----
        lt = c.d.get("layer_types")
        if lt is not None:
            self.layer_types = layer_list(c, "layer_types", lt, self.n_layer, ("linear_attention", "full_attention"))
        elif "full_attn_layers" in lac and "kda_layers" in lac:
            self.layer_types = one_based_layers(c, lac, self.n_layer)
        else:
            self.layer_types = ["full_attention" if i and i % 4 == 0 else "linear_attention" for i in range(self.n_layer)]
        mt = c.d.get("mlp_layer_types")
        if mt is not None:
            self.mlp_types = layer_list(c, "mlp_layer_types", mt, self.n_layer, ("dense", "sparse"))
        else:
            k = c.int("first_k_dense_replace", default=1, min_value=0)
            self.mlp_types = ["dense" if i < k else "sparse" for i in range(self.n_layer)]
        self.n_lead_dense = next((i for i, t in enumerate(self.mlp_types) if t != "dense"), self.n_layer)

    def n_vocab_rows(self) -> int:
        return self.n_vocab

    def _keys(self) -> None:
        key, p, KD = self.key, self.plan, Keys.KDA
        _, ctx = spelled(self.cfg, "max_position_embeddings")
        p.kv += self.kda_leading_keys(self.cfg.int(spelled(self.cfg, "max_position_embeddings")[0])
                                      if ctx is not None else 1048576, group_count=False)
        p.kv += [
            kv_u32(key(Keys.Attention.KEY_LENGTH), self.kv_lora_rank + self.dr),
            kv_u32(key(Keys.Attention.VALUE_LENGTH), self.dr),   # llama.cpp: head_dim, which HF sets to dr (unused)
            kv_u32(key(Keys.LLM.VOCAB_SIZE), self.n_vocab),
            kv_u32(key(Keys.SSM.CONV_KERNEL), self.d_conv),
            kv_u32(key(KD.HEAD_DIM), self.kda_head_dim),
        ]
        if self.q_lora_rank is not None:
            p.kv.append(kv_u32(key(KD.Q_LORA_RANK), self.q_lora_rank))
        p.kv += [
            kv_u32(key(KD.KV_LORA_RANK), self.kv_lora_rank),
            kv_u32(key(Keys.Rope.DIMENSION_COUNT), self.dr),
            kv_u32(key(KD.KEY_LENGTH_MLA), self.dn + self.dr),
            kv_u32(key(KD.VALUE_LENGTH_MLA), self.dv),
            kv_u32(key(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH), self.n_ff_exp),
            kv_u32(key(Keys.LLM.EXPERT_SHARED_COUNT), self.n_shared),
            kv_u32(key(Keys.LLM.LEADING_DENSE_BLOCK_COUNT), self.n_lead_dense),
            kv_f32(key(Keys.LLM.EXPERT_WEIGHTS_SCALE), self.scale),
        ]
        # ours / llama.cpp's keys its kimi-linear file never carries: only where they change something
        if self.n_group > 1:
            p.kv.append(kv_u32(key(Keys.LLM.EXPERT_GROUP_COUNT), self.n_group))
        if not self.norm_topk:
            p.kv.append(kv_bool(key(Keys.LLM.EXPERT_WEIGHTS_NORM), False))
        if self.kda_n_head != self.n_head:
            p.kv.append(kv_u32(key(KD.HEAD_COUNT), self.kda_n_head))
        if self.eps != HF_EPS:
            p.kv += [kv_f32(key(KD.L2_NORM_EPS), HF_EPS), kv_f32(key(KD.MLA_NORM_EPS), HF_EPS)]

    def build(self):
        self.read_hparams()
        self._keys()
        H = self.n_embd
        self.copy(tn(T.TOKEN_EMBD), "model.embed_tokens.weight", (self.n_vocab, H))
        for i in range(self.n_layer):
            pre = f"model.layers.{i}."
            self.copy(tn(T.ATTN_NORM, i), pre + "input_layernorm.weight", (H,))
            if self.layer_types[i] == "linear_attention":
                self.kda_tensors(i, pre + "self_attn.", low_rank=True, a_log_shape=(1, 1, self.kda_n_head, 1))
            else:
                self.mla_tensors(i, pre + "self_attn.")
            self.copy(tn(T.FFN_NORM, i), pre + "post_attention_layernorm.weight", (H,))
            if self.mlp_types[i] == "dense":
                self.dense_mlp(i, (pre + "mlp.", pre + "block_sparse_moe."))
            else:
                self.moe(i, pre + "block_sparse_moe.")
        self.copy(tn(T.OUTPUT_NORM), "model.norm.weight", (H,))
        self.copy(tn(T.OUTPUT), "lm_head.weight", (self.n_vocab, H), why="tie_word_embeddings is ignored by HF kimi_linear")
        self.check_leftovers()
        return self.plan
