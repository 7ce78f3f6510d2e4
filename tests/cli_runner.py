"""Run `toolkit ARGS` in-process through the real entry point (its error table included)."""
from __future__ import annotations

import io
import sys

from toolkit.cli import main


def cli(monkeypatch, capsys, *args: str, stdin: str | bytes | None = None) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``toolkit ARGS``.

    ``stdin``: text is fed as is; bytes are decoded as UTF-8 with surrogateescape, the way
    Python's own stdin hands undecodable bytes to the program.
    """
    monkeypatch.setattr(sys, "argv", ["toolkit", *args])
    if isinstance(stdin, bytes):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8",
                                                           errors="surrogateescape"))
    elif stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    try:
        main()
        rc = 0
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err
