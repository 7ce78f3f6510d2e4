"""The typer app and the one table that maps known exceptions to a message and an exit code.

Diagnostics go to stderr, results to stdout.  Tracebacks only with TOOLKIT_DEBUG=1.
"""
from __future__ import annotations

import importlib
import logging
import os
import sys

import typer
from rich.console import Console

from toolkit.cli.help import Typer
from toolkit.errors import ToolkitError

app = Typer(
    name="toolkit",
    help="Hybrid recurrent/attention language models ({families}): convert Hugging Face checkpoints to GGUF, "
         "quantize, and run them on a CPU.",   # {families}: the converter registry's list (cli/help.py)
    no_args_is_help=True,
    add_completion=True,      # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
# markup=False: no user or message text is ever read as rich markup (a path `[draft].gguf`, a
# shape `[rows, row_dim]`, a `[/x]`); our own labels are styled with Text (print_error).
err_console = Console(stderr=True, soft_wrap=not sys.stderr.isatty(), markup=False)   # piped: never wrapped at 80 columns


def print_error(msg: str, label: str = "error") -> None:
    """``LABEL: MSG`` on stderr, one line; MSG printed as it is (never as markup)."""
    from rich.text import Text
    err_console.print(Text.assemble((f"{label}:", "bold red"), " ", str(msg)), highlight=False, soft_wrap=True)


def _version(value: bool) -> None:
    if value:
        from toolkit import __version__, build_commit
        typer.echo(f"toolkit {__version__} (commit {build_commit()})")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                       help="Print toolkit's version and the git commit it was built from, and exit.")) -> None:
    """Hybrid recurrent/attention models: convert, quantize, run."""

# Subcommand modules register themselves on `app` when imported.  A module listed here
# that does not exist yet (its issue not done) is skipped.
_COMMANDS = ("convert", "info", "quantize", "run", "bench", "perplexity", "serve")
for _name in _COMMANDS:
    try:
        importlib.import_module(f"toolkit.cli.cmd_{_name}")
    except ModuleNotFoundError as _e:
        if _e.name != f"toolkit.cli.cmd_{_name}":
            raise


def _exit_status(rc: int) -> int:
    """``rc``, or 128 + n when SIGINT / SIGTERM came at any point of the command (a run that
    finished its work anyway still says it was interrupted); prints "interrupted" for those."""
    from toolkit.runtime import interrupt
    sig = interrupt.received()
    if sig:
        rc = 128 + sig
    if rc in (130, 143):
        err_console.print("interrupted" if rc == 130 else "terminated", highlight=False)
    return rc


def main(early_signals: list[int] | None = None) -> None:
    """Entry point: run the app; map errors to one line on stderr and an exit code.

    SIGINT / SIGTERM go through toolkit.runtime.interrupt (recorded while the C library works,
    raised elsewhere); either way the exit status is 130 / 143.  ``early_signals``: signals
    recorded by toolkit/__main__.py before the imports (the process's own entry point; without
    it, as when tests call main() in-process, the previous handlers are restored on return)."""
    from toolkit.cli import report
    report.mark_start(process=early_signals is not None)   # wall_s in --json counts from here
    logging.basicConfig(level=os.environ.get("TOOLKIT_LOG", "WARNING"), format="%(levelname)s: %(message)s",
                        stream=sys.stderr)
    import toolkit
    from toolkit.runtime import interrupt
    early = list(toolkit._EARLY_SIGNALS) + list(early_signals or [])
    interrupt.install(early[0] if early else 0)
    try:
        try:
            interrupt.arm()
            rc = _run_app()
        except KeyboardInterrupt:
            rc = 130
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if rc == 1 and _stdout_reader_gone():
                rc = 0   # click's answer to a closed stdout (EPIPE: `| head`) is exit 1; a closed pipe is no error
                _quiet_stdout()
        with interrupt.deferred():    # from here on a signal is recorded, never raised
            rc = _exit_status(rc)
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                _quiet_stdout()
            except ValueError:        # stdout closed
                pass
            if early_signals is not None:
                _exit_process(rc)
    finally:
        if early_signals is None:
            interrupt.uninstall()
    sys.exit(rc)


