"""Qwen3NextForCausalLM -> GGUF ``qwen3next``; Qwen3_5ForCausalLM / ..ForConditionalGeneration ->
``qwen35``; Qwen3_5MoeForCausalLM / ..ForConditionalGeneration -> ``qwen35moe``.

Sources: see :mod:`toolkit.convert.families.qwen_gdn` (transformers 5.24, llama.cpp 0c1e570's
``conversion/qwen.py`` class chain ``Qwen3_5TextModel -> _Qwen35MRopeMixin ->
_LinearAttentionVReorderBase -> Qwen3NextModel -> _QwenMtpMixin -> Qwen2MoeModel -> TextModel``)
and docs/specs/gdn-family.md §1.2-1.7.  Our f32 files of the tiny fixtures equal
llama.cpp's in every tensor and key (tests/parity/test_convert_gdn.py), except as listed below.

HF tensor (numpy shape)                                  GGUF tensor
model.embed_tokens [V, D] / lm_head [V, D]               token_embd / output (when the checkpoint has lm_head)
model.norm [D] (+1)                                      output_norm
layers.i.input_layernorm / post_attention_layernorm (+1) blk.i.attn_norm / post_attention_norm
GDN layer, qwen35*: linear_attn.in_proj_qkv/z/b/a, ...   as qwen4exp (V heads grouped -> tiled)
GDN layer, qwen3next: linear_attn.in_proj_qkvz           blk.i.attn_qkv [Q|K|V] + attn_gate [Z] (regrouped)
  in_proj_ba [2 Hv, D]                                   blk.i.ssm_ba (as stored)
  A_log, dt_bias, conv1d, norm, out_proj                 blk.i.ssm_a (-exp), ssm_dt.bias, ssm_conv1d, ssm_norm, ssm_out
attention layer: self_attn.{q,k,v,o}_proj, q/k_norm (+1) blk.i.attn_{q,k,v,output}, attn_{q,k}_norm
FFN: mlp.{gate,up,down}_proj (qwen35)                    blk.i.ffn_{gate,up,down}
     mlp.gate, experts, shared_expert(_gate) (MoE)       blk.i.ffn_gate_inp, ffn_*_exps, ffn_*_shexp, ffn_gate_inp_shexp
MTP (mtp.*, llama.cpp _QwenMtpMixin), block b = num_hidden_layers + j:
  mtp.layers.j.* (a full-attention block)                blk.b.* as an attention layer
  mtp.fc [D, 2D]                                         blk.L.nextn.eh_proj
  mtp.pre_fc_norm_embedding / _hidden, mtp.norm (+1)     blk.L.nextn.enorm / hnorm / shared_head_norm
model.visual.* (ForConditionalGeneration)                left out, one log line

Where we differ from llama.cpp's converter (each said in a test):
- MTP: the MTP layer count comes from the ``mtp.layers.N`` tensors.  llama.cpp asserts on a
  checkpoint without MTP tensors unless given ``--no-mtp``; we convert it as it is, with no
  nextn key.
- ``ssm.value_head_dim`` is written when linear_value_head_dim != linear_key_head_dim
  (llama.cpp reads both from ssm.state_size and cannot load such a model).
- ``attention.layer_indices``: ours, the attention layers among the main layers.
- ``full_attention_interval`` is config.json's value (default 4); llama.cpp reads it after
  transformers' ``__post_init__``, which drops it when ``layer_types`` is absent (so writes 4).
- +1 and -exp on an F16 checkpoint are computed after widening to float32; llama.cpp computes
  them in float16 (BF16 it widens to float32 first, as we do).  Identical on F32 and BF16
  checkpoints (-exp: within 1 ulp, see ssm_a).
- a layer pattern with no attention layer, and ``mrope_section`` sums beyond the rotary pairs,
  are refused.
"""
from __future__ import annotations

import re
from typing import ClassVar

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.activation import ffn_act_kv, ssm_act_kv
from toolkit.convert.rope_scaling import SCALED_ROPE_TYPES, SCALED_WHY, rope_scaling_kv
from toolkit.convert.config_keys import ConfigKeys
from toolkit.convert.families.qwen_gdn import (QWEN_MOE_READ, QWEN_READ, QWEN_REFUSED, VL_IRRELEVANT, DENSE, GATED_ATTN, GDN_FUSED, GDN_SPLIT, L, MOE, MTP, NORMS, P,
                                               QwenGDNFamily, text_config)
