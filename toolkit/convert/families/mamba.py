"""MambaForCausalLM -> GGUF ``mamba`` (llama.cpp's MambaModel converter, same keys, names, data).

Glossary: D = hidden_size, L = num_hidden_layers, d_inner = intermediate_size (expand * D),
N = d_state, K = d_conv, R = dt_rank, V = vocab rows.

HF tensor (numpy shape)                     GGUF tensor
backbone.embeddings.weight [V, D]           token_embd.weight
backbone.layers.i.norm.weight [D]           blk.i.attn_norm.weight
  mixer.in_proj.weight [2 d_inner, D]       blk.i.ssm_in.weight
  mixer.in_proj.bias (use_bias)             blk.i.ssm_in.bias (ours: not in llama.cpp's mamba)
  mixer.conv1d.weight [d_inner, 1, K]       blk.i.ssm_conv1d.weight [d_inner, K]   (squeeze)
  mixer.conv1d.bias [d_inner]               blk.i.ssm_conv1d.bias (zeros when use_conv_bias is false)
hidden_act: the activation after the conv (ours mamba.ssm.activation when not silu; llama.cpp: SiLU)
  mixer.x_proj.weight [R + 2N, d_inner]     blk.i.ssm_x.weight
  mixer.dt_proj.weight [d_inner, R] / bias  blk.i.ssm_dt.weight / .bias
  mixer.A_log [d_inner, N]                  blk.i.ssm_a = -exp(A_log)
  mixer.D [d_inner]                         blk.i.ssm_d
  mixer.out_proj.weight [D, d_inner]        blk.i.ssm_out.weight
  mixer.out_proj.bias (use_bias)            blk.i.ssm_out.bias (ours)
backbone.norm_f.weight [D]                  output_norm.weight
lm_head.weight [V, D]                       output.weight (omitted when tied)
"""
from __future__ import annotations

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.base import Family
from toolkit.convert.activation import ssm_act_kv
from toolkit.convert.config_keys import ConfigKeys
from toolkit.convert.plan import kv_bool, kv_f32, kv_u32
from toolkit.gguf_io import ARCH_MAMBA, Keys

_L = r"backbone\.layers\.\d+\."


