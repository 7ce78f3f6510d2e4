"""Config variants (issue 43): checkpoints that set a flag no family fixture covers, converted
and run against HF's float32 logits, one row per variant.  A supported flag of the config
audit (docs/config-audit.md) gets its row here, its fixture made by the family's
tools/make_*_fixtures.py.

    fixture               family        flag
    olmohybrid-bias-tiny  OLMo-Hybrid   attention_bias: q/k/v/o_proj biases (blk.i.attn_{q,k,v,output}.bias)
    falconh1-attnbias-tiny  Falcon-H1   attention_bias, with key_multiplier / attention_out_multiplier on k's / o's
    lfm2-convbias-tiny    LFM2          conv_bias: short-conv in_proj / conv / out_proj biases (blk.i.shortconv.*.bias)
    falconh1-projbias-tiny  Falcon-H1   mamba_proj_bias (blk.i.ssm_in.bias x ssm_multipliers), projectors_bias
                                        (blk.i.ssm_out.bias x ssm_out_multiplier), mlp_bias (blk.i.ffn_{gate,up,down}.bias)
    zamba-projbias-tiny   Zamba         mamba_proj_bias: in_proj (de-interleaved) / out_proj biases (blk.i.ssm_{in,out}.bias)
    zamba2-bias-tiny      Zamba2        add_bias_linear: Mamba-2 in_proj / out_proj biases (blk.i.ssm_{in,out}.bias) and
                                        the shared MLP's (shared.b.ffn_{gate,up,down}.bias, gate_up_proj's halves)
    lfm3-convbias-tiny    LFM3          conv_bias, as LFM2's (tools/make_dtclamp_fixtures.py)

Made without torch by tools/make_config_variant_fixtures.py, reference.npz from the float64 NumPy
forward of tests/mamba_ref.py (checked against each base fixture's HF logits below):

    bamba-bias-tiny          Bamba         attention_bias, mlp_bias (blk.i.ffn_{gate,up,down}.bias), mamba_proj_bias
                                           (blk.i.ssm_{in,out}.bias, ours), mamba_conv_bias false, tied embeddings
    granitehybrid-bias-tiny  Granite 4.0-H attention_bias (q / k biases in NORM RoPE order), mamba_proj_bias,
                                           mamba_conv_bias false, RoPE, multipliers
    mamba2-bias-tiny         Mamba-2       use_bias (in_proj / out_proj), use_conv_bias false, untied lm_head
    mamba-bias-tiny          Mamba         use_bias (blk.i.ssm_{in,out}.bias, ours), use_conv_bias false, untied lm_head
    falconmamba-bias-tiny    FalconMamba   use_bias, use_conv_bias false
    jamba-bias-tiny          Jamba         mamba_proj_bias (blk.i.ssm_{in,out}.bias, ours), mamba_conv_bias false
    nemotronh-bias-tiny      Nemotron-H    use_bias, use_conv_bias false, mlp_bias (blk.i.ffn_{up,down}.bias)
    laramini-var-tiny        Lara-Mini     attention_bias (before the q / k norms), norm_topk_prob false
                                           (expert_weights_norm = false, llama.cpp's key), untied lm_head
                                           (reference: tests/lara_ref.py)

Made from HF (torch, transformers 5.24 float32 logits) by tools/make_attnbias_fixtures.py:

    kimilinear-attnbias-tiny     Kimi-Linear  attention_bias: MLA q_a_proj / kv_a_proj_with_mqa / o_proj biases
                                              (blk.i.attn_{q_a,kv_a_mqa,output}.bias), q-LoRA
    glm5next-attnbias-tiny       GLM-5-Next   the same (the DSA indexer reads the biased q-LoRA latent)
    bailinghybrid-attnbias-tiny  Ling 3       the same (o_proj saved as attention.dense), RoPE on k_rot after the bias
    lfm3-attnbias-tiny           LFM3         attention_bias: q/k/v/o_proj biases (blk.i.attn_{q,k,v,output}.bias)
    qwen4exp-attnbias-tiny       qwen4exp     attention_bias: the QSA layers' q/k/v/o_proj biases (q's [2 Hq hd] with the gate half)
    glm5next-tied-tiny           GLM-5-Next   the root's tie_word_embeddings true (text_config's false), no lm_head
    minimax-swa-tiny             MiniMax      sliding_window 8 on its full_attention layer (attention.sliding_window)

The f32 parity of the variant fixtures is a table row now (tests/families.py),
run by tests/parity/test_families.py.
    falconh1-yarn-tiny    Falcon-H1     rope_parameters yarn (factor 4 over 16 positions, betas 4 / 0.25)
    lfm2-yarn-tiny        LFM2          rope_parameters yarn with attention_factor 1.3 (factor 8 over 12 positions)
    olmohybrid-linear-tiny  OLMo-Hybrid rope_parameters linear (factor 4)
    qwen3next-yarn-tiny   Qwen3-Next    rope_parameters yarn on partial NEOX RoPE (16 of 32 dims, betas 8 / 0.5)
    qwen35-linear-tiny    Qwen3.5       rope_parameters linear with interleaved M-RoPE sections (16 of 32 dims)
    qwen35moe-yarn-tiny   Qwen3.5-MoE   rope_parameters yarn with attention_factor 0.9 (factor 8 over 12 positions)
    lfm2moe-linear-tiny   LFM2-MoE      rope_parameters linear (factor 4)
    bamba-yarn-tiny       Bamba         rope_parameters yarn on partial NORM RoPE (8 of 16 dims, factor 4 over 16 positions, betas 4 / 0.5)
    granitehybrid-linear-tiny  Granite 4.0-H  position_embedding_type rope, rope_parameters linear (factor 4), MoE
    qwen4exp-yarn-tiny    qwen4exp      rope_parameters yarn (factor 4 over 40 of 160 positions) on the attention and the QSA indexer
    nemotronh-act-tiny    Nemotron-H    mlp_hidden_act silu (MLP layer, routed and shared experts; default relu2)
    zamba2-act-tiny       Zamba2        hidden_act silu (the shared block's MLP; default gelu)
    zamba-act-tiny        Zamba         hidden_act silu (the shared block's MLP; default gelu)
    recurrentgemma-act-tiny  RecurrentGemma  hidden_activation gelu (MLP gate and the recurrent block's y branch;
                                           default gelu_pytorch_tanh)
    laramini-gelu-tiny    Lara-Mini     hidden_act gelu (the GDN conv, routed experts and shared expert; the
                                           gated norm's act is silu, fixed; tools/make_conv_act_fixtures.py)
    laramini-yarn-tiny    Lara-Mini     rope_parameters yarn (factor 4 over 16 positions, betas 4 / 0.5) on the sliding layers' RoPE
    minimax-yarn-tiny     MiniMax       rope_parameters yarn with attention_factor 1.25 on the softmax layers
    zamba2-yarn-tiny      Zamba2        rope_parameters yarn (betas 8 / 0.5) on the shared blocks' RoPE (use_mem_rope)
    zamba2-linear-tiny    Zamba2        rope_parameters linear (factor 4)
    bailinghybrid-yarn-tiny  Ling 3     DeepSeek-style yarn on the MLA's rotated dims: mscale 1, mscale_all_dim 0.8
                                        (cos / sin x their ratio, the softmax scale x mscale(4, 0.8)^2, folded into attn_q_b)
    lfm3-yarn-tiny        LFM3          rope_parameters.full_attention yarn over the whole head (the sliding layers default)
    lfm3-propscale-tiny   LFM3          rope_parameters.full_attention proportional with factor 4 (linear on its 4 of 8 pairs)

The RoPE-scaling rows (issue 43 item 4) run 64 + 16 positions, past the original context; their
references are HF's own float32 logits (transformers 5.24, tools/make_*_fixtures.py; the last seven
tools/make_rope3_fixtures.py: the family fixture's weights with rope_parameters changed).
"""
from __future__ import annotations

