"""Qwen4ExpForCausalLM / Qwen4ExpForConditionalGeneration (text part), "Qwen3.8-Flash-Next"
-> GGUF ``qwen4exp``.

Sources: transformers 5.24 ``models/qwen4_exp`` (config, modeling: parameter names, shapes,
which RMSNorms are zero-centred, the n-gram hash) and llama.cpp 0c1e570 (the llama-cpp-python
0.3.36 sdist, ``vendor/llama.cpp``): ``conversion/qwen4exp.py`` with its parents
``_LinearAttentionVReorderBase`` / ``Qwen3NextModel`` / ``Qwen2MoeModel`` in
``conversion/qwen.py`` and ``TextModel`` in ``conversion/base.py`` (keys, tensor names,
transforms, always-F32 types), ``gguf-py`` (the key and tensor name strings gguf 0.19 lacks,
UINT64 hash arrays) and ``src/models/qwen4exp.cpp`` (what the runtime loads).  The converted
tiny fixture equals that converter's output in every tensor (name, shape, type, bytes) and
key, except as listed below.

Glossary: D = hidden_size, L = layers, V = vocab rows, hc = hc_count (residual streams),
HD = hc * D, r = hc_lowrank; attention: Hq, Hkv heads of hd = head_dim, rot = hd *
partial_rotary_factor; QSA indexer: Hi heads of di = indexer_head_dim (one key head);
gated delta net: Hk key heads, Hv value heads, dk / dv head dims, Kc = linear_conv_kernel_dim,
conv_dim = 2 Hk dk + Hv dv; MoE: E experts of width F, shared expert width Fs;
PLE: P = ple_embed_dim, n = ngram_size, h = heads_per_ngram, Hp = (n - 1) h heads of
dp = P / Hp, Kp = ple_conv_kernel_size, R = rows of the n-gram table.

HF tensor (numpy shape)                                  GGUF tensor
model.embed_tokens [V, D]                                token_embd.weight
lm_head [V, D]                                           output.weight
model.hyper_connection_mixer.hc_norm [HD] (+1)           output_hc_norm.weight  (no output_norm)
  .input_mix_weight_down [r, HD] / _up [HD, r]           output_hc_down / output_hc_up
layers.i.{attn,mlp}_hyper_connection.hc_norm [HD] (+1)   blk.i.hc_{attn,ffn}_norm
  .input_mix_weight_down / _up / block_inject [hc, HD]   blk.i.hc_{attn,ffn}_{down,up,inject}
linear layer: linear_attn.in_proj_qkv [2Hk dk + Hv dv, D] blk.i.attn_qkv    (V rows reordered)
  in_proj_z [Hv dv, D]                                   blk.i.attn_gate    (reordered)
  in_proj_b / in_proj_a [Hv, D]                          blk.i.ssm_beta / ssm_alpha (reordered)
  A_log [Hv]                                             blk.i.ssm_a = -exp(A_log) (reordered)
  dt_bias [Hv]                                           blk.i.ssm_dt.bias  (reordered)
  conv1d [conv_dim, 1, Kc]                               blk.i.ssm_conv1d [conv_dim, Kc] (squeeze, V rows reordered)
  norm [dv] (RMSNormGated, not zero-centred)             blk.i.ssm_norm
  out_proj [D, Hv dv]                                    blk.i.ssm_out      (V columns reordered)
attention layer: self_attn.q_proj [2 Hq hd, D]           blk.i.attn_q       (query|gate per head, as stored)
  k_proj / v_proj / o_proj                               blk.i.attn_k / attn_v / attn_output
  q_norm / k_norm [hd] (+1)                              blk.i.attn_q_norm / attn_k_norm
  indexer.index_qk_proj [(Hi + 1) di, D]                 blk.i.indexer.q_proj [Hi di, D] + indexer.k_proj [di, D]
  indexer.q_layernorm / k_layernorm [di] (+1)            blk.i.indexer.q_norm / indexer.k_norm
mlp.gate [E, D]                                          blk.i.ffn_gate_inp
mlp.experts.{e}.{gate,up}_proj [F, D], down [D, F]       blk.i.ffn_{gate,up}_exps [E, F, D], ffn_down_exps [E, D, F]
  (or fused experts.gate_up_proj [E, 2F, D] / down_proj)   (split into gate | up)
mlp.shared_expert.{gate,up,down}_proj                    blk.i.ffn_{gate,up,down}_shexp
mlp.shared_expert_gate [1, D]                            blk.i.ffn_gate_inp_shexp
PLE layer: ple.key_proj [HD, P] / value_proj [D, P]      blk.i.ple_key / ple_value
  ple.norm_{key,query,conv} [HD] (+1)                    blk.i.ple_norm_{key,query,conv}
  ple.conv1d [HD, 1, Kp]                                 blk.i.ple_conv1d [HD, Kp] (squeeze, F32)
  ple.ple_embedding.ngram_embedding.shard_K [R_K, dp]    per_layer_token_embd [R, dp]: shard K at rows sum(R_0..R_{K-1})
  ple.ple_embedding.{layer_multipliers,ngram_heads_offsets,ngram_heads_vocab_sizes} (int64)
                                                         {arch}.ple.* UINT64 key/values (exact)

Why each transform (each runs exactly once, per band, in ``convert``):
- +1 on zero-centred gammas: HF's Qwen4ExpTextRMSNorm computes x * (1 + w); llama.cpp
  multiplies by the stored gamma.  The gated delta net's RMSNormGated multiplies by w itself.
- V-head reorder: HF groups value heads by key head [k0: v0..v(r-1), k1: ...]; llama.cpp
  broadcasts key heads tiled [k0, k1, ..., k0, k1, ...], so value heads move to
  (j, k) <- (k, j) (``_LinearAttentionVReorderBase``), only when Hk != Hv.
- A = -exp(A_log): llama.cpp's gated delta net multiplies by A (Qwen3NextModel).
- conv1d squeeze: [C, 1, K] -> [C, K], the layout ggml_ssm_conv takes.

Where we differ from llama.cpp's converter (each said in a test):
- ``attention.compress_ratios``: llama.cpp sets the ratio only where ``layer_types[i] ==
  "full_attention"``, but transformers 5.24 rewrites that spelling to ``"indexed_attention"``, so
  llama.cpp writes all zeros; we write the ratio on every attention layer.
- ``ple.eos_token_id`` from a list ``eos_token_id``: HF's n-gram hash resets on
  ``eos_token_id[0]`` (Qwen4ExpTextNGramEmbedding); llama.cpp writes ``eos_token_id[-1]``.
  We write what the hash uses.
- the per_layer_token_embd table is streamed shard by shard into its final rows (one band
  resident), never concatenated in memory.
- +1 and -exp on an F16 checkpoint are computed after widening to float32 (as HF's
  forward does, ``1.0 + weight.float()``); llama.cpp computes them in float16 (BF16 it widens
  to float32 first, as we do).  Identical on F32 and BF16 checkpoints.
- we also write ``{arch}.attention.layer_indices`` (every hybrid here carries it).
"""
from __future__ import annotations

