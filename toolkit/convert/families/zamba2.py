"""Zamba2ForCausalLM -> GGUF ``zamba2`` (llama.cpp has no Zamba2: our layout, README "Zamba2 layout").

Glossary: D = hidden_size, L = num_hidden_layers, V = vocab rows; Mamba-2: H = n_mamba_heads,
P = mamba_headdim, d_inner = mamba_expand * D = H * P, G = mamba_ngroups, N = mamba_d_state,
K = mamba_d_conv; shared block: A = attention_hidden_size (= 2 D: the block reads [x | embedding]),
Hq = num_attention_heads, Hkv = num_key_value_heads, hd = attention_head_dim (Hq hd = A),
I = intermediate_size, r = adapter_rank, M = num_mem_blocks (shared blocks).

Every layer is a Mamba-2 block; the "hybrid" layers (``layers_block_type``) first run shared
block b = j % M (j: the hybrid layer's rank among the hybrid layers) with the layer's own LoRA
adapters, then its own linear projection, and add the result to the Mamba-2 block's input
(transformers modeling_zamba2.py Zamba2HybridLayer).  The shared blocks are stored once.

HF tensor (numpy shape)                                   GGUF tensor
model.embed_tokens.weight [V, D]                          token_embd.weight
model.layers.i.input_layernorm.weight [D]                 blk.i.attn_norm.weight   (Mamba-2 layer)
model.layers.i.mamba_decoder.input_layernorm.weight [D]   blk.i.attn_norm.weight   (hybrid layer)
  (mamba_decoder.)mamba.* (Mamba-2 mixer)                 blk.i.ssm_* (as mamba2.py; add_bias_linear: in_proj /
                                                          out_proj biases as blk.i.ssm_{in,out}.bias)
  linear.weight [D, D]                                    blk.i.shared_linear.weight
shared_transformer of the first hybrid layer of block b (the others are tied to it):
  input_layernorm.weight [A]                              shared.b.attn_norm.weight
  self_attn.{q,k,v}_proj.weight [Hq hd | Hkv hd, A]       shared.b.attn_{q,k,v}.weight
  self_attn.o_proj.weight [D, Hq hd]                      shared.b.attn_output.weight
  pre_ff_layernorm.weight [D]                             shared.b.ffn_norm.weight
  feed_forward.gate_up_proj.weight [2 I, D]               shared.b.ffn_gate.weight (rows 0..I),
                                                          shared.b.ffn_up.weight (rows I..2I)
  feed_forward.down_proj.weight [D, I]                    shared.b.ffn_down.weight
  feed_forward.gate_up_proj.bias [2 I] (add_bias_linear)  shared.b.ffn_gate.bias (0..I), shared.b.ffn_up.bias (I..2I)
  feed_forward.down_proj.bias [D] (add_bias_linear)       shared.b.ffn_down.bias
  self_attn.linear_{q,k,v}_adapter_list.j.0.weight [r, A] blk.i.attn_{q,k,v}_lora_a.weight
    (only with use_shared_attention_adapter; the MLP adapter is always there)
  self_attn.linear_{q,k,v}_adapter_list.j.1.weight [A, r] blk.i.attn_{q,k,v}_lora_b.weight
  feed_forward.gate_up_proj_adapter_list.j.0.weight [r, D] blk.i.ffn_lora_a.weight
  feed_forward.gate_up_proj_adapter_list.j.1.weight [2I, r] blk.i.ffn_gate_lora_b (rows 0..I),
                                                          blk.i.ffn_up_lora_b (rows I..2I)
model.final_layernorm.weight [D]                          output_norm.weight
lm_head.weight [V, D]                                     output.weight (omitted when tied)

RoPE (use_mem_rope) is NEOX (rotate_half) over the whole head: rows are stored in HF order.
"""
from __future__ import annotations

from types import SimpleNamespace

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.activation import ffn_act_kv
from toolkit.convert.base import Family
from toolkit.convert.families.mamba2 import emit_mamba2_mixer
from toolkit.convert.plan import Segment, kv_arr_i32, kv_f32, kv_u32
from toolkit.convert.config_keys import ConfigKeys, Refused
from toolkit.convert.rope_scaling import SCALED_ROPE_TYPES, SCALED_WHY, rope_scaling_kv
from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import Keys
from toolkit.gguf_io.constants import ARCH_ZAMBA2

