"""Glm5NextForConditionalGeneration (its text model) -> GGUF ``glm5-next`` (llama.cpp's names,
keys and transformations; docs/specs/kda-family.md §1.3, KDA / MLA / MoE tensors in
:mod:`toolkit.convert.families.kda`).

Sources: transformers 5.24 ``models/glm5_next`` (configuration_glm5_next.py: the text config's
keys and ``__post_init__`` schedules; modeling_glm5_next.py: tensor names and shapes);
llama.cpp 0c1e570 ``conversion/glm.py`` class ``Glm5NextModel`` (:407-598, keys and layouts).

config.json is read as it is: ``text_config`` merged over the root (a flat text-only config
works too), ``linear_attn_config`` or the flat ``linear_*`` keys, ``layer_types`` (default: every
4th layer, ``i % 4 == 3``, attention; ``full_attention`` = ``indexed_attention``),
``indexer_types`` (or ``index_topk_pattern`` / ``index_topk_freq`` + ``index_skip_topk_offset``),
``mlp_layer_types`` (default: the first min(3, L) layers dense; HF ignores
``first_k_dense_replace``, D11).  The vision tower (``model.visual.*``) is left out with one
line.  The tokenizer needs none of GLM's special tokens (llama.cpp's converter does, D10).
``tie_word_embeddings`` is the root's (Glm5NextForConditionalGeneration ties lm_head to
``embed_tokens`` by its own config, Glm5NextConfig; text_config's is not read by HF's model, and a
composite saved with ``tie_word_embeddings=True`` keeps text_config's false): true writes no
``output.weight`` (the output is ``token_embd``, as llama.cpp reads a file without it) and leaves a
saved ``lm_head.weight`` out.

HF tensor (prefix model.language_model.layers.i.)     GGUF tensor
hc_{attn,ffn}_fn [hc(2+hc), hc H]                      blk.i.hc_{attn,ffn}_fn.weight (F32 at any outtype)
hc_{attn,ffn}_base [hc(2+hc)], hc_*_scale [3]          blk.i.hc_{attn,ffn}_{base,scale}.weight
self_attn.indexer.wq_b [nI dI, rq]                     blk.i.indexer.attn_q_b.weight
self_attn.indexer.wk [dI, H]                           blk.i.indexer.attn_k.weight
self_attn.indexer.k_norm.{weight,bias} [dI]            blk.i.indexer.k_norm.{weight,bias}
self_attn.indexer.weights_proj [nI, H]                 blk.i.indexer.proj.weight
self_attn.indexer.index_kpool_compress_ape [kp, dI]    blk.i.indexer_compressor_ape.weight (F32)
self_attn.indexer.index_kpool_compress_gate [dI, H]    blk.i.indexer_compressor_gate.weight (F32)
the KDA layer (A_log [n] -> ssm_a [n] = -exp), MLA (q-LoRA, NoPE), dense MLP / MoE (mlp.*,
experts.e.{gate,up,down}_proj): kda.py.

MTP / NextN layers (llama.cpp 0c1e570 glm.py Glm5NextModel: ``num_nextn_predict_layers`` layers
stored after the main ones, ``model.language_model.layers.{L + j}.``, L = num_hidden_layers; HF
ignores them, modeling_glm5_next.py:1390), DeepSeek-V3's layout, as block L + j:
enorm / hnorm / eh_proj [D, 2D] / shared_head.norm     blk.b.nextn.{enorm, hnorm, eh_proj, shared_head_norm}
shared_head.head / embed_tokens (when present)         blk.b.nextn.{shared_head_head, embed_tokens}
input_layernorm, post_attention_layernorm              blk.b.attn_norm, blk.b.ffn_norm
self_attn.* (MLA with its own indexer), mlp.*          as a main attention layer's (no hc_*: llama.cpp's
                                                       loader binds mHC tensors for the main layers only)
and the keys ``block_count`` = L + n, ``nextn_predict_layers`` = n, ``head_count_kv`` padded with 1,
the SwiGLU clamps per block.  The count comes from the tensors (a config that says 1 without
them -- HF's save -- converts without a head); ``--no-mtp`` leaves them out.

Keys: llama.cpp's (``attention.layer_norm_epsilon`` 1e-6: the indexer key LayerNorm;
``attention.indexer.{head_count,key_length,top_k,kpool,kpool_select_tail,types}``,
``hyper_connection.{count,sinkhorn_iterations,epsilon}`` -- llama.cpp's loader accepts only a
count of 4, ours any --, ``swiglu_clamp_exp`` / ``swiglu_clamp_shexp`` per layer, ...), plus
ours only where llama.cpp's file cannot say the value: ``kda.safe_gate`` = false for the
softplus gate (``linear_lower_bound`` null; llama.cpp's file then has no bound and its graph
has no softplus gate), ``kda.head_count`` when the KDA heads differ from the attention heads.
"""
from __future__ import annotations

