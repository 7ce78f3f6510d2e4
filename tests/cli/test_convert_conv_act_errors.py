"""A mixer-activation attribute read by a family (hidden_act; Nemotron-H mamba_hidden_act, Zamba
hidden_mamba_act: toolkit.convert.activation) set to an HF ACT2FN name the runtime does not have
(mish) stops `toolkit convert` with one line naming config.json and the key, exit 3, nothing
written.  The cases come from the families' declarations (``config_keys.read``)."""
from __future__ import annotations

import pytest

from cli_runner import cli as run_cli
from convert_error_util import HF
from toolkit.convert.families import FAMILIES

from families import main_fixture
from hf_edit_util import config_edited

ATTRS = ("hidden_act", "mamba_hidden_act", "hidden_mamba_act")
FIXTURE = main_fixture()
CASES = [(f.__name__, a) for f in FAMILIES for a in ATTRS if a in f.config_keys.read]


def test_the_conv_act_families_read_their_attribute():
    """The families whose mixer conv takes the attribute declare it read (not refused)."""
    names = {f for f, _ in CASES}
    assert {"MambaFamily", "FalconMambaFamily", "Mamba2Family", "GraniteHybridFamily", "JambaFamily",
            "FalconH1Family", "Qwen3NextFamily", "Qwen35Family", "Qwen35MoeFamily", "OlmoHybridFamily",
            "KimiLinearFamily", "Glm5NextFamily", "BailingMoe3Family", "NemotronHFamily", "ZambaFamily"} <= names


@pytest.mark.parametrize("fam,attr", CASES, ids=[f"{f}-{a}" for f, a in CASES])
def test_an_activation_the_runtime_lacks_is_refused(monkeypatch, capsys, tmp_path, fam, attr):
    d = config_edited(HF / FIXTURE[fam], tmp_path, {attr: "mish"})
    out = tmp_path / "out.gguf"
    rc, _, err = run_cli(monkeypatch, capsys, "convert", str(d), str(out))
    line = " ".join(err.split())          # rich may wrap the one line on a narrow terminal
    assert rc == 3, err
    assert line.startswith("error:") and "Traceback" not in err and len(err.strip().splitlines()) <= 3, err
    assert "config.json" in line and attr in line and '"mish"' in line.replace("'mish'", '"mish"'), line
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]
