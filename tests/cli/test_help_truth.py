"""Help that tells the truth (issue 37): the command list, each command's own usage, flag
spellings, the families, the version."""
from __future__ import annotations

import json
import pathlib

import pytest

from cli_runner import cli


def test_root_help_lists_chat(monkeypatch, capsys):
    rc, out, err = cli(monkeypatch, capsys, "-h")
    assert rc == 0
    names = [ln.strip("│ ").split(" ")[0] for ln in out.split("Commands")[1].splitlines()]
    assert "chat" in names, out


def test_chat_help_is_chats_own(monkeypatch, capsys):
    rc, out, err = cli(monkeypatch, capsys, "chat", "-h")
    assert rc == 0
    assert "toolkit chat" in out and "toolkit run [" not in out, out
    assert "--conversation" not in out, out


def _flat(s: str) -> str:
    return " ".join(s.replace("│", " ").split())


def test_every_family_list_is_the_registrys(monkeypatch, capsys):
    # `toolkit -h` named five families, `convert -h` left out Falcon-H1, LFM2, Zamba2, Nemotron-H;
    # then four hand-copied lists (issue 45): the help texts now take the registry's, and the
    # README's opening list must equal it, in its order
    import pathlib
    from toolkit.convert.families import family_names
    names = family_names()
    root = pathlib.Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    opening = _flat(readme.split("## ")[0])
    listed = opening.split("language models (", 1)[1].split(") from a Hugging Face", 1)[0]
    assert listed.split(", ") == names, ("README opening", listed)
    joined = ", ".join(names)
    for where, text in {"toolkit -h": _flat(cli(monkeypatch, capsys, "-h")[1]),
                        "convert -h": _flat(cli(monkeypatch, capsys, "convert", "-h")[1])}.items():
        assert joined in text, (where, text)
    listing = cli(monkeypatch, capsys, "convert", "--list-archs")[1]
    assert not [n for n in names if n not in listing], listing
    for src in ("toolkit/cli/app.py", "toolkit/cli/cmd_convert.py", "toolkit/cli/help.py"):
        text = (root / src).read_text()        # no copy to keep in step (a remark may name two)
        named = [n for n in names if n in text]
        assert len(named) <= 2, (src, named)


def test_list_archs_names_every_hf_architecture(monkeypatch, capsys):
    import json
    from toolkit.convert.families import REGISTRY
    rc, out, err = cli(monkeypatch, capsys, "convert", "--list-archs", "--json")
    assert rc == 0, err
    rows = json.loads(out)
    assert sorted(r["hf_architecture"] for r in rows) == sorted(REGISTRY)
    assert {r["gguf_architecture"] for r in rows if not r["llama_cpp"]} == {"zamba", "zamba2", "olmo-hybrid", "lfm3", "lara-mini", "recurrent-gemma"}   # our layouts


