"""`toolkit run -cnv` / `toolkit chat`: a scripted conversation through stdin on the demo model
(a hybrid: attention + Mamba-2 layers), with a chat template from a file (the packaged model
and the fixtures carry none).

The third turn decodes only its new tokens (n_reused = what the memory held), /regen re-feeds
one token, /undo rolls the recurrent state back to a checkpoint, and the answers' probabilities
(--n-probs, computed from the logits) equal those of a from-scratch run of the same rendered
text, to the bit (ubatches below the SSD threshold: see ARGS).
"""
from __future__ import annotations

import json
import pathlib

import pytest

from cli_runner import cli
from toolkit.gguf_io import GGUFFile
from toolkit.runtime.chat import CHATML, ChatTemplate
from toolkit.runtime.tokenizer import Tokenizer

pytestmark = pytest.mark.native

DEMO = pathlib.Path(__file__).resolve().parents[2] / "toolkit" / "data" / "default.gguf"
# ubatches of 16 tokens: below the Mamba-2 SSD threshold, so every decode takes the recurrence
# and the logits do not depend on where the history was cut (the chunked SSD rounds otherwise:
# up to ~3e-2 in these logits, whichever way the tokens are split)
ARGS = ["-m", str(DEMO), "--temp", "0", "-n", "8", "--json", "--n-probs", "4", "-t", "2", "-ub", "16"]


@pytest.fixture()
def template_file(tmp_path) -> str:
    p = tmp_path / "chatml.jinja"
    p.write_text(CHATML)
    return str(p)


def turns(out: str) -> list[dict]:
    return [json.loads(x) for x in out.splitlines() if x.strip()]


def test_three_turns_regen_undo_reuse_and_logits(monkeypatch, capsys, template_file):
    script = "Hello there\nWhat is a cat?\n/regen\n/undo\nTell me a story\n"
    rc, out, err = cli(monkeypatch, capsys, "chat", "--chat-template", template_file, *ARGS, stdin=script)
    assert rc == 0, err
    t1, t2, regen, t3 = turns(out)
    assert t1["n_reused"] == 0 and t1["n_decoded"] == t1["n_prompt"]
    held1 = t1["n_prompt"] + len(t1["tokens"]) - (t1["stop_reason"] == "n_predict")
    # turn 2 reuses all that turn 1 left in the memory, and decodes only the rest
    assert t2["n_reused"] == held1 and t2["n_decoded"] == t2["n_prompt"] - held1
    # /regen: same conversation, one token re-fed (from the checkpoint before the prompt's last)
    assert regen["n_prompt"] == t2["n_prompt"] and regen["n_decoded"] == 1
    assert regen["tokens"] == t2["tokens"] and regen["probs"] == t2["probs"]
    # /undo then a new message: back to the end of turn 1's answer, only the new turn decoded
    assert t3["n_reused"] == held1 and t3["n_decoded"] == t3["n_prompt"] - held1

    # from scratch: the same rendered conversation as token ids, in a fresh process state
    tok = Tokenizer.from_gguf(GGUFFile(DEMO))
    tpl = ChatTemplate(CHATML, "chatml")
    msgs = [{"role": "user", "content": "Hello there"}, {"role": "assistant", "content": t1["text"]},
            {"role": "user", "content": "Tell me a story"}]
    ids = tpl.encode(tok, msgs)
    assert len(ids) == t3["n_prompt"]
    rc, out, err = cli(monkeypatch, capsys, "run", "--tokens", ",".join(map(str, ids)), *ARGS)
    assert rc == 0, err
    scratch = json.loads(out)
    assert scratch["tokens"] == t3["tokens"]
    assert scratch["probs"] == t3["probs"]          # bit-identical logits -> identical probabilities


def test_no_template_gets_a_note(monkeypatch, capsys):
    rc, out, err = cli(monkeypatch, capsys, "run", "-cnv", *ARGS, stdin="Once upon a time\n")
    assert rc == 0 and "no chat template" in err, err
    assert len(turns(out)) == 1


