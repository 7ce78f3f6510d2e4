"""The mixers' conv activation (issue 43): HF's ``hidden_act`` (Nemotron-H ``mamba_hidden_act``,
Zamba ``hidden_mamba_act``) is the activation after the causal conv of the Mamba-1 / Mamba-2 / GDN /
KDA mixers (``causal_conv1d_fn(..., activation=...)``), and, where the attribute is ``hidden_act`` of
a family with an MLP, the MLP / experts' gate too.  The converter writes ours
``{arch}.ssm.activation`` (and ``{arch}.feed_forward.activation``) only when not silu.

The fixtures (tools/make_conv_act_fixtures.py: a family fixture's weights with the attribute changed,
HF float32 logits) run at HF accuracy as rows of tests/families.py (parity, two_seq); here: each key
the file carries matters (without it the run is far from HF's), a file at the default has neither
key, and a bad value in a file is one error line.
"""
from __future__ import annotations

import gguf
import numpy as np
import pytest

from families import BY_NAME
from gguf_edit_util import rewrite, run_error
from parity_util import logits_of, rel_l2

pytestmark = pytest.mark.native

# (fixture, its base fixture, the keys (less "{arch}.") the conversion writes, with their values)
FIXTURES = [
    ("mamba-gelu-tiny", "mamba-tiny", {"ssm.activation": "gelu"}),
    ("mamba2-gelu-tiny", "mamba2-tiny", {"ssm.activation": "gelu_pytorch_tanh"}),
    ("bamba-gelu-tiny", "bamba-tiny", {"ssm.activation": "gelu", "feed_forward.activation": "gelu"}),
    ("qwen35-gelu-tiny", "qwen35-tiny", {"ssm.activation": "gelu", "feed_forward.activation": "gelu"}),
    ("kimilinear-gelu-tiny", "kimilinear-tiny", {"ssm.activation": "gelu", "feed_forward.activation": "gelu"}),
    ("nemotronh-relu-tiny", "nemotronh-dense-tiny", {"ssm.activation": "relu"}),
    ("zamba-gelutanh-tiny", "zamba-tiny", {"ssm.activation": "gelu_pytorch_tanh"}),
    # before: converted without a word (hidden_act was read for the output gate only) and ran 7.1e-2 from HF
    ("qwen4exp-gelu-tiny", "qwen4exp-hc3-tiny", {"ssm.activation": "gelu", "feed_forward.activation": "gelu"}),
    ("falconh1-gelu-tiny", "falconh1-attnbias-tiny", {"ssm.activation": "gelu", "feed_forward.activation": "gelu"}),
    ("olmohybrid-relu2-tiny", "olmohybrid-bias-tiny", {"ssm.activation": "relu2", "feed_forward.activation": "relu2"}),
    ("granitehybrid-gelu-tiny", "granitehybrid-linear-tiny", {"ssm.activation": "gelu", "feed_forward.activation": "gelu"}),
    ("qwen35moe-gelu-tiny", "qwen35moe-yarn-tiny", {"ssm.activation": "gelu", "feed_forward.activation": "gelu"}),
    ("laramini-gelu-tiny", "laramini-tiny", {"ssm.activation": "gelu", "feed_forward.activation": "gelu"}),
]
CASES = [(name, key) for name, _, keys in FIXTURES for key in keys]


def _act_keys(path) -> dict[str, str]:
    r = gguf.GGUFReader(str(path))
    arch = r.fields["general.architecture"].contents()
    return {k[len(arch) + 1:]: r.fields[k].contents() for k in r.fields if k.endswith(".activation")}


@pytest.mark.parametrize("name,base,keys", FIXTURES, ids=[f[0] for f in FIXTURES])
def test_the_file_has_the_keys_and_the_default_file_none(hf_f32, name, base, keys):
    """The variant's file says HF's name; its base fixture (silu) converts without either key, so
    default files are byte-identical to before the keys existed."""
    assert _act_keys(hf_f32(name)) == keys
    assert _act_keys(hf_f32(base)) == {}


