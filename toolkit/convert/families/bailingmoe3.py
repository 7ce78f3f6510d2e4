"""BailingMoeV3ForCausalLM / BailingHybridForCausalLM (Ling 3) -> GGUF ``bailingmoe3``
(llama.cpp's names, keys and transformations; docs/specs/kda-family.md §1.4, KDA / MLA / MoE tensors
in :mod:`toolkit.convert.families.kda`).

Sources: transformers 5.24 ``models/bailing_hybrid`` (configuration_bailing_hybrid.py: keys,
attribute map, ``__post_init__`` schedules; modeling_bailing_hybrid.py: names, shapes, the
shared-expert width ``moe_intermediate_size x num_shared_experts``); llama.cpp 0c1e570
``conversion/bailingmoe3.py`` (keys and layouts).

config.json is read as it is (llama.cpp's converter reads transformers' attribute-map spellings
and fails, D1): ``head_dim`` (or ``linear_head_dim``) is the KDA head dim; the layer schedule is
``layer_types`` if present, else HF's rule ``(i + 1) % layer_group_size == 0`` -> attention.
When ``num_hidden_layers % layer_group_size != 0`` llama.cpp's converter (and vLLM) make every
layer after the last complete group attention; HF does not, and we follow HF (D14), saying so
in one line.  The schedule is written as llama.cpp's per-layer ``attention.head_count_kv``.

HF tensor (model.layers.i.attention.)   GGUF tensor
f_proj [C, H] (KDA)                     blk.i.ssm_f_a (full rank)
g_proj [C, H] (KDA) / [h, H] (MLA)      blk.i.ssm_g_a / blk.i.attn_gate (the head-wise output gate)
A_log [n]                               blk.i.ssm_a = +exp(A_log), ne [1, n] (no minus sign, unlike kimi / glm)
dense                                   blk.i.attn_output
mlp.gate.expert_bias                    blk.i.exp_probs_b.bias
the rest as kimi-linear (kda.py); model.word_embeddings -> token_embd.

MTP / NextN layers (llama.cpp 0c1e570 bailingmoe3.py / bailingmoe3.cpp graph_mtp; HF ignores
``layers.{L..}``, modeling_bailing_hybrid.py:964-967), block b = L + j (L = num_hidden_layers):
eh_proj [D, 2D], enorm, hnorm               blk.b.nextn.{eh_proj, enorm, hnorm}
final_layernorm (the shared head's norm)    blk.b.layer_output_norm
the layer's MLA (+ g_proj head gate), MoE   as a main attention layer's
and the keys ``block_count`` L + n, ``head_count_kv`` 1 on the MTP blocks, ``nextn_predict_layers``
(written only with the layers: HF's save writes num_mtp_layers 1 without them); ``--no-mtp``
leaves them out.

Keys: llama.cpp's (``kda.safe_gate``, ``kda.gate_lower_bound``, ``rope.freq_base``,
``expert_shared_feed_forward_length``, ``expert_weights_norm``, ...), with HF's values where the
two disagree: the shared-expert width is HF's ``moe_intermediate_size x num_shared_experts``
(llama.cpp reads ``moe_shared_expert_intermediate_size``, D15; a disagreeing value is said in one
line); ``expert_swiglu_limit_list`` / ``share_expert_swiglu_limit_list`` are not written (HF never
clamps, D16).  Ours, only where llama.cpp's file cannot say the value: ``kda.l2_norm_epsilon`` and
``attention.mla_norm_epsilon`` (HF's fixed 1e-6, where llama.cpp uses ``rms_norm_eps``; D4, D5)
when ``rms_norm_eps`` != 1e-6.

RoPE scaling (``rope_parameters`` linear / yarn) as llama.cpp's ``rope.scaling.*`` keys on the MLA's
rotated dims (HF's rotary embedding takes head_dim = qk_rope_head_dim, configuration_bailing_hybrid.py
``__post_init__``).  HF also multiplies the MLA softmax scale by ``mscale(factor, mscale_all_dim)^2``
(modeling_bailing_hybrid.py yarn_apply_mscale, any non-default type); llama.cpp's bailingmoe3 graph
keeps 1/sqrt(qk_head_dim) and reads no key for it, so that factor is folded into attn_q / attn_q_b's
rows (every score q . k carries it): the file holds llama.cpp's keys only, and libllama 0c1e570 runs
it as toolkit does (1.1e-6 with mscale_all_dim 0.8) at HF's default betas 32 / 1 (it reads
rope.scaling.yarn_beta_* only for grok / mistral3: other betas run 0.08 from HF there).
"""
from __future__ import annotations