import numpy as np
import pytest


pytestmark = pytest.mark.native

# (fixture, what it flips, bound on the relative L2 error of the logits, ids never chosen greedily)
VARIANTS = [
    ("olmohybrid-bias-tiny", "attention_bias", 1e-5, (0,)),
    ("falconh1-attnbias-tiny", "attention_bias", 1e-5, ()),
    ("lfm2-convbias-tiny", "conv_bias", 1e-5, ()),
    ("lfm3-convbias-tiny", "conv_bias", 1e-5, ()),
    ("bamba-bias-tiny", "biases", 1e-5, (2,)),
    ("granitehybrid-bias-tiny", "biases", 1e-5, (2,)),
    ("mamba2-bias-tiny", "biases", 1e-5, (2,)),
    ("mamba-bias-tiny", "biases", 1e-5, (0,)),
    ("falconmamba-bias-tiny", "biases", 1e-5, (0,)),
    ("laramini-var-tiny", "attention_bias", 1e-5, (0,)),
    ("nemotronh-bias-tiny", "biases", 1e-5, (0,)),
    ("jamba-bias-tiny", "biases", 1e-5, (2,)),
    ("falconh1-projbias-tiny", "biases", 1e-5, ()),
    ("zamba-projbias-tiny", "biases", 1e-5, (0,)),
    ("zamba2-bias-tiny", "biases", 1e-5, ()),
    ("falconh1-yarn-tiny", "rope yarn", 1e-5, ()),
    ("lfm2-yarn-tiny", "rope yarn", 1e-5, ()),
    ("olmohybrid-linear-tiny", "rope linear", 1e-5, (0,)),
    ("qwen3next-yarn-tiny", "rope yarn", 1e-5, (0,)),
    ("qwen35-linear-tiny", "rope linear", 1e-5, (0,)),
    ("qwen35moe-yarn-tiny", "rope yarn", 1e-5, (0,)),
    ("lfm2moe-linear-tiny", "rope linear", 1e-5, ()),
    ("bamba-yarn-tiny", "rope yarn", 1e-5, ()),
    ("granitehybrid-linear-tiny", "rope linear", 1e-5, ()),
    ("qwen4exp-yarn-tiny", "rope yarn", 1e-5, ()),
    ("nemotronh-act-tiny", "activation", 1e-5, ()),
    ("zamba2-act-tiny", "activation", 1e-5, ()),
    ("zamba-act-tiny", "activation", 1e-5, (0,)),
    ("recurrentgemma-act-tiny", "activation", 1e-5, (0,)),
    ("laramini-gelu-tiny", "activation", 1e-5, (0,)),
    ("laramini-yarn-tiny", "rope yarn", 1e-5, (0,)),
    ("minimax-yarn-tiny", "rope yarn", 1e-5, (0,)),
    ("zamba2-yarn-tiny", "rope yarn", 1e-5, (0,)),
    ("zamba2-linear-tiny", "rope linear", 1e-5, (0,)),
    ("bailinghybrid-yarn-tiny", "rope yarn", 1e-5, (0,)),
    ("lfm3-yarn-tiny", "rope yarn", 1e-5, (0,)),
    ("lfm3-propscale-tiny", "rope linear", 1e-5, (0,)),
    ("lfm3-attnbias-tiny", "attention_bias", 1e-5, (0,)),
    ("qwen4exp-attnbias-tiny", "attention_bias", 1e-5, ()),
    ("kimilinear-attnbias-tiny", "mla_bias", 1e-5, (0,)),
    ("glm5next-attnbias-tiny", "mla_bias", 1e-5, (0,)),
    ("bailinghybrid-attnbias-tiny", "mla_bias", 1e-5, (0,)),
]
TENSOR_VARIANTS = [v for v in VARIANTS if not v[1].startswith(("rope", "activation"))]
ACT_VARIANTS = [v for v in VARIANTS if v[1] == "activation"]
ROPE_VARIANTS = [v for v in VARIANTS if v[1].startswith("rope")]