@pytest.mark.parametrize("name,key", CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_each_key_matters(hf_f32, tmp_path, name, key):
    """Calibration: the same file without the key (that activation read as silu) is far from HF,
    so the families rows would fail on a runtime or converter that dropped it; a family whose
    hidden_act also sets the MLP is checked key by key (the conv's alone matters)."""
    src = hf_f32(name)
    arch = gguf.GGUFReader(str(src)).fields["general.architecture"].contents()
    out = tmp_path / "dropped.gguf"
    rewrite(src, out, drop_kv=(f"{arch}.{key}",))
    ref = np.load(BY_NAME[name].hf / "reference.npz")
    assert rel_l2(logits_of(out, ref["tokens"]), ref["logits"]) > 1e-3


def test_a_value_outside_the_runtime_s_is_one_error_line(monkeypatch, capsys, hf_f32, tmp_path):
    """A file whose ssm.activation is not one the runtime has: one line naming the key, exit 2."""
    out = tmp_path / "bad.gguf"
    rewrite(hf_f32("mamba-gelu-tiny"), out, kv={"mamba.ssm.activation": ("mish", gguf.GGUFValueType.STRING, None)})
    err = run_error(monkeypatch, capsys, out)
    assert "mamba.ssm.activation" in err and "mish" in err, err


def test_quantize_keeps_the_keys(hf_f32, tmp_path):
    """`toolkit quantize` carries both keys into the Q8_0 file, and that file runs them: it is
    closer to HF than the same Q8_0 file with the keys dropped (the activations read as silu)."""
    from toolkit.quantize import Options, quantize_file
    name = "qwen35-gelu-tiny"
    out = tmp_path / "q8.gguf"
    quantize_file(str(hf_f32(name)), str(out), "Q8_0", Options(), n_threads=2)
    assert _act_keys(out) == {"ssm.activation": "gelu", "feed_forward.activation": "gelu"}
    dropped = tmp_path / "q8-dropped.gguf"
    rewrite(out, dropped, drop_kv=("qwen35.ssm.activation", "qwen35.feed_forward.activation"))
    ref = np.load(BY_NAME[name].hf / "reference.npz")
    with_keys = rel_l2(logits_of(out, ref["tokens"]), ref["logits"])
    without = rel_l2(logits_of(dropped, ref["tokens"]), ref["logits"])
    assert with_keys < without / 2, (with_keys, without)


def _conv_act_cases() -> list[tuple[str, str]]:
    """(family class name, attribute) for every family that reads a conv-activation attribute
    (MiniMax's hidden_act sets its FFN and lightning qkv only: no conv; Zamba's and Zamba2's
    hidden_act only the shared block's MLP: tests/parity/test_config_variants.py's act rows)."""
    from toolkit.convert.families import FAMILIES
    attrs = ("hidden_act", "mamba_hidden_act", "hidden_mamba_act")
    mlp_only = {("MiniMaxFamily", "hidden_act"), ("ZambaFamily", "hidden_act"), ("Zamba2Family", "hidden_act")}
    return [(f.__name__, a) for f in FAMILIES for a in attrs
            if a in f.config_keys.read and (f.__name__, a) not in mlp_only]


@pytest.mark.parametrize("fam,attr", _conv_act_cases(), ids=[f"{f}-{a}" for f, a in _conv_act_cases()])
def test_every_conv_act_family_writes_the_key(tmp_path, fam, attr):
    """Each family whose mixer conv takes the attribute, the ones without a fixture above too
    (FalconMamba, Jamba, Qwen3-Next, Qwen3.5-MoE, GLM-5-Next, Ling 3), writes ssm.activation from it
    (its main fixture with the attribute changed; qwen4exp-tiny has no output_gate_type, so its
    hidden_act must be one the output gate takes: sigmoid)."""
    from families import main_fixture
    from hf_edit_util import config_edited
    from toolkit.convert import convert
    value = "sigmoid" if fam == "Qwen4ExpFamily" else "gelu"
    d = config_edited(BY_NAME[main_fixture()[fam]].hf, tmp_path, {attr: value})
    convert(str(d), str(tmp_path / "a.gguf"), "f32")
    assert _act_keys(tmp_path / "a.gguf")["ssm.activation"] == value
