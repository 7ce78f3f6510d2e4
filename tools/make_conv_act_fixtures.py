"""Make the conv-activation fixtures of issue 43 from HF (needs /work/tfvenv: torch + transformers 5.24):
a family fixture whose config sets the mixer's activation (``hidden_act``; Nemotron-H
``mamba_hidden_act``, Zamba ``hidden_mamba_act``) to another HF ACT2FN name, the weights the base
fixture's unchanged; reference.npz: the base fixture's tokens, HF's float32 logits [T, n_vocab] and
16 greedy tokens (cache-free forward, end-of-text masked as ``min_new_tokens`` does).

Where HF's modeling code applies the attribute (transformers 5.24, the CPU path):

    mamba-gelu-tiny        mamba-tiny, hidden_act gelu: MambaMixer's causal_conv1d_fn(activation=)
                           only (the gate z is F.silu)
    mamba2-gelu-tiny       mamba2-tiny, hidden_act gelu_pytorch_tanh: the conv of x, B, C only (the
                           gated norm's act is F.silu)
    bamba-gelu-tiny        bamba-tiny, hidden_act gelu: the Mamba-2 conv and the MLP gate (BambaMLP)
    qwen35-gelu-tiny       qwen35-tiny, hidden_act gelu: the GDN conv and the MLP gate (the gated
                           norm's act is "silu", fixed)
    kimilinear-gelu-tiny   kimilinear-tiny, hidden_act gelu: the KDA q / k / v convs and the MLP /
                           experts' gate (the gated norm's act is "sigmoid", fixed)
    nemotronh-relu-tiny    nemotronh-dense-tiny, mamba_hidden_act relu: the Mamba-2 conv only
    zamba-gelutanh-tiny    zamba-tiny, hidden_mamba_act gelu_pytorch_tanh: the Mamba conv only
    qwen4exp-gelu-tiny     qwen4exp-hc3-tiny (output_gate_type sigmoid), hidden_act gelu: the GDN conv and
                           the experts' gate (the gated norm takes output_gate_type)
    falconh1-gelu-tiny     falconh1-attnbias-tiny, hidden_act gelu: the Mamba-2 conv and the MLP gate
                           (after gate_multiplier 1.1, which the converter folds into ffn_gate)
    olmohybrid-relu2-tiny  olmohybrid-bias-tiny, hidden_act relu2: the GDN's three separate q / k / v
                           convs and the MLP gate
    granitehybrid-gelu-tiny  granitehybrid-linear-tiny (Granite 4.0-H MoE), hidden_act gelu: the Mamba-2
                           conv, the routed experts (GraniteMoeHybridMoE) and the shared MLP
    qwen35moe-gelu-tiny    qwen35moe-yarn-tiny, hidden_act gelu: the GDN conv, the routed experts and the
                           shared expert
    laramini-gelu-tiny     laramini-tiny, hidden_act gelu: the GDN conv, the routed experts (LaraMiniExperts)
                           and the ungated shared expert (LaraMiniMLP); the gated norm's act is "silu", fixed

Made by tools/make_gdn_fixtures.py's write_variant (keep_shards: the base fixture's safetensors files
copied as they are; HF's class must load them all and read the attribute back).

    /work/tfvenv/bin/python tools/make_conv_act_fixtures.py [OUT_DIR] [NAME ...]   # default tests/fixtures/hf
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gdn_fixtures import main_of_variants, write_variant  # noqa: E402

# name: (base fixture, config.json changes)
SPECS = {
    "mamba-gelu-tiny": ("mamba-tiny", dict(hidden_act="gelu")),
    "mamba2-gelu-tiny": ("mamba2-tiny", dict(hidden_act="gelu_pytorch_tanh")),
    "bamba-gelu-tiny": ("bamba-tiny", dict(hidden_act="gelu")),
    "qwen35-gelu-tiny": ("qwen35-tiny", dict(hidden_act="gelu")),
    "kimilinear-gelu-tiny": ("kimilinear-tiny", dict(hidden_act="gelu")),
    "nemotronh-relu-tiny": ("nemotronh-dense-tiny", dict(mamba_hidden_act="relu")),
    "zamba-gelutanh-tiny": ("zamba-tiny", dict(hidden_mamba_act="gelu_pytorch_tanh")),
    "qwen4exp-gelu-tiny": ("qwen4exp-hc3-tiny", dict(hidden_act="gelu")),
    "falconh1-gelu-tiny": ("falconh1-attnbias-tiny", dict(hidden_act="gelu")),
    "olmohybrid-relu2-tiny": ("olmohybrid-bias-tiny", dict(hidden_act="relu2")),
    "granitehybrid-gelu-tiny": ("granitehybrid-linear-tiny", dict(hidden_act="gelu")),
    "qwen35moe-gelu-tiny": ("qwen35moe-yarn-tiny", dict(hidden_act="gelu")),
    "laramini-gelu-tiny": ("laramini-tiny", dict(hidden_act="gelu")),
}


def make(name: str, out_root: str, src_root: str) -> None:
    base, changes = SPECS[name]
    src = os.path.join(src_root, base)
    logits, _ = write_variant(os.path.join(out_root, name), src, changes, keep_shards=True)
    base_logits = np.load(os.path.join(src, "reference.npz"))["logits"]
    print(f"  rel L2 to {base}'s logits {float(np.linalg.norm(logits - base_logits) / np.linalg.norm(base_logits)):.3g}")


if __name__ == "__main__":
    main_of_variants(sys.argv[1:], SPECS, make)
