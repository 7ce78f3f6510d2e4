"""Reading olmo-hybrid's hparams (toolkit/arch/readers.py read_olmo_hybrid; README "OLMo-Hybrid
layout") from our conversions of tests/fixtures/hf/olmohybrid-*, with keys replaced: a bad key is
one InputError naming the file and the key; and the tensors a post-norm block needs."""
from __future__ import annotations

import pytest

from toolkit.arch import HParams, LayerKind, arch_spec
from toolkit.errors import InputError
from toolkit.gguf_io import GGUFFile

_ABSENT = object()
G, A = LayerKind.GDN, LayerKind.ATTENTION


def edited(path, **kv) -> GGUFFile:
    """The GGUF at ``path`` with keys ``olmo-hybrid.KEY`` (dots as '__') replaced; _ABSENT drops one."""
    f = GGUFFile(str(path))
    get = f.get
    over = {f"olmo-hybrid.{k.replace('__', '.')}": v for k, v in kv.items()}

    def patched(key, default=None):
        full = f._resolve(key)
        if full in over:
            return default if over[full] is _ABSENT else over[full]
        return get(key, default)
    f.get = patched
    return f


def test_files_read_as_expected(hf_f32):
    hp = HParams.from_gguf(edited(hf_f32("olmohybrid-tiny")))
    assert hp.layer_kinds == [G, G, A, G] and hp.n_head_kv == [0, 0, 2, 0]
    assert (hp.n_group, hp.ssm_n_head, hp.d_state, hp.ssm_head_dim, hp.d_conv) == (2, 4, 16, 32, 4)
    assert (hp.gdn_beta_scale, hp.gdn_norm_eps, hp.n_rot, hp.head_dim) == (2.0, 1e-5, 16, 16)
    hp = HParams.from_gguf(edited(hf_f32("olmohybrid-nope-tiny")))
    assert hp.layer_kinds == [A, G, G, A, G] and hp.n_head_kv == [1, 0, 0, 1, 0]
    assert (hp.n_group, hp.ssm_n_head, hp.d_state, hp.ssm_head_dim, hp.d_conv) == (3, 6, 8, 12, 3)
    assert (hp.gdn_beta_scale, hp.n_rot) == (1.0, 0)       # no beta_scale key: 1; NoPE


@pytest.mark.parametrize("kv, key", [
    ({"ssm__beta_scale": 0.0}, "olmo-hybrid.ssm.beta_scale"),
    ({"ssm__beta_scale": float("nan")}, "olmo-hybrid.ssm.beta_scale"),
    ({"ssm__inner_size": 130}, "olmo-hybrid.ssm.inner_size"),          # not Hv x Dv
    ({"ssm__group_count": 3}, "olmo-hybrid.ssm.group_count"),          # does not divide Hv 4
    ({"attention__recurrent_layers": [True, True, False]}, "olmo-hybrid.attention.recurrent_layers"),
    ({"rope__dimension_count": 15}, "olmo-hybrid.rope.dimension_count"),
])
def test_bad_keys_name_the_key(hf_f32, kv, key):
    with pytest.raises(InputError, match=key.replace(".", r"\.")):
        HParams.from_gguf(edited(hf_f32("olmohybrid-tiny"), **kv))


def test_post_norm_block_tensors():
    """An attention block of olmo-hybrid needs its post-norms and neither pre-norm; a GDN block its
    pre-norms and the q / k / v pieces."""
    from toolkit.arch import FFNKind
    req, _ = arch_spec("olmo-hybrid").expected_tensors([G, A], [FFNKind.DENSE, FFNKind.DENSE])
    assert {"blk.1.post_attention_norm.weight", "blk.1.post_ffw_norm.weight", "blk.1.attn_q_norm.weight"} <= req
    assert not {"blk.1.attn_norm.weight", "blk.1.ffn_norm.weight", "blk.0.post_ffw_norm.weight"} & req
    assert {"blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "blk.0.attn_q.weight", "blk.0.ssm_conv1d_v.weight"} <= req
    assert "blk.0.attn_qkv.weight" not in req and "blk.0.ssm_conv1d.weight" not in req
