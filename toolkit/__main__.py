"""``python -m toolkit`` and the ``toolkit`` console script.

SIGINT / SIGTERM are recorded from the first line on, before the imports (typer, rich, numpy,
the C library) that take a few hundred milliseconds: main() then ends the command with
128 + n and no traceback (see toolkit/runtime/interrupt.py, which takes over from here).
"""
import signal

EARLY_SIGNALS: list[int] = []


def _record(signum, frame) -> None:
    EARLY_SIGNALS.append(signum)


def main() -> None:
    """Record signals, then run the CLI (toolkit.cli.main)."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _record)
    from toolkit.cli import main as cli_main
    cli_main(early_signals=EARLY_SIGNALS)


if __name__ == "__main__":
    main()
