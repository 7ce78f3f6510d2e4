"""``toolkit run -cnv`` / ``toolkit chat``: the interactive loop over toolkit.runtime.chat.Chat.

User turns are lines of stdin (a terminal or a pipe); answers stream to stdout.  Commands:

    /regen        answer the last message again
    /undo         drop the last message and its answer
    /save FILE    write the conversation (JSON messages)
    /load FILE    continue a saved conversation
    /reset        start over (the system message stays)
    /exit         leave (end of input does too)

On a terminal the prompt has line editing and history (Python's readline).  Ctrl-C during an
answer ends that answer; at the prompt it leaves (exit 130), as Ctrl-D does (exit 0).  The
commands say what they did on stderr; piped, the answers are separated by a blank line.  With -v the
memory report goes to stderr before the first turn (as ``run -v`` prints it), and the
prompt-cache figures after each answer ("reused N of M prompt tokens"); with
--json each answer is one JSON line on stdout: turn, text, tokens, stop_reason, n_prompt,
n_reused, n_decoded, timings (and probs with --n-probs).
"""
from __future__ import annotations

import json
import os
import sys

from toolkit.cli.app import err_console, print_error
from toolkit.errors import InputError

HELP = "commands: /regen /undo /save FILE /load FILE /reset /exit"


_readline_ready = False


def _use_readline() -> bool:
    """Python's readline for the prompt: line editing (arrows, Home/End, Ctrl-A/E...) and
    history (Up/Down) within the chat.  Only when stdin and stdout are both terminals (input()
    uses readline only then); False when the module is missing (some builds)."""
    global _readline_ready
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return False
    if not _readline_ready:
        try:
            import readline  # noqa: F401  (importing it is what turns line editing on for input())
        except ImportError:
            return False
        _readline_ready = True
    return True


def _read_line(tty: bool):
    """The next input line without its newline, or None at the end of input.  On a terminal
    the prompt is ``> `` with line editing and history; Ctrl-D and Ctrl-C there end the line
    the cursor is on before the chat leaves (Ctrl-C: KeyboardInterrupt, exit 130)."""
    from toolkit.runtime import interrupt
    with interrupt.raising():      # a blocking read: Ctrl-C here leaves the chat
        if not tty:
            line = sys.stdin.readline()
            return None if line == "" else line.rstrip("\n")
        try:
            if _use_readline():
                return input("> ")
            err_console.print("> ", end="", highlight=False)
            line = sys.stdin.readline()
            if line == "":
                raise EOFError
            return line.rstrip("\n")
        except EOFError:           # Ctrl-D
            sys.stderr.write("\n")
            return None
        except KeyboardInterrupt:  # Ctrl-C at the prompt: leave on a fresh line
            sys.stderr.write("\n")
            raise


def _note(msg: str) -> None:
    err_console.print(msg, highlight=False, soft_wrap=True)


def chat_loop(opts, as_json: bool = False, verbose: bool = False, inputs: tuple[str, ...] = (),
              single_turn: bool = False) -> int:
    """Run the chat for ``opts`` (toolkit.runtime.run.RunOptions; prompt, if any, is the first
    user turn); returns the exit status.  ``inputs``: other files the command read (-f, a
    grammar or schema file), which /save refuses as the model's file."""
    from toolkit.runtime import interrupt
    from toolkit.runtime.chat import Chat, chat_template_for
    from toolkit.runtime.context import Context
    from toolkit.runtime.model import Model
    from toolkit.runtime.run import context_size
    from toolkit.runtime.sampling import Sampler
    from toolkit.runtime.tokenizer import Tokenizer

    with interrupt.deferred():
        m = Model(opts.model, n_threads=opts.threads, mmap=opts.mmap, options=opts.options)
        try:
            tok = Tokenizer.from_gguf(m.gguf)
            tpl, note = chat_template_for(m.gguf, opts.chat_template)
            if note:
                _note(note)
            ctx = Context(m, n_ctx=context_size(opts.ctx_size, m), n_seq_max=1, n_ubatch=opts.ubatch,
                          n_threads=opts.threads, n_checkpoints=opts.checkpoints,
                          checkpoint_every=opts.checkpoint_every)
            chat = Chat(ctx, tok, tpl, Sampler(opts.sampling), system=opts.system)
            chat.inputs = tuple(str(p) for p in (opts.draft_model, opts.chat_template, *inputs)
                                if p is not None and os.path.isfile(p))
            drafter, dm = None, None
            try:
                from toolkit.runtime.run import make_drafter, speculative
                if speculative(opts):
                    drafter, dm = make_drafter(opts, tok, chat.sampler.seed, _note if verbose else None, model=m, ctx=ctx)
                    chat.set_speculative(drafter, opts.draft_max, opts.draft_min)
                if verbose:   # what this context allocated (its draft window included), as run -v prints
                    from toolkit.runtime.run import report_memory
                    report_memory(_note, m, ctx.memory_report(), ctx.n_ctx)
                return _loop(chat, opts, as_json, verbose, single_turn)
            finally:
                if drafter is not None:
                    drafter.close()
                if dm is not None:
                    dm.close()
        finally:
            m.close()