# the variants whose reference is tests/mamba_ref.py's, and the HF fixture it is checked against
NUMPY_REFERENCE = {"bamba-bias-tiny": "bamba-tiny", "granitehybrid-bias-tiny": "granitehybrid-moe-tiny",
                   "mamba2-bias-tiny": "mamba2-tiny", "mamba-bias-tiny": "mamba-tiny",
                   "falconmamba-bias-tiny": "falconmamba-tiny", "laramini-var-tiny": "laramini-tiny",
                   "nemotronh-bias-tiny": "nemotronh-dense-tiny", "jamba-bias-tiny": "jamba-tiny"}


@pytest.mark.parametrize("name", sorted(NUMPY_REFERENCE))
def test_numpy_reference_matches_hf(fixtures, name):
    """The variant's reference is only as good as its NumPy forward: on the base fixture it
    gives HF's logits and greedy tokens."""
    import json

    import mamba_ref
    from parity_util import rel_l2
    base = fixtures / "hf" / NUMPY_REFERENCE[name]
    ref = np.load(base / "reference.npz")
    # measured 1.7e-7 .. 5.0e-7 (the Mamba kinds), 1.1e-6 (jamba-tiny), 2.1e-6 (laramini-tiny: HF float32's own floor)
    assert rel_l2(mamba_ref.logits(base, ref["tokens"]), ref["logits"]) < 5e-6
    eos = json.loads((base / "config.json").read_text())["eos_token_id"]
    assert mamba_ref.greedy(base, ref["tokens"], len(ref["greedy"]), (eos,)) == ref["greedy"].tolist()


