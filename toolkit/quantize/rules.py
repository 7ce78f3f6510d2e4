"""Per-tensor type rules of llama-quantize's mixtures (Q4_K_M, Q3_K_M, ...), for our architectures.

A port of src/llama-quant.cpp at llama.cpp build 0c1e570: ``tensor_allows_quantization``,
``tensor_get_category``, ``llama_tensor_get_type`` / ``llama_tensor_get_type_impl`` and
``tensor_type_fallback``.  Branches for architectures and file types we do not handle
(Falcon, the IQ1/IQ2/IQ3 mixtures, MXFP4) are left out.  The rules are stateful the way
llama.cpp's are: ``attn_v`` and ``ffn_down`` bumps count the tensors in llama.cpp's tensor
order (:func:`llama_tensor_order`), and ``n_attention_wv`` counts only the layers that
have an attention V projection, so a hybrid model's recurrent layers are not counted.

The gated-delta-net families (qwen3next, qwen35, qwen35moe) have no branch of their own in
llama-quant.cpp; its generic rules give (checked byte for byte against llama-quantize on
qwen35-small, qwen35moe-small and qwen3next-small, tests/fixtures/quant/README.md):

- kept as they are (F32): ``ssm_a``, ``ssm_dt.bias``, every norm (1-D), ``ssm_conv1d`` (by
  name), ``ffn_gate_inp`` (by name) and ``ffn_gate_inp_shexp`` (shape [n_embd, 1]: 1-D for
  ggml_n_dims);
- ``ssm_alpha`` / ``ssm_beta`` / ``ssm_ba``, ``attn_gate``, ``ssm_out``: category OTHER, the
  file type's default type (fallbacks by ne0 = n_embd or d_inner);
- ``attn_qkv`` (a GDN layer's fused q/k/v) is attn_v-like: it is counted in ``n_attention_wv``
  with the attention layers' ``attn_v`` and takes the attn_v bumps (Q4_K_M: Q6_K by
  use_more_bits), so llama.cpp's ATTENTION_QKV branch is never reached for it;
- olmo-hybrid (llama.cpp has no such architecture; its rules have no branch for it, so these
  name-based ones are what llama-quantize would do): a GDN layer's separate ``attn_q`` / ``attn_k``
  / ``attn_v`` take the attention categories (counted in ``n_attention_wv``, as kimi-linear's KDA
  layers are in llama.cpp), ``ssm_conv1d_{q,k,v}`` stay F32 (by name);
- lara-mini (llama.cpp has no such architecture): qwen35moe's tensor names (its fused in_proj cut
  into ``attn_qkv`` / ``attn_gate`` / ``ssm_beta`` / ``ssm_alpha`` at convert time), so exactly the
  rules above, qwen35moe's; its ungated shared expert has no ``ffn_gate_inp_shexp``, and its
  attention layers' ``attn_q`` / ``attn_k`` / ``attn_v`` are the attention categories;
- recurrent-gemma (llama.cpp has no such architecture; we follow its Gemma family, whose rules
  in llama-quant.cpp are these generic name-based ones, no Gemma branch): the tied
  ``token_embd`` takes the output rule (Q6_K, or Q8_0 when its rows are not a k-block);
  ``rglru_x`` / ``rglru_y`` / ``ssm_out`` and the 3-D per-head gate blocks ``rglru_gate_i`` /
  ``rglru_gate_a`` are category OTHER (the file type's default), the attention and GeGLU
  tensors their categories, ``ssm_conv1d`` / ``rglru_param`` / norms / biases F32.  One rule of
  ours (the row's ``quant_no_fallback``): a gate block whose rows (bw = lru / n_head values) are not a whole block of the target
  type keeps its type (F32) instead of llama.cpp's F16 / Q5_0 fallback: the runtime expands the
  gate blocks to float32 at load anyway (mixer_rglru.c), so a fallback would only lose precision;
- glm5-next has llama-quant.cpp branches of its own, which its architecture row holds
  (:class:`toolkit.arch.table.ArchSpec` ``quant_keep``, ``quant_min_q8_0``): the never-quantized
  list (mHC, indexer, KDA gates and beta, MLA's kv_a / k_b / v_b) and its q-LoRA projections
  (``attn_q_a`` / ``attn_q_b``) at Q8_0 unless F32/F16/BF16; bailingmoe3 has none
  but for MXFP4 (not handled); both checked byte for byte on their tiny fixtures, 18 types;
- ``ffn_*_exps`` (3-D) and ``ffn_*_shexp`` are FFN_UP / FFN_GATE / FFN_DOWN; with more than one
  expert the layer comes from the name; exactly 8 experts raise attn_v / attn_qkv / attn_k to
  Q8_0 and attn_output to Q5_K (for the K-quant / IQ4 mixtures listed in :meth:`TypeChooser._impl`).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Iterable, Sequence

from toolkit.arch import arch_spec
from toolkit.errors import InputError
from toolkit.gguf_io import GGMLType
from toolkit.quantize.types import QUANTIZED, FileType, block_size

log = logging.getLogger(__name__)


class Category(Enum):
    OUTPUT = auto()
    TOKEN_EMBD = auto()
    ATTENTION_QKV = auto()
    ATTENTION_KV_B = auto()
    ATTENTION_V = auto()
    ATTENTION_K = auto()
    ATTENTION_Q = auto()
    ATTENTION_OUTPUT = auto()
    FFN_UP = auto()
    FFN_GATE = auto()
    FFN_DOWN = auto()
    OTHER = auto()


def category(name: str) -> Category:
    """llama.cpp's tensor_get_category (substring tests, in its order)."""
    if name == "output.weight":
        return Category.OUTPUT
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return Category.TOKEN_EMBD
    for sub, cat in (("attn_qkv.weight", Category.ATTENTION_QKV), ("attn_kv_b.weight", Category.ATTENTION_KV_B),
                     ("attn_v.weight", Category.ATTENTION_V), ("attn_k.weight", Category.ATTENTION_K),
                     ("attn_q.weight", Category.ATTENTION_Q), ("attn_output.weight", Category.ATTENTION_OUTPUT),
                     ("ffn_up", Category.FFN_UP), ("ffn_gate", Category.FFN_GATE), ("ffn_down", Category.FFN_DOWN)):
        if sub in name:
            return cat
    return Category.OTHER