_L = r"model\.layers\.\d+\."
_MIXER = r"mamba\.(A_log|D|dt_bias|conv1d\.weight|conv1d\.bias|in_proj\.(weight|bias)|norm\.weight|out_proj\.(weight|bias))"
_ST = _L + r"shared_transformer\."
# config.json layers_block_type: the transformers 5 names and the original (hub) ones
_BLOCK_TYPES = {"mamba": False, "linear_attention": False, "hybrid": True}


def shared_block_map(fam: Family) -> list[int]:
    """Per layer, the shared block a hybrid layer runs (the j-th hybrid layer: j mod n_mem), -1
    for the others (Zamba and Zamba2: ``fam.hybrid``, ``fam.n_mem``, ``fam.n_layer``)."""
    bmap = [-1] * fam.n_layer
    for j, i in enumerate(fam.hybrid):
        bmap[i] = j % fam.n_mem
    return bmap


def shared_attention_kv(fam: Family, bmap: list[int]) -> list:
    """The keys Zamba and Zamba2 write alike, in this order: sizes, the attention heads (KV
    heads only on hybrid layers), HF's scale softmax(q k^T / sqrt(hd / 2))
    (Zamba(2)Attention.scaling) and the norm epsilon."""
    key = fam.key
    return [
        kv_u32(key(Keys.LLM.BLOCK_COUNT), fam.n_layer),
        # Zamba2 use_long_context: HF's Zamba2Config sets max_position_embeddings = 16384 (transformers
        # 5.24 configuration_zamba2.py __post_init__); its RoPE is unchanged (see Zamba2Family.__init__)
        kv_u32(key(Keys.LLM.CONTEXT_LENGTH), 16384 if getattr(fam, "long_context", False)
               else fam.cfg.int("max_position_embeddings", default=4096)),
        kv_u32(key(Keys.LLM.EMBEDDING_LENGTH), fam.n_embd),
        kv_u32(key(Keys.LLM.FEED_FORWARD_LENGTH), fam.n_ff),
        kv_u32(key(Keys.Attention.HEAD_COUNT), fam.n_head),
        kv_arr_i32(key(Keys.Attention.HEAD_COUNT_KV), [fam.n_head_kv if b >= 0 else 0 for b in bmap]),
        kv_u32(key(Keys.Attention.KEY_LENGTH), fam.head_dim),
        kv_u32(key(Keys.Attention.VALUE_LENGTH), fam.head_dim),
        kv_f32(key(Keys.Attention.SCALE), float((fam.head_dim / 2) ** -0.5)),
        kv_f32(key(Keys.Attention.LAYERNORM_RMS_EPS), fam.eps),
    ]


def copy_shared_attention(fam: Family, b: int, st: str) -> None:
    """Shared block ``b``'s attention (its norm on the [h, embeddings] input of width
    ``fam.attn_in``, q / k / v, out) and its FFN norm, from the HF prefix ``st``; Zamba and
    Zamba2 differ only in the FFN after it."""
    D, A = fam.n_embd, fam.attn_in
    fam.copy(tn(T.SHARED_ATTN_NORM, b), st + "input_layernorm.weight", (A,))
    for out, src, rows in ((T.SHARED_ATTN_Q, "q", fam.n_head), (T.SHARED_ATTN_K, "k", fam.n_head_kv),
                           (T.SHARED_ATTN_V, "v", fam.n_head_kv)):
        fam.copy(tn(out, b), st + f"self_attn.{src}_proj.weight", (rows * fam.head_dim, A))
    fam.copy(tn(T.SHARED_ATTN_OUT, b), st + "self_attn.o_proj.weight", (D, fam.n_head * fam.head_dim))
    fam.copy(tn(T.SHARED_FFN_NORM, b), st + "pre_ff_layernorm.weight", (D,))


