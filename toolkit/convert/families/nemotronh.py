"""NemotronHForCausalLM -> GGUF ``nemotron_h`` (no MoE layer) / ``nemotron_h_moe`` (llama.cpp's names).

Glossary: D = hidden_size, L = layers, V = vocab rows; Mamba-2: H = mamba_num_heads,
P = mamba_head_dim, d_inner = H P, G = n_groups, N = ssm_state_size, K = conv_kernel;
attention: Hq = num_attention_heads, Hkv = num_key_value_heads, hd = head_dim (no RoPE);
MLP: F = intermediate_size; MoE: E = n_routed_experts, Fe = moe_intermediate_size,
Fs = moe_shared_expert_intermediate_size.

Every block is ``x += mixer(norm(x))`` with ONE mixer: Mamba-2 (``M`` / linear_attention),
attention (``*`` / full_attention), a ReLU² MLP (``-`` / mlp) or a MoE (``E`` / moe).  The layer
list comes from ``layers_block_type`` (transformers 5) or ``hybrid_override_pattern`` (the
original configs); both are read, and must agree when both are present.

HF tensor (numpy shape)                               GGUF tensor
backbone.embeddings.weight [V, D]                     token_embd.weight
backbone.layers.i.norm.weight [D]                     blk.i.attn_norm.weight (every block's one norm)
M: backbone.layers.i.mixer.*                          blk.i.ssm_* (as mamba2)
*: mixer.{q,k,v,o}_proj.weight                        blk.i.attn_{q,k,v,output}.weight (q/k rows permuted, below)
-: mixer.up_proj [F, D] / down_proj [D, F]            blk.i.ffn_up / ffn_down.weight
E: mixer.gate.weight [E, D]                           blk.i.ffn_gate_inp.weight
   mixer.gate.e_score_correction_bias [E]             blk.i.exp_probs_b.bias
   mixer.experts.e.up_proj [Fe, D] (e < E)            blk.i.ffn_up_exps.weight [E, Fe, D] (stacked)
   mixer.experts.e.down_proj [D, Fe]                  blk.i.ffn_down_exps.weight [E, D, Fe]
   mixer.shared_experts.{up,down}_proj                blk.i.ffn_{up,down}_shexp.weight
   mixer.fc1_latent_proj [Dl, D] / fc2 [D, Dl]         blk.i.ffn_latent_down / ffn_latent_up.weight (moe_latent_size
                                                      Dl set: the experts' D above is Dl; key moe_latent_size)
backbone.norm_f.weight [D]                            output_norm.weight
lm_head.weight [V, D]                                 output.weight (whenever saved: HF never ties it)

No RoPE; q and k rows are still reordered per head as llama.cpp's converter does (the same
permutation of each head's dims in q and k does not change q . k), so the data equal its file's.

Keys: llama.cpp's NemotronHModel ones, with two corrections: ``feed_forward_length`` is per
layer with F on MLP layers and Fe on MoE layers (llama.cpp 0c1e570 writes 0 on the MLP layers of
a transformers-5 config, so its file does not load: fixtures README, Round 2), and the
architecture is ``nemotron_h_moe`` when a layer is MoE (llama.cpp: when ``num_experts_per_tok``
is in config.json, which transformers 5 always writes).  Ours besides: ``attention.layer_indices``,
``ssm.head_dim``, ``attention.layer_norm_rms_epsilon``.
"""
from __future__ import annotations

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.activation import ffn_act_kv, ssm_act_kv
from toolkit.convert.base import Family, head_perm
from toolkit.convert.config_keys import ConfigKeys
from toolkit.convert.families.mamba2 import dt_limit_kv, emit_mamba2_mixer
from toolkit.convert.plan import Segment, kv_arr_i32, kv_bool, kv_f32, kv_u32
from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import ARCH_NEMOTRON_H, ARCH_NEMOTRON_H_MOE, Keys

_L = r"backbone\.layers\.\d+\.mixer\."
# hybrid_override_pattern letters -> layers_block_type names (NemotronHConfig._pattern_to_list)
PATTERN = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}