# calibration per variant: the tensors the flag adds, zeroed in a copy of the checkpoint
FLAG_TENSORS = {"attention_bias": r"model\.layers\.\d+\.self_attn\.[qkvo]_proj\.bias",
                "conv_bias": r"model\.layers\.\d+\.conv\.(in_proj|conv|out_proj)\.bias",
                "mla_bias": r"model\.(language_model\.)?layers\.\d+\.(self_attn|attention)\.(q_a_proj|kv_a_proj_with_mqa|o_proj|dense)\.bias",
                "biases": r"(model|backbone)\.layers\.\d+\.(mamba_decoder\.|shared_transformer\.)?"
                          r"(self_attn|feed_forward|mamba|mixer)\.\w+_proj\.bias"}


@pytest.mark.parametrize("name,flag,bound,suppress", TENSOR_VARIANTS, ids=[v[0] for v in TENSOR_VARIANTS])
def test_the_flag_matters(fixtures, tmp_path, name, flag, bound, suppress):
    """Calibration: with the flag's tensors zeroed the run is far from HF, so the rows above
    would fail on a runtime that dropped them."""
    import re
    import shutil

    from safetensors.numpy import load_file, save_file

    from parity_util import logits_of, rel_l2
    from toolkit.convert import convert
    d = tmp_path / name
    shutil.copytree(fixtures / "hf" / name, d)
    zeroed = 0
    for f in sorted(d.glob("*.safetensors")):
        t = load_file(str(f))
        hit = [n for n in t if re.fullmatch(FLAG_TENSORS[flag], n)]
        for n in hit:
            t[n] = np.zeros_like(t[n])
        if hit:
            save_file(t, str(f), metadata={"format": "pt"})
            zeroed += len(hit)
    assert zeroed
    convert(str(d), str(tmp_path / "z.gguf"), "f32")
    ref = np.load(fixtures / "hf" / name / "reference.npz")
    assert rel_l2(logits_of(tmp_path / "z.gguf", ref["tokens"]), ref["logits"]) > 100 * bound


# the Mamba-2 dt clamp fixtures (tools/make_dtclamp_fixtures.py; their f32 parity is their
# tests/families.py row): the config key that sets HF's dt_limit, and its value that clamps nothing
DT_CLAMP = [("mamba2-dtclamp-tiny", "time_step_limit", [0.0, "Infinity"]),
            ("bamba-dtclamp-tiny", "time_step_limit", [0.0, "Infinity"]),
            ("falconh1-dtclamp-tiny", "time_step_limit", [0.0, "Infinity"]),
            ("nemotronh-dtmin-tiny", "time_step_min", 0.0),
            ("zamba2-noconvb-tiny", "time_step_min", 0.0),
            ("zamba2-dtfloor-tiny", "time_step_min", 0.0)]


