"""toolkit run / chat / info with --mtp (toolkit/runtime/mtp.py): greedy tokens identical to plain
decoding at -b 1 and -b 512, with a session (saved, then reused) and with a context shift; info
says whether a file has an MTP head and --memory counts its tensors only with --mtp; --mtp on a
file without a head is one line, exit 2."""
from __future__ import annotations

import json

import pytest

from cli_runner import cli
from mtp_util import MTP_FIXTURES

pytestmark = pytest.mark.native

FIXTURES = MTP_FIXTURES   # every fixture with a NextN head
PROMPT = "def read_lines(path):\\n    with open(path) as f:"


def _run(monkeypatch, capsys, model, *extra):
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", model, "-p", PROMPT, "--temp", "0", "--json",
                       "--ignore-eos", *extra)
    assert rc == 0, err
    return json.loads(out)


@pytest.mark.parametrize("name", FIXTURES)
def test_greedy_mtp_equals_plain(monkeypatch, capsys, hf_f32, name):
    model = str(hf_f32(name))
    for b in ("1", "512"):
        ref = _run(monkeypatch, capsys, model, "-n", "40", "-b", b)
        for extra in (("--mtp",), ("--mtp", "--draft-max", "1"), ("--mtp", "--draft-max", "5", "--draft-min", "2")):
            got = _run(monkeypatch, capsys, model, "-n", "40", "-b", b, *extra)
            assert got["tokens"] == ref["tokens"] and got["text"] == ref["text"], (b, extra)
            assert got["speculative"]["n_drafted"] > 0


def test_the_table_has_every_family_with_a_head():
    assert {"qwen35-mtp-tiny", "qwen3next-mtp-tiny", "qwen35moe-vl-tiny", "glm5next-mtp-tiny",
            "bailinghybrid-mtp-tiny"} <= set(FIXTURES)


@pytest.mark.parametrize("b", ["1", "512"])
@pytest.mark.parametrize("name", FIXTURES)
def test_session_with_mtp(monkeypatch, capsys, hf_f32, tmp_path, name, b):
    """A session saved by an --mtp run is reused by the next one (the block starts where the
    restored prefix ends), and both give plain decoding's tokens."""
    model = str(hf_f32(name))
    ref = _run(monkeypatch, capsys, model, "-n", "24", "-b", b)
    s = str(tmp_path / "s.session")
    first = _run(monkeypatch, capsys, model, "-n", "24", "-b", b, "--mtp", "--session", s)
    again = _run(monkeypatch, capsys, model, "-n", "24", "-b", b, "--mtp", "--session", s)
    assert first["tokens"] == ref["tokens"] == again["tokens"]
    assert again["n_reused"] > 0


@pytest.mark.parametrize("b", ["1", "512"])
@pytest.mark.parametrize("name", FIXTURES)
def test_context_shift_with_mtp(monkeypatch, capsys, hf_f32, name, b):
    model = str(hf_f32(name))
    args = ("-n", "70", "-c", "40", "--context-shift", "--keep", "4", "-b", b)
    ref = _run(monkeypatch, capsys, model, *args)
    for extra in (("--mtp",), ("--mtp", "--draft-max", "6"), ("--lookup",)):
        got = _run(monkeypatch, capsys, model, *args, *extra)
        assert got["tokens"] == ref["tokens"], extra
        assert len(got["tokens"]) == 70


def test_info_says_whether_there_is_an_mtp_head(monkeypatch, capsys, hf_f32):
    rc, out, err = cli(monkeypatch, capsys, "info", str(hf_f32("qwen35-mtp-tiny")), "--json", "--no-tensors")
    assert rc == 0, err
    assert json.loads(out)["mtp"] == "1 NextN block at blk.4 (runs with --mtp)"
    rc, out, err = cli(monkeypatch, capsys, "info", str(hf_f32("glm5next-mtp-tiny")), "--json", "--no-tensors")
    assert rc == 0, err
    assert json.loads(out)["mtp"] == "1 NextN block at blk.5 (runs with --mtp)"
    rc, out, err = cli(monkeypatch, capsys, "info", str(hf_f32("bailinghybrid-mtp-tiny")), "--json", "--no-tensors")
    assert rc == 0, err
    assert json.loads(out)["mtp"] == "1 NextN block at blk.4 (runs with --mtp)"
    rc, out, err = cli(monkeypatch, capsys, "info", str(hf_f32("qwen35-tiny")), "--no-tensors")
    assert rc == 0 and "MTP head: none" in out
    rc, out, err = cli(monkeypatch, capsys, "info", str(hf_f32("glm5next-tiny")), "--no-tensors")
    assert rc == 0 and "MTP head: none" in out
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(hf_f32("qwen35-tiny")), "-p", "x", "--mtp")
    assert rc == 2 and "has no MTP / NextN head" in err and len(err.strip().splitlines()) == 1 and out == ""