import re

import numpy as np

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.activation import ffn_act_kv, ssm_act_kv
from toolkit.convert.config_keys import ConfigKeys
from toolkit.convert.rope_scaling import SCALED_ROPE_TYPES, SCALED_WHY, rope_scaling_kv
from toolkit.convert.families.qwen_gdn import QWEN_MOE_READ, QWEN_READ, VL_IRRELEVANT, QwenGDNFamily, text_config
from toolkit.convert.plan import KV, Segment, kv_arr_i32, kv_f32, kv_str, kv_u32
from toolkit.convert.st_reader import STTensor, ShardReader
from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import Keys
from toolkit.gguf_io.constants import ARCH_QWEN4EXP, GGUFValueType

_P = r"model\.(?:language_model\.)?"          # text weights: model.* or model.language_model.*
_L = _P + r"layers\.\d+\."
_HC = r"(?:hc_norm|input_mix_weight_down|input_mix_weight_up|block_inject_weight)\.weight"
_NGRAM = "ple_embedding."

# layer_types spellings of an attention layer: transformers 5.24 writes "indexed_attention"
# (and rewrites the real checkpoint's "full_attention" to it); "linear_attention" is the GDN.
_ATTN_TYPES = ("indexed_attention", "full_attention")
_LINEAR_TYPES = ("linear_attention",)
_INT_DTYPES = {"I64": "<i8", "I32": "<i4"}


def kv_arr_u64(key: str, v: list[int]) -> KV:
    """A UINT64 array key/value; the values stay Python ints end to end (exact up to 2^64 - 1)."""
    return KV(key, [int(x) for x in v], GGUFValueType.ARRAY, GGUFValueType.UINT64)