from toolkit.convert.plan import KV, kv_arr_i32, kv_f32, kv_u32
from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import Keys
from toolkit.gguf_io.constants import ARCH_QWEN3NEXT, ARCH_QWEN35, ARCH_QWEN35MOE, GGUFValueType

_ATTN, _LINEAR = "full_attention", "linear_attention"
# _QwenMtpMixin.filter_tensors: mtp.<name> -> the nextn tensor of block num_hidden_layers
_MTP_HEAD = (("fc", T.NEXTN_EH_PROJ, False), ("pre_fc_norm_embedding", T.NEXTN_ENORM, True),
             ("pre_fc_norm_hidden", T.NEXTN_HNORM, True), ("norm", T.NEXTN_SHARED_HEAD_NORM, True))


def _known(gdn: str, ffn: tuple[str, ...]) -> tuple[str, ...]:
    bodies = (gdn, GATED_ATTN, NORMS) + ffn
    mtp_bodies = (GATED_ATTN, NORMS) + ffn
    return ((r"lm_head\.weight", P + r"embed_tokens\.weight", P + r"norm\.weight", r"model\.visual\..*",
             MTP + r"(?:fc|pre_fc_norm_embedding|pre_fc_norm_hidden|norm)\.weight")
            + tuple(L + b for b in bodies) + tuple(MTP + r"layers\.\d+\." + b for b in mtp_bodies))


