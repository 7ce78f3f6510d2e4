"""A file with a tensor the runtime never binds is refused, not run without it: a bias this build
does not apply, or a tensor of a configuration the keys do not describe, would otherwise be
dropped without a word and the model would write the wrong text (llama.cpp refuses the same file:
"wrong number of tensors")."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from gguf_edit_util import rewrite, run_error
from toolkit.errors import NativeError
from toolkit.runtime import Model

pytestmark = pytest.mark.native

BAMBA = pathlib.Path(__file__).parent.parent / "fixtures" / "llamacpp" / "bamba-tiny.f32.gguf"


def test_an_unread_tensor_is_one_line_naming_the_file_and_tensor(monkeypatch, capsys, tmp_path):
    with Model(BAMBA, n_threads=1) as m:          # the file as it is loads
        D = m.hparams.n_embd
    bad = tmp_path / "extra.gguf"
    rewrite(BAMBA, bad, add_tensors={"blk.0.ssm_norm.bias": np.zeros(D, np.float32)})
    err = run_error(monkeypatch, capsys, bad)
    assert str(bad) in err and "1 tensor the runtime does not use: 'blk.0.ssm_norm.bias'" in err, err


def test_many_unread_tensors_are_counted_and_the_first_named(tmp_path):
    bad = tmp_path / "extras.gguf"
    rewrite(BAMBA, bad, add_tensors={f"blk.{i}.foo.weight": np.ones(4, np.float32) for i in range(5)})
    with pytest.raises(NativeError, match=r"5 tensors the runtime does not use: 'blk\.0\.foo\.weight', "
                                          r"'blk\.1\.foo\.weight', 'blk\.2\.foo\.weight', \.\.\."):
        Model(bad, n_threads=1)