def ceil_div(a: int, b: int) -> int:
    return -(a // -b)


class MambaFamily(Family):
    hf_archs = ("MambaForCausalLM",)
    families = ("Mamba",)
    arch = ARCH_MAMBA
    dt_b_c_rms = False      # FalconMamba: weightless RMSNorms on dt, B, C (falconmamba.py)
    hf_configs = ("MambaConfig",)
    config_keys = ConfigKeys.of(
        "vocab_size hidden_size state_size num_hidden_layers layer_norm_epsilon expand conv_kernel time_step_rank "
        "tie_word_embeddings use_bias use_conv_bias hidden_act")
    known = (
        r"backbone\.embeddings\.weight", r"backbone\.norm_f\.weight", r"lm_head\.weight",
        _L + r"norm\.weight",
        _L + r"mixer\.(A_log|D|conv1d\.weight|conv1d\.bias|dt_proj\.weight|dt_proj\.bias|in_proj\.(weight|bias)|"
             r"x_proj\.weight|out_proj\.(weight|bias))",
    )

    def read_hparams(self) -> None:
        c = self.cfg
        self.n_embd = c.int("hidden_size", "d_model")
        self.n_layer = self.layer_count("num_hidden_layers", "n_layer")
        self.n_vocab = c.int("vocab_size")
        # MambaConfig sets intermediate_size = int(expand * hidden_size)
        self.d_inner = c.int("intermediate_size", "d_inner", default=int(c.float("expand", default=2) * self.n_embd))
        self.d_conv = c.int("conv_kernel", "d_conv", default=4)
        self.d_state = c.int("state_size", "d_state", default=16)
        r = c.get("time_step_rank", "dt_rank")
        # "auto" / absent: ceil(D / 16) (mamba_ssm mamba_simple.py)
        self.dt_rank = ceil_div(self.n_embd, 16) if r in (None, "auto") else c.int("time_step_rank", "dt_rank")
        self.eps = c.eps("layer_norm_epsilon", "rms_norm_eps", default=1e-5)
        self.conv_bias = c.flag("use_conv_bias", True)    # false: no conv1d.bias (zeros written)
        self.proj_bias = c.flag("use_bias", False)        # in_proj / out_proj biases

    def n_vocab_rows(self) -> int:
        return self.n_vocab

    def extra_kv(self) -> list:
        """Keys a subclass adds after llama.cpp's (none for Mamba)."""
        return []

    def build(self):
        self.read_hparams()
        key = self.key
        p = self.plan
        # llama.cpp MambaModel.set_gguf_parameters, same keys and order
        p.kv += [
            kv_u32(key(Keys.LLM.CONTEXT_LENGTH), 2**20),   # no positional limit; llama.cpp's value
            kv_u32(key(Keys.LLM.EMBEDDING_LENGTH), self.n_embd),
            kv_u32(key(Keys.LLM.FEED_FORWARD_LENGTH), 0),
            kv_u32(key(Keys.Attention.HEAD_COUNT), 0),
            kv_u32(key(Keys.LLM.BLOCK_COUNT), self.n_layer),
            kv_u32(key(Keys.SSM.CONV_KERNEL), self.d_conv),
            kv_u32(key(Keys.SSM.INNER_SIZE), self.d_inner),
            kv_u32(key(Keys.SSM.STATE_SIZE), self.d_state),
            kv_u32(key(Keys.SSM.TIME_STEP_RANK), self.dt_rank),
            kv_f32(key(Keys.Attention.LAYERNORM_RMS_EPS), self.eps),
            kv_bool(key(Keys.SSM.DT_B_C_RMS), self.dt_b_c_rms),
        ]
        p.kv += self.extra_kv()
        # the conv's act (HF causal_conv1d_fn(..., activation=hidden_act); z's gate is F.silu, fixed); written only when not silu
        p.kv += ssm_act_kv(self.cfg.path, self.cfg.d, key)
        D, di, N, K, R = self.n_embd, self.d_inner, self.d_state, self.d_conv, self.dt_rank
        self.copy(tn(T.TOKEN_EMBD), "backbone.embeddings.weight", (self.n_vocab, D))
        for i in range(self.n_layer):
            pre = f"backbone.layers.{i}."
            m = pre + "mixer."
            self.copy(tn(T.ATTN_NORM, i), pre + "norm.weight", (D,))
            self.copy(tn(T.SSM_IN, i), m + "in_proj.weight", (2 * di, D))
            if self.proj_bias:
                self.copy(tn(T.SSM_IN, i, ".bias"), m + "in_proj.bias", (2 * di,), why="use_bias is true")
            conv = self.copy(tn(T.SSM_CONV1D, i), m + "conv1d.weight", (di, 1, K), (di, K), note="squeeze [C,1,K] -> [C,K]")
            if self.conv_bias:
                self.copy(tn(T.SSM_CONV1D, i, ".bias"), m + "conv1d.bias", (di,), why="use_conv_bias is true")
            else:
                self.zeros(tn(T.SSM_CONV1D, i, ".bias"), conv, di, note="zeros: use_conv_bias is false")
            self.copy(tn(T.SSM_X, i), m + "x_proj.weight", (R + 2 * N, di))
            self.copy(tn(T.SSM_DT, i), m + "dt_proj.weight", (di, R))
            self.copy(tn(T.SSM_DT, i, ".bias"), m + "dt_proj.bias", (di,))
            # the runtime wants A itself; HF stores log(-A) for the parametrisation A = -exp(A_log)
            self.copy(tn(T.SSM_A, i, ""), m + "A_log", (di, N), op="neg_exp", note="A = -exp(A_log)")
            self.copy(tn(T.SSM_D, i, ""), m + "D", (di,))
            self.copy(tn(T.SSM_OUT, i), m + "out_proj.weight", (D, di))
            if self.proj_bias:
                self.copy(tn(T.SSM_OUT, i, ".bias"), m + "out_proj.bias", (D,), why="use_bias is true")
        self.copy(tn(T.OUTPUT_NORM), "backbone.norm_f.weight", (D,))
        self.tied_output("backbone.embeddings.weight", "lm_head.weight", self.n_vocab, D, tie_default=True)
        self.check_leftovers()
        return p