def layer_types(cfg) -> list[str]:
    """The block type of every layer from ``layers_block_type`` and/or ``hybrid_override_pattern``.

    Raises:
        InputError: neither key; an unknown letter or type; a pattern whose length differs from
            ``num_hidden_layers`` or from ``layers_block_type``; the two forms disagreeing.
    """
    lt, pat = cfg.d.get("layers_block_type"), cfg.d.get("hybrid_override_pattern")
    forms = []
    if lt is not None:
        if not isinstance(lt, list) or not lt or not all(isinstance(t, str) for t in lt):
            raise InputError(f"{cfg.path}: key 'layers_block_type' must be a non-empty list of layer types, got {str(lt)[:60]}")
        bad = [t for t in lt if t not in PATTERN.values()]
        if bad:
            raise InputError(f"{cfg.path}: key 'layers_block_type' has unknown layer type {bad[0]!r} "
                             f"(known: {', '.join(PATTERN.values())})")
        forms.append(("layers_block_type", list(lt)))
    if pat is not None:
        if not isinstance(pat, str) or not pat:
            raise InputError(f"{cfg.path}: key 'hybrid_override_pattern' must be a non-empty string, got {pat!r}")
        for i, ch in enumerate(pat):
            if ch not in PATTERN:
                raise InputError(f"{cfg.path}: key 'hybrid_override_pattern' has unknown letter {ch!r} at {i} "
                                 f"(known: {' '.join(PATTERN)})")
        n = cfg.d.get("num_hidden_layers")
        if lt is None and n is not None and n != len(pat):
            raise InputError(f"{cfg.path}: key 'hybrid_override_pattern' has {len(pat)} letters, "
                             f"num_hidden_layers is {n}")
        forms.append(("hybrid_override_pattern", [PATTERN[ch] for ch in pat]))
    if not forms:
        raise InputError(f"{cfg.path}: neither 'layers_block_type' nor 'hybrid_override_pattern': cannot tell the layer types")
    if len(forms) == 2 and forms[0][1] != forms[1][1]:
        raise InputError(f"{cfg.path}: keys 'layers_block_type' ({len(forms[0][1])} layers) and "
                         f"'hybrid_override_pattern' ({len(forms[1][1])} layers) disagree")
    return forms[0][1]


