"""The declared hparams (toolkit/arch/fields.py) read through KeyReader.fill: default, type, range."""
from __future__ import annotations

import pytest

from toolkit.arch import HParams
from toolkit.arch import fields as F
from toolkit.arch.readers import KeyReader
from toolkit.errors import InputError


class _File:
    """The part of GGUFFile a KeyReader uses."""

    def __init__(self, kv: dict):
        self.path, self.kv = "m.gguf", kv

    def get(self, key, default=None):
        return self.kv.get(key, default)

    def require(self, key):
        if key not in self.kv:
            raise InputError(f"{self.path}: missing key {key!r}")
        return self.kv[key]


def _hp() -> HParams:
    return HParams(arch="x", n_vocab=0, n_embd=0, n_layer=0, n_ctx_train=0, rms_eps=0.0, layer_kinds=[], ffn_kinds=[])


def _fill(kv: dict, *names: str) -> HParams:
    hp = _hp()
    KeyReader(_File({f"x.{k}": v for k, v in kv.items()}), "x").fill(hp, *names)
    return hp


def test_absent_keys_take_the_declared_value():
    hp = _fill({}, "hc_sinkhorn_iters", "hc_eps", "gdn_beta_scale", "dsa_select_tail", "logit_scale")
    assert (hp.hc_sinkhorn_iters, hp.hc_eps, hp.gdn_beta_scale, hp.dsa_select_tail, hp.logit_scale) == (20, 1e-6, 1.0, 1, 1.0)
    assert _fill({"logit_scale": 0.0}, "logit_scale").logit_scale == 1.0    # Granite: 0 means 1


def test_present_keys_are_read_with_their_type():
    hp = _fill({"ssm.conv_kernel": 4, "ssm.inner_size": 64, "ssm.state_size": 16, "ssm.time_step_rank": 8,
                "attention.indexer.kpool_select_tail": False}, "d_conv", "d_inner", "d_state", "dt_rank", "dsa_select_tail")
    assert (hp.d_conv, hp.d_inner, hp.d_state, hp.dt_rank, hp.dsa_select_tail) == (4, 64, 16, 8, 0)
    assert type(hp.dsa_select_tail) is int


@pytest.mark.parametrize("kv, name, msg", [
    ({}, "d_conv", "missing key 'x.ssm.conv_kernel'"),
    ({"ssm.conv_kernel": 65}, "d_conv", "'x.ssm.conv_kernel' = 65 must be in [1, 64]"),
    ({"ssm.state_size": 0}, "d_state", "'x.ssm.state_size' = 0 must be in [1, 4096]"),
    ({"ssm.beta_scale": -2.0}, "gdn_beta_scale", "'x.ssm.beta_scale' = -2.0 must be finite and > 0"),
    ({"ssm.dt_min": float("inf")}, "ssm_dt_min", "'x.ssm.dt_min' = inf must be finite and >= 0"),
    ({"hyper_connection.sinkhorn_iterations": 0}, "hc_sinkhorn_iters", "= 0 must be in [1, 1000]"),
    ({"ssm.conv_kernel": 2.5}, "d_conv", "(float) is not a valid value (expected an int32)"),
    ({"ssm.norm_before_gate": "yes"}, "ssm_norm_before_gate", "(expected a boolean)"),
])
def test_bad_values_name_the_key(kv, name, msg):
    with pytest.raises(InputError) as e:
        _fill(kv, name)
    assert msg in str(e.value) and str(e.value).startswith("m.gguf: ")


def test_hparams_fields_are_the_declarations():
    import dataclasses
    assert [f.name for f in dataclasses.fields(HParams)] == [h.name for h in F.hparams_fields()]
    assert _hp().moe_weights_norm_eps == 1e-20 and _hp().n_head_kv == [] and _hp().use_rope is True