import logging

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.base import Family
from toolkit.convert.families.kda import KDA_READ, KDA_REFUSED, KDAMixin, layer_list, read_flag, read_int
from toolkit.convert.families.qwen_gdn import text_config
from toolkit.convert.plan import kv_arr_bool, kv_arr_f32, kv_arr_i32, kv_bool, kv_f32, kv_u32
from toolkit.convert.config_keys import ConfigKeys
from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import GGMLType, Keys
from toolkit.gguf_io.constants import ARCH_GLM5_NEXT

log = logging.getLogger(__name__)
_L = r"model\.language_model\.layers\.\d+\."
INDEXER_LN_EPS = 1e-6   # HF Glm5NextTextIndexer.k_norm = nn.LayerNorm(eps=1e-6) (modeling_glm5_next.py:799)


def glm_layer_types(c, n_layer: int) -> list[str]:
    lt = c.d.get("layer_types")
    if lt is None:
        return ["indexed_attention" if i % 4 == 3 else "linear_attention" for i in range(n_layer)]
    lt = layer_list(c, "layer_types", lt, n_layer, ("linear_attention", "indexed_attention", "full_attention"))
    return ["indexed_attention" if t == "full_attention" else t for t in lt]


def glm_indexer_types(c, n_layer: int) -> list[str]:
    """configuration_glm5_next.py __post_init__ (:173-185)."""
    it = c.d.get("indexer_types")
    if it is not None:
        return layer_list(c, "indexer_types", it, n_layer, ("full", "shared"))
    pat = c.d.get("index_topk_pattern")
    if pat is not None:
        if isinstance(pat, str):
            if any(ch not in "FS" for ch in pat):
                raise InputError(f"{c.path}: index_topk_pattern {pat!r} must be letters F (full) and S (shared)")
            pat = ["full" if ch == "F" else "shared" for ch in pat]
        return layer_list(c, "index_topk_pattern", pat, n_layer, ("full", "shared"))
    freq = max(c.int("index_topk_freq", default=1, min_value=-(1 << 30)), 1)
    off = c.int("index_skip_topk_offset", default=2, min_value=-(1 << 30))
    return ["full" if max(i - off + 1, 0) % freq == 0 else "shared" for i in range(n_layer)]


