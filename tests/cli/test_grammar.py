"""--grammar (GBNF) and --json-schema through llguidance (toolkit/runtime/grammar.py) on the demo
model: the output matches the grammar for every seed, and a bad grammar is one line, exit 2."""
from __future__ import annotations

import json
import pathlib

import pytest

from cli_runner import cli

pytest.importorskip("llguidance")
pytestmark = pytest.mark.native

DEMO = pathlib.Path(__file__).resolve().parents[2] / "toolkit" / "data" / "default.gguf"
SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 16},
                         "age": {"type": "integer", "minimum": 0, "maximum": 150},
                         "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
                         "ok": {"type": "boolean"}},
          "required": ["name", "age", "ok"], "additionalProperties": False}


def valid(d) -> bool:
    """SCHEMA's rules, written out (no jsonschema dependency)."""
    return (isinstance(d, dict) and set(d) <= set(SCHEMA["properties"]) and {"name", "age", "ok"} <= set(d)
            and isinstance(d["name"], str) and len(d["name"]) <= 16
            and type(d["age"]) is int and 0 <= d["age"] <= 150 and isinstance(d["ok"], bool)
            and ("tags" not in d or (isinstance(d["tags"], list) and len(d["tags"]) <= 3
                                     and all(t in ("a", "b", "c") for t in d["tags"]))))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20))
def test_json_schema_output_parses_and_validates(monkeypatch, capsys, seed):
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(DEMO), "-p", "Person record:", "--json", "-n", "400",
                       "--seed", str(seed), "-t", "2", "--json-schema", json.dumps(SCHEMA))
    assert rc == 0, err
    d = json.loads(out)
    assert d["stop_reason"] in ("grammar", "eog"), d["stop_reason"]
    assert valid(json.loads(d["text"])), d["text"]


def test_without_grammar_the_model_writes_no_json(monkeypatch, capsys):
    # the check above can fail: the demo model left alone does not write this object
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(DEMO), "-p", "Person record:", "--json", "-n", "60",
                       "--seed", "0", "-t", "2")
    text = json.loads(out)["text"]
    with pytest.raises(ValueError):
        assert valid(json.loads(text))


def test_gbnf_and_files(monkeypatch, capsys, tmp_path):
    g = tmp_path / "yn.gbnf"
    g.write_text('root ::= answer "."\nanswer ::= "yes" | "no"\n')
    for seed in range(3):
        rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(DEMO), "-p", "Q:", "--json", "--seed", str(seed),
                           "--grammar-file", str(g))
        assert rc == 0, err
        d = json.loads(out)
        assert d["text"] in ("yes.", "no.") and d["stop_reason"] == "grammar"
    s = tmp_path / "s.json"
    s.write_text(json.dumps({"type": "boolean"}))
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(DEMO), "-p", "Q:", "--json", "--json-schema-file", str(s))
    assert rc == 0 and json.loads(out)["text"] in ("true", "false"), err


@pytest.mark.parametrize("args,msg", [
    (["--grammar", "root ::= ("], "--grammar:"),
    (["--json-schema", '{"type":'], "--json-schema: not JSON"),
    (["--json-schema", '{"type": "frob"}'], "--json-schema:"),
    (["--grammar", 'root ::= "a"', "-j", "{}"], "give one of --grammar"),
    (["--grammar-file", "/nonexistent.gbnf"], "--grammar-file /nonexistent.gbnf"),
])
def test_bad_grammar_one_line(monkeypatch, capsys, args, msg):
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(DEMO), "-p", "Q:", *args)
    assert rc == 2 and msg in err and out == "" and "Traceback" not in err, err


def test_grammar_in_chat_each_answer(monkeypatch, capsys, tmp_path):
    from toolkit.runtime.chat import CHATML
    t = tmp_path / "chatml.jinja"
    t.write_text(CHATML)
    rc, out, err = cli(monkeypatch, capsys, "chat", "-m", str(DEMO), "--chat-template", str(t), "--json", "-t", "2",
                       "--seed", "3", "--json-schema", json.dumps(SCHEMA), stdin="Hello\nAnother one\n")
    assert rc == 0, err
    answers = [json.loads(x) for x in out.splitlines()]
    assert len(answers) == 2 and all(valid(json.loads(a["text"])) for a in answers)
