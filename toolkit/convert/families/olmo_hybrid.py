"""OlmoHybridForCausalLM -> GGUF ``olmo-hybrid`` (llama.cpp 0c1e570 has no OLMo-Hybrid: the names and
keys proposed by docs/specs/more-hybrids.md §3.3, llama.cpp's where it has them).

Glossary: D = hidden_size, L = num_hidden_layers, V = vocab rows, F = intermediate_size; attention:
Hq / Hkv = num_attention_heads / num_key_value_heads, hd = D / Hq (there is no head_dim key,
modeling_olmo_hybrid.py:175); gated delta net: Hk / Hv = linear_num_key_heads / linear_num_value_heads, Dk / Dv =
linear_key_head_dim / linear_value_head_dim (defaults int(0.75 D / Hk) and 2 Dk), K =
linear_conv_kernel_dim.

Layers (``layer_types``; default full attention at i % 4 == 3, configuration_olmo_hybrid.py:120-149):
- ``linear_attention``: pre-norm gated delta net block, then a pre-norm SwiGLU FFN; v-head h
  reads k-head h // (Hv / Hk) (HF's grouped order, kept: the runtime's gdn_head_tiled = 0);
  beta = sigmoid(b) x 2 when ``linear_allow_neg_eigval`` (our key ``ssm.beta_scale``, written only
  when it is not 1, llama.cpp's GDN value); the gated norm's epsilon is HF's constant 1e-5
  (modeling_olmo_hybrid.py:631), the runtime's for this architecture.
- ``full_attention``: post-norm (OLMo-2): no input norm; h += rms(attn(h)); h += rms(ffn(h)); q / k
  RMSNorm over all heads at once; NoPE when ``rope_parameters.rope_theta`` is null (the released
  checkpoints: ``rope.dimension_count`` 0, no ``rope.freq_base``), else NeoX RoPE over hd.

HF tensor (saved name; numpy shape)                    GGUF tensor
model.embed_tokens.weight [V, D]                       token_embd.weight
GDN layer i, model.layers.i.:
  attention_layer_norm.weight [D]                      blk.i.attn_norm.weight
  feedforward_layer_norm.weight [D] (pre-FFN norm)     blk.i.ffn_norm.weight
  linear_attn.{q,k}_proj.weight [Hk Dk, D]             blk.i.attn_{q,k}.weight
  linear_attn.v_proj.weight [Hv Dv, D]                 blk.i.attn_v.weight
  linear_attn.g_proj.weight [Hv Dv, D]                 blk.i.attn_gate.weight
  linear_attn.{b,a}_proj.weight [Hv, D]                blk.i.ssm_{beta,alpha}.weight
  linear_attn.{q,k,v}_conv1d.weight (concatenated:     blk.i.ssm_conv1d_{q,k,v}.weight [Hk Dk | Hk Dk | Hv Dv, K]
    [2 Hk Dk + Hv Dv, 1, K])                             (cut, squeezed; kimi-linear's names)
  linear_attn.A_log [Hv]                               blk.i.ssm_a = -exp(A_log)
  linear_attn.dt_bias [Hv]                             blk.i.ssm_dt.bias
  linear_attn.o_norm.weight [Dv]                       blk.i.ssm_norm.weight
  linear_attn.o_proj.weight [D, Hv Dv]                 blk.i.ssm_out.weight
attention layer i, model.layers.i.:
  self_attn.{q,k,v,o}_proj.weight                      blk.i.attn_{q,k,v,output}.weight
  self_attn.{q,k}_norm.weight [Hq hd] / [Hkv hd]       blk.i.attn_{q,k}_norm.weight (full width, as llama.cpp's olmo2)
  feedforward_layer_norm.weight [D] (attention         blk.i.post_attention_norm.weight (olmo2's name)
    output norm: HF post_attention_layernorm, conversion_mapping.py:1304)
  post_feedforward_layernorm.weight [D]                blk.i.post_ffw_norm.weight (olmo2's name)
every layer: mlp.{gate,up,down}_proj.weight            blk.i.ffn_{gate,up,down}.weight
model.norm.weight [D]                                  output_norm.weight
lm_head.weight [V, D]                                  output.weight (omitted when tied)

Both spellings of the renamed norms are accepted (docs/specs/more-hybrids.md §3.2): ``feedforward_layer_norm`` /
``post_attention_layernorm``, ``attention_layer_norm`` / ``input_layernorm``.  The conv pieces
``{q,k,v}_conv1d`` are concatenated and cut at the q / k / v boundaries (see ``_gdn``: transformers
5.24 saves them as three equal chunks, not [Hk Dk, 1, K] / [Hk Dk, 1, K] / [Hv Dv, 1, K] by the
head sizes); a fused ``linear_attn.conv1d.weight`` (the module's own name) is cut the same way.
``mtp.*`` tensors are left out (transformers ignores them on load, modeling_olmo_hybrid.py:857).
"""
from __future__ import annotations

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.base import Family
from toolkit.convert.rope_scaling import SCALED_ROPE_TYPES, SCALED_WHY, rope_scaling_kv
from toolkit.convert.plan import KV, Segment, kv_f32, kv_u32
from toolkit.convert.activation import ffn_act_kv, ssm_act_kv
from toolkit.convert.config_keys import ConfigKeys
from toolkit.errors import InputError
from toolkit.gguf_io import Keys
from toolkit.gguf_io.constants import ARCH_OLMO_HYBRID, GGUFValueType