def _is_attn_v(cat: Category) -> bool:
    return cat in (Category.ATTENTION_V, Category.ATTENTION_QKV, Category.ATTENTION_KV_B)


_BLK = re.compile(r"^blk\.(\d+)\.")


def layer_of(name: str) -> int:
    """Layer index of ``blk.N.*`` tensors, -1 for the others (as sscanf leaves it)."""
    m = _BLK.match(name)
    return int(m.group(1)) if m else -1


def llama_tensor_order(names: Iterable[str]) -> list[str]:
    """The order llama-quantize visits (and writes) tensors: its weights_map comparator
    sorts by layer index (non-layer tensors first, as layer -1), then by name."""
    return sorted(names, key=lambda n: (layer_of(n), n.encode()))


def n_dims(shape: Sequence[int]) -> int:
    """ggml_n_dims: the number of dimensions up to the last one larger than 1 (at least 1)."""
    for i in range(len(shape) - 1, 0, -1):
        if shape[i] > 1:
            return i + 1
    return 1


# tensors llama-quantize never quantizes (substring tests of tensor_allows_quantization that
# can occur in our architectures' tensor names)
_NEVER = ("_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
          "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
          "indexer.q_proj.weight", "attn_rel_b.weight", ".position_embd", ".rel_pos", ".patch_embd",
          "time_mix_first.weight")


def _row(arch: str):
    """The architecture row of ``arch`` (its quantization exceptions), or None."""
    return arch_spec(arch) if arch else None


