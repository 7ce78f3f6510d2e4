"""RecurrentGemma (RecurrentGemmaForCausalLM -> recurrent-gemma): the runtime against HF's logits.

recurrentgemma-tiny is the reference set's (transformers 5.24): 4 layers r, r, a, r; H 64, 4 heads /
1 KV head of 16 (MQA), 8 of 16 dims rotated, window 16, lru 64 (RG-LRU blocks of 16), K 4, soft cap
30.  recurrentgemma-odd-tiny (tools/make_recurrent_gemma_fixtures.py) is held back from the code's
writing: 5 layers r, a, r, a, r; H 96 (embedding scale bf16(sqrt 96) = 9.8125), 4 heads / 2 KV heads
of 24, 6 of 24 dims rotated at θ 500, window 8, q / k / v biases, lru 80 (blocks of 20), K 3, soft
cap 12, ε 1e-5.  Each prompt is 64 tokens, longer than both windows.

Checked: f32 logits < 1e-5 relative L2 in one shot and in ubatches of 1 and 7, greedy
continuation identical (end-of-text, id 0, suppressed as HF's reference did); two sequences in
one batch give each its own run's logits; Q8_0 / Q4_K_M ordered by bits; run's bad input (a
window of 0, an RG-LRU width that disagrees with the conv, a soft cap of 0) one line, exit 2.
Seen failing (recurrentgemma-tiny / odd, one-shot; f32 as built 5.4e-7 / 2.6e-7): no reset at
position 0 (the multiplier sqrt(1 - a^2) there) 5.0e-4 / 1.2e-2; the sqrt(1 - a^2) multiplier
dropped 4.7e-3 / 3.7e-1; the window one token wider 5.1e-2 / 3.6e-2; no soft cap 2.4e-3 / 6.2e-3.

The f32 parity, two-sequence and quantize-order checks of the family's fixtures are table rows now
(tests/families.py), run by tests/parity/test_families.py; this module keeps the special ones.
"""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.native



def test_layout(hf_f32):
    from toolkit.arch import FFNKind, HParams, LayerKind, arch_spec
    from toolkit.gguf_io import GGUFFile
    hp = HParams.from_gguf(GGUFFile(str(hf_f32("recurrentgemma-odd-tiny"))))
    assert hp.arch == "recurrent-gemma" and hp.attention_layers == [1, 3] and hp.recurrent_layers == [0, 2, 4]
    assert hp.layer_kinds[0] == LayerKind.RGLRU and set(hp.ffn_kinds) == {FFNKind.GEGLU}
    assert hp.d_inner == 80 and hp.d_conv == 3 and hp.n_head == 4 and hp.n_head_kv[1] == 2 and hp.head_dim == 24
    assert hp.n_rot == 6 and hp.rope_freq_base == 500.0 and hp.n_swa == 8 and hp.swa_layers == [0, 1, 0, 1, 0]
    assert hp.embedding_scale == 9.8125 and hp.logit_softcap == 12.0 and arch_spec(hp.arch).attn_bias


@pytest.mark.parametrize("kv, msg", [
    ({"recurrent-gemma.attention.sliding_window": (0, "UINT32")}, "sliding_window"),
    ({"recurrent-gemma.rglru.width": (96, "UINT32")}, "rglru_x"),     # the conv / linear_x are 64 wide
    ({"recurrent-gemma.final_logit_softcapping": (0.0, "FLOAT32")}, "final_logit_softcapping"),
])
def test_run_refuses_bad_keys(monkeypatch, capsys, tmp_path, hf_f32, kv, msg):
    import gguf
    from gguf_edit_util import rewrite, run_error
    bad = tmp_path / "bad.gguf"
    rewrite(hf_f32("recurrentgemma-tiny"), bad,
            kv={k: (v, getattr(gguf.GGUFValueType, t), None) for k, (v, t) in kv.items()})
    err = run_error(monkeypatch, capsys, bad)
    assert msg in err, err
