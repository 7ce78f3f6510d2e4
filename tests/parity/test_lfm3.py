"""LFM3 (Lfm3ForCausalLM -> lfm3): our conversion against HF's logits, and the file's layout.

lfm3-tiny is the reference set's (transformers 5.24): 5 layers conv, conv, full attention, conv,
sliding attention (window 16), 4 heads / 2 KV heads of 16, proportional RoPE (factor 0.5) on the
full layer and θ 10 000 on the sliding one, sandwich norms, the per-head output gate, tied
embeddings.  llama.cpp has no lfm3: no llama.cpp file (README "LFM3 layout").

Checked: f32 logits < 1e-5 relative L2 in one shot and in ubatches of 1 and 7 (64 tokens: the
sliding layer's window is passed, its cache evicts), greedy continuation identical (HF's
reference was generated with end-of-text masked: suppressed here too); two sequences in one batch
give each its own run's logits; `toolkit quantize` Q8_0 / Q4_K_M with the error ordered by bits.

The f32 parity, two-sequence and quantize-order checks of the family's fixtures are table rows now
(tests/families.py), run by tests/parity/test_families.py; this module keeps the special ones.
"""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.native

NAME = "lfm3-tiny"


def test_layout(hf_f32):
    from toolkit.arch import HParams, Norm
    from toolkit.gguf_io import GGUFFile
    f = GGUFFile(str(hf_f32(NAME)))
    hp = HParams.from_gguf(f)
    assert hp.arch == "lfm3" and hp.attention_layers == [2, 4] and hp.recurrent_layers == [0, 1, 3]
    assert hp.n_swa == 16 and hp.swa_layers == [0, 0, 0, 0, 1]
    assert hp.rope_freq_base == 1e6 and hp.rope_freq_base_swa == 1e4 and hp.n_rot == 16 and hp.rope_prop_rot == 8
    assert hp.attn_head_gate == 1 and hp.norm_place == Norm.SANDWICH
    assert tuple(f.tensors["blk.2.attn_gate.weight"].shape) == (64, 4)          # ne: [D, H]
    assert "blk.0.post_attention_norm.weight" in f.tensors and "blk.0.post_ffw_norm.weight" in f.tensors
    assert "output.weight" not in f.tensors                                      # tied