def test_info_memory_counts_the_head_only_with_mtp(monkeypatch, capsys, hf_f32):
    """Without --mtp the weights are the tensors the model loads (the head's blk.4.* left out);
    with it, the head's weights and its KV cache are added, as toolkit run --mtp allocates."""
    from toolkit.gguf_io import GGUFFile
    path = str(hf_f32("qwen35-mtp-tiny"))
    f = GGUFFile(path)
    head = sum(t.nbytes for t in f if t.name.startswith("blk.4."))
    rc, out, err = cli(monkeypatch, capsys, "info", path, "--memory", "--json")
    assert rc == 0, err
    plain = json.loads(out)
    assert plain["memory"]["weights"] == sum(t.nbytes for t in f) - head
    rc, out, err = cli(monkeypatch, capsys, "info", path, "--memory", "--json", "--mtp")
    assert rc == 0, err
    d = json.loads(out)
    assert d["mtp"]["weights"] == head and d["mtp"]["kv"] > 0
    from toolkit.runtime import Context, Model
    from toolkit.runtime.mtp import open_mtp_draft
    with Model(path) as m, Context(m, n_ctx=4096) as ctx:
        dr = open_mtp_draft(m, ctx, n_ctx=4096)
        got = dr.ctx.memory_report()
        assert {k: v for k, v in got.items() if k != "weights"} == {k: v for k, v in d["mtp"].items() if k != "weights"}
        dr.close()


@pytest.mark.parametrize("shift", [(), ("-c", "128", "--context-shift")])
def test_chat_with_mtp_answers_as_without(monkeypatch, capsys, hf_f32, shift):
    """toolkit chat --mtp: the same answers, /regen and /undo included (the block's cache follows
    the conversation back and forth), and with context shifts (no /regen there: refused)."""
    model = str(hf_f32("qwen35-mtp-tiny"))
    script = ("Write a loop\nWhat is a list?\nWhat is a dict?\nAnd a set?\n" if shift else
              "Write a loop\nWhat is a list?\n/regen\n/undo\nWhat is a dict?\n")

    def answers(*extra):
        rc, out, err = cli(monkeypatch, capsys, "chat", "-m", model, "--chat-template", "chatml", "-n", "24",
                           "--temp", "0", "--ignore-eos", "--json", *shift, *extra, stdin=script)
        assert rc == 0, err
        return [json.loads(line)["tokens"] for line in out.splitlines() if line.startswith("{")]
    ref = answers()
    assert len(ref) == 4
    assert answers("--mtp") == ref
    assert answers("--mtp", "--draft-max", "1") == ref


def test_serve_mtp_without_a_head_exit_2(monkeypatch, capsys, hf_f32):
    rc, out, err = cli(monkeypatch, capsys, "serve", "-m", str(hf_f32("qwen35-tiny")), "--port", "0", "--mtp")
    assert rc == 2 and "has no MTP / NextN head" in err.strip().splitlines()[-1], err


def test_run_v_reports_the_mtp_head_as_info_does(monkeypatch, capsys, hf_f32):
    # run -v --mtp: the MTP head's memory in info --memory --mtp's words (K/V types included)
    model = str(hf_f32("qwen35-mtp-tiny"))
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", model, "-p", "hi", "-n", "2", "-v", "--mtp", "-c", "256")
    assert rc == 0, err
    rc, iout, ierr = cli(monkeypatch, capsys, "info", model, "--memory", "--mtp", "-c", "256")
    assert rc == 0, ierr
    head = iout[iout.index("with --mtp, besides the total"):]
    assert head.strip() in err, (head, err)
