"""The JSON vocabulary every command's ``--json`` shares, and consoles that never wrap piped text.

Fields (README.md, "JSON output", lists them; a command adds its own beside them):

    architecture     the GGUF's general.architecture ("granitehybrid", "mamba2", ...)
    wall_s           seconds from the command's start (the process's, for the toolkit command) to
                     its result (float); every command's --json takes it from common_fields()
    peak_rss_bytes   the process's peak resident memory (getrusage ru_maxrss, bytes)
    n_params         parameters: elements of every tensor of the file
    file_type        {"id": general.file_type, "name": llama.cpp's LLAMA_FTYPE name} or null
"""
from __future__ import annotations

import os
import resource
import sys
import time

from rich.console import Console

T0 = time.perf_counter()   # the command's start (perf_counter seconds); main() sets it: mark_start()


def process_age_s() -> float | None:
    """Seconds since this process started (Linux: /proc/self/stat's starttime against
    /proc/uptime, clock-tick resolution, 10 ms), or None where that is not known."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        start_ticks = int(stat[stat.rindex(")") + 2:].split()[19])   # field 22, starttime
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def mark_start(process: bool) -> None:
    """Start the ``wall_s`` clock: at the process's start when ``process`` (the ``toolkit``
    command itself: Python's start-up and the imports count, as ``time`` would show them), else
    now (main() called in-process, as the tests do)."""
    global T0
    age = process_age_s() if process else None
    T0 = time.perf_counter() - (age or 0.0)


def common_fields(architecture: str | None = None) -> dict:
    """``wall_s`` since the CLI's start, ``peak_rss_bytes`` (and ``architecture`` when given)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"wall_s": round(time.perf_counter() - T0, 6),
           "peak_rss_bytes": int(rss if sys.platform == "darwin" else rss * 1024)}   # Linux: KiB
    if architecture is not None:
        out = {"architecture": architecture, **out}
    return out


class QuietConsole(Console):
    """rich's Console, but a closed pipe (``| head``) raises BrokenPipeError, which the CLI
    turns into a quiet exit 0, instead of rich's SystemExit(1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def console(stderr: bool = False) -> Console:
    """A rich Console for results or diagnostics: on a terminal it wraps at the terminal's
    width; piped, it never wraps or cuts a line (rich would assume 80 columns).  Markup is off:
    strings (paths, tensor names, messages, table cells) print as they are; our own labels are
    styled with rich.text.Text (``Text.assemble((label, "bold"), text)``)."""
    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    return QuietConsole(stderr=stderr, soft_wrap=not tty, width=None if tty else 1 << 16, markup=False)