def test_bad_commands_and_templates(monkeypatch, capsys, tmp_path, template_file):
    rc, out, err = cli(monkeypatch, capsys, "chat", "--chat-template", template_file, *ARGS,
                       stdin="/undo\n/regen\n/frob\n/load nowhere.json\n/save\n")
    assert rc == 2 and out == ""        # piped input: the chat went on past each error, then exit 2
    for what in ("/undo: nothing to undo", "/regen: no answer", "unknown command /frob", "/load nowhere.json",
                 "/save needs a FILE"):
        assert what in err, (what, err)
    rc, _, err = cli(monkeypatch, capsys, "chat", "--chat-template", "nosuch", *ARGS, stdin="hi\n")
    assert rc == 2 and "--chat-template nosuch" in err
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for %}")
    rc, _, err = cli(monkeypatch, capsys, "chat", "--chat-template", str(bad), *ARGS, stdin="hi\n")
    assert rc == 2 and "chat template" in err and "Traceback" not in err


@pytest.mark.parametrize("flag, value", [("--session", "s.session"), ("--logits-out", "l.npy"), ("--tokens", "1,2")])
def test_run_only_flags_refused_in_chat(monkeypatch, capsys, tmp_path, template_file, flag, value):
    """These were accepted and silently unused by the chat loop (exit 0, no file)."""
    arg = value if flag == "--tokens" else str(tmp_path / value)
    rc, out, err = cli(monkeypatch, capsys, "chat", "--chat-template", template_file, *ARGS, flag, arg, stdin="hi\n")
    assert rc == 2 and out == "" and f"{flag}: not supported in a conversation" in err, err
    assert len([x for x in err.splitlines() if x.strip()]) == 1 and not list(tmp_path.glob("*.session"))


def test_save_load_round_trip(monkeypatch, capsys, tmp_path, template_file):
    f = tmp_path / "c.json"
    rc, out, err = cli(monkeypatch, capsys, "chat", "--chat-template", template_file, *ARGS,
                       stdin=f"Hello there\n/save {f}\n")
    assert rc == 0, err
    saved = json.loads(f.read_text())["messages"]
    assert [m["role"] for m in saved] == ["user", "assistant"]
    rc, out, err = cli(monkeypatch, capsys, "chat", "--chat-template", template_file, *ARGS,
                       stdin=f"/load {f}\nTell me a story\n")
    assert rc == 0, err
    (t,) = turns(out)
    msgs = saved + [{"role": "user", "content": "Tell me a story"}]
    tok = Tokenizer.from_gguf(GGUFFile(DEMO))
    assert t["n_prompt"] == len(ChatTemplate(CHATML, "chatml").encode(tok, msgs))


def test_system_prompt_single_turn(monkeypatch, capsys, template_file):
    rc, out, err = cli(monkeypatch, capsys, "run", "-sys", "You are terse.", "-p", "Hi", "--chat-template",
                       template_file, *ARGS)
    assert rc == 0, err
    tok = Tokenizer.from_gguf(GGUFFile(DEMO))
    ids = ChatTemplate(CHATML, "chatml").encode(tok, [{"role": "system", "content": "You are terse."},
                                                      {"role": "user", "content": "Hi"}])
    assert json.loads(out)["prompt_tokens"] == ids
    rc, _, err = cli(monkeypatch, capsys, "run", "-sys", "x", "-p", "Hi", *ARGS)
    assert rc == 2 and "needs a chat template" in err


def test_template_from_gguf_key():
    class G(dict):
        pass
    g = G({"tokenizer.chat_template": CHATML, "tokenizer.chat_template.tool_use": "{{ 'T' }}"})
    assert ChatTemplate.from_gguf(g).render([{"role": "user", "content": "x"}]) == \
        "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"
    assert ChatTemplate.from_gguf(g, "tool_use").render([]) == "T"
    assert ChatTemplate.from_gguf(G()) is None