def _exit_process(rc: int) -> None:
    """End the process now with ``rc`` (128 + n where SIGINT / SIGTERM came, up to the last
    moment), skipping the interpreter's shutdown.  Called inside interrupt.deferred(), where a
    signal is recorded, never raised.  The shutdown put the default handlers back before the
    process was gone, so a signal landing in it killed the process (status -15 where 143 is
    due).  The command's own cleanup (temp files, the C context) has run by now."""
    from toolkit.runtime import interrupt
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    sig = interrupt.received()
    if sig and rc != 128 + sig:
        rc = _exit_status(rc)
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
    os._exit(rc)


def _run_app() -> int:
    """The app under the error table: returns the exit status."""
    debug = os.environ.get("TOOLKIT_DEBUG") == "1"
    try:
        from toolkit.cli.argv import check_argv, check_cpu_env
        check_cpu_env(os.environ)
        argv = check_argv(sys.argv[1:], _option_names())
        rc = app(args=argv, prog_name="toolkit", standalone_mode=False)
        return rc if isinstance(rc, int) else 0
    except ToolkitError as e:
        if debug:
            raise
        print_error(str(e))
        return e.exit_code
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except Exception as e:  # click's usage errors (typer vendors click) and the unexpected
        if hasattr(e, "show") and hasattr(e, "exit_code"):  # a click ClickException
            if _is(e, "NoArgsIsHelpError"):   # `toolkit` alone: the help (rich printed it on stdout
                if e.format_message().strip():   # while click built the message: a blank line else)
                    e.show()
                return 2
            if not _is(e, "UsageError"):
                e.show()
                return e.exit_code
            print_error(usage_line(e, sys.argv[1:]))
            return 2
        if type(e).__name__ == "Abort":   # click turns Ctrl-C inside a command into Abort
            return 130
        if debug:
            raise
        print_error(f"{type(e).__name__}: {e} (run with TOOLKIT_DEBUG=1 for a traceback)", "internal error")
        return 1


def _is(e: BaseException, name: str) -> bool:
    """``e`` is click's exception class ``name`` (typer vendors click: matched by name)."""
    return any(c.__name__ == name for c in type(e).__mro__)


