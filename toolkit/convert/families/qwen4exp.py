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
- +1 and -exp on a BF16/F16 checkpoint are computed after widening to float32 (as HF's
  forward does, ``1.0 + weight.float()``); llama.cpp computes them in the source dtype first.
  Identical on float32 checkpoints.
- we also write ``{arch}.attention.layer_indices`` (every hybrid here carries it).
"""
from __future__ import annotations

import re

import numpy as np

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.base import Family
from toolkit.convert.hfdir import Config
from toolkit.convert.plan import KV, Segment, kv_arr_i32, kv_f32, kv_u32
from toolkit.convert.st_reader import STTensor, ShardReader
from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import GGMLType, Keys
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


def v_head_perm(n_k: int, n_v: int, head_dim: int) -> np.ndarray:
    """Order that moves value heads from HF's grouped-by-key-head layout to llama.cpp's tiled one.

    HF: V heads [k0: v0..v(r-1), k1: v0..v(r-1), ...] with r = n_v / n_k; llama.cpp (ggml
    broadcast): [k0 v0, k1 v0, ..., k0 v1, k1 v1, ...].  Output element (j, k, d) <- source
    (k, j, d), i.e. ``perm[(j n_k + k) hd + d] = (k r + j) hd + d``.
    Shape: int64 [n_v * head_dim].  ref: llama.cpp conversion/qwen.py
    ``_LinearAttentionVReorderBase._reorder_v_heads``.
    """
    r = n_v // n_k
    return np.arange(n_k * r * head_dim, dtype=np.int64).reshape(n_k, r, head_dim).transpose(1, 0, 2).reshape(-1)


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


class Qwen4ExpFamily(Family):
    hf_archs = ("Qwen4ExpForCausalLM", "Qwen4ExpForConditionalGeneration")
    arch = ARCH_QWEN4EXP
    known = (
        r"lm_head\.weight",
        _P + r"embed_tokens\.weight",
        _P + r"hyper_connection_mixer\.(?:hc_norm|input_mix_weight_down|input_mix_weight_up)\.weight",
        _L + r"(?:attn|mlp)_hyper_connection\." + _HC,
        _L + r"linear_attn\.(?:in_proj_qkv\.weight|in_proj_z\.weight|in_proj_a\.weight|in_proj_b\.weight|"
             r"A_log|dt_bias|conv1d\.weight|norm\.weight|out_proj\.weight)",
        _L + r"self_attn\.(?:q_proj|k_proj|v_proj|o_proj|q_norm|k_norm)\.weight",
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
        d = self.cfg.d
        if isinstance(d.get("text_config"), dict):
            # llama.cpp's ModelBase merges text_config into the root (image_token_id stays at the root)
            c = Config(self.cfg.path, {**d, **d["text_config"]})
        else:
            c = self.cfg
        self.c = c
        self.prefix = "model.language_model." if any(n.startswith("model.language_model.") for n in self.hf.tensors) else "model."
        self.n_embd = c.int("hidden_size")
        self.n_layer = c.int("num_hidden_layers")
        self.n_vocab = c.int("vocab_size")
        self.eps = c.float("rms_norm_eps", default=1e-6)
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
        self.n_head = c.int("num_attention_heads")
        self.n_head_kv = c.int("num_key_value_heads")
        self.head_dim = c.int("head_dim", default=256)   # Qwen4ExpTextConfig's default
        if c.d.get("attention_bias"):
            raise UnsupportedError(f"{c.path}: attention_bias = true is not supported (llama.cpp's qwen4exp has no attention biases)")
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
        self.d_conv = c.int("linear_conv_kernel_dim", default=4)
        self.n_k = c.int("linear_num_key_heads")
        self.n_v = c.int("linear_num_value_heads")
        self.d_k = c.int("linear_key_head_dim")
        self.d_v = c.int("linear_value_head_dim")
        if self.n_v % self.n_k:
            raise InputError(f"{c.path}: linear_num_key_heads {self.n_k} does not divide linear_num_value_heads {self.n_v}")
        # ---- MoE ----
        self.n_expert = c.int("num_experts")
        self.n_expert_used = c.int("num_experts_per_tok")
        if self.n_expert_used > self.n_expert:
            raise InputError(f"{c.path}: num_experts_per_tok {self.n_expert_used} > num_experts {self.n_expert}")
        self.n_ff_exp = c.int("moe_intermediate_size")
        self.n_ff_shexp = c.int("shared_expert_intermediate_size")
        # ---- PLE ----
        ple_ids = c.get("ple_layer_ids", default=[])
        if not isinstance(ple_ids, list) or not all(isinstance(i, int) and 1 <= i <= self.n_layer for i in ple_ids):
            raise InputError(f"{c.path}: key 'ple_layer_ids' = {ple_ids!r} must list 1-based layer ids in [1, {self.n_layer}]")
        self.ple_layers = sorted({i - 1 for i in ple_ids})    # HF is 1-based, GGUF 0-based
        if len(self.ple_layers) > 1:
            raise UnsupportedError(f"{c.path}: ple_layer_ids {ple_ids}: llama.cpp's qwen4exp holds one set of PLE hash "
                                   f"constants and one per_layer_token_embd, so only one PLE layer is supported")
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
        lre = re.compile(re.escape(self.prefix) + r"layers\.(\d+)\.")
        present = {int(m.group(1)) for n in self.hf.tensors if (m := lre.match(n))}
        if present and max(present) + 1 != L:
            raise InputError(f"{self.c.path}: num_hidden_layers = {L}, but the checkpoint has layers 0..{max(present)}")
        attn = set(self.attn_layers)
        p.kv += [
            kv_u32(key(Keys.LLM.BLOCK_COUNT), L),
            kv_u32(key(Keys.LLM.CONTEXT_LENGTH), self.n_ctx),
            kv_u32(key(Keys.LLM.EMBEDDING_LENGTH), D),
            kv_u32(key(Keys.Attention.HEAD_COUNT), self.n_head),
            kv_u32(key(Keys.Attention.HEAD_COUNT_KV), self.n_head_kv),
            kv_arr_i32(key(Keys.Rope.DIMENSION_SECTIONS), self.mrope_sections),
            kv_f32(key(Keys.Rope.FREQ_BASE), self.rope_theta),
            kv_f32(key(Keys.Attention.LAYERNORM_RMS_EPS), self.eps),
            kv_u32(key(Keys.LLM.EXPERT_COUNT), self.n_expert),
            kv_u32(key(Keys.LLM.EXPERT_USED_COUNT), self.n_expert_used),
            kv_u32(key(Keys.Attention.KEY_LENGTH), self.head_dim),
            kv_u32(key(Keys.Attention.VALUE_LENGTH), self.head_dim),
            kv_u32(key(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH), self.n_ff_exp),
            kv_u32(key(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH), self.n_ff_shexp),
            kv_u32(key(Keys.SSM.CONV_KERNEL), self.d_conv),
            kv_u32(key(Keys.SSM.STATE_SIZE), self.d_k),
            kv_u32(key(Keys.SSM.GROUP_COUNT), self.n_k),
            kv_u32(key(Keys.SSM.TIME_STEP_RANK), self.n_v),
            kv_u32(key(Keys.SSM.INNER_SIZE), self.d_v * self.n_v),
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
        ]

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
                self._gated_delta_net(i, lp + "linear_attn.")
            self._moe(i, lp + "mlp.")
            if i in self.ple_layers:
                self._ple(i, lp + "ple.")
        self.tied_output(pre + "embed_tokens.weight", "lm_head.weight", self.n_vocab, D, tie_default=False)
        for name in self.hf.tensors:
            if name.startswith("model.visual."):
                self.omit(name, "vision tower: not part of the text GGUF (llama.cpp writes it to a separate mmproj file)")
        mtp = [n for n in self.hf.tensors if n.startswith("mtp.")]
        for name in mtp:
            self.omit(name, "MTP / NextN draft head: not converted")
        if mtp:
            p.warnings.append(f"{len(mtp)} mtp.* tensors (the MTP draft head) were not converted")
        self.check_leftovers()
        return p

    # ---- pieces -----------------------------------------------------------------------------
    def _plus_one(self, out: str, src: str, shape: tuple[int, ...]) -> None:
        """A zero-centred RMSNorm gamma (HF computes x * (1 + w)) written as 1 + w."""
        self.copy(out, src, shape, op="plus_one", note="gamma + 1 (zero-centred RMSNorm)")

    def _hyper_connection(self, hp: str, norm: str, down: str, up: str, inject: str | None, bid: int | None) -> None:
        HD, r = self.hc * self.n_embd, self.hc_lowrank
        # the gamma stays 1-D [HD]; llama.cpp loads it as [D, hc] (TENSOR_ALLOW_RESHAPE)
        self._plus_one(tn(norm, bid), hp + "hc_norm.weight", (HD,))
        self.copy(tn(down, bid), hp + "input_mix_weight_down.weight", (r, HD))
        self.copy(tn(up, bid), hp + "input_mix_weight_up.weight", (HD, r))
        if inject is not None:
            self.copy(tn(inject, bid), hp + "block_inject_weight.weight", (self.hc, HD))

    def _attention(self, i: int, a: str) -> None:
        D, hd = self.n_embd, self.head_dim
        # q_proj holds [query | gate] per head; llama.cpp splits it in the graph (NEOX-style
        # M-RoPE rotates halves as HF does), so q/k rows are written as stored
        self.copy(tn(T.ATTN_Q, i), a + "q_proj.weight", (2 * self.n_head * hd, D))
        self.copy(tn(T.ATTN_K, i), a + "k_proj.weight", (self.n_head_kv * hd, D))
        self.copy(tn(T.ATTN_V, i), a + "v_proj.weight", (self.n_head_kv * hd, D))
        self.copy(tn(T.ATTN_OUT, i), a + "o_proj.weight", (D, self.n_head * hd))
        self._plus_one(tn(T.ATTN_Q_NORM, i), a + "q_norm.weight", (hd,))
        self._plus_one(tn(T.ATTN_K_NORM, i), a + "k_norm.weight", (hd,))
        # one projection feeds the indexer's Hi query heads then its single key head: split rows
        nq, di = self.idx_n_head * self.idx_head_dim, self.idx_head_dim
        t = self.take(a + "indexer.index_qk_proj.weight", (nq + di, D))
        self.emit(tn(T.INDEXER_Q_PROJ, i), (nq, D), [Segment(t, 0, nq)], note="rows [0, Hi di) of index_qk_proj")
        self.emit(tn(T.INDEXER_K_PROJ, i), (di, D), [Segment(t, nq, di)], note="rows [Hi di, (Hi + 1) di) of index_qk_proj")
        self._plus_one(tn(T.INDEXER_Q_NORM, i), a + "indexer.q_layernorm.weight", (di,))
        self._plus_one(tn(T.INDEXER_K_NORM, i), a + "indexer.k_layernorm.weight", (di,))

    def _gated_delta_net(self, i: int, g: str) -> None:
        D = self.n_embd
        nk, nv, dk, dv = self.n_k, self.n_v, self.d_k, self.d_v
        key_dim, value_dim = nk * dk, nv * dv
        conv_dim = 2 * key_dim + value_dim
        # take (shape-check) first: the permutations below are sized by config.json
        t = self.take(g + "in_proj_qkv.weight", (conv_dim, D))
        reorder = nk != nv
        vp = v_head_perm(nk, nv, dv) if reorder else None       # over value rows/columns
        hp = v_head_perm(nk, nv, 1) if reorder else None        # over value heads
        note = "V heads grouped -> tiled" if reorder else ""
        self.emit(tn(T.ATTN_QKV, i), (conv_dim, D),
                  [Segment(t, 0, 2 * key_dim), Segment(t, 2 * key_dim, value_dim, vp, value_dim)], note=note)
        self.copy(tn(T.ATTN_GATE, i), g + "in_proj_z.weight", (value_dim, D), perm=vp, block=value_dim, note=note)
        self.copy(tn(T.SSM_BETA, i), g + "in_proj_b.weight", (nv, D), perm=hp, block=nv, note=note)
        self.copy(tn(T.SSM_ALPHA, i), g + "in_proj_a.weight", (nv, D), perm=hp, block=nv, note=note)
        a = self.copy(tn(T.SSM_A, i, suffix=""), g + "A_log", (nv,), op="neg_exp", note=("A = -exp(A_log); " + note).strip("; "))
        a.col_perm = hp
        dt = self.copy(tn(T.SSM_DT, i, suffix=".bias"), g + "dt_bias", (nv,), note=note)
        dt.col_perm = hp
        # conv1d [C, 1, K] -> [C, K] (the squeeze is a reshape of the same bytes); V channels reordered
        t = self.take(g + "conv1d.weight", (conv_dim, 1, self.d_conv))
        self.emit(tn(T.SSM_CONV1D, i), (conv_dim, self.d_conv),
                  [Segment(t, 0, 2 * key_dim), Segment(t, 2 * key_dim, value_dim, vp, value_dim)],
                  note=("squeeze; " + note).strip("; "))
        self.copy(tn(T.SSM_NORM, i), g + "norm.weight", (dv,))
        o = self.copy(tn(T.SSM_OUT, i), g + "out_proj.weight", (D, value_dim), note=note.replace("heads", "columns"))
        o.col_perm = vp

    def _moe(self, i: int, m: str) -> None:
        D, E, F, Fs = self.n_embd, self.n_expert, self.n_ff_exp, self.n_ff_shexp
        self.copy(tn(T.FFN_GATE_INP, i), m + "gate.weight", (E, D))
        if self.has(m + "experts.0.gate_proj.weight"):
            # per-expert matrices (transformers' saved layout): stack, one segment per expert
            for out, w, shape in ((T.FFN_GATE_EXP, "gate_proj", (F, D)), (T.FFN_UP_EXP, "up_proj", (F, D)),
                                  (T.FFN_DOWN_EXP, "down_proj", (D, F))):
                segs = [Segment(self.take(f"{m}experts.{e}.{w}.weight", shape), 0, shape[0]) for e in range(E)]
                self.emit(tn(out, i), (E,) + shape, segs, note=f"stack of {E} experts")
        else:
            # fused: gate_up_proj [E, 2F, D] (rows :F gate, F: up), down_proj [E, D, F]
            gu = m + "experts.gate_up_proj" + (".weight" if self.has(m + "experts.gate_up_proj.weight") else "")
            t = self.take(gu, (E, 2 * F, D))
            for out, half in ((T.FFN_GATE_EXP, 0), (T.FFN_UP_EXP, 1)):
                self.emit(tn(out, i), (E, F, D), [Segment(t, e * 2 * F + half * F, F) for e in range(E)],
                          note=f"{'first' if half == 0 else 'second'} half of the rows of gate_up_proj")
            dn = m + "experts.down_proj" + (".weight" if self.has(m + "experts.down_proj.weight") else "")
            self.copy(tn(T.FFN_DOWN_EXP, i), dn, (E, D, F))
        s = m + "shared_expert."
        self.copy(tn(T.FFN_GATE_SHEXP, i), s + "gate_proj.weight", (Fs, D))
        self.copy(tn(T.FFN_UP_SHEXP, i), s + "up_proj.weight", (Fs, D))
        self.copy(tn(T.FFN_DOWN_SHEXP, i), s + "down_proj.weight", (D, Fs))
        g = self.copy(tn(T.FFN_GATE_INP_SHEXP, i), m + "shared_expert_gate.weight", (1, D))
        g.type = GGMLType.F32   # llama.cpp's converter keeps FFN_GATE_INP_SHEXP in F32, as the router

    def _ple(self, i: int, pp: str) -> None:
        D, HD, P = self.n_embd, self.hc * self.n_embd, self.ple_embed_dim
        self.copy(tn(T.PLE_KEY, i), pp + "key_proj.weight", (HD, P))
        self.copy(tn(T.PLE_VALUE, i), pp + "value_proj.weight", (D, P))
        self._plus_one(tn(T.PLE_NORM_KEY, i), pp + "norm_key.weight", (HD,))
        self._plus_one(tn(T.PLE_NORM_QUERY, i), pp + "norm_query.weight", (HD,))
        self._plus_one(tn(T.PLE_NORM_CONV, i), pp + "norm_conv.weight", (HD,))
        t = self.take(pp + "conv1d.weight", (HD, 1, self.ple_conv_kernel))
        self.emit(tn(T.PLE_CONV1D, i), (HD, self.ple_conv_kernel), [Segment(t, 0, HD)], note="squeeze")

        # ---- the hash constants: int64 in the checkpoint, exact UINT64 key/values here ----
        ng = pp + _NGRAM
        consts = {}
        for name, n in (("layer_multipliers", self.ngram_size), ("ngram_heads_offsets", self.ple_n_heads),
                        ("ngram_heads_vocab_sizes", self.ple_n_heads)):
            t = self.take(ng + name, (n,), why="one value per n-gram order" if n == self.ngram_size else "one value per n-gram head")
            consts[name] = read_int_tensor(t)
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
        self.emit(tn(T.PER_LAYER_TOKEN_EMBD), (rows, row_dim), segs,
                  note=f"{len(segs)} shards, each written at its row offset" if len(segs) > 1 else "")

        key, p = self.key, self.plan
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
