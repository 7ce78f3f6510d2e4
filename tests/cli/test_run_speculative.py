"""toolkit run --lookup / --draft-model: same text as without them (greedy), --json's
"speculative" object, -v's draft memory line, and the flags' errors (one line, exit 2)."""
from __future__ import annotations

import json

import pytest

from cli_runner import cli

pytestmark = pytest.mark.native

DEMO = "toolkit/data/default.gguf"
PROMPT = "def add(a, b):\\n    return a + b\\n\\ndef add(a, b):"


def _run(monkeypatch, capsys, *extra):
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", DEMO, "-p", PROMPT, "-n", "48", "--temp", "0", "--json",
                       "--ignore-eos", *extra)
    assert rc == 0, err
    return json.loads(out)


def test_lookup_and_draft_model_give_the_plain_text(monkeypatch, capsys):
    ref = _run(monkeypatch, capsys)
    assert "speculative" not in ref
    for extra in (("--lookup",), ("--draft-ngram", "2", "--draft-max", "4"), ("-md", DEMO, "--draft-max", "8"),
                  ("--lookup", "--draft-min", "3")):
        got = _run(monkeypatch, capsys, *extra)
        assert got["tokens"] == ref["tokens"] and got["text"] == ref["text"], extra
        s = got["speculative"]
        assert s["n_accepted"] <= s["n_drafted"] and s["n_verify"] >= 1
    assert _run(monkeypatch, capsys, "-md", DEMO)["speculative"]["acceptance"] == 1.0


def test_verbose_reports_the_draft_memory(monkeypatch, capsys):
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", DEMO, "-p", "x", "-n", "4", "--temp", "0", "--lookup",
                       "--draft-max", "4", "-v")
    assert rc == 0, err
    assert "speculative window: 4 tokens" in err and ("speculative: accepted" in err or "no draft was found" in err)
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", DEMO, "-p", "x", "-n", "1", "--temp", "0", "--lookup")
    assert rc == 0 and "speculative: no draft was found\n" in err, err
    rc, out, err = cli(monkeypatch, capsys, "info", DEMO, "--memory", "--draft-max", "4", "--json")
    assert rc == 0
    mem = json.loads(out)["memory"]
    assert mem["draft"] == 4 * mem["recurrent"]        # the target keeps no state after a call's last token


@pytest.mark.parametrize("args, msg", [
    (("--draft-max", "0", "--lookup"), "--draft-max 0: must be in [1, 256]"),
    (("--draft-min", "-1", "--lookup"), "--draft-min must be >= 0"),
    (("--draft-ngram", "0"), "--draft-ngram must be >= 1"),
    (("-md", "/nonexistent.gguf"), "--draft-model /nonexistent.gguf: no such file"),
    (("-md", DEMO, "--lookup"), "choose one draft source"),
    (("--mtp",), "has no MTP / NextN head"),
    (("--mtp", "--lookup"), "choose one draft source"),
    (("--draft-max", "4"), "--draft-max needs a draft source"),
    (("--draft-min", "2"), "--draft-min needs a draft source"),
    (("--lookup", "--draft-min", "17"), "--draft-min 17 > --draft-max 16"),
    (("-md", "tests"), "--draft-model tests: is a directory"),
])
def test_bad_flags_exit_2(monkeypatch, capsys, args, msg):
    """One line, exit 2, and nothing on stdout: refused before the prompt is echoed."""
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", DEMO, "-p", "x", "-n", "2", *args)
    assert rc == 2 and msg in err and len(err.strip().splitlines()) == 1, err
    assert out == "", out


def test_draft_with_another_vocabulary_exit_2(monkeypatch, capsys, hf_f32):
    other = str(hf_f32("mamba-tiny"))
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", DEMO, "-p", "x", "-n", "2", "-md", other)
    assert rc == 2 and f"--draft-model {other}" in err and "vocabulary" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert out == "", out   # checked before the prompt is echoed