def usage_line(e, argv: list[str]) -> str:
    """click's usage error ``e`` (a 4-line box: usage, hint, message) as one line naming the
    flag: ``-n/--n-predict: 'abc' is not an integer``, ``no such option: --foo (toolkit run -h
    lists the options)``, ``missing argument HF_DIR``; a suggestion only for a close spelling."""
    import difflib
    import typer.main
    group = typer.main.get_command(app)
    cmd_name = next((a for a in argv if not a.startswith("-")), None)
    cmd = getattr(group, "commands", {}).get(cmd_name)
    prog = f"toolkit {cmd_name}" if cmd is not None else "toolkit"
    params = list(cmd.params) if cmd is not None else []

    def spell(p) -> str:
        if getattr(p, "param_type_name", "") != "option":   # as the usage line writes it (IN.gguf)
            from toolkit.cli.help import usage_name
            return usage_name(p).strip("[]")
        return "/".join(sorted(p.opts, key=lambda o: (o.startswith("--"), len(o))))

    def by_flag(flag: str):
        return next((p for p in params if flag in p.opts or flag in getattr(p, "secondary_opts", ())), None)

    if _is(e, "NoSuchOption"):
        from toolkit.cli.argv import no_such_option
        opts = [o for p in params for o in (*p.opts, *getattr(p, "secondary_opts", ()))] + ["-h", "--help"]
        return no_such_option(e.option_name, cmd_name if cmd is not None else None, opts)
    if _is(e, "MissingParameter") and getattr(e, "param", None) is not None:
        p = e.param
        what = "argument" if getattr(p, "param_type_name", "") == "argument" else "option"
        return f"missing {what} {spell(p)} ({prog} -h shows the usage)"
    if _is(e, "BadParameter") and getattr(e, "param", None) is not None:
        p = e.param
        value = _value_in(argv, p.opts) if getattr(p, "param_type_name", "") == "option" else None
        kind = _kind(p)
        if value is not None and kind:
            return f"{spell(p)}: {value!r} is not {kind}"
        return f"{spell(p)}: {_one_line(e.message)}"
    msg = _one_line(e.format_message() if hasattr(e, "format_message") else str(e))
    if _is(e, "BadOptionUsage") and getattr(e, "option_name", None) and "requires an argument" in msg:
        p = by_flag(e.option_name)
        return f"{spell(p) if p is not None else e.option_name} needs a value"
    if msg.startswith("No such command"):
        bad = msg.split("'")[1] if msg.count("'") >= 2 else ""
        close = difflib.get_close_matches(bad, list(getattr(group, "commands", {})), n=1, cutoff=0.75)
        return f"no such command: {bad} " + (f"(did you mean {close[0]}?)" if close else "(toolkit -h lists the commands)")
    if msg.startswith("Got unexpected extra argument"):
        rest = msg[len("Got unexpected extra argument"):]   # click: "s (a b)"; typer's own: "(s) (a b)"
        rest = rest.removeprefix("(s)").removeprefix("s").strip()
        extra = rest[1:-1] if rest.startswith("(") and rest.endswith(")") else rest
        return f"unexpected extra argument: {extra} ({prog} -h shows the usage)"
    return msg[:1].lower() + msg[1:].rstrip(".")


def _one_line(s: str) -> str:
    return " ".join(str(s).split())


def _value_in(argv: list[str], opts) -> str | None:
    """The value given to the option spelled ``opts`` in ``argv`` (``-n 5``, ``--n=5``), the last one."""
    value = None
    for i, a in enumerate(argv):
        if a == "--":
            break
        for o in opts:
            if a == o and i + 1 < len(argv):
                value = argv[i + 1]
            elif a.startswith(o + "=") and o.startswith("--"):
                value = a[len(o) + 1:]
    return value


def _kind(p) -> str | None:
    """"an integer" / "a number" for an int / float parameter (typer's annotation, else click's type)."""
    ann = getattr(getattr(p, "type_descriptor", None), "annotation", None)
    name = getattr(ann, "__name__", None) or getattr(getattr(p, "type", None), "name", None)
    return {"int": "an integer", "integer": "an integer", "float": "a number"}.get(name)


def _option_names() -> dict[str, dict[str, bool]]:
    """Each command's option spellings (``-m``, ``--model``, ``-cnv``, ...) -> whether it takes
    a value, from the click command typer builds."""
    import typer.main
    group = typer.main.get_command(app)
    out = {}
    for name, cmd in getattr(group, "commands", {}).items():
        names = {"-h": False, "--help": False}
        for p in cmd.params:
            if getattr(p, "param_type_name", "") != "option":
                continue
            value = not (getattr(p, "is_flag", False) or getattr(p, "count", False))
            names.update(dict.fromkeys(p.opts, value))
            names.update(dict.fromkeys(p.secondary_opts, False))
        out[name] = names
    return out


def _stdout_reader_gone() -> bool:
    """True when stdout is a pipe whose reading end is closed (poll reports POLLERR)."""
    import select
    try:
        p = select.poll()
        p.register(sys.__stdout__.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in p.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def _quiet_stdout() -> None:
    """stdout's reader went away (``| head``): point fd 1 at /dev/null so the interpreter's
    final flush does not print "Exception ignored ... BrokenPipeError"."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