_L = r"model\.layers\.\d+\."
_GDN = r"linear_attn\.(A_log|dt_bias|(q|k|v|g|a|b|o)_proj\.weight|(q_|k_|v_|)conv1d\.weight|o_norm\.weight)"
_NORMS = r"(attention_layer_norm|input_layernorm|feedforward_layer_norm|post_attention_layernorm|post_feedforward_layernorm)\.weight"
_LAYER_TYPES = ("linear_attention", "full_attention")


class OlmoHybridFamily(Family):
    hf_archs = ("OlmoHybridForCausalLM",)
    hf_configs = ("OlmoHybridConfig",)
    config_keys = ConfigKeys.of(
        "vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads "
        "max_position_embeddings rms_norm_eps tie_word_embeddings rope_parameters layer_types linear_num_key_heads "
        "linear_num_value_heads linear_key_head_dim linear_value_head_dim linear_conv_kernel_dim linear_allow_neg_eigval "
        "attention_bias hidden_act",
        irrelevant={k: "A_log / dt_bias initialisation only" for k in (
            "linear_a_log_min", "linear_a_log_max", "linear_dt_min", "linear_dt_max", "linear_dt_init_floor")},
        rope_types=SCALED_ROPE_TYPES, rope_why=SCALED_WHY)
    families = ("OLMo-Hybrid",)
    llama_cpp = False   # llama.cpp 0c1e570 has no olmo-hybrid architecture (names from docs/specs/more-hybrids.md)
    vllm = False        # not in vLLM's supported-models list as we read it
    arch = ARCH_OLMO_HYBRID
    known = (
        r"model\.embed_tokens\.weight", r"model\.norm\.weight", r"lm_head\.weight",
        _L + _NORMS, _L + _GDN, _L + r"self_attn\.(q|k|v|o)_proj\.(weight|bias)", _L + r"self_attn\.(q|k)_norm\.weight",
        _L + r"mlp\.(gate|up|down)_proj\.weight", r"(model\.)?mtp\..*",
    )

    def _layer_types(self) -> list[str]:
        """``layer_types``, or HF's default pattern when absent (configuration_olmo_hybrid.py:120-129).

        Raises:
            InputError: a list of the wrong length or with another value, or one without a layer
                of each kind (HF refuses that config, configuration_olmo_hybrid.py:144-149).
        """
        c, L = self.cfg, self.n_layer
        lt = c.d.get("layer_types")
        if lt is None:
            lt = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(L)]
            if "full_attention" not in lt:
                lt[-1] = "full_attention"
            return lt
        if not isinstance(lt, list) or len(lt) != L:
            raise InputError(f"{c.path}: key 'layer_types' has {len(lt) if isinstance(lt, list) else 'no list of'} "
                             f"entries, num_hidden_layers is {L}")
        bad = [x for x in lt if x not in _LAYER_TYPES]
        if bad:
            raise InputError(f"{c.path}: key 'layer_types' has {bad[0]!r}; OLMo-Hybrid layers are {' or '.join(_LAYER_TYPES)}")
        if set(lt) != set(_LAYER_TYPES):
            raise InputError(f"{c.path}: key 'layer_types' must have at least one linear_attention and one "
                             f"full_attention layer (as transformers' OlmoHybridConfig requires)")
        return list(lt)

    def read_hparams(self) -> None:
        c = self.cfg
        self.n_embd = D = c.int("hidden_size")
        self.n_layer = self.layer_count("num_hidden_layers")
        self.n_vocab = c.int("vocab_size")
        self.n_ff = c.int("intermediate_size")
        self.eps = c.eps("rms_norm_eps", default=1e-6)
        self.n_head = c.int("num_attention_heads")
        self.n_head_kv = c.int("num_key_value_heads", default=self.n_head)
        if D % self.n_head or self.n_head % self.n_head_kv:
            raise InputError(f"{c.path}: num_attention_heads {self.n_head} must divide hidden_size {D}, and "
                             f"num_key_value_heads {self.n_head_kv} must divide num_attention_heads")
        self.head_dim = D // self.n_head
        self.n_k = c.int("linear_num_key_heads", default=self.n_head)
        self.n_v = c.int("linear_num_value_heads", default=self.n_head)
        self.d_k = c.int("linear_key_head_dim", default=int(0.75 * D / self.n_k))
        self.d_v = c.int("linear_value_head_dim", default=2 * self.d_k)
        self.d_conv = c.int("linear_conv_kernel_dim", default=4)
        if self.n_v % self.n_k:
            raise InputError(f"{c.path}: linear_num_key_heads {self.n_k} does not divide linear_num_value_heads {self.n_v}")
        self.beta_scale = 2.0 if c.flag("linear_allow_neg_eigval", True) else 1.0
        rp = c.d.get("rope_parameters")
        if rp is not None and not isinstance(rp, dict):
            raise InputError(f"{c.path}: key 'rope_parameters' = {str(rp)[:60]} is not an object")
        self.rope_theta = (rp or {}).get("rope_theta")
        if self.rope_theta is not None:
            if isinstance(self.rope_theta, bool) or not isinstance(self.rope_theta, (int, float)) or not self.rope_theta > 0:
                raise InputError(f"{c.path}: rope_parameters.rope_theta = {self.rope_theta!r} must be a positive number or null")
            self.rope_theta = float(self.rope_theta)
        self.attn_bias = c.flag("attention_bias", False)   # q/k/v/o_proj biases (OlmoHybridAttention)
        self.layer_types = self._layer_types()

    def n_vocab_rows(self) -> int:
        return self.n_vocab

    def _keys(self) -> None:
        key, p = self.key, self.plan
        p.kv += [
            kv_u32(key(Keys.LLM.BLOCK_COUNT), self.n_layer),
            kv_u32(key(Keys.LLM.CONTEXT_LENGTH), self.cfg.int("max_position_embeddings", default=65536)),
            kv_u32(key(Keys.LLM.EMBEDDING_LENGTH), self.n_embd),
            kv_u32(key(Keys.LLM.FEED_FORWARD_LENGTH), self.n_ff),
            kv_u32(key(Keys.Attention.HEAD_COUNT), self.n_head),
            kv_u32(key(Keys.Attention.HEAD_COUNT_KV), self.n_head_kv),
            kv_f32(key(Keys.Attention.LAYERNORM_RMS_EPS), self.eps),
            # NoPE (rope_theta null): no rotated dims, no base
            kv_u32(key(Keys.Rope.DIMENSION_COUNT), self.head_dim if self.rope_theta is not None else 0),
            kv_u32(key(Keys.SSM.CONV_KERNEL), self.d_conv),
            kv_u32(key(Keys.SSM.STATE_SIZE), self.d_k),
            kv_u32(key(Keys.SSM.GROUP_COUNT), self.n_k),
            kv_u32(key(Keys.SSM.TIME_STEP_RANK), self.n_v),
            # Dv = inner_size / time_step_rank (llama.cpp's GDN assumes Dv = Dk; OLMo's default is 2 Dk)
            kv_u32(key(Keys.SSM.INNER_SIZE), self.n_v * self.d_v),
            KV(key(Keys.Attention.RECURRENT_LAYERS), [t == "linear_attention" for t in self.layer_types],
               GGUFValueType.ARRAY, GGUFValueType.BOOL),
        ]
        if self.rope_theta is not None:
            p.kv.append(kv_f32(key(Keys.Rope.FREQ_BASE), self.rope_theta))
            p.kv += rope_scaling_kv(self.cfg, key)
        if self.beta_scale != 1.0:
            p.kv.append(kv_f32(key(Keys.SSM.BETA_SCALE), self.beta_scale))
        # hidden_act: the q / k / v convs' act (causal_conv1d_fn activation=) and the MLP gate's
        # (ACT2FN[hidden_act]); the gated norm's is "silu", fixed.  Each key written only when not silu
        p.kv += ffn_act_kv(self.cfg.path, self.cfg.d, key) + ssm_act_kv(self.cfg.path, self.cfg.d, key)

    def _norm(self, out: str, pre: str, names: tuple[str, ...]) -> None:
        """One RMSNorm weight [D] saved under either of ``names`` (the transformers rename)."""
        src = next((pre + n for n in names if self.has(pre + n)), pre + names[0])
        self.copy(out, src, (self.n_embd,))

    def _gdn(self, i: int, g: str) -> None:
        D, nk, nv, dk, dv, K = self.n_embd, self.n_k, self.n_v, self.d_k, self.d_v, self.d_conv
        for out, src, rows in ((T.ATTN_Q, "q_proj", nk * dk), (T.ATTN_K, "k_proj", nk * dk), (T.ATTN_V, "v_proj", nv * dv),
                               (T.ATTN_GATE, "g_proj", nv * dv), (T.SSM_BETA, "b_proj", nv), (T.SSM_ALPHA, "a_proj", nv)):
            self.copy(tn(out, i), g + src + ".weight", (rows, D))
        # The conv's channels are [q (Hk Dk) | k (Hk Dk) | v (Hv Dv)] of the module's one conv1d.
        # transformers 5.24 saves it as three pieces, but splits it into three EQUAL chunks of
        # C / 3 rows (the reverse of its load-time Concatenate, conversion_mapping.py:1305-1312), not at the q / k / v
        # boundaries: q_conv1d of olmohybrid-tiny is [64, 1, 4] with Hk Dk = 32.  So the pieces are
        # concatenated in order (any split; the fused conv1d.weight too) and cut at the q / k / v
        # boundaries.
        C = 2 * nk * dk + nv * dv
        parts = ([self.take(g + "conv1d.weight", (C, 1, K), why="linear_conv_kernel_dim")] if self.has(g + "conv1d.weight")
                 else [self.take(g + f"{n}_conv1d.weight") for n in "qkv"])
        for t in parts:
            if len(t.shape) != 3 or t.shape[1:] != (1, K):
                raise InputError(f"{t.path}: tensor {t.name!r} has shape {list(t.shape)}, expected [rows, 1, {K}] "
                                 f"(linear_conv_kernel_dim)")
        if sum(t.shape[0] for t in parts) != C:
            raise InputError(f"{parts[0].path}: the q / k / v conv1d pieces of layer {i} have {sum(t.shape[0] for t in parts)} "
                             f"rows, config.json implies 2 x {nk * dk} + {nv * dv} = {C}")
        pieces = [(t, r) for t in parts for r in range(t.shape[0])]   # (tensor, row) per channel
        row0 = 0
        for out, rows in ((T.SSM_CONV1D_Q, nk * dk), (T.SSM_CONV1D_K, nk * dk), (T.SSM_CONV1D_V, nv * dv)):
            segs: list[Segment] = []
            for t, r in pieces[row0:row0 + rows]:
                if segs and segs[-1].src is t and segs[-1].row0 + segs[-1].n_rows == r:
                    segs[-1] = Segment(t, segs[-1].row0, segs[-1].n_rows + 1)
                else:
                    segs.append(Segment(t, r, 1))
            self.emit(tn(out, i), (rows, K), segs, note="channels of the concatenated conv pieces; squeeze")
            row0 += rows
        self.copy(tn(T.SSM_A, i, ""), g + "A_log", (nv,), op="neg_exp", note="A = -exp(A_log)")
        self.copy(tn(T.SSM_DT, i, ".bias"), g + "dt_bias", (nv,))
        self.copy(tn(T.SSM_NORM, i), g + "o_norm.weight", (dv,))
        self.copy(tn(T.SSM_OUT, i), g + "o_proj.weight", (D, nv * dv))

    def _attention(self, i: int, a: str) -> None:
        D, hd, nq, nkv = self.n_embd, self.head_dim, self.n_head, self.n_head_kv
        self.copy(tn(T.ATTN_Q, i), a + "q_proj.weight", (nq * hd, D))
        self.copy(tn(T.ATTN_K, i), a + "k_proj.weight", (nkv * hd, D))
        self.copy(tn(T.ATTN_V, i), a + "v_proj.weight", (nkv * hd, D))
        self.copy(tn(T.ATTN_OUT, i), a + "o_proj.weight", (D, nq * hd))
        if self.attn_bias:   # llama.cpp's bq / bk / bv / bo; added before q/k norm, as HF's q_proj(x) holds it
            for out, src, n in ((T.ATTN_Q, "q_proj", nq * hd), (T.ATTN_K, "k_proj", nkv * hd), (T.ATTN_V, "v_proj", nkv * hd),
                                (T.ATTN_OUT, "o_proj", D)):
                self.copy(tn(out, i, ".bias"), a + src + ".bias", (n,), why="attention_bias is true")
        self.copy(tn(T.ATTN_Q_NORM, i), a + "q_norm.weight", (nq * hd,), note="over all heads at once")
        self.copy(tn(T.ATTN_K_NORM, i), a + "k_norm.weight", (nkv * hd,), note="over all heads at once")

    def build(self):
        self.read_hparams()
        self._keys()
        D, F = self.n_embd, self.n_ff
        self.copy(tn(T.TOKEN_EMBD), "model.embed_tokens.weight", (self.n_vocab, D))
        for i, lt in enumerate(self.layer_types):
            pre = f"model.layers.{i}."
            if lt == "linear_attention":
                self._norm(tn(T.ATTN_NORM, i), pre, ("attention_layer_norm.weight", "input_layernorm.weight"))
                self._gdn(i, pre + "linear_attn.")
                self._norm(tn(T.FFN_NORM, i), pre, ("feedforward_layer_norm.weight", "post_attention_layernorm.weight"))
            else:
                self._attention(i, pre + "self_attn.")
                self._norm(tn(T.ATTN_POST_NORM, i), pre, ("feedforward_layer_norm.weight", "post_attention_layernorm.weight"))
                self._norm(tn(T.FFN_POST_NORM, i), pre, ("post_feedforward_layernorm.weight",))
            self.copy(tn(T.FFN_GATE, i), pre + "mlp.gate_proj.weight", (F, D))
            self.copy(tn(T.FFN_UP, i), pre + "mlp.up_proj.weight", (F, D))
            self.copy(tn(T.FFN_DOWN, i), pre + "mlp.down_proj.weight", (D, F))
        for name in [n for n in self.hf.tensors if n.startswith(("mtp.", "model.mtp."))]:
            self.omit(name, "MTP head: transformers ignores it on load (modeling_olmo_hybrid.py:857)")
        self.copy(tn(T.OUTPUT_NORM), "model.norm.weight", (D,))
        self.tied_output("model.embed_tokens.weight", "lm_head.weight", self.n_vocab, D, tie_default=False)
        self.check_leftovers()
        return self.plan