import logging

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.base import Family
from toolkit.convert.families.kda import KDA_READ, KDA_REFUSED, KDAMixin, layer_list, read_flag, read_int, spelled
from toolkit.convert.plan import kv_arr_i32, kv_bool, kv_f32, kv_u32
from toolkit.convert.config_keys import ConfigKeys
from toolkit.convert.rope_scaling import SCALED_ROPE_TYPES, SCALED_WHY, mla_softmax_mscale, rope_scaling_kv
from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import Keys
from toolkit.gguf_io.constants import ARCH_BAILINGMOE3

log = logging.getLogger(__name__)
_L = r"model\.layers\.\d+\."
HF_EPS = 1e-6    # HF's fixed epsilon of the KDA q/k l2-norm and the MLA q_a / kv_a RMSNorms


class BailingMoe3Family(KDAMixin, Family):
    """Ling 3: KDA layers with full-rank gates (bounded or softplus), MLA with interleaved RoPE and a
    head-wise sigmoid output gate, a dense SwiGLU on the leading layers, then a sigmoid-routed MoE."""

    hf_archs = ("BailingMoeV3ForCausalLM", "BailingHybridForCausalLM")
    hf_configs = ("BailingHybridConfig",)
    config_keys = ConfigKeys.of(
        KDA_READ + " first_k_dense_replace rope_parameters num_mtp_layers num_local_experts rope_theta head_dim "
        "short_conv_kernel_size layer_group_size kda_safe_gate kda_lower_bound",
        irrelevant={"tie_word_embeddings": "HF's model ties nothing (_tied_weights_keys = {}): the saved lm_head is the output"},
        refused=KDA_REFUSED, rope_types=SCALED_ROPE_TYPES, rope_why=SCALED_WHY)
    families = ("Ling 3",)
    arch = ARCH_BAILINGMOE3
    known = (r"model\.word_embeddings\.weight", r"model\.norm\.weight", r"lm_head\.weight",
             _L + r"(?:input_layernorm|post_attention_layernorm)\.weight",
             _L + r"attention\.(?:q|k|v|b|f|g|q_a|q_b|kv_b)_proj\.weight", _L + r"attention\.kv_a_proj_with_mqa\.weight",
             _L + r"attention\.dense\.weight",
             _L + r"attention\.(?:q_a_proj|kv_a_proj_with_mqa|dense)\.bias",     # attention_bias
             _L + r"attention\.(?:q|k|v)_conv1d\.weight",
             _L + r"attention\.(?:A_log|dt_bias|o_norm\.weight|q_a_layernorm\.weight|kv_a_layernorm\.weight)",
             _L + r"mlp\.(?:gate|up|down)_proj\.weight",
             _L + r"mlp\.gate\.(?:weight|expert_bias)",
             _L + r"mlp\.experts\.\d+\.(?:gate|up|down)_proj\.weight",
             _L + r"mlp\.shared_experts\.(?:gate|up|down)_proj\.weight",
             _L + r"(?:eh_proj|enorm|hnorm|final_layernorm)\.weight")    # MTP layers

    def read_hparams(self) -> None:
        c = self.cfg
        self.n_embd = c.int("hidden_size")
        self.n_layer = self.layer_count("num_hidden_layers")
        self.n_vocab = c.int("vocab_size")
        self.eps = c.eps("rms_norm_eps", default=1e-6)
        for key in ("score_function", "scoring_func"):
            if c.d.get(key, "sigmoid") != "sigmoid":
                raise UnsupportedError(f"{c.path}: {key} = {c.d[key]!r} is not supported (only 'sigmoid')")
        self.n_mtp_cfg = c.int("num_nextn_predict_layers", "num_mtp_layers", default=0, min_value=0)
        # ---- KDA: n = num_attention_heads, D = head_dim of config.json (HF's linear_head_dim) ----
        self.n_head = c.int("num_attention_heads", default=32)
        self.kda_n_head = self.n_head
        self.kda_head_dim = c.int("linear_head_dim", "head_dim", default=128)
        self.d_conv = c.int("short_conv_kernel_size", default=4)
        self.safe_gate = c.flag("kda_safe_gate", True)
        self.gate_lb = c.float("kda_lower_bound", default=-5.0)
        if self.safe_gate and not self.gate_lb < 0:
            raise InputError(f"{c.path}: kda_lower_bound = {self.gate_lb} must be negative")
        self._read_mla(c)
        self._read_ffn(c)
        self._read_schedule(c)

    def _read_mla(self, c) -> None:
        n_kv = c.int("num_key_value_heads", default=self.n_head)
        if n_kv != self.n_head:
            raise InputError(f"{c.path}: num_key_value_heads {n_kv} must equal num_attention_heads {self.n_head}")
        self.q_lora_rank = c.int("q_lora_rank") if c.d.get("q_lora_rank") is not None else None
        self.kv_lora_rank = c.int("kv_lora_rank", default=512)
        self.dn = c.int("qk_nope_head_dim", default=128)
        self.dr = c.int("qk_rope_head_dim", default=64, min_value=0)
        if self.dr % 2:
            raise InputError(f"{c.path}: qk_rope_head_dim = {self.dr} must be even (RoPE rotates pairs)")
        self.dv = c.int("v_head_dim", default=128)
        rp = c.d.get("rope_parameters") or {}
        if not isinstance(rp, dict):
            raise InputError(f"{c.path}: key 'rope_parameters' must be an object")
        theta = rp.get("rope_theta", c.d.get("rope_theta", 6e6))
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
            raise InputError(f"{c.path}: rope_theta = {theta!r} must be a positive number")
        self.rope_theta = float(theta)
        # HF's yarn_apply_mscale: the softmax scale times mscale(factor, mscale_all_dim)^2 (folded into q)
        self.q_scale = mla_softmax_mscale(c)

    def _read_ffn(self, c) -> None:
        self.n_ff = c.int("intermediate_size")
        self.n_ff_exp = c.int("moe_intermediate_size")
        self.n_expert = read_int(c, "n_routed_experts", default=512)
        self.n_expert_used = read_int(c, "num_experts_per_tok", default=8)
        self.n_shared = read_int(c, "n_shared_experts", default=1, min_value=0)
        self.n_ff_shexp = self.n_ff_exp * self.n_shared     # HF (modeling_bailing_hybrid.py:840-842), D15
        lc = c.d.get("moe_shared_expert_intermediate_size")
        if self.n_shared and lc is not None and lc != self.n_ff_shexp:
            msg = (f"{c.path}: moe_shared_expert_intermediate_size = {lc} (llama.cpp's shared-expert width) differs "
                   f"from HF's moe_intermediate_size x num_shared_experts = {self.n_ff_shexp}; following HF")
            self.plan.warnings.append(msg)
            log.warning("%s", msg)
        self.n_group = read_int(c, "n_group", default=8)
        self.topk_group = c.int("topk_group", default=4)
        if self.topk_group > self.n_group:
            raise InputError(f"{c.path}: topk_group {self.topk_group} is larger than n_group {self.n_group}")
        if self.n_expert % self.n_group or self.n_expert // self.n_group < 2:
            raise InputError(f"{c.path}: n_group {self.n_group} must divide the {self.n_expert} experts into groups of "
                             f"at least 2 (a group's score is its two best experts)")
        if self.n_expert_used > self.topk_group * (self.n_expert // self.n_group):
            raise InputError(f"{c.path}: num_experts_per_tok {self.n_expert_used} is more than the "
                             f"{self.topk_group * (self.n_expert // self.n_group)} experts of the topk_group groups kept")
        self.norm_topk = read_flag(c, "norm_topk_prob", True)
        self.scale = c.float("routed_scaling_factor", default=2.5)

    def _read_schedule(self, c) -> None:
        L = self.n_layer
        lt = c.d.get("layer_types")
        if lt is not None:
            self.layer_types = layer_list(c, "layer_types", lt, L, ("linear_attention", "full_attention"))
        else:
            g = c.int("layer_group_size", default=6, min_value=-(1 << 30))
            if g < 1:
                raise InputError(f"{c.path}: layer_group_size = {g} must be at least 1")
            self.layer_types = ["full_attention" if (i + 1) % g == 0 else "linear_attention" for i in range(L)]
            if L % g:
                msg = (f"{c.path}: num_hidden_layers {L} is not a multiple of layer_group_size {g}: layers "
                       f"{L - L % g}..{L - 1} follow HF's rule (KDA); llama.cpp's converter would make them attention")
                self.plan.warnings.append(msg)
                log.warning("%s", msg)
        mt = c.d.get("mlp_layer_types")
        if mt is not None:
            self.mlp_types = layer_list(c, "mlp_layer_types", mt, L, ("dense", "sparse"))
        else:
            k = c.int("first_k_dense_replace", default=2, min_value=0)
            self.mlp_types = ["dense" if i < k else "sparse" for i in range(L)]
        self.n_lead_dense = next((i for i, t in enumerate(self.mlp_types) if t != "dense"), L)
        if "dense" in self.mlp_types[self.n_lead_dense:]:
            raise UnsupportedError(f"{c.path}: mlp_layer_types has a dense layer after a sparse one; only leading dense "
                                   f"layers fit llama.cpp's layout (leading_dense_block_count)")

    def n_vocab_rows(self) -> int:
        return self.n_vocab

    def _keys(self) -> None:
        key, p, KD = self.key, self.plan, Keys.KDA
        name, _ = spelled(self.cfg, "max_position_embeddings")
        ctx = self.cfg.int(name) if name is not None else 262144   # InputError naming the key: not an integer, < 1
        lead = self.kda_leading_keys(ctx, rope_base=self.rope_theta)
        if self.n_mtp:    # bailingmoe3.py: block_count += n, head_count_kv 1 on the MTP blocks (attention)
            for j, e in enumerate(lead):
                if e.key == key(Keys.LLM.BLOCK_COUNT):
                    lead[j] = kv_u32(e.key, self.n_layer + self.n_mtp)
                elif e.key == key(Keys.Attention.HEAD_COUNT_KV):
                    lead[j] = kv_arr_i32(e.key, list(e.value) + [1] * self.n_mtp)
        p.kv += lead
        p.kv += [
            kv_u32(key(Keys.Attention.KEY_LENGTH), self.kv_lora_rank + self.dr),
            kv_u32(key(Keys.Attention.VALUE_LENGTH), self.kda_head_dim),   # llama.cpp: head_dim of config.json (unused)
            kv_u32(key(Keys.LLM.VOCAB_SIZE), self.n_vocab),
            kv_u32(key(Keys.SSM.CONV_KERNEL), self.d_conv),
            kv_u32(key(KD.HEAD_DIM), self.kda_head_dim),
            kv_bool(key(KD.SAFE_GATE), self.safe_gate),
        ]
        if self.safe_gate:
            p.kv.append(kv_f32(key(KD.GATE_LOWER_BOUND), self.gate_lb))
        if self.q_lora_rank is not None:
            p.kv.append(kv_u32(key(KD.Q_LORA_RANK), self.q_lora_rank))
        p.kv += [
            kv_u32(key(KD.KV_LORA_RANK), self.kv_lora_rank),
            kv_u32(key(Keys.Rope.DIMENSION_COUNT), self.dr),
            kv_u32(key(KD.KEY_LENGTH_MLA), self.dn + self.dr),
            kv_u32(key(KD.VALUE_LENGTH_MLA), self.dv),
            kv_u32(key(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH), self.n_ff_exp),
            kv_u32(key(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH), self.n_ff_shexp),
            kv_u32(key(Keys.LLM.EXPERT_SHARED_COUNT), self.n_shared),
            kv_u32(key(Keys.LLM.LEADING_DENSE_BLOCK_COUNT), self.n_lead_dense),
            kv_f32(key(Keys.LLM.EXPERT_WEIGHTS_SCALE), self.scale),
            kv_bool(key(Keys.LLM.EXPERT_WEIGHTS_NORM), self.norm_topk),
            *rope_scaling_kv(self.cfg, key),     # llama.cpp's rope.scaling.*: the MLA's q_rot / k_rot
        ]
        if self.eps != HF_EPS:   # ours: HF's fixed 1e-6 where llama.cpp uses rms_norm_eps (D4, D5)
            p.kv += [kv_f32(key(KD.L2_NORM_EPS), HF_EPS), kv_f32(key(KD.MLA_NORM_EPS), HF_EPS)]
        if self.n_mtp:   # bailingmoe3.py writes it from the config; we only with the layers (HF's save has none)
            p.kv.append(kv_u32(key(Keys.LLM.NEXTN_PREDICT_LAYERS), self.n_mtp))

    def _mtp_ids(self) -> list[int]:
        pre = "model.layers."
        return sorted({int(n[len(pre):].split(".", 1)[0]) for n in self.hf.tensors if n.startswith(pre)
                       and int(n[len(pre):].split(".", 1)[0]) >= self.n_layer})

    def _mtp_layers(self) -> int:
        """The MTP layers in the checkpoint (``model.layers.{L + j}.``), 0 when it has none (HF's
        save writes num_mtp_layers 1 without them) or ``no_mtp``.

        Raises:
            InputError: layers after the main ones that are not L, L + 1, ..., or more of them
                than num_nextn_predict_layers / num_mtp_layers says, or one without its eh_proj."""
        ids = self._mtp_ids()
        if not ids or self.no_mtp:
            return 0
        first = self.hf.tensors[next(t for t in self.hf.tensors if t.startswith(f"model.layers.{ids[0]}."))]
        if ids != list(range(self.n_layer, self.n_layer + len(ids))) or len(ids) > self.n_mtp_cfg:
            raise InputError(f"{first.path}: the checkpoint has layers {ids} after the {self.n_layer} main ones, but "
                             f"num_nextn_predict_layers = {self.n_mtp_cfg} (MTP layers are {self.n_layer}.."
                             f"{self.n_layer + self.n_mtp_cfg - 1})")
        for i in ids:
            if not self.has(f"model.layers.{i}.eh_proj.weight"):
                raise InputError(f"{first.path}: MTP layer {i} has no tensor 'model.layers.{i}.eh_proj.weight'")
        return len(ids)

    def _mtp(self) -> None:
        """The MTP layers as llama.cpp's bailingmoe3.py writes them (module docstring), or every
        tensor of them left out (``--no-mtp``)."""
        H = self.n_embd
        if not self.n_mtp:
            for n in [n for n in self.hf.tensors if any(n.startswith(f"model.layers.{i}.") for i in self._mtp_ids())]:
                self.omit(n, "MTP / NextN layer: --no-mtp")
            return
        for i in range(self.n_layer, self.n_layer + self.n_mtp):
            pre = f"model.layers.{i}."
            a = pre + "attention."
            self.copy(tn(T.NEXTN_EH_PROJ, i), pre + "eh_proj.weight", (H, 2 * H), why="hidden_size, 2 hidden_size")
            self.copy(tn(T.NEXTN_ENORM, i), pre + "enorm.weight", (H,))
            self.copy(tn(T.NEXTN_HNORM, i), pre + "hnorm.weight", (H,))
            self.copy(tn(T.LAYER_OUT_NORM, i), pre + "final_layernorm.weight", (H,))   # the shared head's norm
            self.copy(tn(T.ATTN_NORM, i), pre + "input_layernorm.weight", (H,))
            self.mla_tensors(i, a, o_name="dense", q_scale=self.q_scale)
            self.copy(tn(T.ATTN_GATE, i), a + "g_proj.weight", (self.n_head, H),
                      why="num_attention_heads (one output gate per head)")
            self.copy(tn(T.FFN_NORM, i), pre + "post_attention_layernorm.weight", (H,))
            self.moe(i, pre + "mlp.", bias_name="gate.expert_bias", expert_names=("gate_proj", "up_proj", "down_proj"))

    def build(self):
        self.read_hparams()
        self.n_mtp = self._mtp_layers()
        self._keys()
        H = self.n_embd
        self.copy(tn(T.TOKEN_EMBD), "model.word_embeddings.weight", (self.n_vocab, H))
        for i in range(self.n_layer):
            pre = f"model.layers.{i}."
            a = pre + "attention."
            self.copy(tn(T.ATTN_NORM, i), pre + "input_layernorm.weight", (H,))
            if self.layer_types[i] == "linear_attention":
                self.kda_tensors(i, a, low_rank=False, a_log_shape=(self.kda_n_head, 1), a_log_op="exp", o_name="dense")
            else:
                self.mla_tensors(i, a, o_name="dense", q_scale=self.q_scale)
                self.copy(tn(T.ATTN_GATE, i), a + "g_proj.weight", (self.n_head, H),
                          why="num_attention_heads (one output gate per head)")
            self.copy(tn(T.FFN_NORM, i), pre + "post_attention_layernorm.weight", (H,))
            if self.mlp_types[i] == "dense":
                self.dense_mlp(i, (pre + "mlp.",))
            else:
                self.moe(i, pre + "mlp.", bias_name="gate.expert_bias", expert_names=("gate_proj", "up_proj", "down_proj"))
        self._mtp()
        self.copy(tn(T.OUTPUT_NORM), "model.norm.weight", (H,))
        self.copy(tn(T.OUTPUT), "lm_head.weight", (self.n_vocab, H))
        self.check_leftovers()
        return self.plan