@pytest.mark.parametrize("name,key,off", DT_CLAMP, ids=[v[0] for v in DT_CLAMP])
def test_the_dt_clamp_matters(fixtures, tmp_path, name, key, off):
    """Calibration: the same checkpoint converted with the clamp off (no ssm.dt_min / dt_max in
    the file) is far from HF, so the fixture's parity row would fail on a converter or runtime
    that dropped the clamp."""
    from hf_edit_util import config_edited
    from parity_util import logits_of, rel_l2
    from toolkit.convert import convert
    src = fixtures / "hf" / name
    d = config_edited(src, tmp_path, {key: off}, root=True)
    convert(str(d), str(tmp_path / "u.gguf"), "f32")
    ref = np.load(src / "reference.npz")
    assert rel_l2(logits_of(tmp_path / "u.gguf", ref["tokens"]), ref["logits"]) > 1e-3


@pytest.mark.parametrize("name,key,value", [("laramini-var-tiny", "norm_topk_prob", True),
                                            ("minimax-swa-tiny", "sliding_window", None)])
def test_the_switch_matters(fixtures, tmp_path, name, key, value):
    """Calibration for a switch that adds no tensor: the same checkpoint converted with the switch
    at its default is far from the reference, so the row above would fail on a converter or
    runtime that dropped it (norm_topk_prob false -> expert_weights_norm = false -> moe.renorm 0)."""
    from hf_edit_util import config_edited
    from parity_util import logits_of, rel_l2
    from toolkit.convert import convert
    d = config_edited(fixtures / "hf" / name, tmp_path, {key: value}, root=True)
    convert(str(d), str(tmp_path / "s.gguf"), "f32")
    ref = np.load(fixtures / "hf" / name / "reference.npz")
    assert rel_l2(logits_of(tmp_path / "s.gguf", ref["tokens"]), ref["logits"]) > 1e-3


# the activation variants' key and the family's HF default (configuration_*.py)
ACT_DEFAULTS = {"nemotronh-act-tiny": ("mlp_hidden_act", "relu2"), "zamba2-act-tiny": ("hidden_act", "gelu"),
                "zamba-act-tiny": ("hidden_act", "gelu"),
                "recurrentgemma-act-tiny": ("hidden_activation", "gelu_pytorch_tanh"),
                "laramini-gelu-tiny": ("hidden_act", "silu")}


@pytest.mark.parametrize("name,flag,bound,suppress", ACT_VARIANTS, ids=[v[0] for v in ACT_VARIANTS])
def test_the_activation_matters(fixtures, tmp_path, name, flag, bound, suppress):
    """Calibration: the same checkpoint converted with the activation key at the family's default
    (the file then has no feed_forward.activation) is off HF's logits by more than twice the bound,
    so the table row (tests/families.py) would fail on a converter or runtime that dropped the key.
    Measured: nemotronh 3.1e-1, zamba2 2.8e-2, zamba 5.4e-2, laramini 3.8e-1; recurrentgemma 5.6e-5 (gelu vs its tanh
    form, the closest pair)."""
    import json
    import os

    from parity_util import logits_of, rel_l2
    from toolkit.convert import convert
    key, default = ACT_DEFAULTS[name]
    src, d = fixtures / "hf" / name, tmp_path / name
    d.mkdir()
    for f in os.listdir(src):
        if f != "config.json":
            os.symlink(src / f, d / f)
    cfg = json.loads((src / "config.json").read_text())
    assert cfg[key] != default
    cfg[key] = default
    (d / "config.json").write_text(json.dumps(cfg))
    convert(str(d), str(tmp_path / "a.gguf"), "f32")
    ref = np.load(src / "reference.npz")
    assert rel_l2(logits_of(tmp_path / "a.gguf", ref["tokens"]), ref["logits"]) > 2 * bound