def test_unknown_architecture_did_you_mean(monkeypatch, capsys, tmp_path):
    import json
    import shutil
    src = pathlib_fixture("mamba-tiny")
    d = tmp_path / "m"
    shutil.copytree(src, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["architectures"] = ["MambaForCausalLm"]
    (d / "config.json").write_text(json.dumps(cfg))
    rc, out, err = cli(monkeypatch, capsys, "convert", str(d), str(tmp_path / "o.gguf"))
    assert rc == 3 and "did you mean MambaForCausalLM?" in err, err
    cfg["architectures"] = ["LlamaForCausalLM"]        # another model, not a typo: no suggestion
    (d / "config.json").write_text(json.dumps(cfg))
    rc, out, err = cli(monkeypatch, capsys, "convert", str(d), str(tmp_path / "o.gguf"))
    assert rc == 3 and "did you mean" not in err and "--list-archs" in err, err


def pathlib_fixture(name: str):
    import pathlib
    return pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hf" / name


def test_version_names_the_commit(monkeypatch, capsys):
    import re
    for flag in ("--version", "-V"):
        rc, out, err = cli(monkeypatch, capsys, flag)
        assert rc == 0, err
        assert re.fullmatch(r"toolkit \S+ \(commit [0-9a-f]{7,40}(-dirty)?\)\n", out), out


def test_shell_completion(monkeypatch, capsys):
    rc, out, err = cli(monkeypatch, capsys, "-h")
    assert "--install-completion" in out
    monkeypatch.setenv("_TOOLKIT_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", "toolkit run --tem")
    monkeypatch.setenv("COMP_CWORD", "2")
    rc, out, err = cli(monkeypatch, capsys)
    assert rc == 0 and out.split() == ["--temp"], (out, err)


def _help_piped(*args: str, env_extra: dict | None = None) -> str:
    """`toolkit ARGS -h` in a child with no terminal at all (stdin, stdout, stderr piped)."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH", "LINES")}
    env.update(env_extra or {})
    p = subprocess.run([sys.executable, "-m", "toolkit", *args, "-h"], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_flags_and_defaults_in_help_are_spelled_right():
    for cmd in ("", "run", "chat", "serve", "bench", "info", "quantize", "convert", "perplexity"):
        out = _help_piped(*([cmd] if cmd else []))
        assert "<bool>" not in out, (cmd, out)        # an on/off flag takes no value
        assert "[default: e]" not in out, (cmd, out)  # --escape/--no-escape's default is on
    assert "[default: escape]" in _flat(_help_piped("run"))


def test_piped_help_wraps_at_80_without_a_terminal_and_at_columns():
    out = _help_piped("run")
    assert max(len(x) for x in out.splitlines()) <= 80, max(len(x) for x in out.splitlines())
    out = _help_piped("run", env_extra={"COLUMNS": "120"})
    assert 100 < max(len(x) for x in out.splitlines()) <= 120


def test_readme_beyond_one_machine_table_is_the_registrys():
    import pathlib
    from toolkit.convert.families import FAMILIES
    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    table = readme.split("## Beyond one machine")[1].split("\n## ")[0]
    rows = [r.split("|")[1:-1] for r in table.splitlines() if r.startswith("| ") and "`" in r]
    by_arch = {a.strip("` "): (cells[2].strip(), cells[3].strip()) for cells in rows
               for a in cells[1].split(",")}
    for fam in FAMILIES:
        name = next(n for n in fam.hf_archs if n in by_arch)   # the table names one spelling at least
        llama, vllm = by_arch[name]
        assert llama.startswith("yes" if fam.llama_cpp else "no"), (name, llama)
        assert vllm.startswith("yes" if fam.vllm else "no"), (name, vllm)


def test_info_shows_floats_as_written(monkeypatch, capsys):
    # rms_eps 1e-05 (a float32 key) showed as 9.999999747378752e-06
    import json
    import pathlib
    demo = pathlib.Path(__file__).resolve().parents[2] / "toolkit" / "data" / "default.gguf"
    rc, out, err = cli(monkeypatch, capsys, "info", str(demo), "--no-tensors")
    assert rc == 0 and "9.99999974" not in out and "1e-05" in out, out
    rc, out, err = cli(monkeypatch, capsys, "info", str(demo), "--json")
    d = json.loads(out)
    assert d["hparams"]["rms_eps"] == 1e-05 and "9.99999974" not in out


@pytest.mark.parametrize("name, absent, present", [
    ("mamba-tiny", ("n_expert", "moe_sigmoid", "n_head", "rope_freq_base", "n_group", "gdn_gate_act", "hc_count",
                    "ple_index", "n_shared_block", "n_ff"), ("d_state", "d_conv", "dt_rank")),
    ("lfm2-tiny", ("d_state", "dt_rank", "n_expert", "ssm_head_dim", "gdn_gate_act"), ("d_conv", "n_head", "n_ff")),
    ("qwen35moe-tiny", ("dt_b_c_rms", "ssm_norm_before_gate", "n_shared_block", "idx_top_k"),
     ("n_expert", "n_expert_used", "gdn_gate_act", "n_head")),
    ("granitehybrid-moe-tiny", ("gdn_gate_act", "dt_b_c_rms"), ("n_expert", "ssm_head_dim")),
])
def test_info_lists_only_the_hparams_the_architecture_uses(monkeypatch, capsys, name, absent, present):
    """info listed every HParams field for every model (ssm keys for a pure-attention model,
    MoE keys without experts); now those of the model's layer and FFN kinds, plus any field
    whose value is not the default."""
    path = pathlib.Path(__file__).parents[1] / "fixtures" / "llamacpp" / f"{name}.f32.gguf"
    rc, out, err = cli(monkeypatch, capsys, "info", str(path), "--json")
    assert rc == 0, err
    hp = json.loads(out)["hparams"]
    assert not [k for k in absent if k in hp], sorted(hp)
    assert all(k in hp for k in present), sorted(hp)
    rc, out, err = cli(monkeypatch, capsys, "info", str(path), "--no-tensors")
    table = out.split("hparams", 1)[1].split("layers", 1)[0]
    assert not [k for k in absent if f" {k} " in table], table


USAGE = {"run": "[PROMPT]", "chat": "[PROMPT]", "info": "FILE.gguf", "quantize": "IN.gguf [OUT.gguf] TYPE [NTHREADS]",
         "convert": "HF_DIR [OUT.gguf]", "perplexity": "[FILE]"}


@pytest.mark.parametrize("cmd", ["run", "chat", "serve", "info", "quantize", "convert", "perplexity", "bench"])
def test_help_at_80_columns_is_readable(monkeypatch, capsys, cmd):
    """At 80 columns typer's six-column options table cut long flags (`--system-prom…`) and
    squeezed the help into a narrow strip; the usage line wrote arguments as `[prompt]`,
    `{model}`, `[[OUT.gguf]]`.  Now: every spelling of every option is printed whole, no line is
    wider than 80, nothing is elided, and arguments read as the README writes them."""
    import typer.main
    from toolkit.cli.app import app
    monkeypatch.setenv("COLUMNS", "80")
    rc, out, err = cli(monkeypatch, capsys, cmd, "-h")
    assert rc == 0, err
    assert "…" not in out and max(len(ln) for ln in out.splitlines()) <= 80, out
    usage = next(ln for ln in out.splitlines() if "Usage:" in ln)
    assert "{" not in usage and "[[" not in usage, usage
    if cmd in USAGE:
        assert usage.split("[OPTIONS]")[1].strip() == USAGE[cmd], usage
    command = typer.main.get_command(app).commands[cmd]
    words = set(" ".join(out.split()).replace(",", " ").split())
    for p in command.params:
        if getattr(p, "param_type_name", "") == "option":
            for o in (*p.opts, *p.secondary_opts):
                assert o in words, (o, out)


def test_command_list_is_reflowed(monkeypatch, capsys):
    """`toolkit -h` kept the docstrings' own line breaks, so descriptions ran in ragged,
    half-empty lines ('resident at a time: Mamba,'); now each fills the column."""
    monkeypatch.setenv("COLUMNS", "80")
    rc, out, err = cli(monkeypatch, capsys, "-h")
    assert rc == 0, err
    panel = out.split("Commands", 1)[1].splitlines()[1:]
    entries: list[list[str]] = []
    for ln in panel:
        if not ln.startswith("│"):
            break
        body = ln.strip("│").rstrip()
        if body[1:2].strip():          # a new command name
            entries.append([body])
        else:
            entries[-1].append(body)
    assert len(entries) >= 8
    for e in entries:
        assert all(len(ln) >= 60 for ln in e[:-1]), "\n".join(e)


@pytest.mark.parametrize("cmd", ["run", "chat", "serve", "bench", "perplexity"])
def test_repack_help_names_every_type_and_the_default(monkeypatch, capsys, cmd):
    """`--repack/--no-repack` in every command that loads a model, its help naming every type a
    level re-lays (the library's list, tk_repack_fast: `run -h` left BF16 out) and the default."""
    from toolkit.binding import lib
    from toolkit.runtime.memory import repack_types
    rc, out, err = cli(monkeypatch, capsys, cmd, "-h")
    assert rc == 0
    text = _flat(out)
    assert "--repack" in text and "--no-repack" in text, text
    i = text.index("--no-repack")
    helptext = text[i:i + 700]
    for lv in (lib.TK_CPU_AVX2, lib.TK_CPU_AVX512):
        for t in repack_types(lv, "all"):
            assert t in helptext, (cmd, t, helptext)
    assert "TOOLKIT_REPACK" in helptext and "Default" in helptext, helptext
