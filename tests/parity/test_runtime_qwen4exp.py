"""Parity of qwen4exp (hyper-connections, QSA indexed attention, PLE n-gram embeddings) with HF.

tests/fixtures/hf/NAME/reference.npz (tools/make_qwen4exp_fixture.py --reference / --variants,
transformers 5.24 eager attention, float32): 160 random tokens with EOS tokens at 40, 41 and 97
(the PLE hash restarts after each), HF's logits for every position and its 16-token greedy
continuation through its own cache.  QSA is sparse from position budget + ratio - 1 on (11 in
qwen4exp-tiny, 14 in the hc3 variant, 23 in the ple2 variant), so most positions choose blocks.

Checked on our own f32 conversions (the session's ``hf_f32``):
- relative L2 error of all 160 positions' logits < 1e-5 in one shot and in ubatches of 1 and 7,
  the greedy continuation identical (parity_util.check_against_hf);
- the logits at ubatch sizes 1, 7, 16 and 64 within 1e-6 (relative L2) of the one-shot run:
  the cuts go through PLE conv windows, n-gram histories and QSA blocks;
- two sequences in one batch give each the logits of its own run (the QSA blocks and the PLE
  history are per sequence).
Measured figures are written to the terminal.

The f32 parity, two-sequence and quantize-order checks of the family's fixtures are table rows now
(tests/families.py), run by tests/parity/test_families.py; this module keeps the special ones.
"""
from __future__ import annotations

import numpy as np
import pytest

from parity_util import logits_of, rel_l2, terminal_report

pytestmark = pytest.mark.native

# the main fixture (hc_count 2, budget 8 / ratio 4, one PLE layer, silu output gate) and the
# held-back-style variants: hc_count 3 with budget 12 / ratio 3, a sigmoid gate and an
# eos_token_id list; hc_count 4 with two PLE layers, 4-grams and budget 16 / ratio 8
NAMES = ["qwen4exp-tiny", "qwen4exp-hc3-tiny", "qwen4exp-ple2-tiny"]
SPLIT_BOUND = 1e-6


@pytest.fixture(scope="module")
def report(request):
    yield from terminal_report(request, "qwen4exp parity")


@pytest.mark.parametrize("name", NAMES)
def test_reference_exercises_qsa_and_eos(fixtures, name):
    """The reference is long enough for sparse QSA selections and holds EOS tokens mid-prompt."""
    import json
    cfg = json.loads((fixtures / "hf" / name / "config.json").read_text())
    ref = np.load(fixtures / "hf" / name / "reference.npz")
    eos = cfg["eos_token_id"][0] if isinstance(cfg["eos_token_id"], list) else cfg["eos_token_id"]
    first_sparse = cfg["indexer_budget"] + cfg["indexer_compress_ratio"] - 1
    assert len(ref["tokens"]) == 160 and first_sparse < 60
    assert {40, 41, 97} <= set(np.flatnonzero(ref["tokens"] == eos).tolist())


@pytest.mark.parametrize("name", NAMES)
def test_ubatch_splits_match_one_shot(hf_f32, fixtures, report, name):
    tok = np.load(fixtures / "hf" / name / "reference.npz")["tokens"]
    path = hf_f32(name)
    one = logits_of(path, tok)
    errs = {b: rel_l2(logits_of(path, tok, n_ubatch=b), one) for b in (1, 7, 16, 64)}
    report.append(f"{name}: vs one-shot, rel L2 " + ", ".join(f"-b {b} {e:.1e}" for b, e in errs.items()))
    for b, e in errs.items():
        assert e < SPLIT_BOUND, f"{name} -b {b}: relative L2 {e:.3e} from the one-shot logits"


def test_session_file_turns_match_scratch(monkeypatch, capsys, tmp_path, hf_f32):
    """Seven turns through ``toolkit run --session`` (a chat's prompt cache, state file between
    runs): each prompt is the previous one + its answer + new user tokens; turn 4 asks turn 3's
    prompt again (a regenerate: all but its last token from the session), turn 6 edits turn 5's
    user tokens (the prompt leaves the saved one inside it: rolled back to a checkpoint).  Every
    run's greedy tokens equal a from-scratch run's (the Conversation API test compares logits)."""
    import json

    from cli_runner import cli

    m, sess = hf_f32("qwen4exp-tiny"), str(tmp_path / "q.session")

    def run(ids, *extra):
        rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(m), "--json", "--temp", "0", "-n", "6", "-c", "512",
                           "--checkpoint-every", "4", "--tokens", ",".join(map(str, ids)), *extra)
        assert rc == 0, err
        return json.loads(out)

    rng = np.random.default_rng(7)
    prompt: list[int] = []
    prev: list[int] = []
    reused, lens = [], []
    for turn in range(1, 8):
        if turn == 4:
            ids = prev                                        # regenerate turn 3
        elif turn == 6:
            ids = prev[:-5] + [int(x) for x in rng.integers(3, 512, 8)]   # edit turn 5's user tokens
        else:
            ids = prompt + [int(x) for x in rng.integers(3, 512, 5 + turn)]
        got = run(ids, "--session", sess)
        assert got["tokens"] == run(ids)["tokens"], f"turn {turn}"
        reused.append(got["n_reused"])
        lens.append(len(ids))
        prev, prompt = ids, ids + got["tokens"]
    assert reused[0] == 0 and all(r > 0 for r in reused[1:]), reused   # every later turn came from the session
    # the regenerate and the edit roll back to a checkpoint (taken every 4 positions, a few
    # kept) before the token to re-feed: the regenerate's last prompt token, the edit's first
    # new token
    assert 0 < reused[3] <= lens[2] - 1 and 0 < reused[5] <= lens[4] - 5, (reused, lens)
