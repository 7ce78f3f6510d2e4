"""Reading zamba2's hparams (toolkit/arch/readers.py read_zamba2; README "Zamba2 layout") from our
conversion of tests/fixtures/hf/zamba2-tiny, with keys replaced: a bad key is one InputError
naming the file and the key."""
from __future__ import annotations

import pytest

from toolkit.arch import HParams, LayerKind
from toolkit.errors import InputError
from toolkit.gguf_io import GGUFFile

_ABSENT = object()
M, Z = LayerKind.MAMBA2, LayerKind.ZAMBA2_SHARED


def edited(path, **kv) -> GGUFFile:
    """The GGUF at ``path`` with keys ``zamba2.KEY`` (dots as '__') replaced; _ABSENT drops one."""
    f = GGUFFile(str(path))
    get = f.get
    over = {f"zamba2.{k.replace('__', '.')}": v for k, v in kv.items()}

    def patched(key, default=None):
        full = f._resolve(key)
        if full in over:
            return default if over[full] is _ABSENT else over[full]
        return get(key, default)
    f.get = patched
    return f


def test_file_reads_as_expected(hf_f32):
    hp = HParams.from_gguf(edited(hf_f32("zamba2-tiny")))
    assert hp.layer_kinds == [M, Z, M, M, Z] and hp.n_shared_block == 1
    assert hp.attention_layers == [1, 4] and hp.recurrent_layers == [0, 1, 2, 3, 4]
    assert (hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_rot) == (4, [0, 4, 0, 0, 4], 32, 32)
    assert hp.attention_scale == pytest.approx(0.25) and hp.ssm_dt_min == pytest.approx(1e-3)


@pytest.mark.parametrize("kv, key", [
    ({"shared_block_map": [-1, 0, -1, 0, 0]}, "zamba2.shared_block_map"),      # layer 3 is not hybrid
    ({"shared_block_map": [-1, 0, -1, -1]}, "zamba2.shared_block_map"),        # 4 entries, 5 layers
    ({"shared_block_map": [-1, 0, -1, -1, 0], "shared_block_count": 2}, "zamba2.shared_block_map"),   # 2nd hybrid -> 1
    ({"shared_block_map": _ABSENT}, "zamba2.shared_block_map"),
    ({"shared_block_count": 0}, "zamba2.shared_block_count"),
    ({"ssm__dt_min": -1.0}, "zamba2.ssm.dt_min"),
    ({"attention__layer_indices": [1, 3]}, "zamba2.attention.head_count_kv"),  # hybrid layers moved
])
def test_bad_values_name_the_key(hf_f32, kv, key):
    with pytest.raises(InputError, match=rf"zamba2-tiny\.f32\.gguf: key '{key}'|zamba2-tiny\.f32\.gguf: missing key '{key}'"):
        HParams.from_gguf(edited(hf_f32("zamba2-tiny"), **kv))
