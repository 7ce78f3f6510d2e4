"""tools/demo_qwen35.py (the torch model tools/train_demo_model.py --arch qwen35 trains) against
the runtime: a small random instance, saved under HF's Qwen3.5 names and converted by
``toolkit convert``, gives the torch model's logits (main head and MTP head) within 1e-5, so
the trained checkpoint means in toolkit what it meant in training.  Needs torch (the [dev]
extra): skipped without it."""
from __future__ import annotations

import json
import pathlib
import shutil
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

REPO = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.native


@pytest.fixture(scope="module")
def dq():
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import demo_qwen35
        yield demo_qwen35
    finally:
        sys.path.remove(str(REPO / "tools"))


def test_chunked_rule_is_the_recurrence(dq):
    g = torch.Generator().manual_seed(0)
    B, H, T, Dk, Dv = 2, 3, 150, 16, 8
    q = dq._l2(torch.randn(B, H, T, Dk, dtype=torch.float64, generator=g)) * Dk ** -0.5
    k = dq._l2(torch.randn(B, H, T, Dk, dtype=torch.float64, generator=g))
    v = torch.randn(B, H, T, Dv, dtype=torch.float64, generator=g)
    gate = -torch.rand(B, H, T, dtype=torch.float64, generator=g)
    beta = torch.rand(B, H, T, dtype=torch.float64, generator=g)
    want = dq.gdr_recurrent(q, k, v, gate, beta)
    assert float((dq.gdr_chunked(q, k, v, gate, beta) - want).abs().max()) < 1e-12


def test_converted_demo_model_matches_torch(dq, tmp_path):
    from safetensors.torch import save_file

    from toolkit.convert import convert
    from toolkit.runtime import Context, Model
    from toolkit.runtime.mtp import MtpModel

    cfg = dq.qwen35_config(4096, 0, 1, hidden=64, layers=4, ffn=128, heads=2, kv_heads=1, head_dim=32,
                           lin_heads=2, lin_dim=16)
    torch.manual_seed(3)
    model = dq.Qwen35Mtp(cfg).double()
    with torch.no_grad():
        for name, p in model.named_parameters():   # every weight nonzero, norms away from their init
            p.add_(0.05 * torch.randn_like(p))
    src = REPO / "examples" / "demo-hf"
    d = tmp_path / "hf"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    save_file(model.hf_state_dict(), str(d / "model.safetensors"), metadata={"format": "pt"})
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(src / f, d / f)
    out = tmp_path / "demo.f32.gguf"
    convert(str(d), str(out), "f32")
    toks = [int(t) for t in torch.randint(2, 4096, (40,), generator=torch.Generator().manual_seed(1))]
    with torch.no_grad():
        lo, mo = model(torch.tensor([toks]))
    lo, mo = lo[0].numpy(), mo[0].numpy()
    m = Model(out)
    try:
        with Context(m, n_ctx=64) as ctx:
            got, hs = ctx.decode_batch([(toks, 0)], logits="all", hidden=True)
        assert float(np.abs(got[0] - lo).max() / np.abs(lo).max()) < 1e-5
        mm = MtpModel(m)
        with Context(mm, n_ctx=64) as mc:
            gm = mc.decode_batch([(toks[1:], 0)], logits="all", embd=[hs[0][:-1]])[0]
        assert float(np.abs(gm - mo).max() / np.abs(mo).max()) < 1e-5
    finally:
        m.close()