class Qwen3NextFamily(QwenGDNFamily):
    """Qwen3-Next: fused GDN projections (value heads kept grouped), MoE on every layer unless
    ``mlp_only_layers`` / ``decoder_sparse_step`` make a layer dense, NEOX partial RoPE."""

    hf_archs = ("Qwen3NextForCausalLM",)
    hf_configs = ("Qwen3NextConfig",)
    config_keys = ConfigKeys.of(
        QWEN_READ + " " + QWEN_MOE_READ + " decoder_sparse_step mlp_only_layers norm_topk_prob",
        refused=QWEN_REFUSED, rope_types=SCALED_ROPE_TYPES, rope_why=SCALED_WHY)
    families = ("Qwen3-Next",)
    arch = ARCH_QWEN3NEXT
    known = _known(GDN_FUSED, MOE + DENSE)
    reorder_v = False
    fused_gdn: ClassVar[bool] = True
    has_moe: ClassVar[bool] = True
    mrope: ClassVar[bool] = False          # qwen35*: interleaved M-RoPE, dimension_sections always written
    default_mrope: ClassVar[list[int]] = [11, 11, 10]   # _Qwen35MRopeMixin / Qwen3_5TextRotaryEmbedding

    # ---- hparams --------------------------------------------------------------------------
    def read_hparams(self) -> None:
        c = self.c = text_config(self.cfg)
        self.prefix = "model.language_model." if any(n.startswith("model.language_model.") for n in self.hf.tensors) else "model."
        self.n_embd = c.int("hidden_size")
        self.n_layer = c.int("num_hidden_layers")
        self.n_vocab = c.int("vocab_size")
        self.eps = c.eps("rms_norm_eps", default=1e-6)
        self.n_ctx = c.int("max_position_embeddings", default=32768)
        self.check_layers(c, self.prefix, self.n_layer)
        self.attn_layers = self._attention_layers(c)
        self.interval = c.int("full_attention_interval", default=4)
        self.read_attention(c, self.arch)
        self._read_rope(c)
        self.read_gdn(c)
        # feed_forward_length where config.json has intermediate_size (TextModel.set_gguf_parameters)
        self.n_ff = c.int("intermediate_size") if c.d.get("intermediate_size") is not None else None
        if self.has_moe:
            self.read_moe(c)
        self.dense_layers = self._dense_layers(c)
        if self.dense_layers and self.n_ff is None:
            raise InputError(f"{c.path}: missing key 'intermediate_size' (the width of the dense FFN layers "
                             f"{self.dense_layers})")
        self.n_mtp = self._mtp_layers(c)

    def _attention_layers(self, c) -> list[int]:
        """Attention layers from ``layer_types`` (else HF's default: every
        ``full_attention_interval``-th layer).

        Raises:
            InputError: a malformed layer_types, or no attention layer at all.
            UnsupportedError: a layer type other than full_attention / linear_attention.
        """
        lt = c.d.get("layer_types")
        if lt is None:
            interval = c.int("full_attention_interval", default=4)
            attn = [i for i in range(self.n_layer) if (i + 1) % interval == 0]
            src = f"full_attention_interval = {interval} with {self.n_layer} layers"
        else:
            if not isinstance(lt, list) or len(lt) != self.n_layer:
                raise InputError(f"{c.path}: key 'layer_types' must be a list of {self.n_layer} layer types, got {lt!r}")
            for i, t in enumerate(lt):
                if t not in (_ATTN, _LINEAR):
                    raise UnsupportedError(f"{c.path}: key 'layer_types'[{i}] = {t!r} is not supported; "
                                           f"supported: {_ATTN}, {_LINEAR}")
            attn = [i for i, t in enumerate(lt) if t == _ATTN]
            src = "layer_types"
        if not attn:
            raise InputError(f"{c.path}: {src} gives no {_ATTN} layer; a {self.arch} model needs at least one "
                             f"attention layer")
        return attn

    def _read_rope(self, c) -> None:
        prf = c.rope("partial_rotary_factor", 0.25)    # the HF configs' __post_init__ default
        if isinstance(prf, bool) or not isinstance(prf, (int, float)) or not (0 < prf <= 1):
            raise InputError(f"{c.path}: partial_rotary_factor = {prf!r} must be in (0, 1]")
        self.n_rot = int(self.head_dim * prf)
        self.rope_theta = c.rope_theta(10000.0)
        rt = c.rope("rope_type", "default")
        if rt not in self.config_keys.rope_types:
            raise UnsupportedError(f"{c.path}: rope_parameters.rope_type = {rt!r} is not supported "
                                   f"(only {', '.join(repr(t) for t in self.config_keys.rope_types)})")
        sections = c.rope("mrope_section", self.default_mrope if self.mrope else None)
        self.mrope_sections = None
        if sections is None:
            return
        if (not isinstance(sections, list) or not 1 <= len(sections) <= 4
                or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in sections)):
            raise InputError(f"{c.path}: rope_parameters.mrope_section = {sections!r} must list up to 4 non-negative ints")
        # interleaved M-RoPE: section s takes rotary pairs s, s+3, ... (HF), so the sections must
        # fit the n_rot/2 frequency pairs (llama.cpp aborts otherwise)
        if sum(sections) > self.n_rot // 2:
            raise InputError(f"{c.path}: rope_parameters.mrope_section {sections} sums to {sum(sections)}, more than the "
                             f"{self.n_rot // 2} rotary pairs of head_dim {self.head_dim} x partial_rotary_factor {prf}")
        self.mrope_sections = list(sections) + [0] * (4 - len(sections))

    def _dense_layers(self, c) -> list[int]:
        """Layers with a dense FFN: all of them without MoE; Qwen3-Next's HF rule otherwise
        (Qwen3NextDecoderLayer: MoE unless in ``mlp_only_layers`` or (i + 1) %
        ``decoder_sparse_step`` != 0).  llama.cpp's loader needs MoE on every layer."""
        if not self.has_moe:
            return list(range(self.n_layer))
        only = c.get("mlp_only_layers", default=[])
        if not isinstance(only, list) or not all(isinstance(i, int) and 0 <= i < self.n_layer for i in only):
            raise InputError(f"{c.path}: key 'mlp_only_layers' = {only!r} must list layer indices in [0, {self.n_layer})")
        step = c.int("decoder_sparse_step", default=1)
        return [i for i in range(self.n_layer) if i in only or (i + 1) % step]

    def _mtp_layers(self, c) -> int:
        """MTP layers in the checkpoint (``mtp.layers.N.*``), 0 when it has none or ``no_mtp``.

        Raises:
            InputError: mtp.* tensors without mtp.layers.0, or a count that disagrees with
                config.json's mtp_num_hidden_layers.
        """
        names = [n for n in self.hf.tensors if re.match(MTP, n)]
        if not names or self.no_mtp:
            return 0
        ids = {int(m.group(1)) for n in names if (m := re.match(MTP + r"layers\.(\d+)\.", n))}
        n = max(ids) + 1 if ids else 0
        if n == 0 or len(ids) != n:
            missing = min(set(range(n + 1)) - ids)
            raise InputError(f"{self.hf.tensors[names[0]].path}: the checkpoint has mtp.* tensors but none of "
                             f"mtp.layers.{missing}.* (the MTP block)")
        want = c.d.get("mtp_num_hidden_layers")
        if isinstance(want, int) and not isinstance(want, bool) and want > 0 and want != n:
            raise InputError(f"{c.path}: mtp_num_hidden_layers = {want}, but the checkpoint has mtp.layers.0..{n - 1}")
        return n

    def n_vocab_rows(self) -> int:
        return self.n_vocab

    # ---- plan -----------------------------------------------------------------------------
    def build(self):
        self.read_hparams()
        self.plan.kv += self._kv()
        pre = self.prefix
        self.copy(tn(T.TOKEN_EMBD), pre + "embed_tokens.weight", (self.n_vocab, self.n_embd))
        for i in range(self.n_layer):
            self._block(i, f"{pre}layers.{i}.", i in self.attn_layers, i in self.dense_layers)
        self.plus_one(tn(T.OUTPUT_NORM), pre + "norm.weight", (self.n_embd,))
        self._output()
        self._mtp()
        self.omit_vision()
        self.check_leftovers()
        return self.plan

    def _kv(self) -> list[KV]:
        key, L = self.key, self.n_layer
        n_block = L + self.n_mtp
        kv = [kv_u32(key(Keys.LLM.BLOCK_COUNT), n_block),
              kv_u32(key(Keys.LLM.CONTEXT_LENGTH), self.n_ctx),
              kv_u32(key(Keys.LLM.EMBEDDING_LENGTH), self.n_embd)]
        if self.n_ff is not None:
            kv.append(kv_u32(key(Keys.LLM.FEED_FORWARD_LENGTH), self.n_ff))
        kv += [kv_u32(key(Keys.Attention.HEAD_COUNT), self.n_head),
               kv_u32(key(Keys.Attention.HEAD_COUNT_KV), self.n_head_kv)]
        if self.mrope_sections is not None:
            kv.append(kv_arr_i32(key(Keys.Rope.DIMENSION_SECTIONS), self.mrope_sections))
        kv += [kv_f32(key(Keys.Rope.FREQ_BASE), self.rope_theta),
               kv_f32(key(Keys.Attention.LAYERNORM_RMS_EPS), self.eps)] + rope_scaling_kv(self.c, key)
        if self.has_moe:
            kv += [kv_u32(key(Keys.LLM.EXPERT_COUNT), self.n_expert),
                   kv_u32(key(Keys.LLM.EXPERT_USED_COUNT), self.n_expert_used), *self.moe_norm_kv()]
        kv += [kv_u32(key(Keys.Attention.KEY_LENGTH), self.head_dim),
               kv_u32(key(Keys.Attention.VALUE_LENGTH), self.head_dim)]
        if self.has_moe:
            kv += [kv_u32(key(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH), self.n_ff_exp),
                   kv_u32(key(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH), self.n_ff_shexp)]
        kv += self.gdn_kv()
        attn = set(self.attn_layers)
        # per block, MTP blocks included (padded with False, as _QwenMtpMixin does)
        kv += [KV(key(Keys.Attention.RECURRENT_LAYERS), [i < L and i not in attn for i in range(n_block)],
                  GGUFValueType.ARRAY, GGUFValueType.BOOL),
               kv_u32(key(Keys.LLM.FULL_ATTENTION_INTERVAL), self.interval),
               kv_u32(key(Keys.Rope.DIMENSION_COUNT), self.n_rot)]
        if self.n_mtp:
            kv.append(kv_u32(key(Keys.LLM.NEXTN_PREDICT_LAYERS), self.n_mtp))
        # ours, as every hybrid here: the explicit attention layer list (main layers only; the
        # runtime runs block_count - nextn_predict_layers layers)
        kv.append(kv_arr_i32(key(Keys.Attention.LAYER_INDICES), sorted(attn)))
        # hidden_act: the GDN conv's act (causal_conv1d_fn activation=) and the MLP / experts' gate
        # (ACT2FN[hidden_act]); each key written only when not silu
        kv += ffn_act_kv(self.c.path, self.c.d, key) + ssm_act_kv(self.c.path, self.c.d, key)
        return kv

    def _block(self, i: int, lp: str, attention: bool, dense: bool) -> None:
        D = self.n_embd
        self.plus_one(tn(T.ATTN_NORM, i), lp + "input_layernorm.weight", (D,))
        if attention:
            self.gated_attention(i, lp + "self_attn.")
        elif self.fused_gdn:
            self.gated_delta_net_fused(i, lp + "linear_attn.")
        else:
            self.gated_delta_net(i, lp + "linear_attn.")
        self.plus_one(tn(T.ATTN_POST_NORM, i), lp + "post_attention_layernorm.weight", (D,))
        if dense:
            self.dense_ffn(i, lp + "mlp.", self.n_ff)
        else:
            self.moe(i, lp + "mlp.")

    def _output(self) -> None:
        """output.weight from lm_head.weight when the checkpoint has one (what llama.cpp's
        converter writes, whatever tie_word_embeddings says); without one the output reuses
        token_embd (llama.cpp's fallback), which needs tie_word_embeddings (root or
        text_config, default false as in the HF configs).

        Raises:
            InputError: no lm_head.weight while tie_word_embeddings is false.
        """
        if self.has("lm_head.weight"):
            self.copy(tn(T.OUTPUT), "lm_head.weight", (self.n_vocab, self.n_embd))
        elif not self.c.flag("tie_word_embeddings", False):
            raise InputError(f"{self.hf.path}: missing tensor 'lm_head.weight' (tie_word_embeddings is false in "
                             f"{self.c.path})")

    def _mtp(self) -> None:
        """The MTP head as llama.cpp's _QwenMtpMixin writes it, or every mtp.* tensor left out
        (``--no-mtp``).  MTP layer j is block num_hidden_layers + j, a full-attention block with
        the family's FFN (MoE or dense)."""
        names = [n for n in self.hf.tensors if re.match(MTP, n)]
        if not self.n_mtp:
            for n in names:
                self.omit(n, "MTP / NextN head: --no-mtp")
            return
        mp = "model.mtp." if any(n.startswith("model.mtp.") for n in names) else "mtp."
        D, b0 = self.n_embd, self.n_layer
        for j in range(self.n_mtp):
            self._block(b0 + j, f"{mp}layers.{j}.", True, not self.has_moe)
        for src, out, norm in _MTP_HEAD:
            if norm:
                self.plus_one(tn(out, b0), f"{mp}{src}.weight", (D,))
            else:
                self.copy(tn(out, b0), f"{mp}{src}.weight", (D, 2 * D))