class NemotronHFamily(Family):
    hf_archs = ("NemotronHForCausalLM",)
    hf_configs = ("NemotronHConfig",)
    config_keys = ConfigKeys.of(
        "vocab_size hidden_size layers_block_type num_attention_heads num_key_value_heads head_dim "
        "max_position_embeddings intermediate_size ssm_state_size mamba_num_heads mamba_head_dim n_groups conv_kernel "
        "n_routed_experts n_shared_experts moe_intermediate_size moe_shared_expert_intermediate_size num_experts_per_tok "
        "routed_scaling_factor n_group topk_group norm_topk_prob layer_norm_epsilon use_conv_bias use_bias mlp_bias "
        "moe_latent_size mlp_hidden_act time_step_min mamba_hidden_act",
        irrelevant={"tie_word_embeddings": "NemotronHForCausalLM ties nothing: a saved lm_head is the output",
                    "expand": "not read by HF's model (d_inner = mamba_num_heads x mamba_head_dim)",
                    "sliding_window": "not read by HF's model",
                    "mamba_ssm_cache_dtype": "HF's state cache dtype: the runtime keeps float32",
                    "moe_shared_expert_overlap": "an execution overlap in HF: the same sum",
                    "num_nextn_predict_layers": "HF's model builds no MTP layers (MTP tensors are refused as unknown)",
                    "mtp_layers_block_type": "HF's model builds no MTP layers (MTP tensors are refused as unknown)",
                    "mamba_proj_bias": "not read by HF's model (use_bias sets the in/out projection biases)",
                    "time_step_limit": "not read by HF's model: its mixer's dt_limit is (time_step_min, inf)",
                    "attention_bias": "not read by HF's model: its q/k/v/o projections have no biases"},
        # mamba_conv_bias: the spelling of older NemotronH configs
        aliases={"layer_types": "layers_block_type", "num_local_experts": "n_routed_experts",
                 "mamba_conv_bias": "use_conv_bias"})
    families = ("Nemotron-H",)
    gguf_archs = "nemotron_h, nemotron_h_moe when a layer is MoE"
    arch = ARCH_NEMOTRON_H
    known = (
        r"backbone\.embeddings\.weight", r"backbone\.norm_f\.weight", r"lm_head\.weight",
        r"backbone\.layers\.\d+\.norm\.weight",
        _L + r"(A_log|D|dt_bias|conv1d\.weight|conv1d\.bias|in_proj\.(weight|bias)|norm\.weight|out_proj\.(weight|bias))",
        _L + r"(q_proj|k_proj|v_proj|o_proj)\.weight", _L + r"(up_proj|down_proj)\.(weight|bias)",
        _L + r"gate\.(weight|e_score_correction_bias)", _L + r"fc[12]_latent_proj\.weight",
        _L + r"experts\.\d+\.(up_proj|down_proj)\.weight",
        _L + r"shared_experts\.(up_proj|down_proj)\.weight",
    )

    def read_hparams(self) -> None:
        c = self.cfg
        self.types = layer_types(c)
        self.n_layer = len(self.types)
        if self.n_layer > len(self.hf.tensors):
            raise InputError(f"{c.path}: {self.n_layer} layers but the checkpoint has only {len(self.hf.tensors)} tensors")
        self.n_embd = c.int("hidden_size")
        self.n_vocab = c.int("vocab_size")
        self.eps = c.eps("layer_norm_epsilon", "rms_norm_eps", default=1e-5)
        # ---- Mamba-2 (d_inner = heads x head dim, not expand x D: llama.cpp's converter agrees) ----
        self.d_conv = c.int("conv_kernel", "mamba_d_conv", default=4)
        self.d_state = c.int("ssm_state_size", default=128)
        self.n_group = c.int("n_groups", "mamba_n_groups", default=1)
        self.ssm_n_head = c.int("mamba_num_heads")
        self.ssm_head_dim = c.int("mamba_head_dim")
        self.d_inner = self.ssm_n_head * self.ssm_head_dim
        if self.ssm_n_head % self.n_group:
            raise InputError(f"{c.path}: n_groups {self.n_group} does not divide mamba_num_heads {self.ssm_n_head}")
        # ---- attention ----
        self.n_head = c.int("num_attention_heads")
        self.n_head_kv = c.int("num_key_value_heads", default=self.n_head)
        self.head_dim = c.int("head_dim", "attention_head_dim", default=self.n_embd // self.n_head)
        if self.n_head % self.n_head_kv:
            raise InputError(f"{c.path}: num_key_value_heads {self.n_head_kv} does not divide num_attention_heads {self.n_head}")
        # ---- MLP / MoE ----
        self.is_moe = "moe" in self.types
        self.n_ff = c.int("intermediate_size") if "mlp" in self.types else 0
        # biases: the Mamba-2 in/out projections (use_bias), its conv (use_conv_bias), the MLP (mlp_bias)
        self.conv_bias = c.flag("use_conv_bias", c.flag("mamba_conv_bias", True))   # (older configs' spelling)
        self.proj_bias = c.flag("use_bias", False)
        self.mlp_bias = c.flag("mlp_bias", False)
        if self.mlp_bias and self.is_moe:   # NemotronHMLP experts take mlp_bias too; the runtime's experts have none
            raise UnsupportedError(f"{c.path}: key 'mlp_bias' = true is not supported with MoE layers (expert "
                                   f"biases: not in the runtime's nor llama.cpp's nemotron_h_moe)")
        if self.is_moe:
            self._read_moe(c)

    def _read_moe(self, c) -> None:
        self.n_expert = c.int("n_routed_experts", "num_local_experts")
        self.n_expert_used = c.int("num_experts_per_tok")
        self.n_ff_exp = c.int("moe_intermediate_size")
        self.n_ff_shexp = c.int("moe_shared_expert_intermediate_size")
        self.n_shared = c.int("n_shared_experts", default=1)
        self.n_group_exp = c.int("n_group", default=1)
        self.topk_group = c.int("topk_group", default=1)
        self.scale = c.float("routed_scaling_factor", default=1.0)
        self.norm_topk = c.flag("norm_topk_prob", True)
        # latent MoE (Nemotron 3 Super): the routed experts run in Dl = moe_latent_size between
        # fc1_latent_proj [Dl, D] and fc2_latent_proj [D, Dl] (the router and shared expert in D)
        self.latent = c.d.get("moe_latent_size")
        if self.latent is not None:
            self.latent = c.int("moe_latent_size")
            if self.latent < 1:
                raise InputError(f"{c.path}: key 'moe_latent_size' must be a positive integer or null, got {self.latent}")
        if not 0 < self.n_expert_used <= self.n_expert:
            raise InputError(f"{c.path}: num_experts_per_tok {self.n_expert_used} must be in [1, n_routed_experts={self.n_expert}]")
        if self.n_expert % self.n_group_exp or not 0 < self.topk_group <= self.n_group_exp:
            raise InputError(f"{c.path}: n_group {self.n_group_exp} must divide n_routed_experts {self.n_expert} and "
                             f"topk_group {self.topk_group} must be in [1, n_group]")
        if self.n_group_exp > 1 and self.n_expert // self.n_group_exp < 2:
            raise InputError(f"{c.path}: n_group {self.n_group_exp} leaves fewer than 2 experts per group "
                             f"(the group score is the sum of its best two)")

    def n_vocab_rows(self) -> int:
        return self.n_vocab

    def build(self):
        self.read_hparams()
        if self.is_moe:
            self.arch = ARCH_NEMOTRON_H_MOE
            self.plan.arch = ARCH_NEMOTRON_H_MOE
        self._keys()
        D = self.n_embd
        self.copy(tn(T.TOKEN_EMBD), "backbone.embeddings.weight", (self.n_vocab, D))
        for i, t in enumerate(self.types):
            pre = f"backbone.layers.{i}."
            self.copy(tn(T.ATTN_NORM, i), pre + "norm.weight", (D,))
            m = pre + "mixer."
            if t == "linear_attention":
                emit_mamba2_mixer(self, i, m, D, self.d_inner, self.d_state, self.n_group, self.ssm_n_head, self.d_conv,
                                  self.conv_bias, self.proj_bias)
            elif t == "full_attention":
                # llama.cpp's converter applies LlamaModel.permute to q and k although nothing
                # rotates them; the same reorder of every head's dims in q and k leaves q . k,
                # and so the attention, unchanged.  Done here too, for llama.cpp's bytes.
                hd, note = self.head_dim, "rows in llama.cpp's q/k order (LlamaModel.permute; q . k unchanged)"
                self.copy(tn(T.ATTN_Q, i), m + "q_proj.weight", (self.n_head * hd, D),
                          perm=lambda: head_perm(self.n_head, hd, hd), block=hd, note=note)
                self.copy(tn(T.ATTN_K, i), m + "k_proj.weight", (self.n_head_kv * hd, D),
                          perm=lambda: head_perm(self.n_head_kv, hd, hd), block=hd, note=note)
                self.copy(tn(T.ATTN_V, i), m + "v_proj.weight", (self.n_head_kv * hd, D))
                self.copy(tn(T.ATTN_OUT, i), m + "o_proj.weight", (D, self.n_head * hd))
            elif t == "mlp":
                self.copy(tn(T.FFN_UP, i), m + "up_proj.weight", (self.n_ff, D))
                self.copy(tn(T.FFN_DOWN, i), m + "down_proj.weight", (D, self.n_ff))
                if self.mlp_bias:   # llama.cpp's ffn_up / ffn_down .bias
                    self.copy(tn(T.FFN_UP, i, ".bias"), m + "up_proj.bias", (self.n_ff,), why="mlp_bias is true")
                    self.copy(tn(T.FFN_DOWN, i, ".bias"), m + "down_proj.bias", (D,), why="mlp_bias is true")
            else:
                self._moe(i, m)
        self.copy(tn(T.OUTPUT_NORM), "backbone.norm_f.weight", (D,))
        # NemotronHForCausalLM ties nothing (_tied_weights_keys = {}): a saved lm_head is the
        # output whatever tie_word_embeddings says; without one the output reuses token_embd
        if self.has("lm_head.weight"):
            self.copy(tn(T.OUTPUT), "lm_head.weight", (self.n_vocab, D))
        self.check_leftovers()
        return self.plan

    def _keys(self) -> None:
        c, key, p, L = self.cfg, self.key, self.plan, self.n_layer
        ff = [self.n_ff if t == "mlp" else self.n_ff_exp if t == "moe" else 0 for t in self.types]
        attn = [i for i, t in enumerate(self.types) if t == "full_attention"]
        p.kv += [
            kv_u32(key(Keys.LLM.BLOCK_COUNT), L),
            kv_u32(key(Keys.LLM.CONTEXT_LENGTH), c.int("max_position_embeddings", default=2**20)),
            kv_u32(key(Keys.LLM.EMBEDDING_LENGTH), self.n_embd),
            kv_arr_i32(key(Keys.LLM.FEED_FORWARD_LENGTH), ff),
            kv_u32(key(Keys.Attention.HEAD_COUNT), self.n_head),
            kv_arr_i32(key(Keys.Attention.HEAD_COUNT_KV), [self.n_head_kv if i in attn else 0 for i in range(L)]),
            kv_f32(key(Keys.Attention.LAYERNORM_EPS), self.eps),        # what llama.cpp's loader reads
            kv_f32(key(Keys.Attention.LAYERNORM_RMS_EPS), self.eps),
        ]
        if self.is_moe:
            p.kv += [
                kv_u32(key(Keys.LLM.EXPERT_COUNT), self.n_expert),
                kv_u32(key(Keys.LLM.EXPERT_USED_COUNT), self.n_expert_used),
                kv_u32(key(Keys.LLM.EXPERT_GROUP_COUNT), self.n_group_exp),
                kv_u32(key(Keys.LLM.EXPERT_GROUP_USED_COUNT), self.topk_group),
                kv_u32(key(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH), self.n_ff_exp),
                kv_u32(key(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH), self.n_ff_shexp),
                kv_u32(key(Keys.LLM.EXPERT_SHARED_COUNT), self.n_shared),
                kv_bool(key(Keys.LLM.EXPERT_WEIGHTS_NORM), self.norm_topk),
                kv_f32(key(Keys.LLM.EXPERT_WEIGHTS_SCALE), self.scale),
            ]
            if self.latent is not None:   # llama.cpp's key; written only for a latent MoE
                p.kv.append(kv_u32(key(Keys.LLM.MOE_LATENT_SIZE), self.latent))
        # the MLP layers' and the experts' act (NemotronHMLP / NemotronHExperts ACT2FN[mlp_hidden_act]);
        # written only when not relu2 (ours: llama.cpp hard-codes ReLU²)
        p.kv += ffn_act_kv(c.path, c.d, key, attr="mlp_hidden_act", default="relu2")
        p.kv += [
            kv_u32(key(Keys.LLM.VOCAB_SIZE), self.n_vocab),
            kv_u32(key(Keys.Rope.DIMENSION_COUNT), self.head_dim),
            kv_u32(key(Keys.SSM.CONV_KERNEL), self.d_conv),
            kv_u32(key(Keys.SSM.STATE_SIZE), self.d_state),
            kv_u32(key(Keys.SSM.GROUP_COUNT), self.n_group),
            kv_u32(key(Keys.SSM.INNER_SIZE), self.d_inner),
            kv_u32(key(Keys.SSM.TIME_STEP_RANK), self.ssm_n_head),
            kv_bool(key(Keys.Rope.SCALING_FINETUNED), False),           # no RoPE (llama.cpp writes the same)
            kv_u32(key(Keys.Attention.KEY_LENGTH), self.head_dim),
            kv_u32(key(Keys.Attention.VALUE_LENGTH), self.head_dim),
            kv_arr_i32(key(Keys.Attention.LAYER_INDICES), attn),
            kv_u32(key(Keys.SSM.HEAD_DIM), self.ssm_head_dim),
        ] + dt_limit_kv(self, floor=self.cfg.float("mamba_dt_min", "time_step_min", default=0.001))   # HF: dt_limit (time_step_min, inf)
        # mamba_hidden_act: the Mamba-2 conv's act (causal_conv1d_fn activation=); the gated norm's is F.silu,
        # fixed.  Written only when not silu
        p.kv += ssm_act_kv(c.path, c.d, key, attr="mamba_hidden_act")

    def _moe(self, i: int, m: str) -> None:
        D, E, Fe, Fs = self.n_embd, self.n_expert, self.n_ff_exp, self.n_ff_shexp
        self.copy(tn(T.FFN_GATE_INP, i), m + "gate.weight", (E, D))
        self.copy(tn(T.FFN_EXP_PROBS_B, i, ".bias"), m + "gate.e_score_correction_bias", (E,))
        Dx = D
        if self.latent is not None:   # llama.cpp's ffn_latent_down / ffn_latent_up (Nemotron 3 Super)
            Dx = self.latent
            self.copy(tn(T.FFN_LATENT_DOWN, i), m + "fc1_latent_proj.weight", (Dx, D), why="moe_latent_size is set")
            self.copy(tn(T.FFN_LATENT_UP, i), m + "fc2_latent_proj.weight", (D, Dx), why="moe_latent_size is set")
        for out, w, shape in ((T.FFN_UP_EXP, "up_proj", (Fe, Dx)), (T.FFN_DOWN_EXP, "down_proj", (Dx, Fe))):
            segs = [Segment(self.take(f"{m}experts.{e}.{w}.weight", shape), 0, shape[0]) for e in range(E)]
            self.emit(tn(out, i), (E,) + shape, segs, note=f"experts.0..{E - 1}.{w} stacked")
        self.copy(tn(T.FFN_UP_SHEXP, i), m + "shared_experts.up_proj.weight", (Fs, D))
        self.copy(tn(T.FFN_DOWN_SHEXP, i), m + "shared_experts.down_proj.weight", (D, Fs))
