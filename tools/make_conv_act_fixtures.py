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

    /work/tfvenv/bin/python tools/make_conv_act_fixtures.py [OUT_DIR] [NAME ...]   # default tests/fixtures/hf
"""
from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
    import torch
    import transformers

    base, changes = SPECS[name]
    src, out = os.path.join(src_root, base), os.path.join(out_root, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    for f in sorted(os.listdir(src)):
        if f.endswith(".safetensors") or f in ("model.safetensors.index.json", "generation_config.json"):
            shutil.copy(os.path.join(src, f), out)
        elif f.startswith("tokenizer") and os.path.islink(os.path.join(src, f)):
            os.symlink(os.readlink(os.path.join(src, f)), os.path.join(out, f))
    cfg = json.load(open(os.path.join(src, "config.json")))
    c = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg
    c.update(changes)
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=2, sort_keys=True)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    for k, v in changes.items():
        got = getattr(model.config.get_text_config(), k)
        assert got == v, (k, got, v)
    tokens = np.load(os.path.join(src, "reference.npz"))["tokens"]
    eos = cfg["eos_token_id"] if "eos_token_id" in cfg else c["eos_token_id"]
    eos = eos if isinstance(eos, list) else [eos]
    with torch.no_grad():
        logits = model(torch.tensor(tokens[None].astype(np.int64)), use_cache=False).logits[0].float().numpy()
        seq = [int(t) for t in tokens]
        greedy = []
        for _ in range(16):
            lg = model(torch.tensor([seq], dtype=torch.long), use_cache=False).logits[0, -1].clone()
            lg[eos] = -float("inf")
            greedy.append(int(lg.argmax()))
            seq.append(greedy[-1])
    base_logits = np.load(os.path.join(src, "reference.npz"))["logits"]
    d = float(np.linalg.norm(logits - base_logits) / np.linalg.norm(base_logits))
    np.savez(os.path.join(out, "reference.npz"), tokens=tokens, logits=logits.astype(np.float32),
             greedy=np.array(greedy, dtype=np.int32))
    print(f"wrote {out}: greedy {greedy}, rel L2 to {base}'s logits {d:.3g}")


def main(argv: list[str]) -> None:
    out_root = argv[0] if argv else os.path.join(REPO, "tests", "fixtures", "hf")
    src_root = os.path.join(REPO, "tests", "fixtures", "hf")
    for name in argv[1:] or list(SPECS):
        make(name, out_root, src_root)


if __name__ == "__main__":
    main(sys.argv[1:])
