"""Every command in README.md's ``bash`` blocks runs as written (issue 18), in order, from the
repository root: exit 0, no traceback, no error line.  Paths under /tmp are the README's
scratch files; here they go to a temp directory.  (``sh`` blocks hold set-up commands: pip,
pytest, benchmarks on checkpoints that are not in the repository.)"""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.native, pytest.mark.slow]   # ~35 commands, a minute or so


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    lines = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M):
        lines += [ln for ln in block.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return lines


def test_readme_bash_blocks_are_toolkit_commands():
    cmds = readme_commands()
    assert len(cmds) > 25
    for c in cmds:   # a toolkit command, maybe fed by echo/printf or with an env prefix
        assert re.match(r"^((echo|printf) .*\| )?(TOOLKIT_\w+=\S+ )?toolkit ", c), c


def test_every_readme_command_runs(tmp_path):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               TOOLKIT_THREADS="2")
    failed = []
    for c in readme_commands():
        cmd = c.replace("/tmp/", f"{tmp_path}/")
        r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=300)
        if r.returncode != 0 or "Traceback" in r.stderr or "error:" in r.stderr:
            failed.append(f"{c}\n  -> exit {r.returncode}: {r.stderr[-400:]}")
    assert not failed, "\n".join(failed)