class Qwen35Family(Qwen3NextFamily):
    """Qwen3.5 dense: split GDN projections, value heads reordered grouped -> tiled, dense
    SwiGLU FFN, interleaved M-RoPE (dimension_sections always written)."""

    hf_archs = ("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration")
    hf_configs = ("Qwen3_5TextConfig", "Qwen3_5Config")
    config_keys = ConfigKeys.of(QWEN_READ, irrelevant=VL_IRRELEVANT, refused=QWEN_REFUSED, rope_types=SCALED_ROPE_TYPES, rope_why=SCALED_WHY)
    families = ("Qwen3.5",)
    arch = ARCH_QWEN35
    known = _known(GDN_SPLIT, DENSE)
    reorder_v = True
    fused_gdn = False
    has_moe = False
    mrope = True


class Qwen35MoeFamily(Qwen3NextFamily):
    """Qwen3.5-MoE: as Qwen3.5 with routed experts and a gated shared expert on every layer."""

    hf_archs = ("Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration")
    hf_configs = ("Qwen3_5MoeTextConfig", "Qwen3_5MoeConfig")
    config_keys = ConfigKeys.of(QWEN_READ + " " + QWEN_MOE_READ, irrelevant=VL_IRRELEVANT, refused=QWEN_REFUSED,
                                rope_types=SCALED_ROPE_TYPES, rope_why=SCALED_WHY)
    families = ("Qwen3.5",)
    arch = ARCH_QWEN35MOE
    known = _known(GDN_SPLIT, MOE)
    reorder_v = True
    fused_gdn = False
    has_moe = True
    mrope = True

    def _dense_layers(self, c) -> list[int]:
        return []