def read_int_tensor(t: STTensor) -> list[int]:
    """The values of an integer safetensors tensor as Python ints (never through a float).

    Raises:
        InputError: a non-integer dtype (a float cannot hold 45-bit hash constants exactly)
            or a negative value (the GGUF keys are UINT64); names the file and tensor.
    """
    if t.dtype not in _INT_DTYPES:
        raise InputError(f"{t.path}: tensor {t.name!r} has dtype {t.dtype}; the PLE hash constants must be "
                         f"stored as integers (I64), a float cannot hold them exactly")
    buf = bytearray(t.nbytes)
    with ShardReader() as rd:
        rd.read_into(t, 0, memoryview(buf))
    vals = [int(x) for x in np.frombuffer(bytes(buf), dtype=_INT_DTYPES[t.dtype]).tolist()]
    if any(x < 0 for x in vals):
        raise InputError(f"{t.path}: tensor {t.name!r} has a negative value ({min(vals)}); expected unsigned hash constants")
    return vals


class Qwen4ExpFamily(QwenGDNFamily):
    hf_archs = ("Qwen4ExpForCausalLM", "Qwen4ExpForConditionalGeneration")
    hf_configs = ("Qwen4ExpTextConfig", "Qwen4ExpConfig")
    config_keys = ConfigKeys.of(
        # (no intermediate_size: Qwen4ExpTextConfig has none, the text model has no dense MLP)
        " ".join(k for k in QWEN_READ.split() if k != "intermediate_size") + " " + QWEN_MOE_READ + " norm_topk_prob hidden_act hc_count hc_lowrank ple_layer_ids ple_embed_dim ple_conv_kernel_size "
        "ngram_size heads_per_ngram split_ngram_parts indexer_n_heads indexer_kv_heads indexer_head_dim indexer_budget "
        "indexer_compress_ratio output_gate_type image_token_id eos_token_id full_attention_interval",
        irrelevant={**{k: v for k, v in VL_IRRELEVANT.items() if k != "image_token_id"},
                    **{k: "the n-gram hash's sizes and multipliers it sets are stored in the checkpoint (hash-constant "
                          "buffers, the n-gram table's shape), which convert reads" for k in (
                        "seed", "ngram_vocab_size_base", "make_ngram_vocab_size_divisible_by")}},
        rope_types=SCALED_ROPE_TYPES, rope_why=SCALED_WHY)
    families = ("Qwen3.8-Flash-Next (qwen4exp)",)
    vllm = False
    arch = ARCH_QWEN4EXP
    known = (
        r"lm_head\.weight",
        _P + r"embed_tokens\.weight",
        _P + r"hyper_connection_mixer\.(?:hc_norm|input_mix_weight_down|input_mix_weight_up)\.weight",
        _L + r"(?:attn|mlp)_hyper_connection\." + _HC,
        _L + r"linear_attn\.(?:in_proj_qkv\.weight|in_proj_z\.weight|in_proj_a\.weight|in_proj_b\.weight|"
             r"A_log|dt_bias|conv1d\.weight|norm\.weight|out_proj\.weight)",
        _L + r"self_attn\.(?:q_proj|k_proj|v_proj|o_proj|q_norm|k_norm)\.weight",
        _L + r"self_attn\.[qkvo]_proj\.bias",     # attention_bias (q's [2 Hq hd] with the gate half)
        _L + r"self_attn\.indexer\.(?:index_qk_proj|q_layernorm|k_layernorm)\.weight",
        _L + r"mlp\.(?:gate|shared_expert_gate)\.weight",
        _L + r"mlp\.shared_expert\.(?:gate_proj|up_proj|down_proj)\.weight",
        _L + r"mlp\.experts\.\d+\.(?:gate_proj|up_proj|down_proj)\.weight",
        _L + r"mlp\.experts\.(?:gate_up_proj|down_proj)(?:\.weight)?",
        _L + r"ple\.(?:key_proj|value_proj|norm_key|norm_query|norm_conv|conv1d)\.weight",
        _L + r"ple\.ple_embedding\.ngram_embedding\.(?:shard_\d+\.)?weight",
        _L + r"ple\.ple_embedding\.(?:layer_multipliers|ngram_heads_offsets|ngram_heads_vocab_sizes)",
        r"model\.visual\..*",      # Qwen3-VL vision tower of ForConditionalGeneration: not text
        r"mtp\..*",                # NextN / MTP draft head
    )
    int_known = (_L + r"ple\.ple_embedding\.(?:layer_multipliers|ngram_heads_offsets|ngram_heads_vocab_sizes)",)

    # ---- hparams --------------------------------------------------------------------------
    def read_hparams(self) -> None:
        # llama.cpp's ModelBase merges text_config into the root (image_token_id stays at the root)
        c = self.c = text_config(self.cfg)
        self.prefix = "model.language_model." if any(n.startswith("model.language_model.") for n in self.hf.tensors) else "model."
        self.n_embd = c.int("hidden_size")
        self.n_layer = c.int("num_hidden_layers")
        self.n_vocab = c.int("vocab_size")
        self.eps = c.eps("rms_norm_eps", default=1e-6)
        self.n_ctx = c.int("max_position_embeddings", default=32768)
        # ---- hyper-connections ----
        self.hc = c.int("hc_count", default=4, min_value=2)
        self.hc_lowrank = c.int("hc_lowrank", default=320)
        # ---- layer kinds ----
        lt = c.d.get("layer_types")
        if lt is None:
            interval = c.int("full_attention_interval", default=4)
            self.attn_layers = [i for i in range(self.n_layer) if (i + 1) % interval == 0]
        else:
            if not isinstance(lt, list) or len(lt) != self.n_layer:
                raise InputError(f"{c.path}: key 'layer_types' must be a list of {self.n_layer} layer types, got {lt!r}")
            for i, t in enumerate(lt):
                if t not in _ATTN_TYPES + _LINEAR_TYPES:
                    raise UnsupportedError(f"{c.path}: key 'layer_types'[{i}] = {t!r} is not supported; "
                                           f"supported: {', '.join(_ATTN_TYPES + _LINEAR_TYPES)}")
            self.attn_layers = [i for i, t in enumerate(lt) if t in _ATTN_TYPES]
        # llama.cpp writes full_attention_interval as config.json has it (default 4) and the
        # runtime prefers the explicit attention.recurrent_layers, which we write from the same list
        self.interval = c.int("full_attention_interval", default=4)
        # ---- attention ----
        self.read_attention(c, "qwen4exp")     # head_dim default 256, Qwen4ExpTextConfig's
        prf = c.rope("partial_rotary_factor", 1.0)
        if not isinstance(prf, (int, float)) or not (0 < prf <= 1):
            raise InputError(f"{c.path}: partial_rotary_factor = {prf!r} must be in (0, 1]")
        self.n_rot = int(self.head_dim * prf)
        self.rope_theta = float(c.rope("rope_theta", 10000.0))
        sections = c.rope("mrope_section", [11, 11, 10])   # Qwen4ExpTextRotaryEmbedding's default
        if (not isinstance(sections, list) or not 1 <= len(sections) <= 4
                or not all(isinstance(s, int) and s >= 0 for s in sections)):
            raise InputError(f"{c.path}: rope_parameters.mrope_section = {sections!r} must list up to 4 non-negative ints")
        # interleaved M-RoPE: section s takes rotary pairs s, s+3, ... (HF recomposition_frequencies),
        # so the sections must fit the rot/2 frequency pairs (llama.cpp aborts otherwise)
        if sum(sections) > self.n_rot // 2:
            raise InputError(f"{c.path}: rope_parameters.mrope_section {sections} sums to {sum(sections)}, more than the "
                             f"{self.n_rot // 2} rotary pairs of head_dim {self.head_dim} x partial_rotary_factor {prf}")
        self.mrope_sections = list(sections) + [0] * (4 - len(sections))
        # ---- QSA indexer ----
        self.idx_n_head = c.int("indexer_n_heads")
        self.idx_head_dim = c.int("indexer_head_dim")
        self.idx_kv_heads = c.int("indexer_kv_heads", default=1)
        if self.idx_kv_heads != 1:
            raise UnsupportedError(f"{c.path}: indexer_kv_heads = {self.idx_kv_heads}; Qwen4-Exp QSA has one key head")
        self.idx_top_k = c.int("indexer_budget")
        self.compress_ratio = c.int("indexer_compress_ratio")
        # ---- gated delta net ----
        self.read_gdn(c)
        # ---- MoE ----
        self.read_moe(c)
        # ---- PLE ----
        ple_ids = c.get("ple_layer_ids", default=[])
        if not isinstance(ple_ids, list) or not all(isinstance(i, int) and 1 <= i <= self.n_layer for i in ple_ids):
            raise InputError(f"{c.path}: key 'ple_layer_ids' = {ple_ids!r} must list 1-based layer ids in [1, {self.n_layer}]")
        # HF is 1-based, GGUF 0-based; PLE module j (HF ple_layer_ids.index) is the j-th in this order
        self.ple_layers = [i - 1 for i in dict.fromkeys(ple_ids)]
        if self.ple_layers != sorted(self.ple_layers):
            raise InputError(f"{c.path}: key 'ple_layer_ids' = {ple_ids!r} must be ascending")
        # the gated delta net's output gate: HF Qwen4ExpTextRMSNormGated(activation=output_gate_type
        # or hidden_act); llama.cpp hard-codes sigmoid and writes nothing (docs/specs/gdn-family.md B3), we write the key
        gate = c.get("output_gate_type") or c.get("hidden_act", "silu")
        if gate not in ("silu", "swish", "sigmoid"):
            raise UnsupportedError(f"{c.path}: output_gate_type / hidden_act = {gate!r}: the gated delta net's output "
                                   f"gate must be silu or sigmoid")
        self.output_gate = "sigmoid" if gate == "sigmoid" else "silu"
        for i in self.ple_layers:
            if i in self.attn_layers:
                raise InputError(f"{c.path}: ple_layer_ids names layer {i + 1} (1-based), an attention layer; "
                                 f"PLE is only supported on linear_attention layers")
        if self.ple_layers:
            self.ngram_size = c.int("ngram_size", default=3, min_value=2)
            self.heads_per_ngram = c.int("heads_per_ngram", default=8)
            self.ple_conv_kernel = c.int("ple_conv_kernel_size", default=4)
            self.ple_embed_dim = c.int("ple_embed_dim", default=self.n_embd)
            self.ple_n_heads = (self.ngram_size - 1) * self.heads_per_ngram
            if self.ple_embed_dim % self.ple_n_heads:
                raise InputError(f"{c.path}: ple_embed_dim {self.ple_embed_dim} is not a multiple of the "
                                 f"{self.ple_n_heads} n-gram heads ((ngram_size - 1) x heads_per_ngram)")
            self.split_ngram_parts = c.int("split_ngram_parts", default=512)
            self.ple_eos = self._ple_eos_id()
            img = c.get("image_token_id")
            self.image_token_id = None if img is None else c.int("image_token_id", min_value=0)

    def _ple_eos_id(self) -> int:
        """The token that restarts the PLE n-grams: HF's ``eos_token_id``, the first one of a
        list (Qwen4ExpTextNGramEmbedding: ``eos_token_id[0] if isinstance(.., list)``)."""
        eos = self.c.get("eos_token_id")
        if isinstance(eos, list):
            eos = eos[0] if eos else None
        if eos is None:
            raise InputError(f"{self.c.path}: missing key 'eos_token_id': the PLE n-gram hash (ple_layer_ids "
                             f"{[i + 1 for i in self.ple_layers]}) restarts its n-grams on it")
        if isinstance(eos, bool) or not isinstance(eos, int) or eos < 0:
            raise InputError(f"{self.c.path}: key 'eos_token_id' = {eos!r} is not a token id")
        return eos

    def n_vocab_rows(self) -> int:
        return self.n_vocab

    # ---- plan -----------------------------------------------------------------------------
    def build(self):
        self.read_hparams()
        key, p = self.key, self.plan
        L, D = self.n_layer, self.n_embd
        # bound the per-layer lists by the checkpoint before building any (num_hidden_layers = 10**9)
        self.check_layers(self.c, self.prefix, L)
        attn = set(self.attn_layers)
        p.kv += [
            kv_u32(key(Keys.LLM.BLOCK_COUNT), L),
            kv_u32(key(Keys.LLM.CONTEXT_LENGTH), self.n_ctx),
            kv_u32(key(Keys.LLM.EMBEDDING_LENGTH), D),
            kv_u32(key(Keys.Attention.HEAD_COUNT), self.n_head),
            kv_u32(key(Keys.Attention.HEAD_COUNT_KV), self.n_head_kv),
            kv_arr_i32(key(Keys.Rope.DIMENSION_SECTIONS), self.mrope_sections),
            kv_f32(key(Keys.Rope.FREQ_BASE), self.rope_theta),
            *rope_scaling_kv(self.c, key),     # llama.cpp's rope.scaling.*: the attention's and the indexer's RoPE
            kv_f32(key(Keys.Attention.LAYERNORM_RMS_EPS), self.eps),
            kv_u32(key(Keys.LLM.EXPERT_COUNT), self.n_expert),
            kv_u32(key(Keys.LLM.EXPERT_USED_COUNT), self.n_expert_used),
            *self.moe_norm_kv(),
            kv_u32(key(Keys.Attention.KEY_LENGTH), self.head_dim),
            kv_u32(key(Keys.Attention.VALUE_LENGTH), self.head_dim),
            kv_u32(key(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH), self.n_ff_exp),
            kv_u32(key(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH), self.n_ff_shexp),
            *self.gdn_kv(),
            KV(key(Keys.Attention.RECURRENT_LAYERS), [i not in attn for i in range(L)], GGUFValueType.ARRAY,
               GGUFValueType.BOOL),
            kv_u32(key(Keys.LLM.FULL_ATTENTION_INTERVAL), self.interval),
            kv_u32(key(Keys.Rope.DIMENSION_COUNT), self.n_rot),
            kv_u32(key(Keys.HyperConnection.COUNT), self.hc),
            kv_u32(key(Keys.HyperConnection.LOW_RANK), self.hc_lowrank),
            kv_u32(key(Keys.Attention.Indexer.HEAD_COUNT), self.idx_n_head),
            kv_u32(key(Keys.Attention.Indexer.KEY_LENGTH), self.idx_head_dim),
            kv_u32(key(Keys.Attention.Indexer.TOP_K), self.idx_top_k),
            # the ratio on every attention layer (llama.cpp matches only "full_attention", which
            # transformers 5.24 no longer writes, and so writes zeros)
            kv_arr_i32(key(Keys.Attention.COMPRESS_RATIOS), [self.compress_ratio if i in attn else 0 for i in range(L)]),
            # ours, as every hybrid here: the explicit attention layer list
            kv_arr_i32(key(Keys.Attention.LAYER_INDICES), sorted(attn)),
            # ours: the gated delta net's output gate activation (llama.cpp assumes sigmoid)
            kv_str(key(Keys.SSM.OUTPUT_GATE_TYPE), self.output_gate),
        ]
        # hidden_act also sets the GDN conv's act (causal_conv1d_fn activation=) and the MLP / experts' gate
        # (ACT2FN[hidden_act]); each key written only when not silu (hidden_act "sigmoid", the only other value
        # the output gate check above lets through, was run as SiLU there before)
        p.kv += ffn_act_kv(self.c.path, self.c.d, key) + ssm_act_kv(self.c.path, self.c.d, key)
        self._ple_consts: dict[str, list[int]] = {"layer_multipliers": [], "ngram_heads_offsets": [],
                                                  "ngram_heads_vocab_sizes": []}
        self._ple_row_dim = 0

        pre = self.prefix
        self.copy(tn(T.TOKEN_EMBD), pre + "embed_tokens.weight", (self.n_vocab, D))
        self._hyper_connection(pre + "hyper_connection_mixer.", T.HC_HEAD_NORM, T.HC_HEAD_DOWN, T.HC_HEAD_UP, None, None)
        for i in range(L):
            lp = f"{pre}layers.{i}."
            self._hyper_connection(lp + "attn_hyper_connection.", T.HC_ATTN_NORM, T.HC_ATTN_DOWN, T.HC_ATTN_UP, T.HC_ATTN_INJECT, i)
            self._hyper_connection(lp + "mlp_hyper_connection.", T.HC_FFN_NORM, T.HC_FFN_DOWN, T.HC_FFN_UP, T.HC_FFN_INJECT, i)
            if i in attn:
                self._attention(i, lp + "self_attn.")
            else:
                self.gated_delta_net(i, lp + "linear_attn.")
            self.moe(i, lp + "mlp.")
            if i in self.ple_layers:
                self._ple(i, lp + "ple.", self.ple_layers.index(i))
        if self.ple_layers:
            self._ple_keys()
        self.tied_output(pre + "embed_tokens.weight", "lm_head.weight", self.n_vocab, D, tie_default=False)
        self.omit_vision()
        mtp = [n for n in self.hf.tensors if n.startswith("mtp.")]
        for name in mtp:
            self.omit(name, "MTP / NextN draft head: not converted")
        if mtp:
            p.warnings.append(f"{len(mtp)} mtp.* tensors (the MTP draft head) were not converted")
        self.check_leftovers()
        return p

    # ---- pieces -----------------------------------------------------------------------------
    def _hyper_connection(self, hp: str, norm: str, down: str, up: str, inject: str | None, bid: int | None) -> None:
        HD, r = self.hc * self.n_embd, self.hc_lowrank
        # the gamma stays 1-D [HD]; llama.cpp loads it as [D, hc] (TENSOR_ALLOW_RESHAPE)
        self.plus_one(tn(norm, bid), hp + "hc_norm.weight", (HD,))
        self.copy(tn(down, bid), hp + "input_mix_weight_down.weight", (r, HD))
        self.copy(tn(up, bid), hp + "input_mix_weight_up.weight", (HD, r))
        if inject is not None:
            self.copy(tn(inject, bid), hp + "block_inject_weight.weight", (self.hc, HD))

    def _attention(self, i: int, a: str) -> None:
        D = self.n_embd
        self.gated_attention(i, a)
        # one projection feeds the indexer's Hi query heads then its single key head: split rows
        nq, di = self.idx_n_head * self.idx_head_dim, self.idx_head_dim
        t = self.take(a + "indexer.index_qk_proj.weight", (nq + di, D))
        self.emit(tn(T.INDEXER_Q_PROJ, i), (nq, D), [Segment(t, 0, nq)], note="rows [0, Hi di) of index_qk_proj")
        self.emit(tn(T.INDEXER_K_PROJ, i), (di, D), [Segment(t, nq, di)], note="rows [Hi di, (Hi + 1) di) of index_qk_proj")
        self.plus_one(tn(T.INDEXER_Q_NORM, i), a + "indexer.q_layernorm.weight", (di,))
        self.plus_one(tn(T.INDEXER_K_NORM, i), a + "indexer.k_layernorm.weight", (di,))

    def _ple(self, i: int, pp: str, j: int) -> None:
        """PLE layer i, module j: its tensors, its n-gram table (the first module's is llama.cpp's
        global ``per_layer_token_embd``, a later one's ``blk.i.per_layer_token_embd``, ours) and
        its hash constants (appended to the module-ordered key arrays, :meth:`_ple_keys`)."""
        D, HD, P = self.n_embd, self.hc * self.n_embd, self.ple_embed_dim
        self.copy(tn(T.PLE_KEY, i), pp + "key_proj.weight", (HD, P))
        self.copy(tn(T.PLE_VALUE, i), pp + "value_proj.weight", (D, P))
        self.plus_one(tn(T.PLE_NORM_KEY, i), pp + "norm_key.weight", (HD,))
        self.plus_one(tn(T.PLE_NORM_QUERY, i), pp + "norm_query.weight", (HD,))
        self.plus_one(tn(T.PLE_NORM_CONV, i), pp + "norm_conv.weight", (HD,))
        t = self.take(pp + "conv1d.weight", (HD, 1, self.ple_conv_kernel))
        self.emit(tn(T.PLE_CONV1D, i), (HD, self.ple_conv_kernel), [Segment(t, 0, HD)], note="squeeze")

        # ---- the hash constants: int64 in the checkpoint, exact UINT64 key/values here ----
        ng = pp + _NGRAM
        consts = {}
        for name, n in (("layer_multipliers", self.ngram_size), ("ngram_heads_offsets", self.ple_n_heads),
                        ("ngram_heads_vocab_sizes", self.ple_n_heads)):
            t = self.take(ng + name, (n,), why="one value per n-gram order" if n == self.ngram_size else "one value per n-gram head")
            consts[name] = read_int_tensor(t)
            self._ple_consts[name] += consts[name]
            self.omit(ng + name, "written as an exact UINT64 key/value")

        # ---- the n-gram table: shards straight into their final rows ----
        segs, row_dim = self._ple_segments(ng + "ngram_embedding.")
        rows = sum(s.n_rows for s in segs)
        need = max(o + v for o, v in zip(consts["ngram_heads_offsets"], consts["ngram_heads_vocab_sizes"]))
        if rows < need:
            raise InputError(f"{segs[-1].src.path}: the PLE n-gram table has {rows} rows, but its head ranges "
                             f"(ngram_heads_offsets + ngram_heads_vocab_sizes) reach row {need}")
        if row_dim * self.ple_n_heads != P:
            raise InputError(f"{segs[0].src.path}: PLE table rows have {row_dim} elements, config.json implies "
                             f"ple_embed_dim {P} / {self.ple_n_heads} n-gram heads = {P // self.ple_n_heads}")
        if self._ple_row_dim and row_dim != self._ple_row_dim:
            raise InputError(f"{segs[0].src.path}: PLE layer {i + 1}'s table rows have {row_dim} elements, "
                             f"the first PLE layer's {self._ple_row_dim}")
        self._ple_row_dim = row_dim
        name = tn(T.PER_LAYER_TOKEN_EMBD) if j == 0 else f"blk.{i}.{tn(T.PER_LAYER_TOKEN_EMBD)}"
        self.emit(name, (rows, row_dim), segs,
                  note=f"{len(segs)} shards, each written at its row offset" if len(segs) > 1 else "")

    def _ple_keys(self) -> None:
        """The PLE keys, once: one PLE layer gives exactly llama.cpp's; with several, ple.layers lists
        them and each UINT64 array holds their sets in that order (ours)."""
        key, p, consts, row_dim = self.key, self.plan, self._ple_consts, self._ple_row_dim
        p.kv += [
            kv_arr_i32(key(Keys.PerLayerEmbedding.LAYERS), self.ple_layers),
            kv_u32(key(Keys.PerLayerEmbedding.NGRAM_SIZE), self.ngram_size),
            kv_u32(key(Keys.PerLayerEmbedding.HEADS_PER_NGRAM), self.heads_per_ngram),
            kv_u32(key(Keys.PerLayerEmbedding.CONV_KERNEL), self.ple_conv_kernel),
            kv_u32(key(Keys.PerLayerEmbedding.EOS_TOKEN_ID), self.ple_eos),
        ]
        if self.image_token_id is not None:
            p.kv.append(kv_u32(key(Keys.PerLayerEmbedding.IMAGE_TOKEN_ID), self.image_token_id))
        p.kv += [
            kv_u32(key(Keys.LLM.EMBD_LENGTH_PER_LAYER_INP), row_dim),
            kv_arr_u64(key(Keys.PerLayerEmbedding.LAYER_MULTIPLIERS), consts["layer_multipliers"]),
            kv_arr_u64(key(Keys.PerLayerEmbedding.HEAD_OFFSETS), consts["ngram_heads_offsets"]),
            kv_arr_u64(key(Keys.PerLayerEmbedding.HEAD_VOCAB_SIZES), consts["ngram_heads_vocab_sizes"]),
        ]

    def _ple_segments(self, base: str) -> tuple[list[Segment], int]:
        """One segment per ``base + shard_K.weight``, K = 0 .. split_ngram_parts - 1, in K order
        whatever file or order they come in; the row counts are the shards' own (headers).

        Raises:
            InputError: a missing shard, a shard index >= split_ngram_parts, shards that
                disagree on the row width, or a shard other than the last whose row count
                differs from shard 0's (names the shard and its file).
        """
        if self.has(base + "weight"):   # an unsharded table
            t = self.take(base + "weight")
            if len(t.shape) != 2 or t.shape[0] == 0:
                raise InputError(f"{t.path}: tensor {t.name!r} has shape {list(t.shape)}, expected [rows, row_dim]")
            return [Segment(t, 0, t.shape[0])], t.shape[1]
        found: dict[int, str] = {}
        pat = re.compile(re.escape(base) + r"shard_(\d+)\.weight")
        for name in self.hf.tensors:
            m = pat.fullmatch(name)
            if m:
                k = int(m.group(1))
                if k in found:
                    t = self.hf.tensors[name]
                    raise InputError(f"{t.path}: tensors {found[k]!r} and {name!r} are both PLE shard {k}")
                found[k] = name
        n = self.split_ngram_parts
        if not found:
            raise InputError(f"{self.hf.path}: missing tensor {base + 'shard_0.weight'!r} (the PLE n-gram table, "
                             f"split_ngram_parts = {n} shards)")
        extra = sorted(k for k in found if k >= n)
        if extra:
            t = self.hf.tensors[found[extra[0]]]
            raise InputError(f"{t.path}: tensor {t.name!r}: shard index {extra[0]} >= split_ngram_parts {n} (config.json)")
        if len(found) < n:   # every found index is < n, so some are missing (never build a list of n)
            first = next(k for k in range(n) if k not in found)
            more = f" and {n - len(found) - 1} more" if n - len(found) > 1 else ""
            raise InputError(f"{self.hf.path}: missing tensor {base}shard_{first}.weight{more} "
                             f"(config.json: split_ngram_parts = {n})")
        shards = [self.take(found[k]) for k in range(n)]
        first = shards[0]
        for t in shards:
            if len(t.shape) != 2 or t.shape[0] == 0 or t.shape[1] == 0:
                raise InputError(f"{t.path}: PLE shard {t.name!r} has shape {list(t.shape)}, expected [rows, row_dim]")
            if t.shape[1] != first.shape[1]:
                raise InputError(f"{t.path}: PLE shard {t.name!r} has rows of {t.shape[1]} elements, "
                                 f"shard 0 ({first.path}) has {first.shape[1]}")
        for t in shards[:-1]:
            if t.shape[0] != first.shape[0]:
                raise InputError(f"{t.path}: PLE shard {t.name!r} has {t.shape[0]} rows, shard 0 has {first.shape[0]}; "
                                 f"every shard but the last must have the same row count")
        return [Segment(t, 0, t.shape[0]) for t in shards], first.shape[1]
