"""What the gated-delta-net Qwen families share: Qwen3-Next (``qwen3next``), Qwen3.5
(``qwen35``), Qwen3.5-MoE (``qwen35moe``) and qwen4exp.

Sources: transformers 5.24 ``models/qwen3_next``, ``qwen3_5``, ``qwen3_5_moe`` (configs and
parameter names) and llama.cpp 0c1e570's converter (llama-cpp-python 0.3.36 sdist,
``vendor/llama.cpp/conversion/qwen.py``: ``Qwen2MoeModel``, ``_QwenMtpMixin``,
``Qwen3NextModel``, ``_LinearAttentionVReorderBase``, ``_Qwen35MRopeMixin``;
``conversion/base.py`` ``TextModel``).  docs/specs/gdn-family.md §1.2-1.7 list
the keys and tensors with line references.

Glossary: D = hidden_size; attention: Hq, Hkv heads of hd = head_dim; gated delta net: Hk =
linear_num_key_heads, Hv = linear_num_value_heads, r = Hv / Hk, Dk / Dv =
linear_key_head_dim / linear_value_head_dim, Kc = linear_conv_kernel_dim, conv_dim = 2 Hk Dk
+ Hv Dv; MoE: E experts of width F (moe_intermediate_size), shared expert width Fs.

Transforms (each runs once, per band, in ``convert``), and why:
- A = -exp(A_log) (``ssm_a``, computed in float64 and rounded to float32): llama.cpp's gated
  delta net multiplies softplus(a + dt_bias) by A itself (Qwen3NextModel.modify_tensors).
- +1 on the zero-centred RMSNorm gammas (input/post-attention/final norms, q/k norms, the MTP
  norms): HF computes x * (1 + w), llama.cpp multiplies by the stored gamma.  Not on
  ``linear_attn.norm`` (RMSNormGated multiplies by w itself).
- conv1d squeeze [C, 1, Kc] -> [C, Kc], the layout ggml_ssm_conv takes.
- V-head reorder (qwen35, qwen35moe, qwen4exp, only when Hk != Hv): HF groups value heads by
  key head, llama.cpp's broadcast tiles them; see :func:`v_head_perm`.
- qwen3next ``in_proj_qkvz`` regrouping: per-key-head [q k v z] rows -> attn_qkv [Q | K | V]
  and attn_gate [Z]; ``in_proj_ba`` is written as stored (``ssm_ba``).
"""
from __future__ import annotations

import logging
import re
from typing import ClassVar

import numpy as np

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.base import Family
from toolkit.convert.hfdir import Config
from toolkit.convert.plan import KV, Segment, kv_bool, kv_u32
from toolkit.convert.config_keys import Refused
from toolkit.errors import InputError
from toolkit.gguf_io import GGMLType, Keys

log = logging.getLogger(__name__)

P = r"model\.(?:language_model\.)?"          # text weights: model.* or model.language_model.*
L = P + r"layers\.\d+\."
MTP = r"(?:model\.)?mtp\."                     # llama.cpp strips "model." from "model.mtp." too

# the bodies (after "layers.N.") of every per-layer tensor name
GDN_SPLIT = (r"linear_attn\.(?:in_proj_qkv\.weight|in_proj_z\.weight|in_proj_a\.weight|in_proj_b\.weight|"
             r"A_log|dt_bias|conv1d\.weight|norm\.weight|out_proj\.weight)")
GDN_FUSED = (r"linear_attn\.(?:in_proj_qkvz\.weight|in_proj_ba\.weight|"
             r"A_log|dt_bias|conv1d\.weight|norm\.weight|out_proj\.weight)")
GATED_ATTN = r"self_attn\.(?:(?:q_proj|k_proj|v_proj|o_proj|q_norm|k_norm)\.weight|[qkvo]_proj\.bias)"
NORMS = r"(?:input_layernorm|post_attention_layernorm)\.weight"
MOE = (r"mlp\.(?:gate|shared_expert_gate)\.weight",
       r"mlp\.shared_expert\.(?:gate_proj|up_proj|down_proj)\.weight",
       r"mlp\.experts\.\d+\.(?:gate_proj|up_proj|down_proj)\.weight",
       r"mlp\.experts\.(?:gate_up_proj|down_proj)(?:\.weight)?")