class Zamba2Family(Family):
    hf_archs = ("Zamba2ForCausalLM",)
    hf_configs = ("Zamba2Config",)
    config_keys = ConfigKeys.of(
        "vocab_size max_position_embeddings hidden_size num_hidden_layers layers_block_type mamba_d_state mamba_d_conv "
        "mamba_expand mamba_ngroups n_mamba_heads intermediate_size num_attention_heads num_key_value_heads "
        "num_mem_blocks use_shared_attention_adapter adapter_rank use_mem_rope rope_parameters rms_norm_eps "
        "tie_word_embeddings hybrid_layer_ids mamba_headdim attention_head_dim attention_hidden_size time_step_min "
        "use_long_context hidden_act add_bias_linear",
        irrelevant={"use_conv_bias": "not read by HF's model: Zamba2MambaMixer builds conv1d with bias=True "
                                      "whatever it says (the checkpoint has conv1d.bias)"},
        rope_types=SCALED_ROPE_TYPES, rope_why=SCALED_WHY,
        aliases={"layer_types": "layers_block_type", "head_dim": "attention_head_dim"})
    families = ("Zamba2",)
    llama_cpp = False   # our layout: llama.cpp has no Zamba2
    arch = ARCH_ZAMBA2
    known = (
        r"model\.embed_tokens\.weight", r"model\.final_layernorm\.weight", r"lm_head\.weight",
        _L + r"input_layernorm\.weight", _L + _MIXER, _L + r"linear\.weight",
        _L + r"mamba_decoder\.input_layernorm\.weight", _L + r"mamba_decoder\." + _MIXER,
        _ST + r"(input_layernorm|pre_ff_layernorm)\.weight",
        _ST + r"self_attn\.[qkvo]_proj\.weight", _ST + r"self_attn\.linear_[qkv]_adapter_list\.\d+\.[01]\.weight",
        _ST + r"feed_forward\.(gate_up_proj|down_proj)\.(weight|bias)",
        _ST + r"feed_forward\.gate_up_proj_adapter_list\.\d+\.[01]\.weight",
    )

    def _hybrid_layers(self) -> list[int]:
        """Indices of the hybrid layers, from ``layers_block_type`` (one entry per layer)."""
        c = self.cfg
        types = c.d.get("layers_block_type")
        if not isinstance(types, list):
            raise InputError(f"{c.path}: key 'layers_block_type' must be a list of block types, got {types!r}")
        if len(types) != self.n_layer:
            raise InputError(f"{c.path}: key 'layers_block_type' has {len(types)} entries, num_hidden_layers is {self.n_layer}")
        bad = [t for t in types if not isinstance(t, str) or t not in _BLOCK_TYPES]
        if bad:
            raise InputError(f"{c.path}: key 'layers_block_type' has unknown block type {bad[0]!r} "
                             f"(known: {', '.join(sorted(_BLOCK_TYPES))})")
        hyb = [i for i, t in enumerate(types) if _BLOCK_TYPES[t]]
        ids = c.d.get("hybrid_layer_ids")
        if ids is not None and ids != hyb:
            raise InputError(f"{c.path}: key 'hybrid_layer_ids' = {ids} disagrees with layers_block_type's hybrid layers {hyb}")
        return hyb

    def read_hparams(self) -> None:
        c = self.cfg
        self.n_embd = c.int("hidden_size")
        self.n_layer = self.layer_count("num_hidden_layers")
        self.n_vocab = c.int("vocab_size")
        self.hybrid = self._hybrid_layers()
        self.d_conv, self.d_state = c.int("mamba_d_conv", default=4), c.int("mamba_d_state", default=64)
        self.n_group, self.ssm_head_dim = c.int("mamba_ngroups", default=1), c.int("mamba_headdim", default=64)
        self.d_inner = int(c.float("mamba_expand", default=2) * self.n_embd)
        self.ssm_n_head = c.int("n_mamba_heads", default=self.d_inner // self.ssm_head_dim)
        if self.ssm_n_head * self.ssm_head_dim != self.d_inner or self.ssm_n_head % self.n_group:
            raise InputError(f"{c.path}: n_mamba_heads {self.ssm_n_head} x mamba_headdim {self.ssm_head_dim} != "
                             f"mamba_expand x hidden_size = {self.d_inner}, or mamba_ngroups {self.n_group} does not divide it")
        self.eps = c.eps("rms_norm_eps", default=1e-5)
        self.n_head, self.n_head_kv = c.int("num_attention_heads"), c.int("num_key_value_heads", default=c.int("num_attention_heads"))
        self.attn_in = c.int("attention_hidden_size", default=2 * self.n_embd)
        self.head_dim = c.int("attention_head_dim", default=2 * self.n_embd // self.n_head)
        if self.attn_in != 2 * self.n_embd or self.n_head * self.head_dim != self.attn_in or self.n_head_kv != self.n_head:
            raise UnsupportedError(f"{c.path}: attention_hidden_size {self.attn_in} must be 2 x hidden_size and equal "
                                   f"num_attention_heads x attention_head_dim, with num_key_value_heads = num_attention_heads")
        self.n_ff, self.rank = c.int("intermediate_size"), c.int("adapter_rank", default=128)
        self.n_mem = c.int("num_mem_blocks", default=1)
        if self.n_mem <= 0:
            raise InputError(f"{c.path}: key 'num_mem_blocks' = {self.n_mem} must be > 0")
        self.attn_adapters = c.flag("use_shared_attention_adapter", False)
        self.use_rope = c.flag("use_mem_rope", False)
        # add_bias_linear: the Mamba-2 in_proj / out_proj and the shared MLP's gate_up_proj / down_proj biases
        self.bias = c.flag("add_bias_linear", False)
        # use_long_context: in transformers 5.24 it only sets max_position_embeddings = 16384; the
        # model logs "using rescaled rope_theta" but Zamba2RotaryEmbedding reads rope_theta as given
        # (no rescale: HF's logits are bit-identical with it on or off, zamba2-tiny measured)
        self.long_context = c.flag("use_long_context", False)
        rp = c.d.get("rope_parameters") or {}
        theta = rp.get("rope_theta", c.d.get("rope_theta", 10000.0)) if isinstance(rp, dict) else None
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
            raise InputError(f"{c.path}: key 'rope_parameters' must hold a positive 'rope_theta', got {rp!r}")
        self.rope_theta = float(theta)

    def n_vocab_rows(self) -> int:
        return self.n_vocab

    def _keys(self) -> None:
        key, p = self.key, self.plan
        bmap = shared_block_map(self)
        p.kv += shared_attention_kv(self, bmap) + [
            kv_u32(key(Keys.Rope.DIMENSION_COUNT), self.head_dim if self.use_rope else 0),
            kv_f32(key(Keys.Rope.FREQ_BASE), self.rope_theta),
            kv_u32(key(Keys.SSM.CONV_KERNEL), self.d_conv),
            kv_u32(key(Keys.SSM.INNER_SIZE), self.d_inner),
            kv_u32(key(Keys.SSM.STATE_SIZE), self.d_state),
            kv_u32(key(Keys.SSM.TIME_STEP_RANK), self.ssm_n_head),
            kv_u32(key(Keys.SSM.GROUP_COUNT), self.n_group),
            kv_u32(key(Keys.SSM.HEAD_DIM), self.ssm_head_dim),
            kv_f32(key(Keys.Zamba2.SSM_DT_MIN), self.cfg.float("time_step_min", default=0.001)),
            kv_arr_i32(key(Keys.Attention.LAYER_INDICES), list(self.hybrid)),
            kv_u32(key(Keys.Zamba2.SHARED_BLOCK_COUNT), self.n_mem),
            kv_arr_i32(key(Keys.Zamba2.SHARED_BLOCK_MAP), bmap),
            kv_u32(key(Keys.Zamba2.ADAPTER_RANK), self.rank),
        ]
        # the shared block's MLP act (Zamba2MLP ACT2FN[hidden_act]); written only when not gelu
        p.kv += ffn_act_kv(self.cfg.path, self.cfg.d, key, default="gelu")
        if self.use_rope:   # llama.cpp's rope.scaling.*; HF rotates only with use_mem_rope
            c = self.cfg
            if self.long_context:   # HF's yarn defaults original_max_position_embeddings to the 16384 it sets
                c = SimpleNamespace(path=c.path, d={**c.d, "max_position_embeddings": 16384})
            p.kv += rope_scaling_kv(c, key)

    def _split(self, gate: str, up: str, src: str, shape: tuple[int, int]) -> None:
        """rows [0, I) of ``src`` as ``gate``, rows [I, 2I) as ``up`` (HF chunk(2, dim=-1))."""
        t = self.take(src, shape)
        half = shape[0] // 2
        self.emit(gate, (half, shape[1]), [Segment(t, 0, half)], note="rows [0, I) of gate_up")
        self.emit(up, (half, shape[1]), [Segment(t, half, half)], note="rows [I, 2I) of gate_up")

    def _shared_block(self, b: int, st: str) -> None:
        D, I = self.n_embd, self.n_ff
        copy_shared_attention(self, b, st)
        self._split(tn(T.SHARED_FFN_GATE, b), tn(T.SHARED_FFN_UP, b), st + "feed_forward.gate_up_proj.weight", (2 * I, D))
        self.copy(tn(T.SHARED_FFN_DOWN, b), st + "feed_forward.down_proj.weight", (D, I))
        if self.bias:
            t = self.take(st + "feed_forward.gate_up_proj.bias", (2 * I,), why="add_bias_linear is true")
            self.emit(tn(T.SHARED_FFN_GATE, b, ".bias"), (I,), [Segment(t, 0, 1)], note="elements [0, I) of gate_up's bias")
            self.emit(tn(T.SHARED_FFN_UP, b, ".bias"), (I,), [Segment(t, 1, 1)], note="elements [I, 2I) of gate_up's bias")
            self.copy(tn(T.SHARED_FFN_DOWN, b, ".bias"), st + "feed_forward.down_proj.bias", (D,), why="add_bias_linear is true")

    def _adapters(self, i: int, j: int, st: str) -> None:
        """Hybrid layer i (the j-th hybrid layer): its adapters, slot j of its shared block's lists."""
        A, D, I, r = self.attn_in, self.n_embd, self.n_ff, self.rank
        for x, ta, tb in () if not self.attn_adapters else (("q", T.ATTN_Q_LORA_A, T.ATTN_Q_LORA_B), ("k", T.ATTN_K_LORA_A, T.ATTN_K_LORA_B),
                          ("v", T.ATTN_V_LORA_A, T.ATTN_V_LORA_B)):
            self.copy(tn(ta, i), st + f"self_attn.linear_{x}_adapter_list.{j}.0.weight", (r, A))
            self.copy(tn(tb, i), st + f"self_attn.linear_{x}_adapter_list.{j}.1.weight", (A, r))
        f = st + f"feed_forward.gate_up_proj_adapter_list.{j}."
        self.copy(tn(T.FFN_LORA_A, i), f + "0.weight", (r, D))
        self._split(tn(T.FFN_GATE_LORA_B, i), tn(T.FFN_UP_LORA_B, i), f + "1.weight", (2 * I, r))

    def build(self):
        self.read_hparams()
        self._keys()
        D = self.n_embd
        self.copy(tn(T.TOKEN_EMBD), "model.embed_tokens.weight", (self.n_vocab, D))
        # shared block b lives in the first hybrid layer that uses it; later copies are ties
        owner = {}
        for j, i in enumerate(self.hybrid):
            owner.setdefault(j % self.n_mem, i)
        for b, i in sorted(owner.items()):
            self._shared_block(b, f"model.layers.{i}.shared_transformer.")
        hyb = {i: j for j, i in enumerate(self.hybrid)}
        for i in range(self.n_layer):
            pre = f"model.layers.{i}."
            if i in hyb:
                j = hyb[i]
                self._adapters(i, j, f"model.layers.{owner[j % self.n_mem]}.shared_transformer.")
                self.copy(tn(T.SHARED_LINEAR, i), pre + "linear.weight", (D, D))
                pre += "mamba_decoder."
            self.copy(tn(T.ATTN_NORM, i), pre + "input_layernorm.weight", (D,))
            emit_mamba2_mixer(self, i, pre + "mamba.", D, self.d_inner, self.d_state, self.n_group,
                              self.ssm_n_head, self.d_conv, proj_bias=self.bias)
        self._omit_tied_copies(owner)
        self.copy(tn(T.OUTPUT_NORM), "model.final_layernorm.weight", (D,))
        self.tied_output("model.embed_tokens.weight", "lm_head.weight", self.n_vocab, D, tie_default=True)
        self.check_leftovers()
        return self.plan

    def _omit_tied_copies(self, owner: dict[int, int]) -> None:
        """Checkpoints that store the tied shared_transformer copies of later hybrid layers."""
        owners = set(owner.values())
        for name in list(self.hf.tensors):
            if ".shared_transformer." in name and name not in self._taken:
                layer = int(name.split(".")[2])
                if layer in self.hybrid and layer not in owners:
                    self.omit(name, "tied to its shared block's first hybrid layer")
