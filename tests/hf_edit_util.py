"""A Hugging Face fixture (tests/fixtures/hf) with its config.json edited, for the tests that
convert a checkpoint with one setting changed (a refused key, an activation, a clamp switched off):
the fixture is never written, its other files are linked."""
from __future__ import annotations

import json
import os
import pathlib
from typing import Callable, Union

# what an edit is: keys to set, or a function that edits the config dict in place
Edit = Union[dict, Callable[[dict], object]]


def config_edited(src: pathlib.Path, tmp: pathlib.Path, edit: Edit, root: bool = False) -> pathlib.Path:
    """``tmp / src.name``: every file of the fixture at ``src`` but config.json a symlink to the
    fixture's; config.json the fixture's with ``edit`` applied (a dict: those keys set; a
    callable: called on the config dict) to ``text_config`` where the fixture has one (a
    ``*ForConditionalGeneration`` checkpoint), to the root with ``root`` or where it has none.
    Returns the directory."""
    src, d = pathlib.Path(src), pathlib.Path(tmp) / pathlib.Path(src).name
    d.mkdir()
    for f in os.listdir(src):
        if f != "config.json":
            os.symlink(src / f, d / f)
    cfg = json.loads((src / "config.json").read_text())
    c = cfg["text_config"] if not root and isinstance(cfg.get("text_config"), dict) else cfg
    if callable(edit):
        edit(c)
    else:
        c.update(edit)
    (d / "config.json").write_text(json.dumps(cfg))
    return d