@pytest.mark.parametrize("name", ["qwen3next-tiny", "qwen4exp-tiny"])
def test_norm_topk_prob_false_self_consistency(fixtures, tmp_path, name):
    """norm_topk_prob false on the families with no float reference here (a self-consistency
    check, not parity): the file says expert_weights_norm = false (llama.cpp's key), the loaded
    model routes without renormalising (moe_renorm 0; the C path laramini-var-tiny's row checks
    against its reference), and the logits leave HF's renormalised ones, which the default
    conversion still matches."""
    import json
    import shutil

    import gguf

    from parity_util import logits_of, rel_l2
    from toolkit.convert import convert
    from toolkit.runtime import Model
    d = tmp_path / name
    shutil.copytree(fixtures / "hf" / name, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["norm_topk_prob"] = False
    (d / "config.json").write_text(json.dumps(cfg))
    convert(str(d), str(tmp_path / "n.gguf"), "f32")
    r = gguf.GGUFReader(str(tmp_path / "n.gguf"))
    key = next(k for k in r.fields if k.endswith(".expert_weights_norm"))
    assert not bool(r.fields[key].parts[r.fields[key].data[0]][0])
    with Model(tmp_path / "n.gguf") as m:
        assert m.hparams.moe_renorm is False
    ref = np.load(fixtures / "hf" / name / "reference.npz")
    convert(str(fixtures / "hf" / name), str(tmp_path / "d.gguf"), "f32")
    assert rel_l2(logits_of(tmp_path / "d.gguf", ref["tokens"]), ref["logits"]) < 1e-5
    assert rel_l2(logits_of(tmp_path / "n.gguf", ref["tokens"]), ref["logits"]) > 1e-3


def _with_rope(fixtures, tmp_path, name: str, edit) -> str:
    """tmp copy of fixture ``name`` whose config.json's rope_parameters is ``edit(rope_parameters)``
    (the other files linked, never written)."""
    import json
    import os
    src, d = fixtures / "hf" / name, tmp_path / name
    d.mkdir()
    for f in os.listdir(src):
        if f != "config.json":
            os.symlink(src / f, d / f)
    cfg = json.loads((src / "config.json").read_text())
    rp = cfg["rope_parameters"]
    if "full_attention" in rp:      # one dict per layer type (LFM3): the full layers' is the scaled one
        cfg["rope_parameters"] = {**rp, "full_attention": edit(dict(rp["full_attention"]))}
    else:
        cfg["rope_parameters"] = edit(dict(rp))
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


@pytest.mark.parametrize("name,flag,bound,suppress", ROPE_VARIANTS, ids=[v[0] for v in ROPE_VARIANTS])
def test_the_rope_scaling_matters(fixtures, tmp_path, name, flag, bound, suppress):
    """Calibration: the same checkpoint converted with the default RoPE (the scaling dropped) is
    far from HF, so the rows above would fail on a converter or runtime that ignored it."""
    from parity_util import logits_of, rel_l2
    from toolkit.convert import convert
    scaling = ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor", "mscale",
               "mscale_all_dim")
    d = _with_rope(fixtures, tmp_path, name, lambda rp: {**{k: v for k, v in rp.items() if k not in scaling},
                                                        "rope_type": "proportional" if rp.get("rope_type") == "proportional"
                                                        else "default"})
    convert(d, str(tmp_path / "d.gguf"), "f32")
    ref = np.load(fixtures / "hf" / name / "reference.npz")
    assert rel_l2(logits_of(tmp_path / "d.gguf", ref["tokens"]), ref["logits"]) > 100 * bound


def test_yarn_attention_factor_matters(fixtures, tmp_path):
    """Calibration of lfm2-yarn-tiny's attention_factor 1.3 (rope.scaling.attn_factor): without it
    (HF's default 0.1 ln 8 + 1) the logits are far from HF's."""
    from parity_util import logits_of, rel_l2
    from toolkit.convert import convert
    d = _with_rope(fixtures, tmp_path, "lfm2-yarn-tiny", lambda rp: {k: v for k, v in rp.items() if k != "attention_factor"})
    convert(d, str(tmp_path / "d.gguf"), "f32")
    ref = np.load(fixtures / "hf" / "lfm2-yarn-tiny" / "reference.npz")
    assert rel_l2(logits_of(tmp_path / "d.gguf", ref["tokens"]), ref["logits"]) > 1e-3