def allows_quantization(name: str, shape: Sequence[int], quantize_output_tensor: bool = True, arch: str = "") -> bool:
    """llama.cpp's tensor_allows_quantization: 2-D/3-D tensors named ``*weight`` that are not
    norms, router gates, conv1d kernels (ssm_conv1d), position embeddings, ...  So ``ssm_a``,
    ``ssm_d``, biases and every 1-D tensor keep their type (F32).  An architecture row may keep
    more (``ArchSpec.quant_keep``: glm5-next's list)."""
    if n_dims(shape) < 2:
        return False
    if not name.endswith("weight"):
        return False
    if not quantize_output_tensor and name == "output.weight":
        return False
    if name in ("position_embd.weight", "token_types.weight"):
        return False
    row = _row(arch)
    if row is not None and any(s in name for s in row.quant_keep):
        return False
    return not any(s in name for s in _NEVER)


@dataclass
class ModelInfo:
    """What the rules need to know about the model (from its GGUF metadata)."""

    arch: str
    n_layer: int            # {arch}.block_count (llama.cpp's n_layer_all)
    n_expert: int = 0       # {arch}.expert_count
    n_gqa: int = 0          # n_head(0) / n_head_kv(0); 0 when layer 0 has no KV heads


@dataclass
class Options:
    """llama_model_quantize_params fields we honour."""

    pure: bool = False
    quantize_output_tensor: bool = True              # not --leave-output-tensor
    output_tensor_type: GGMLType | None = None       # --output-tensor-type
    token_embedding_type: GGMLType | None = None     # --token-embedding-type
    tensor_types: list[tuple[str, GGMLType]] = field(default_factory=list)  # --tensor-type REGEX=TYPE


@dataclass
class Choice:
    name: str
    type: GGMLType          # target type
    fallback: str | None = None   # warning text when a fallback was applied


