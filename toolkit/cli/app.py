"""The typer app and the one table that maps known exceptions to a message and an exit code.

Diagnostics go to stderr, results to stdout.  Tracebacks only with TOOLKIT_DEBUG=1.
"""
from __future__ import annotations

import importlib
import logging
import os
import signal
import sys

import typer
from rich.console import Console

from toolkit.errors import ToolkitError

app = typer.Typer(
    name="toolkit",
    help="Hybrid recurrent/attention language models (Mamba, Mamba-2, Bamba, Granite 4.0-H, Jamba): "
         "convert Hugging Face checkpoints to GGUF, quantize, and run them on a CPU.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        from toolkit import __version__
        typer.echo(f"toolkit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print toolkit's version and exit.")) -> None:
    """Hybrid recurrent/attention models: convert, quantize, run."""

# Subcommand modules register themselves on `app` when imported.  A module listed here
# that does not exist yet (its issue not done) is skipped.
_COMMANDS = ("convert", "info", "quantize", "run", "bench", "perplexity")
for _name in _COMMANDS:
    try:
        importlib.import_module(f"toolkit.cli.cmd_{_name}")
    except ModuleNotFoundError as _e:
        if _e.name != f"toolkit.cli.cmd_{_name}":
            raise


def _on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main() -> None:
    """Entry point: run the app; map errors to one line on stderr and an exit code."""
    logging.basicConfig(level=os.environ.get("TOOLKIT_LOG", "WARNING"), format="%(levelname)s: %(message)s",
                        stream=sys.stderr)
    debug = os.environ.get("TOOLKIT_DEBUG") == "1"
    try:
        # SIGTERM (kill, timeout, docker stop) unwinds like Ctrl-C, so atomic_output removes its
        # temp file; the default action would end the process with the .part file left behind
        signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:   # not the main thread (embedded use): leave the handler alone
        pass
    try:
        rc = app(standalone_mode=False)
        if isinstance(rc, int) and rc:
            if rc == 130:   # Ctrl-C inside a command (typer returns click's Abort as 130) or Exit(130)
                err_console.print("interrupted", highlight=False)
            sys.exit(rc)
    except ToolkitError as e:
        if debug:
            raise
        err_console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted", highlight=False)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except SystemExit:
        raise
    except Exception as e:  # click's usage errors (typer vendors click) and the unexpected
        if hasattr(e, "show") and hasattr(e, "exit_code"):  # a click ClickException
            e.show()
            sys.exit(e.exit_code)
        if type(e).__name__ == "Abort":   # click turns Ctrl-C inside a command into Abort
            err_console.print("interrupted", highlight=False)
            sys.exit(130)
        if debug:
            raise
        err_console.print(f"[bold red]internal error:[/] {type(e).__name__}: {e} (run with TOOLKIT_DEBUG=1 for a traceback)",
                          highlight=False, soft_wrap=True)
        sys.exit(1)