DENSE = (r"mlp\.(?:gate_proj|up_proj|down_proj)\.weight",)


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


def v_head_segments(t, row0: int, n_k: int, n_v: int, head_dim: int, reorder: bool) -> list[Segment]:
    """The ``n_v * head_dim`` value rows of ``t`` from row ``row0``, in llama.cpp's tiled head
    order when ``reorder`` (:func:`v_head_perm`), as one contiguous segment per value head, so
    a band never has to hold all value heads at once (one permutation block of n_v head_dim
    rows would be 8192 x 4096 elements on the largest Qwen3.5).  Else one segment."""
    if not reorder:
        return [Segment(t, row0, n_v * head_dim)]
    r = n_v // n_k
    return [Segment(t, row0 + (k * r + j) * head_dim, head_dim) for j in range(r) for k in range(n_k)]


# what the gated-delta-net Qwen families read of their text configs, and refuse
QWEN_READ = ("vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads "
             "max_position_embeddings rms_norm_eps tie_word_embeddings rope_parameters head_dim linear_conv_kernel_dim "
             "linear_key_head_dim linear_value_head_dim linear_num_key_heads linear_num_value_heads layer_types attention_bias "
             "hidden_act")
QWEN_MOE_READ = "moe_intermediate_size shared_expert_intermediate_size num_experts_per_tok num_experts"
# (hidden_act is read: the GDN conv's act and the MLP / experts' gate, ffn_act_kv + ssm_act_kv; the gated
# norm's act is "silu" in HF's Qwen3NextRMSNormGated, not the config's)
QWEN_REFUSED: dict[str, Refused] = {}
# the composite (ForConditionalGeneration) class's own fields
VL_IRRELEVANT = {k: "vision input only: the text model does not read it" for k in (
    "image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")}


def text_config(cfg: Config) -> Config:
    """config.json, with ``text_config`` (a ForConditionalGeneration checkpoint) merged over
    the root as llama.cpp's ModelBase does (root keys such as image_token_id stay)."""
    d = cfg.d
    if isinstance(d.get("text_config"), dict):
        return Config(cfg.path, {**d, **d["text_config"]})
    return cfg