# llama.cpp's keys (gguf-py Keys.Rope) each RoPE-scaling fixture's file carries, as written
ROPE_KEYS = {
    "falconh1-yarn-tiny": ("falcon-h1", {"type": "yarn", "factor": 4.0, "original_context_length": 16,
                                         "yarn_beta_fast": 4.0, "yarn_beta_slow": 0.25}),
    "lfm2-yarn-tiny": ("lfm2", {"type": "yarn", "factor": 8.0, "original_context_length": 12,
                                "attn_factor": 1.3 / (0.1 * np.log(8.0) + 1.0)}),
    "olmohybrid-linear-tiny": ("olmo-hybrid", {"type": "linear", "factor": 4.0}),
    "qwen3next-yarn-tiny": ("qwen3next", {"type": "yarn", "factor": 4.0, "original_context_length": 16,
                                          "yarn_beta_fast": 8.0, "yarn_beta_slow": 0.5}),
    "qwen35-linear-tiny": ("qwen35", {"type": "linear", "factor": 4.0}),
    "qwen35moe-yarn-tiny": ("qwen35moe", {"type": "yarn", "factor": 8.0, "original_context_length": 12,
                                          "attn_factor": 0.9 / (0.1 * np.log(8.0) + 1.0)}),
    "lfm2moe-linear-tiny": ("lfm2moe", {"type": "linear", "factor": 4.0}),
    "bamba-yarn-tiny": ("granitehybrid", {"type": "yarn", "factor": 4.0, "original_context_length": 16,
                                          "yarn_beta_fast": 4.0, "yarn_beta_slow": 0.5, "finetuned": True}),
    "granitehybrid-linear-tiny": ("granitehybrid", {"type": "linear", "factor": 4.0, "finetuned": True}),
    "qwen4exp-yarn-tiny": ("qwen4exp", {"type": "yarn", "factor": 4.0, "original_context_length": 40,
                                        "yarn_beta_fast": 4.0, "yarn_beta_slow": 0.5}),
    "laramini-yarn-tiny": ("lara-mini", {"type": "yarn", "factor": 4.0, "original_context_length": 16,
                                         "yarn_beta_fast": 4.0, "yarn_beta_slow": 0.5}),
    "minimax-yarn-tiny": ("minimax-01", {"type": "yarn", "factor": 4.0, "original_context_length": 16,
                                         "yarn_beta_fast": 4.0, "yarn_beta_slow": 0.5,
                                         "attn_factor": 1.25 / (0.1 * np.log(4.0) + 1.0)}),
    "zamba2-yarn-tiny": ("zamba2", {"type": "yarn", "factor": 4.0, "original_context_length": 16,
                                    "yarn_beta_fast": 8.0, "yarn_beta_slow": 0.5}),
    "zamba2-linear-tiny": ("zamba2", {"type": "linear", "factor": 4.0}),
    # HF's attention_factor mscale(4, 1) / mscale(4, 0.8) over llama.cpp's own mscale(4, 1)
    "bailinghybrid-yarn-tiny": ("bailingmoe3", {"type": "yarn", "factor": 4.0, "original_context_length": 16,
                                                "yarn_beta_fast": 4.0, "yarn_beta_slow": 0.5,
                                                "attn_factor": 1.0 / (0.08 * np.log(4.0) + 1.0)}),
    "lfm3-yarn-tiny": ("lfm3", {"type": "yarn", "factor": 4.0, "original_context_length": 16,
                                "yarn_beta_fast": 4.0, "yarn_beta_slow": 0.5}),
    "lfm3-propscale-tiny": ("lfm3", {"type": "linear", "factor": 4.0}),
}