class Glm5NextFamily(KDAMixin, Family):
    """GLM-5-Next's text model: KDA layers with the bounded gate, NoPE MLA with the DSA k-pool
    indexer, mHC residual streams, a dense SwiGLU on the leading layers then a sigmoid-routed
    MoE, every SwiGLU clamped."""

    hf_archs = ("Glm5NextForConditionalGeneration",)
    hf_configs = ("Glm5NextTextConfig", "Glm5NextConfig")
    config_keys = ConfigKeys.of(
        KDA_READ + " n_routed_experts index_topk index_head_dim index_n_heads indexer_types swiglu_limit "
        "linear_head_dim linear_num_heads linear_conv_kernel_dim linear_lower_bound hc_mult hc_eps hc_sinkhorn_iters "
        "index_kpool index_kpool_always_select_tail tie_word_embeddings num_nextn_predict_layers",
        irrelevant={**{k: "vision input only: the text model does not read it" for k in (
            "image_token_id", "video_token_id", "image_start_token_id", "image_end_token_id", "video_start_token_id",
            "video_end_token_id")},
            "head_dim": "not read by HF's model (MLA: qk_nope_head_dim, qk_rope_head_dim, v_head_dim)"},
        refused=KDA_REFUSED, aliases={"num_local_experts": "n_routed_experts"})
    families = ("GLM-5-Next",)
    arch = ARCH_GLM5_NEXT
    vllm = False
    known = (r"model\.language_model\.embed_tokens\.weight", r"model\.language_model\.norm\.weight", r"lm_head\.weight",
             r"model\.visual\..*",
             _L + r"hc_(?:attn|ffn)_(?:fn|base|scale)",
             _L + r"(?:input_layernorm|post_attention_layernorm)\.weight",
             _L + r"self_attn\.(?:q|k|v|o|b|f_a|f_b|g_a|g_b|q_a|q_b|kv_a_proj_with_mqa|kv_b)(?:_proj)?\.weight",
             _L + r"self_attn\.(?:q|k|v)_conv1d\.weight",
             _L + r"self_attn\.(?:A_log|dt_bias|o_norm\.weight|q_a_layernorm\.weight|kv_a_layernorm\.weight)",
             _L + r"self_attn\.(?:q_a_proj|kv_a_proj_with_mqa|o_proj)\.bias",     # attention_bias
             _L + r"self_attn\.indexer\.(?:wq_b|wk|weights_proj)\.weight",
             _L + r"self_attn\.indexer\.k_norm\.(?:weight|bias)",
             _L + r"self_attn\.indexer\.index_kpool_compress_(?:ape|gate)",
             _L + r"mlp\.(?:gate|up|down)_proj\.weight",
             _L + r"mlp\.gate\.(?:weight|e_score_correction_bias)",
             _L + r"mlp\.experts\.\d+\.(?:gate|up|down)_proj\.weight",
             _L + r"mlp\.shared_experts\.(?:gate|up|down)_proj\.weight",
             _L + r"(?:eh_proj|enorm|hnorm|shared_head\.norm|shared_head\.head|embed_tokens)\.weight")   # MTP layers

    def read_hparams(self) -> None:
        self.tie = self.cfg.flag("tie_word_embeddings", False)   # the root's (Glm5NextConfig), before the merge
        c = self.cfg = text_config(self.cfg)
        self.n_embd = c.int("hidden_size")
        self.n_layer = self.layer_count("num_hidden_layers")
        self.n_vocab = c.int("vocab_size")
        self.eps = c.eps("rms_norm_eps", default=1e-5)
        if c.d.get("scoring_func", "sigmoid") != "sigmoid":
            raise UnsupportedError(f"{c.path}: scoring_func = {c.d['scoring_func']!r} is not supported (only 'sigmoid')")
        self._read_kda(c)
        self._read_mla(c)
        self._read_ffn(c)
        self._read_dsa_mhc(c)
        self.n_mtp = self._mtp_layers(c)

    def _mtp_layers(self, c) -> int:
        """The MTP layers in the checkpoint (``layers.{L + j}.``, L = num_hidden_layers), 0 when it
        has none or ``no_mtp``.

        Raises:
            InputError: MTP layers that are not L, L + 1, ..., or more of them than
                num_nextn_predict_layers says, or a layer without its eh_proj."""
        want = c.int("num_nextn_predict_layers", default=0, min_value=0)
        pre = "model.language_model.layers."
        ids = sorted({int(n[len(pre):].split(".", 1)[0]) for n in self.hf.tensors if n.startswith(pre)
                      and int(n[len(pre):].split(".", 1)[0]) >= self.n_layer})
        if not ids or self.no_mtp:
            return 0
        n = len(ids)
        first = self.hf.tensors[next(t for t in self.hf.tensors if t.startswith(f"{pre}{ids[0]}."))]
        if ids != list(range(self.n_layer, self.n_layer + n)) or n > want:
            raise InputError(f"{first.path}: the checkpoint has layers {ids} after the {self.n_layer} main ones, but "
                             f"num_nextn_predict_layers = {want} (MTP layers are {self.n_layer}..{self.n_layer + want - 1})")
        for i in ids:
            if not self.has(f"{pre}{i}.eh_proj.weight"):
                raise InputError(f"{first.path}: MTP layer {i} has no tensor '{pre}{i}.eh_proj.weight'")
        return n

    def _read_kda(self, c) -> None:
        lac = self.read_kda_dims(c, n_head_default=64)
        # the gate bound (configuration_glm5_next.py:188-196): linear_attn_config.gate_lower_bound
        # over linear_lower_bound (default -5); null with safe_gate (default true) -> -5
        if "gate_lower_bound" in lac:
            lb = lac["gate_lower_bound"]
        else:
            lb = c.d.get("linear_lower_bound", -5.0)
        if lb is None and lac and lac.get("safe_gate", True) is not False:
            lb = -5.0
        if lb is not None and (isinstance(lb, bool) or not isinstance(lb, (int, float)) or not lb < 0):
            raise InputError(f"{c.path}: the KDA gate lower bound {lb!r} must be a negative number (or null: the softplus gate)")
        self.gate_lb = None if lb is None else float(lb)

    def _read_mla(self, c) -> None:
        self.n_head = c.int("num_attention_heads", default=64)
        n_kv = c.int("num_key_value_heads", default=self.n_head)
        if n_kv != self.n_head:
            raise InputError(f"{c.path}: num_key_value_heads {n_kv} must equal num_attention_heads {self.n_head}")
        if c.d.get("q_lora_rank") is None:
            raise InputError(f"{c.path}: missing key 'q_lora_rank' (GLM-5-Next's attention needs the q-LoRA latent)")
        self.q_lora_rank = c.int("q_lora_rank")
        self.kv_lora_rank = c.int("kv_lora_rank", default=512)
        self.dn = c.int("qk_nope_head_dim", default=256)
        self.dr = c.int("qk_rope_head_dim", default=0, min_value=0)
        if self.dr:
            raise UnsupportedError(f"{c.path}: qk_rope_head_dim = {self.dr}: GLM-5-Next's attention is NoPE (must be 0)")
        self.dv = c.int("v_head_dim", default=256)

    def _read_ffn(self, c) -> None:
        self.n_ff = c.int("intermediate_size")
        self.n_ff_exp = c.int("moe_intermediate_size")
        self.n_expert = read_int(c, "n_routed_experts", default=256)
        self.n_expert_used = read_int(c, "num_experts_per_tok", default=8)
        self.n_shared = read_int(c, "n_shared_experts", default=1, min_value=0)
        self.n_ff_shexp = self.n_ff_exp * self.n_shared
        self.n_group = read_int(c, "n_group", default=1)
        self.topk_group = c.int("topk_group", default=1)
        if self.topk_group > self.n_group:
            raise InputError(f"{c.path}: topk_group {self.topk_group} is larger than n_group {self.n_group}")
        if self.n_expert % self.n_group or self.n_expert // self.n_group < 2:   # HF: topk(2) per group (modeling_glm5_next.py:166)
            raise InputError(f"{c.path}: n_group {self.n_group} must divide the {self.n_expert} experts into groups of "
                             f"at least 2 (a group's score is its two best experts)")
        if self.n_expert_used > self.topk_group * (self.n_expert // self.n_group):
            raise InputError(f"{c.path}: num_experts_per_tok {self.n_expert_used} is more than the "
                             f"{self.topk_group * (self.n_expert // self.n_group)} experts of the topk_group groups kept")
        self.norm_topk = read_flag(c, "norm_topk_prob", True)
        self.scale = c.float("routed_scaling_factor", default=2.5)
        self.swiglu_limit = c.float("swiglu_limit", default=10.0)
        if not self.swiglu_limit > 0:
            raise InputError(f"{c.path}: swiglu_limit = {self.swiglu_limit} must be positive")
        self.layer_types = glm_layer_types(c, self.n_layer)
        mt = c.d.get("mlp_layer_types")
        if mt is not None:
            self.mlp_types = layer_list(c, "mlp_layer_types", mt, self.n_layer, ("dense", "sparse"))
        else:
            self.mlp_types = ["dense" if i < min(3, self.n_layer) else "sparse" for i in range(self.n_layer)]
        self.n_lead_dense = next((i for i, t in enumerate(self.mlp_types) if t != "dense"), self.n_layer)
        if "dense" in self.mlp_types[self.n_lead_dense:]:
            raise UnsupportedError(f"{c.path}: mlp_layer_types has a dense layer after a sparse one "
                                   f"(layer {self.mlp_types.index('dense', self.n_lead_dense)}); only leading dense layers "
                                   f"fit llama.cpp's layout (leading_dense_block_count)")

    def _read_dsa_mhc(self, c) -> None:
        self.idx_n_head = c.int("index_n_heads", default=32)
        self.idx_head_dim = c.int("index_head_dim", default=128)
        self.idx_top_k = c.int("index_topk", default=2048)
        self.kpool = c.int("index_kpool", default=16, min_value=-(1 << 30))
        if self.kpool < 1:
            raise InputError(f"{c.path}: index_kpool = {self.kpool} must be at least 1")
        if self.idx_top_k % self.kpool:
            raise InputError(f"{c.path}: index_topk {self.idx_top_k} must be a multiple of index_kpool {self.kpool}")
        self.select_tail = c.flag("index_kpool_always_select_tail", True)
        self.indexer_types = glm_indexer_types(c, self.n_layer)
        attn = [i for i, t in enumerate(self.layer_types) if t == "indexed_attention"]
        if attn and self.indexer_types[attn[0]] != "full":
            raise InputError(f"{c.path}: indexer_types[{attn[0]}] = 'shared' on the first attention layer (no earlier "
                             f"indexer to share)")
        self.hc = c.int("hc_mult", default=4, min_value=-(1 << 30))
        if self.hc < 1:
            raise InputError(f"{c.path}: hc_mult = {self.hc} must be at least 1")
        self.hc_iters = c.int("hc_sinkhorn_iters", default=20)
        self.hc_eps = c.eps("hc_eps", default=1e-6)

    def n_vocab_rows(self) -> int:
        return self.n_vocab

    def _keys(self) -> None:
        key, p, KD, I, HC = self.key, self.plan, Keys.KDA, Keys.Attention.Indexer, Keys.HyperConnection
        L = self.n_layer + self.n_mtp     # llama.cpp's block_count: the MTP layers included
        lead = self.kda_leading_keys(self.cfg.int("max_position_embeddings", default=1048576))
        if self.n_mtp:    # glm.py: block_count += n, head_count_kv padded with 1 (attention)
            for j, e in enumerate(lead):
                if e.key == key(Keys.LLM.BLOCK_COUNT):
                    lead[j] = kv_u32(e.key, L)
                elif e.key == key(Keys.Attention.HEAD_COUNT_KV):
                    lead[j] = kv_arr_i32(e.key, [0 if lt == "linear_attention" else 1 for lt in self.layer_types]
                                         + [1] * self.n_mtp)
        p.kv += lead
        p.kv += [
            kv_u32(key(Keys.LLM.VOCAB_SIZE), self.n_vocab),
            kv_f32(key(Keys.Attention.LAYERNORM_EPS), INDEXER_LN_EPS),
            kv_u32(key(Keys.SSM.CONV_KERNEL), self.d_conv),
            kv_u32(key(KD.HEAD_DIM), self.kda_head_dim),
        ]
        if self.n_mtp:
            p.kv.append(kv_u32(key(Keys.LLM.NEXTN_PREDICT_LAYERS), self.n_mtp))
        if self.gate_lb is not None:
            p.kv.append(kv_f32(key(KD.GATE_LOWER_BOUND), self.gate_lb))
        rkv = self.kv_lora_rank
        p.kv += [
            kv_u32(key(KD.Q_LORA_RANK), self.q_lora_rank),
            kv_u32(key(KD.KV_LORA_RANK), rkv),
            kv_u32(key(Keys.Rope.DIMENSION_COUNT), 0),
            kv_u32(key(Keys.Attention.KEY_LENGTH), rkv),
            kv_u32(key(Keys.Attention.VALUE_LENGTH), rkv),
            kv_u32(key(KD.KEY_LENGTH_MLA), self.dn),
            kv_u32(key(KD.VALUE_LENGTH_MLA), self.dv),
            kv_u32(key(I.HEAD_COUNT), self.idx_n_head),
            kv_u32(key(I.KEY_LENGTH), self.idx_head_dim),
            kv_u32(key(I.TOP_K), self.idx_top_k),
            kv_u32(key(I.KPOOL), self.kpool),
            kv_bool(key(I.KPOOL_SELECT_TAIL), self.select_tail),
            kv_arr_bool(key(I.TYPES), [t == "full" for t in self.indexer_types]),
            kv_u32(key(HC.COUNT), self.hc),
            kv_u32(key(HC.SINKHORN_ITERATIONS), self.hc_iters),
            kv_f32(key(HC.EPSILON), self.hc_eps),
            kv_u32(key(Keys.LLM.LEADING_DENSE_BLOCK_COUNT), self.n_lead_dense),
            kv_u32(key(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH), self.n_ff_exp),
            kv_u32(key(Keys.LLM.EXPERT_SHARED_COUNT), self.n_shared),
            kv_f32(key(Keys.LLM.EXPERT_WEIGHTS_SCALE), self.scale),
            kv_bool(key(Keys.LLM.EXPERT_WEIGHTS_NORM), self.norm_topk),
            kv_arr_f32(key(KD.SWIGLU_CLAMP_EXP), [self.swiglu_limit] * L),
            kv_arr_f32(key(KD.SWIGLU_CLAMP_SHEXP), [self.swiglu_limit] * L),
        ]
        # ours, only where llama.cpp's file cannot say the value
        if self.gate_lb is None:
            p.kv.append(kv_bool(key(KD.SAFE_GATE), False))
        if self.kda_n_head != self.n_head:
            p.kv.append(kv_u32(key(KD.HEAD_COUNT), self.kda_n_head))

    def _mhc(self, i: int, pre: str) -> None:
        hc, H = self.hc, self.n_embd
        M = hc * (2 + hc)
        for blk in ("attn", "ffn"):
            t = self.copy(f"blk.{i}.hc_{blk}_fn.weight", pre + f"hc_{blk}_fn", (M, hc * H), why="hc_mult x hidden_size")
            t.type = GGMLType.F32   # glm.py:575-580 keeps hc_* in F32 at any outtype
            self.copy(f"blk.{i}.hc_{blk}_base.weight", pre + f"hc_{blk}_base", (M,), why="hc_mult (2 + hc_mult)")
            self.copy(f"blk.{i}.hc_{blk}_scale.weight", pre + f"hc_{blk}_scale", (3,))

    def _indexer(self, i: int, a: str) -> None:
        H, nI, dI, rq, kp = self.n_embd, self.idx_n_head, self.idx_head_dim, self.q_lora_rank, self.kpool
        x = a + "indexer."
        self.copy(f"blk.{i}.indexer.attn_q_b.weight", x + "wq_b.weight", (nI * dI, rq),
                  why="index_n_heads x index_head_dim, q_lora_rank")
        self.copy(f"blk.{i}.indexer.attn_k.weight", x + "wk.weight", (dI, H), why="index_head_dim")
        self.copy(f"blk.{i}.indexer.k_norm.weight", x + "k_norm.weight", (dI,), why="index_head_dim")
        self.copy(f"blk.{i}.indexer.k_norm.bias", x + "k_norm.bias", (dI,), why="index_head_dim")
        self.copy(f"blk.{i}.indexer.proj.weight", x + "weights_proj.weight", (nI, H), why="index_n_heads")
        t = self.copy(f"blk.{i}.indexer_compressor_ape.weight", x + "index_kpool_compress_ape", (kp, dI),
                      why="index_kpool x index_head_dim")
        t.type = GGMLType.F32
        t = self.copy(f"blk.{i}.indexer_compressor_gate.weight", x + "index_kpool_compress_gate", (dI, H),
                      why="index_head_dim")
        t.type = GGMLType.F32

    def _mtp(self, m: str) -> None:
        """The MTP layers as llama.cpp's glm.py writes them (module docstring), or every tensor
        of them left out (``--no-mtp``)."""
        H = self.n_embd
        if not self.n_mtp:
            pre = m + "layers."
            for n in [n for n in self.hf.tensors if n.startswith(pre) and int(n[len(pre):].split(".", 1)[0]) >= self.n_layer]:
                self.omit(n, "MTP / NextN layer: --no-mtp")
            return
        for i in range(self.n_layer, self.n_layer + self.n_mtp):
            pre = f"{m}layers.{i}."
            self.copy(tn(T.NEXTN_EH_PROJ, i), pre + "eh_proj.weight", (H, 2 * H), why="hidden_size, 2 hidden_size")
            self.copy(tn(T.NEXTN_ENORM, i), pre + "enorm.weight", (H,))
            self.copy(tn(T.NEXTN_HNORM, i), pre + "hnorm.weight", (H,))
            if self.has(pre + "shared_head.norm.weight"):
                self.copy(tn(T.NEXTN_SHARED_HEAD_NORM, i), pre + "shared_head.norm.weight", (H,))
            if self.has(pre + "shared_head.head.weight"):
                self.copy(tn(T.NEXTN_SHARED_HEAD_HEAD, i), pre + "shared_head.head.weight", (self.n_vocab, H))
            if self.has(pre + "embed_tokens.weight"):
                self.copy(tn(T.NEXTN_EMBED_TOKENS, i), pre + "embed_tokens.weight", (self.n_vocab, H))
            self.copy(tn(T.ATTN_NORM, i), pre + "input_layernorm.weight", (H,))
            self.mla_tensors(i, pre + "self_attn.")
            self._indexer(i, pre + "self_attn.")      # an MTP layer runs its own indexer (glm5-next.cpp)
            self.copy(tn(T.FFN_NORM, i), pre + "post_attention_layernorm.weight", (H,))
            if self.has(pre + "mlp.gate.weight"):
                self.moe(i, pre + "mlp.", expert_names=("gate_proj", "up_proj", "down_proj"))
            else:
                self.dense_mlp(i, (pre + "mlp.",))

    def build(self):
        self.read_hparams()
        self._keys()
        H, m = self.n_embd, "model.language_model."
        for name in [n for n in self.hf.tensors if n.startswith("model.visual.")]:
            self.omit(name, "vision tower: not part of the text GGUF")
        vis = sum(n.startswith("model.visual.") for n in self.hf.tensors)
        if vis:
            msg = f"{self.hf.path}: vision tower skipped ({vis} model.visual.* tensors); converting the text model only"
            self.plan.warnings.append(msg)
            log.warning("%s", msg)
        self.copy(tn(T.TOKEN_EMBD), m + "embed_tokens.weight", (self.n_vocab, H))
        for i in range(self.n_layer):
            pre = f"{m}layers.{i}."
            self._mhc(i, pre)
            self.copy(tn(T.ATTN_NORM, i), pre + "input_layernorm.weight", (H,))
            if self.layer_types[i] == "linear_attention":
                self.kda_tensors(i, pre + "self_attn.", low_rank=True)
            else:
                self.mla_tensors(i, pre + "self_attn.")
                if self.indexer_types[i] == "full":
                    self._indexer(i, pre + "self_attn.")
            self.copy(tn(T.FFN_NORM, i), pre + "post_attention_layernorm.weight", (H,))
            if self.mlp_types[i] == "dense":
                self.dense_mlp(i, (pre + "mlp.",))
            else:
                self.moe(i, pre + "mlp.", expert_names=("gate_proj", "up_proj", "down_proj"))
        self._mtp(m)
        self.copy(tn(T.OUTPUT_NORM), m + "norm.weight", (H,))
        if self.tie:      # HF ties lm_head to embed_tokens: the output is token_embd
            if self.has("lm_head.weight"):
                self.take("lm_head.weight", (self.n_vocab, H))
                self.omit("lm_head.weight", "tie_word_embeddings: the output reuses token_embd.weight")
        else:
            self.copy(tn(T.OUTPUT), "lm_head.weight", (self.n_vocab, H), why="tie_word_embeddings is false")
        self.check_leftovers()
        return self.plan
