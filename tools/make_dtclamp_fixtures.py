"""Make the issue-43 fixtures of the Mamba-2 dt clamp and the conv biases (tests/fixtures/hf/*):
a shared fixture's checkpoint with config.json flags flipped, run by transformers' own model.

    mamba2-dtclamp-tiny     mamba2-tiny with time_step_limit [0.4, 1.0]
    bamba-dtclamp-tiny      bamba-tiny with time_step_limit [0.4, 1.0]
    falconh1-dtclamp-tiny   falconh1-tiny with time_step_limit [0.4, 1.0]
    nemotronh-dtmin-tiny    nemotronh-dense-tiny with time_step_min 0.7 (NemotronHMamba2Mixer's
                            dt_limit is (time_step_min, inf); it never reads time_step_limit)
    zamba2-noconvb-tiny     zamba2-tiny with use_conv_bias false (HF's Zamba2MambaMixer builds
                            conv1d with bias=True whatever it says: the same tensors and logits)
                            and time_step_min 0.5 (its dt_limit floor)
    lfm3-convbias-tiny      lfm3-tiny with conv_bias true: every short conv's in_proj / conv /
                            out_proj bias drawn N(0, 0.1) (seeded)

The softplus(dt + dt_bias) of these checkpoints on the fixture tokens lies between ~0.19 (1st
percentile) and ~1.9 (99th), so [0.4, 1.0] and floors of 0.5 and 0.7 clamp a large share of it; each
clamped variant's logits must differ from its base fixture's (the unclamped run of the same
weights) by more than 1e-3 relative L2, else the script stops.

reference.npz: the base fixture's tokens, HF's float32 logits of one cache-free forward, and
16 greedy tokens by repeated full forwards (HF's one-token decode step,
mamba2_selective_state_update, takes no dt_limit: only its chunked prompt pass clamps).  The
tokenizer files are the base fixture's symlinks (tests/fixtures/tokenizer/).

Runs only where torch and transformers 5.24 are installed, never in the tests:

    /work/tfvenv/bin/python tools/make_dtclamp_fixtures.py [OUT_DIR] [NAME ...]   # default tests/fixtures/hf
"""
from __future__ import annotations

import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gdn_fixtures import N_GREEDY, copy_tokenizer, main_of_variants, save_reference  # noqa: E402

LIMIT = [0.4, 1.0]

# name: (base fixture, config.json changes, seed of the added biases, clamps: logits must move)
SPECS = {
    "mamba2-dtclamp-tiny": ("mamba2-tiny", dict(time_step_limit=LIMIT), None, True),
    "bamba-dtclamp-tiny": ("bamba-tiny", dict(time_step_limit=LIMIT), None, True),
    "falconh1-dtclamp-tiny": ("falconh1-tiny", dict(time_step_limit=LIMIT), None, True),
    "nemotronh-dtmin-tiny": ("nemotronh-dense-tiny", dict(time_step_min=0.7), None, True),
    "zamba2-noconvb-tiny": ("zamba2-tiny", dict(use_conv_bias=False, time_step_min=0.5), None, True),
    "lfm3-convbias-tiny": ("lfm3-tiny", dict(conv_bias=True), 441, False),
}


def rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b.astype(np.float64)))


def make(name: str, out_root: str, src_root: str) -> None:
    import torch
    import transformers

    base, changes, seed, clamps = SPECS[name]
    src, out = os.path.join(src_root, base), os.path.join(out_root, name)
    cfg = transformers.AutoConfig.from_pretrained(src)
    for k, v in changes.items():
        setattr(cfg, k, v)
    model = transformers.AutoModelForCausalLM.from_pretrained(src, config=cfg, dtype=torch.float32).eval()
    if seed is not None:   # the biases the flag adds (absent from the base checkpoint): drawn here
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for n, p in sorted(model.named_parameters()):
                if n.endswith(".bias") and ".conv." in n:
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
    if os.path.lexists(out):
        shutil.rmtree(out)
    model.save_pretrained(out, max_shard_size="400KB")
    copy_tokenizer(src, out)
    ref = np.load(os.path.join(src, "reference.npz"))
    tokens = ref["tokens"]
    ids = torch.tensor(tokens[None].astype(np.int64))
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float().numpy().astype(np.float32)
        seq = ids
        for _ in range(N_GREEDY):
            nxt = model(input_ids=seq).logits[0, -1].argmax()
            seq = torch.cat([seq, nxt.view(1, 1)], dim=1)
    greedy = seq[0, len(tokens):].numpy().astype(np.int32)
    moved = rel_l2(logits, ref["logits"])
    if clamps and not moved > 1e-3:
        sys.exit(f"{name}: the clamp moves the logits by {moved:.2e} relative L2 from {base}'s (<= 1e-3)")
    save_reference(out, tokens, logits, greedy, f", {moved:.3e} rel L2 from {base}")


if __name__ == "__main__":
    main_of_variants(sys.argv[1:], SPECS, make)