@pytest.mark.parametrize("name", list(ROPE_KEYS))
def test_rope_scaling_keys_are_llama_cpps(hf_f32, name):
    """The file has llama.cpp's rope.scaling.* keys (names, types, values) and no other
    rope.scaling key; the runtime reads them back into the hparams."""
    import gguf

    from toolkit.runtime import Model
    arch, want = ROPE_KEYS[name]
    path = hf_f32(name)
    fields = gguf.GGUFReader(str(path)).fields
    got = {k[len(f"{arch}.rope.scaling."):]: fields[k].contents() for k in fields if k.startswith(f"{arch}.rope.scaling.")}
    assert set(got) == set(want), got
    for k, v in want.items():
        assert got[k] == v if isinstance(v, (str, bool)) else got[k] == pytest.approx(v, rel=1e-6), (k, got[k], v)
    assert f"{arch}.rope.scaling.type" == gguf.Keys.Rope.SCALING_TYPE.format(arch=arch)
    with Model(path) as m:
        hp = m.hparams
        assert hp.rope_scaling_type == {"linear": 1, "yarn": 2}[want["type"]]
        assert hp.rope_freq_scale == pytest.approx(1.0 / want["factor"])
        assert hp.rope_attn_factor == pytest.approx(want.get("attn_factor", 1.0), rel=1e-6)


def test_zamba2_use_long_context(fixtures, tmp_path):
    """Zamba2 ``use_long_context`` true: transformers 5.24 sets max_position_embeddings = 16384
    (Zamba2Config.__post_init__) and leaves the RoPE as rope_theta says (the model's "rescaled
    rope_theta" warning has no code behind it: HF's logits on zamba2-tiny are bit-identical with it
    on and off, measured with /work/tfvenv).  So the file has context_length 16384 and the logits
    are zamba2-tiny's HF reference."""
    import json
    import os

    import gguf
    from parity_util import logits_of, rel_l2
    from toolkit.convert import convert
    src, d = fixtures / "hf" / "zamba2-tiny", tmp_path / "zamba2-long"
    d.mkdir()
    for f in os.listdir(src):
        if f != "config.json":
            os.symlink(src / f, d / f)
    cfg = json.loads((src / "config.json").read_text())
    assert cfg["use_mem_rope"] is True and cfg["max_position_embeddings"] != 16384
    (d / "config.json").write_text(json.dumps({**cfg, "use_long_context": True}))
    convert(str(d), str(tmp_path / "l.gguf"), "f32")
    fields = gguf.GGUFReader(str(tmp_path / "l.gguf")).fields
    assert fields["zamba2.context_length"].contents() == 16384
    ref = np.load(src / "reference.npz")
    assert rel_l2(logits_of(tmp_path / "l.gguf", ref["tokens"]), ref["logits"]) < 1e-5


def test_zamba2_long_context_yarn_original_context(fixtures, tmp_path):
    """Zamba2 ``use_long_context`` with yarn and no ``original_max_position_embeddings``: HF's
    Zamba2Config sets max_position_embeddings = 16384 first, and its standardize_rope_params then
    defaults the yarn original context to that (transformers 5.24: rope_parameters
    original_max_position_embeddings 16384 with config.json's 4096, checked in /work/tfvenv), so
    the file's rope.scaling.original_context_length is 16384, not config.json's 4096."""
    import json
    import pathlib

    import gguf
    from toolkit.convert import convert
    d = _with_rope(fixtures, tmp_path, "zamba2-yarn-tiny",
                   lambda rp: {k: v for k, v in rp.items() if k != "original_max_position_embeddings"})
    cfg = json.loads((pathlib.Path(d) / "config.json").read_text())
    assert cfg["max_position_embeddings"] == 4096 and cfg["rope_parameters"]["rope_type"] == "yarn"
    (pathlib.Path(d) / "config.json").write_text(json.dumps({**cfg, "use_long_context": True}))
    convert(d, str(tmp_path / "l.gguf"), "f32")
    fields = gguf.GGUFReader(str(tmp_path / "l.gguf")).fields
    assert fields["zamba2.rope.scaling.original_context_length"].contents() == 16384
    assert fields["zamba2.context_length"].contents() == 16384