class TypeChooser:
    """Stateful chooser: call :meth:`choose` once per tensor, in llama_tensor_order.

    Raises (from the constructor):
        InputError: a --tensor-type regex does not compile.
    """

    def __init__(self, model: ModelInfo, ftype: FileType, default: GGMLType, opts: Options,
                 names: Sequence[str], has_imatrix: bool = False):
        self.m = model
        self.has_imatrix = has_imatrix
        self.ftype = ftype
        self.default = default
        self.o = opts
        self.patterns: list[tuple[re.Pattern[str], GGMLType, str]] = []
        for pat, t in opts.tensor_types:
            try:
                self.patterns.append((re.compile(pat.lower()), t, pat))
            except re.error as e:
                raise InputError(f"--tensor-type {pat!r}: not a valid regular expression ({e})") from None
        self.pattern_hits = {pat: 0 for _, _, pat in self.patterns}
        cats = [category(n) for n in names]
        self.n_attention_wv = sum(1 for c in cats if _is_attn_v(c))
        self.has_tied_embeddings = Category.OUTPUT not in cats
        self.n_ffn_down = self.n_ffn_gate = self.n_ffn_up = model.n_layer
        self.i_attention_wv = self.i_ffn_down = self.i_ffn_gate = self.i_ffn_up = 0
        self.n_fallback = 0

    # ---- llama_tensor_get_type -----------------------------------------------------------
    def choose(self, name: str, shape: Sequence[int], cur_type: GGMLType) -> Choice:
        """Target type of tensor ``name`` (ggml ``shape``, current type ``cur_type``)."""
        if not allows_quantization(name, shape, self.o.quantize_output_tensor, self.m.arch):
            return Choice(name, cur_type)
        cat = category(name)
        if self.o.token_embedding_type is not None and cat == Category.TOKEN_EMBD:
            named = name == "per_layer_token_embd.weight" and any(p.search(name) for p, _, _ in self.patterns)
            if not named:
                return Choice(name, self.o.token_embedding_type)
        if self.o.output_tensor_type is not None and cat == Category.OUTPUT:
            return Choice(name, self.o.output_tensor_type)

        new_type = self.default
        fb = None
        if self.default in QUANTIZED:
            manual = False
            for p, t, pat in self.patterns:
                if p.search(name):
                    new_type = t
                    manual = True
                    self.pattern_hits[pat] += 1
                    break
            if not manual and not self.o.pure:
                new_type = self._impl(new_type, name, shape, cat)
            new_type, fb = self._fallback(name, shape, new_type)
            row = _row(self.m.arch)       # ours (module docstring): the row's tensors take no fallback type
            if fb is not None and row is not None and any(s in name for s in row.quant_no_fallback):
                self.n_fallback -= 1
                return Choice(name, cur_type)
        return Choice(name, new_type, fb)

    # ---- tensor_type_fallback ------------------------------------------------------------
    def _fallback(self, name: str, shape: Sequence[int], target: GGMLType) -> tuple[GGMLType, str | None]:
        ncols = int(shape[0])
        qk = block_size(target)
        if ncols % qk == 0:
            return target, None
        self.n_fallback += 1
        table = {GGMLType.IQ4_XS: GGMLType.IQ4_NL, GGMLType.Q2_K: GGMLType.Q4_0, GGMLType.Q3_K: GGMLType.Q4_0,
                 GGMLType.Q4_K: GGMLType.Q5_0, GGMLType.Q5_K: GGMLType.Q5_1, GGMLType.Q6_K: GGMLType.Q8_0}
        ret = table.get(target, target)   # a 32-block type has nothing smaller to fall back to
        if ncols % block_size(ret) != 0:
            ret = GGMLType.F16
        msg = (f"{name}: row width {ncols} is not a multiple of {qk} (required for {target.name}); "
               f"falling back to {ret.name}")
        return ret, msg

    # ---- llama_tensor_get_type_impl --------------------------------------------------------
    def _impl(self, new_type: GGMLType, name: str, shape: Sequence[int], cat: Category) -> GGMLType:
        ft, FT, T = self.ftype, FileType, GGMLType
        n_expert = self.m.n_expert
        n_gqa = self.m.n_gqa

        def use_more_bits(i_layer: int, n_layers: int) -> bool:
            return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or _cmod(i_layer - n_layers // 8, 3) == 2

        def layer_info(i_layer: int, n_layer: int) -> tuple[int, int]:
            if max(1, n_expert) > 1:
                li = layer_of(name)
                if li < 0:
                    raise InputError(f"tensor {name!r}: cannot determine its layer")
                if li >= n_layer:
                    raise InputError(f"tensor {name!r}: layer {li} out of range [0, {n_layer})")
                return li, n_layer
            return i_layer, n_layer

        # the row's tensors never below Q8_0 (glm5-next: its q-LoRA projections and an MTP eh_proj)
        row = _row(self.m.arch)
        if row is not None and any(s in name for s in row.quant_min_q8_0):
            return new_type if new_type in (T.F32, T.BF16, T.F16) else T.Q8_0
        if cat == Category.OUTPUT or (self.has_tied_embeddings and cat == Category.TOKEN_EMBD):
            if self.o.output_tensor_type is not None:
                new_type = self.o.output_tensor_type
            else:
                nx = int(shape[0])
                if nx % block_size(new_type) != 0:
                    new_type = T.Q8_0
                elif new_type != T.Q8_0:
                    new_type = T.Q6_K
        elif cat == Category.TOKEN_EMBD:
            if self.o.token_embedding_type is not None:
                new_type = self.o.token_embedding_type
        elif _is_attn_v(cat):
            if ft == FT.MOSTLY_Q2_K:
                new_type = T.Q4_K if n_gqa >= 4 else T.Q3_K
            elif ft == FT.MOSTLY_Q3_K_M:
                new_type = T.Q5_K if self.i_attention_wv < 2 else T.Q4_K
            elif ft == FT.MOSTLY_Q3_K_L:
                new_type = T.Q5_K
            elif ft in (FT.MOSTLY_IQ4_NL, FT.MOSTLY_IQ4_XS) and n_gqa >= 4:
                new_type = T.Q5_K
            elif ft in (FT.MOSTLY_Q4_K_M, FT.MOSTLY_Q5_K_M) and use_more_bits(self.i_attention_wv, self.n_attention_wv):
                new_type = T.Q6_K
            elif ft == FT.MOSTLY_Q4_K_S and self.i_attention_wv < 4:
                new_type = T.Q5_K
            if n_expert == 8:
                new_type = T.Q8_0
            self.i_attention_wv += 1
        elif cat == Category.ATTENTION_K:
            if n_expert == 8:
                new_type = T.Q8_0
        elif cat == Category.FFN_DOWN:
            i_layer, n_layer = layer_info(self.i_ffn_down, self.n_ffn_down)
            if ft == FT.MOSTLY_Q2_K:
                new_type = T.Q3_K
            elif ft == FT.MOSTLY_Q3_K_M:
                new_type = T.Q5_K if i_layer < n_layer // 16 else T.Q4_K
            elif ft == FT.MOSTLY_Q3_K_L:
                new_type = T.Q5_K
            elif ft == FT.MOSTLY_Q4_K_M:
                if use_more_bits(i_layer, n_layer):
                    new_type = T.Q6_K
            elif i_layer < n_layer // 8 and ft in (FT.MOSTLY_IQ4_NL, FT.MOSTLY_IQ4_XS) and not self.has_imatrix:
                new_type = T.Q5_K
            elif ft == FT.MOSTLY_Q5_K_M and use_more_bits(i_layer, n_layer):
                new_type = T.Q6_K
            elif ft == FT.MOSTLY_Q4_K_S and i_layer < n_layer // 8:
                new_type = T.Q5_K
            elif ft in (FT.MOSTLY_Q4_0, FT.MOSTLY_Q5_0) and self.has_imatrix and i_layer < n_layer // 8:
                # llama.cpp guards the first ffn_down layers of Q4_0/Q5_0 only when an imatrix is given
                new_type = T.Q4_1 if ft == FT.MOSTLY_Q4_0 else T.Q5_1
            self.i_ffn_down += 1
        elif cat == Category.ATTENTION_OUTPUT:
            if n_expert == 8:
                if ft in (FT.MOSTLY_Q2_K, FT.MOSTLY_Q3_K_S, FT.MOSTLY_Q3_K_M, FT.MOSTLY_IQ4_NL,
                          FT.MOSTLY_Q4_K_S, FT.MOSTLY_Q4_K_M, FT.MOSTLY_IQ4_XS):
                    new_type = T.Q5_K
            else:
                if ft == FT.MOSTLY_Q2_K:
                    new_type = T.Q3_K
                elif ft == FT.MOSTLY_Q3_K_M:
                    new_type = T.Q4_K
                elif ft == FT.MOSTLY_Q3_K_L:
                    new_type = T.Q5_K
        elif cat == Category.ATTENTION_QKV:
            if ft in (FT.MOSTLY_Q3_K_M, FT.MOSTLY_Q3_K_L):
                new_type = T.Q4_K
            elif ft == FT.MOSTLY_Q4_K_M:
                new_type = T.Q5_K
            elif ft == FT.MOSTLY_Q5_K_M:
                new_type = T.Q6_K
        elif cat == Category.FFN_GATE:
            layer_info(self.i_ffn_gate, self.n_ffn_gate)
            self.i_ffn_gate += 1
        elif cat == Category.FFN_UP:
            layer_info(self.i_ffn_up, self.n_ffn_up)
            self.i_ffn_up += 1
        return new_type


def _cmod(a: int, b: int) -> int:
    """C's % (truncates toward zero), used by use_more_bits on negative values."""
    r = abs(a) % b
    return -r if a < 0 else r