class QwenGDNFamily(Family):
    """Base of the gated-delta-net Qwen families: hparams readers and tensor emitters.

    A subclass calls ``read_gdn`` / ``read_moe`` / ``read_attention`` from its hparams reader
    (they set ``n_k, n_v, d_k, d_v, d_conv``; ``n_expert, n_expert_used, n_ff_exp,
    n_ff_shexp``; ``n_head, n_head_kv, head_dim``) and the emitters per layer.  ``n_embd``
    must be set first.
    """

    # qwen35 / qwen35moe / qwen4exp: value heads grouped -> tiled (llama.cpp broadcasts key heads
    # tiled); qwen3next: kept grouped (llama.cpp repeat-interleaves its key heads)
    reorder_v: ClassVar[bool] = True

    # ---- hparams ------------------------------------------------------------------------------
    def read_gdn(self, c: Config) -> None:
        """Gated delta net sizes (HF config keys linear_*).

        Raises:
            InputError: a missing / non-positive key, or Hk not dividing Hv (names config.json).
        """
        self.d_conv = c.int("linear_conv_kernel_dim", default=4)
        self.n_k = c.int("linear_num_key_heads")
        self.n_v = c.int("linear_num_value_heads")
        self.d_k = c.int("linear_key_head_dim")
        self.d_v = c.int("linear_value_head_dim")
        if self.n_v % self.n_k:
            raise InputError(f"{c.path}: linear_num_key_heads {self.n_k} does not divide linear_num_value_heads {self.n_v}")

    def read_moe(self, c: Config) -> None:
        """Routed experts and the shared expert (num_experts, num_experts_per_tok,
        moe_intermediate_size, shared_expert_intermediate_size).

        Raises:
            InputError: a missing key, or more experts used than exist.
        """
        self.n_expert = c.int("num_experts")
        self.n_expert_used = c.int("num_experts_per_tok")
        if self.n_expert_used > self.n_expert:
            raise InputError(f"{c.path}: num_experts_per_tok {self.n_expert_used} > num_experts {self.n_expert}")
        self.n_ff_exp = c.int("moe_intermediate_size")
        self.n_ff_shexp = c.int("shared_expert_intermediate_size")
        # norm_topk_prob false (Qwen3-Next, qwen4exp, Lara-Mini): the top-k softmax weights not renormalised
        self.norm_topk = c.flag("norm_topk_prob", True)

    def moe_norm_kv(self) -> list[KV]:
        """``expert_weights_norm = false`` (llama.cpp's key) when norm_topk_prob is false; nothing
        otherwise (absent: renormalised, the architecture row's default, as llama.cpp's files)."""
        return [] if self.norm_topk else [kv_bool(self.key(Keys.LLM.EXPERT_WEIGHTS_NORM), False)]

    def read_attention(self, c: Config, what: str) -> None:
        """Gated attention heads (num_attention_heads, num_key_value_heads, head_dim default 256
        as the HF configs have it).  ``what`` names the family in the attention_bias error.

        attention_bias (q/k/v/o_proj biases; q_proj's [2 Hq hd] holds the gate half's too):
        ``self.attn_bias``.
        """
        self.attn_bias = c.flag("attention_bias", False)
        self.n_head = c.int("num_attention_heads")
        self.n_head_kv = c.int("num_key_value_heads")
        self.head_dim = c.int("head_dim", default=256)

    def gdn_kv(self) -> list[KV]:
        """The ``{arch}.ssm.*`` keys (Qwen3NextModel.set_gguf_parameters); plus our
        ``ssm.value_head_dim`` = Dv, only when Dv != Dk (llama.cpp reads both from state_size)."""
        key = self.key
        kv = [
            kv_u32(key(Keys.SSM.CONV_KERNEL), self.d_conv),
            kv_u32(key(Keys.SSM.STATE_SIZE), self.d_k),
            kv_u32(key(Keys.SSM.GROUP_COUNT), self.n_k),
            kv_u32(key(Keys.SSM.TIME_STEP_RANK), self.n_v),
            kv_u32(key(Keys.SSM.INNER_SIZE), self.d_v * self.n_v),
        ]
        if self.d_v != self.d_k:
            kv.append(kv_u32(key(Keys.SSM.VALUE_HEAD_DIM), self.d_v))
        return kv

    def check_layers(self, c: Config, prefix: str, n_layer: int) -> None:
        """num_hidden_layers against the checkpoint's ``{prefix}layers.N.`` tensors, before any
        per-layer list is built (num_hidden_layers = 10**9 fails here).

        Raises:
            InputError: the highest layer present is not num_hidden_layers - 1.
        """
        lre = re.compile(re.escape(prefix) + r"layers\.(\d+)\.")
        present = {int(m.group(1)) for n in self.hf.tensors if (m := lre.match(n))}
        if present and max(present) + 1 != n_layer:
            raise InputError(f"{c.path}: num_hidden_layers = {n_layer}, but the checkpoint has layers 0..{max(present)}")

    # ---- tensors ------------------------------------------------------------------------------
    def plus_one(self, out: str, src: str, shape: tuple[int, ...]) -> None:
        """A zero-centred RMSNorm gamma (HF computes x * (1 + w)) written as 1 + w."""
        self.copy(out, src, shape, op="plus_one", note="gamma + 1 (zero-centred RMSNorm)")

    def gated_attention(self, i: int, a: str) -> None:
        """Full-attention tensors of block ``i`` from ``a`` = ``...self_attn.``.

        q_proj [2 Hq hd, D] holds [query | gate] per head; llama.cpp splits it in the graph
        (NEOX-style rotation of halves, as HF), so q/k rows are written as stored.
        """
        D, hd = self.n_embd, self.head_dim
        self.copy(tn(T.ATTN_Q, i), a + "q_proj.weight", (2 * self.n_head * hd, D))
        self.copy(tn(T.ATTN_K, i), a + "k_proj.weight", (self.n_head_kv * hd, D))
        self.copy(tn(T.ATTN_V, i), a + "v_proj.weight", (self.n_head_kv * hd, D))
        self.copy(tn(T.ATTN_OUT, i), a + "o_proj.weight", (D, self.n_head * hd))
        self.plus_one(tn(T.ATTN_Q_NORM, i), a + "q_norm.weight", (hd,))
        self.plus_one(tn(T.ATTN_K_NORM, i), a + "k_norm.weight", (hd,))
        if getattr(self, "attn_bias", False):   # HF attention_bias: llama.cpp's bq / bk / bv / bo names
            for out, src, n in ((T.ATTN_Q, "q_proj", 2 * self.n_head * hd), (T.ATTN_K, "k_proj", self.n_head_kv * hd),
                                (T.ATTN_V, "v_proj", self.n_head_kv * hd), (T.ATTN_OUT, "o_proj", D)):
                self.copy(tn(out, i, ".bias"), a + src + ".bias", (n,), why="attention_bias is true")

    def gated_delta_net(self, i: int, g: str) -> None:
        """GDN tensors of block ``i`` from ``g`` = ``...linear_attn.``, split projections
        (in_proj_qkv [conv_dim, D], in_proj_z [Hv Dv, D], in_proj_b / in_proj_a [Hv, D]), value
        heads reordered grouped -> tiled when ``reorder_v`` and Hk != Hv.

        Raises:
            InputError: a missing tensor or a shape config.json does not imply (e.g. a conv
                kernel other than linear_conv_kernel_dim), naming the tensor and file.
        """
        D = self.n_embd
        nk, nv, dk, dv = self.n_k, self.n_v, self.d_k, self.d_v
        key_dim, value_dim = nk * dk, nv * dv
        conv_dim = 2 * key_dim + value_dim
        # take (shape-check) first: the permutations below are sized by config.json
        t = self.take(g + "in_proj_qkv.weight", (conv_dim, D))
        reorder = self.reorder_v and nk != nv
        vp = v_head_perm(nk, nv, dv) if reorder else None       # over value rows/columns
        hp = v_head_perm(nk, nv, 1) if reorder else None        # over value heads
        note = "V heads grouped -> tiled" if reorder else ""
        self.emit(tn(T.ATTN_QKV, i), (conv_dim, D),
                  [Segment(t, 0, 2 * key_dim)] + v_head_segments(t, 2 * key_dim, nk, nv, dv, reorder), note=note)
        t = self.take(g + "in_proj_z.weight", (value_dim, D))
        self.emit(tn(T.ATTN_GATE, i), (value_dim, D), v_head_segments(t, 0, nk, nv, dv, reorder), note=note)
        self.copy(tn(T.SSM_BETA, i), g + "in_proj_b.weight", (nv, D), perm=hp, block=nv, note=note)
        self.copy(tn(T.SSM_ALPHA, i), g + "in_proj_a.weight", (nv, D), perm=hp, block=nv, note=note)
        self._gdn_common(i, g, vp, hp, note)

    def gated_delta_net_fused(self, i: int, g: str) -> None:
        """GDN tensors of block ``i`` from Qwen3-Next's fused projections.

        in_proj_qkvz [Hk (2 Dk + 2 r Dv), D] holds, per key head h, rows [q_h (Dk) | k_h (Dk) |
        v_h (r Dv) | z_h (r Dv)] (HF Qwen3NextGatedDeltaNet.fix_query_key_value_ordering).  It
        becomes attn_qkv [conv_dim, D] = [Q all heads | K all heads | V all heads] and
        attn_gate [Hv Dv, D] = [Z], value heads in HF's grouped order (llama.cpp
        Qwen3NextModel.modify_tensors).  in_proj_ba [2 Hv, D] ([b (r) | a (r)] per key head) is
        written as stored, ``ssm_ba``; llama.cpp splits it in the graph.

        Raises:
            InputError: as :meth:`gated_delta_net`.
        """
        D = self.n_embd
        nk, nv, dk, dv = self.n_k, self.n_v, self.d_k, self.d_v
        rdv = nv // nk * dv
        w = 2 * dk + 2 * rdv                       # rows per key head
        t = self.take(g + "in_proj_qkvz.weight", (nk * w, D))
        segs = ([Segment(t, h * w, dk) for h in range(nk)] + [Segment(t, h * w + dk, dk) for h in range(nk)]
                + [Segment(t, h * w + 2 * dk, rdv) for h in range(nk)])
        self.emit(tn(T.ATTN_QKV, i), (2 * nk * dk + nv * dv, D), segs, note="q, k, v rows of in_proj_qkvz, grouped by part")
        self.emit(tn(T.ATTN_GATE, i), (nv * dv, D), [Segment(t, h * w + 2 * dk + rdv, rdv) for h in range(nk)],
                  note="z rows of in_proj_qkvz")
        self.copy(tn(T.SSM_BETA_ALPHA, i), g + "in_proj_ba.weight", (2 * nv, D))
        self._gdn_common(i, g, None, None, "")

    def _gdn_common(self, i: int, g: str, vp: np.ndarray | None, hp: np.ndarray | None, note: str) -> None:
        """A, dt_bias, conv1d, the gated norm and out_proj (vp / hp: value row / head orders)."""
        D = self.n_embd
        key_dim, value_dim, nv = self.n_k * self.d_k, self.n_v * self.d_v, self.n_v
        conv_dim = 2 * key_dim + value_dim
        a = self.copy(tn(T.SSM_A, i, suffix=""), g + "A_log", (nv,), op="neg_exp", note=("A = -exp(A_log); " + note).strip("; "))
        a.col_perm = hp
        dt = self.copy(tn(T.SSM_DT, i, suffix=".bias"), g + "dt_bias", (nv,), note=note)
        dt.col_perm = hp
        # conv1d [C, 1, K] -> [C, K] (the squeeze is a reshape of the same bytes); V channels reordered
        t = self.take(g + "conv1d.weight", (conv_dim, 1, self.d_conv), why="linear_conv_kernel_dim")
        self.emit(tn(T.SSM_CONV1D, i), (conv_dim, self.d_conv),
                  [Segment(t, 0, 2 * key_dim), Segment(t, 2 * key_dim, value_dim, vp, value_dim)],
                  note=("squeeze; " + note).strip("; "))
        self.copy(tn(T.SSM_NORM, i), g + "norm.weight", (self.d_v,))
        o = self.copy(tn(T.SSM_OUT, i), g + "out_proj.weight", (D, value_dim), note=note.replace("heads", "columns"))
        o.col_perm = vp

    def moe(self, i: int, m: str, shared_gate: bool = True) -> None:
        """Routed experts (stacked per-expert matrices, or HF's fused gate_up_proj / down_proj
        split into gate | up), the router, the shared expert and (``shared_gate``) its sigmoid
        gate, from ``m`` = ``...mlp.`` (llama.cpp Qwen2MoeModel.modify_tensors).  Without the
        gate (Lara-Mini) no ffn_gate_inp_shexp is written: the runtime adds the shared expert as is."""
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
        if not shared_gate:
            return
        g = self.copy(tn(T.FFN_GATE_INP_SHEXP, i), m + "shared_expert_gate.weight", (1, D))
        g.type = GGMLType.F32   # llama.cpp's converter keeps FFN_GATE_INP_SHEXP in F32, as the router

    def dense_ffn(self, i: int, m: str, n_ff: int) -> None:
        """SwiGLU FFN of width ``n_ff`` (intermediate_size) from ``m`` = ``...mlp.``."""
        D = self.n_embd
        self.copy(tn(T.FFN_GATE, i), m + "gate_proj.weight", (n_ff, D))
        self.copy(tn(T.FFN_UP, i), m + "up_proj.weight", (n_ff, D))
        self.copy(tn(T.FFN_DOWN, i), m + "down_proj.weight", (D, n_ff))

    def omit_vision(self) -> None:
        """Leave out a ForConditionalGeneration's vision tower (``model.visual.*``), with one
        log line (llama.cpp writes it to a separate mmproj file)."""
        vis = [n for n in self.hf.tensors if n.startswith("model.visual.")]
        for name in vis:
            self.omit(name, "vision tower: not part of the text GGUF (llama.cpp writes it to a separate mmproj file)")
        if vis:
            msg = f"{self.hf.path}: vision tower skipped ({len(vis)} model.visual.* tensors); converting the text model only"
            self.plan.warnings.append(msg)
            log.warning("%s", msg)