@pytest.mark.parametrize("content, needle", [
    (b'{"bad": 1}', 'expected {"messages": [{"role": ..., "content": ...}, ...]}'),
    (b'[{"role": "user", "content": "x"}]', 'expected {"messages": [{"role": ..., "content": ...}, ...]}'),
    (b'{"messages": [{"role": "user", "content": 5}]}', "message 0: needs a role and a content string"),
    (b'{"messages": [{"role": "alien", "content": "x"}]}', "message 0: role 'alien'"),
    (b'{"messages": "x"}', 'expected {"messages": [{"role": ..., "content": ...}, ...]}'),
    (b"\xff\xfe", "not UTF-8"),
    (b"{not json", "not JSON"),
    (None, "no such file"),
])
def test_load_of_a_malformed_file_says_what_is_wrong(monkeypatch, capsys, tmp_path, template_file, content, needle):
    """/load printed Python's exception text ("'messages'", "list indices must be integers or
    slices, not str", "[Errno 2] ..."); now a line that says what the file should hold."""
    f = tmp_path / "c.json"
    if content is not None:
        f.write_bytes(content)
    rc, out, err = cli(monkeypatch, capsys, "chat", "--chat-template", template_file, *ARGS, stdin=f"/load {f}\nHi\n")
    assert rc == 2
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith(f"error: /load {f}: ") and needle in lines[0], err
    assert len(turns(out)) == 1          # the chat goes on


def test_save_never_overwrites_an_input(monkeypatch, capsys, tmp_path, template_file):
    """`/save MODEL.gguf` replaced the model the chat was running with the conversation's JSON
    (exit 0), and `/save` of the -f file replaced the prompt; an output path is never an input
    (README, exit codes): the model, the draft model, the template, -f and grammar files are
    refused, the chat goes on, the files are unchanged."""
    model = tmp_path / "m.gguf"
    model.write_bytes(DEMO.read_bytes())
    tpl = pathlib.Path(template_file)
    prompt = tmp_path / "first.txt"          # -f: the first user turn (was overwritten too)
    prompt.write_text("Hi")
    gram = tmp_path / "g.gbnf"
    gram.write_text('root ::= [a-z ]+')
    files = (model, tpl, prompt, gram)
    before = [p.read_bytes() for p in files]
    args = [a if a != str(DEMO) else str(model) for a in ARGS]
    for target in files:
        rc, out, err = cli(monkeypatch, capsys, "chat", "--chat-template", template_file, *args, "-md", str(model),
                           "-f", str(prompt), "--grammar-file", str(gram),
                           stdin=f"/save {target}\n/save {tmp_path / 'ok.json'}\n")
        assert rc == 2, err
        assert f"error: {target}: output would overwrite the input" in " ".join(err.split()), err
        assert [p.read_bytes() for p in files] == before
        assert json.loads((tmp_path / "ok.json").read_text())["messages"][0]["content"] == "Hi"


def test_verbose_prints_the_memory_report(monkeypatch, capsys, template_file):
    """chat -v prints the memory report chat -h promises (issue 44 §2 item 4): the figures of
    the context the chat made, before the first answer, and run -v's lines for the same flags."""
    args = ["--chat-template", template_file, "-m", str(DEMO), "--temp", "0", "-n", "2", "-c", "256", "-t", "1"]
    rc, out, err = cli(monkeypatch, capsys, "chat", *args, "-v", stdin="Hello\n")
    assert rc == 0, err
    lines = err.splitlines()
    assert lines[0] == "memory (n_ctx = 256, n_seq_max = 1):", err
    kinds = [ln.split()[0] for ln in lines[1:] if ln.startswith("  ")]
    assert {"weights", "kv", "recurrent", "checkpoints", "compute", "total"} <= set(kinds), err
    rc, _, quiet = cli(monkeypatch, capsys, "chat", *args, stdin="Hello\n")
    assert rc == 0 and "memory" not in quiet, quiet


@pytest.mark.parametrize("n", ["0", "2"])
def test_checkpoints_are_what_the_flag_says(monkeypatch, capsys, template_file, n):
    """chat keeps --checkpoints N (chat -h: 0 none), the figure info --memory gives for the same
    flags (before: chat kept max(N, 8) whatever the flag said)."""
    args = ["-m", str(DEMO), "-c", "256", "-t", "1", "--checkpoints", n]
    rc, out, err = cli(monkeypatch, capsys, "chat", "--chat-template", template_file, "--temp", "0", "-n", "2",
                       *args, "-v", stdin="Hello\n")
    assert rc == 0, err
    chat_line = next(ln for ln in err.splitlines() if ln.split()[:1] == ["checkpoints"])
    rc, info, _ = cli(monkeypatch, capsys, "info", str(DEMO), "--memory", "-c", "256", "--checkpoints", n)
    assert rc == 0
    info_line = next(ln for ln in info.splitlines() if ln.split()[:1] == ["checkpoints"])
    assert chat_line.split() == info_line.split(), (chat_line, info_line)