def test_chat_with_drafts_answers_as_without(monkeypatch, capsys):
    """toolkit chat with --lookup / --draft-model: the same answers, /regen and /undo included
    (the draft model's context follows the conversation back and forth)."""
    script = "Write a loop\nWhat is a list?\n/regen\n/undo\nWhat is a dict?\n"

    def answers(*extra):
        rc, out, err = cli(monkeypatch, capsys, "chat", "--chat-template", "chatml", "-n", "24", "--temp", "0",
                           "--json", *extra, stdin=script)
        assert rc == 0, err
        return [json.loads(line)["tokens"] for line in out.splitlines() if line.startswith("{")]
    ref = answers()
    assert len(ref) == 4
    assert answers("--lookup", "--draft-max", "4") == ref
    assert answers("-md", DEMO, "--draft-max", "4") == ref


def test_session_with_lookup_is_reused(monkeypatch, capsys, tmp_path):
    """A session saved by a speculative run restores as a plain one does (its checkpoints are
    there even though the prompt is shorter than the draft window)."""
    sess = str(tmp_path / "s.session")
    runs = []
    for extra in (("--lookup",), ("--lookup",), ()):
        rc, out, err = cli(monkeypatch, capsys, "run", "-m", DEMO, "def add(a, b):", "-n", "20", "--temp", "0",
                           "--session", sess, "--json", *extra)
        assert rc == 0, err
        runs.append(json.loads(out))
    assert runs[0]["n_reused"] == 0 and runs[1]["n_reused"] == runs[2]["n_reused"] == len(runs[0]["prompt_tokens"]) - 1
    assert runs[0]["tokens"] == runs[1]["tokens"] == runs[2]["tokens"]


def test_help_shows_the_draft_defaults(monkeypatch, capsys):
    """rich markup ate a literal '[default: 16]' (the default hidden, ' .' left behind)."""
    monkeypatch.setenv("COLUMNS", "300")
    rc, out, err = cli(monkeypatch, capsys, "run", "--help")
    assert rc == 0 and "[default: 16]" in out and ") ." not in out, out
    rc, out, err = cli(monkeypatch, capsys, "info", "--help")
    assert rc == 0 and "[default: 4096]" in out and "[default: 0, none]" in out, out


GRAMMAR = 'root ::= ("yes" | "no") "." ("yes" | "no")*'


@pytest.mark.parametrize("sampling", [("--temp", "0"), ("--temp", "0.8", "--seed", "3")])
def test_draft_model_follows_the_grammar(monkeypatch, capsys, sampling):
    """The draft model drafted without the grammar: with the model itself as the draft, 0 of
    168 drafted tokens were accepted (every draft left the grammar), so --grammar made
    speculative decoding all cost.  It now drafts under a copy of the grammar's matcher; the
    text stays the plain one (greedy) and a draft that equals the model is always accepted."""
    base = ("run", "-m", DEMO, "-p", "Is the sky blue? Answer:", "-n", "20", "--json", "--grammar", GRAMMAR,
            *sampling)
    rc, out, err = cli(monkeypatch, capsys, *base)
    assert rc == 0, err
    ref = json.loads(out)
    rc, out, err = cli(monkeypatch, capsys, *base, "-md", DEMO, "--draft-max", "8")
    assert rc == 0, err
    got = json.loads(out)
    s = got["speculative"]
    assert s["n_drafted"] > 0 and s["n_drafted"] <= len(got["tokens"]), s
    if sampling[1] == "0":
        assert got["tokens"] == ref["tokens"]
        assert s["acceptance"] == 1.0, s


def test_lookup_drafts_stop_where_the_grammar_refuses(monkeypatch, capsys):
    """A lookup draft is cut at its first token the grammar refuses (no verify position is
    spent on a token the target can never take)."""
    # the prompt is "no.no.no." with the token the output's "no" takes (698): the lookup drafts
    # "." after each "no", which the grammar never allows (was: 8 drafted, 6 accepted)
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", DEMO, "--tokens", "698,15,698,15,698,15", "-n", "12",
                       "--temp", "0", "--json", "--grammar", 'root ::= "no" (" no")*', "--lookup")
    assert rc == 0, err
    got = json.loads(out)
    assert got["text"] == "no " * 6
    s = got["speculative"]
    assert s["n_drafted"] > 0 and s["n_accepted"] == s["n_drafted"], s
