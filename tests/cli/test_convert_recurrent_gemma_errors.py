"""`toolkit convert` on a RecurrentGemma checkpoint whose tensors disagree with each other: one line
naming the tensor, exit 2, nothing at OUT (the config-level errors are in
tests/parity/test_convert_recurrent_gemma.py)."""
from __future__ import annotations

import numpy as np

from convert_error_util import config, copy, expect_error, replace_tensor


def test_conv_of_another_width_than_the_rg_lru(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "recurrentgemma-tiny")
    c = config(d)
    lru, k = c["lru_width"], c["conv1d_width"]
    replace_tensor(d, "model.layers.0.temporal_block.conv_1d.weight", np.zeros((lru + 8, 1, k), np.float32))
    expect_error(monkeypatch, capsys, tmp_path, d, "'model.layers.0.temporal_block.conv_1d.weight'",
                 f"[{lru + 8}, 1, {k}]")