def _loop(chat, opts, as_json: bool, verbose: bool, single_turn: bool = False) -> int:
    """Read turns and commands until the end of input; returns the exit status: 0, or 2 when
    input came from a pipe or file and a turn or command failed (its one-line error was
    printed and the chat went on), so that a script sees it."""
    from toolkit.runtime import interrupt
    tty = sys.stdin.isatty()
    if tty:
        err_console.print(f"chat template: {chat.template.name}; {HELP}", highlight=False, soft_wrap=True)
    first, n_turn, failed = opts.prompt, 0, False
    while True:
        line = first if first is not None else _read_line(tty)
        first = None
        if line is None or line.strip() == "/exit":
            return 2 if failed and not tty else 0
        cmd, _, arg = line.strip().partition(" ")
        try:
            if cmd == "/undo":
                chat.undo()
                _note(f"undone: the last exchange was dropped ({_count(chat.messages)} left)")
                continue
            if cmd == "/reset":
                chat.reset()
                _note("reset: the conversation starts over" + (" (the system message stays)" if chat.messages else ""))
                continue
            if cmd in ("/save", "/load"):
                if not arg.strip():
                    raise InputError(f"{cmd} needs a FILE")
                if cmd == "/save":
                    chat.save(arg.strip())
                    _note(f"saved {_count(chat.messages)} to {arg.strip()}")
                else:
                    chat.load(arg.strip())
                    _note(f"loaded {_count(chat.messages)} from {arg.strip()}")
                continue
            if cmd.startswith("/") and cmd not in ("/regen",):
                raise InputError(f"unknown command {cmd}; {HELP}")
            n_turn += 1
            if n_turn > 1 and not tty and not as_json:
                sys.stdout.write("\n")    # piped: a blank line between answers
            turn = _answer(chat, opts, None if cmd == "/regen" else line, as_json)
        except InputError as e:
            print_error(str(e))
            failed = True
            continue
        if as_json:
            sys.stdout.write(json.dumps({"turn": n_turn, "text": turn.text, "tokens": turn.tokens,
                                         "stop_reason": turn.stop_reason, "n_prompt": turn.n_prompt,
                                         "n_reused": turn.n_reused, "n_decoded": turn.n_decoded,
                                         "timings": turn.timings, **({"probs": turn.probs} if turn.probs else {}),
                                         **({"n_shifts": turn.n_shifts} if opts.context_shift else {}),
                                         **({"speculative": turn.spec} if turn.spec else {})},
                                        ensure_ascii=False) + "\n")
            sys.stdout.flush()
        if verbose:
            err_console.print(f"reused {turn.n_reused} of {turn.n_prompt} prompt tokens, decoded {turn.n_decoded}"
                              + (f", context shifts: {turn.n_shifts}" if opts.context_shift else "")
                              + (f", drafts accepted {turn.spec['n_accepted']} of {turn.spec['n_drafted']}"
                                 if turn.spec else ""),
                              highlight=False, soft_wrap=True)
        if single_turn:                       # -st: one answer, then leave
            return 128 + interrupt.received() if turn.stop_reason == "interrupted" else 0
        if turn.stop_reason == "interrupted":
            if interrupt.received() != 2:     # SIGTERM (or another signal): leave
                return 128 + interrupt.received()
            interrupt.clear()                 # Ctrl-C ended this answer; the chat goes on


def _count(messages) -> str:
    return f"{len(messages)} message{'' if len(messages) == 1 else 's'}"


def _answer(chat, opts, user, as_json: bool):
    """Generate one answer (``user`` None: /regen), streaming it unless --json."""
    def on_text(s: str) -> None:
        sys.stdout.write(s)
        sys.stdout.flush()

    from toolkit.runtime.run import make_grammar
    gen = dict(ignore_eos=opts.ignore_eos, stop=opts.stop, n_probs=opts.n_probs,
               grammar=make_grammar(opts, chat.tok, chat.ctx.n_vocab),   # a fresh matcher per answer
               context_shift=opts.context_shift, n_keep=max(opts.keep, 0) + int(chat.tok.add_bos))
    cb = None if as_json else on_text
    turn = chat.regen(opts.n_predict, cb, **gen) if user is None else chat.send(user, opts.n_predict, cb, **gen)
    if not as_json:
        sys.stdout.write("\n")
        sys.stdout.flush()
    return turn
