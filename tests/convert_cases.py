"""Shared pieces of the convert error tests."""
from __future__ import annotations

import json
import pathlib

BAD_CONFIG_VALUES = ("x", 0, 10**9, 0.5)


def count_config_kind_errors(d: pathlib.Path) -> int:
    """Set every key of d/config.json, one at a time, to each of BAD_CONFIG_VALUES and plan
    the conversion: each attempt must build a plan or raise a ToolkitError (anything else
    propagates and fails the test).  Returns how many raised."""
    from toolkit.convert import make_plan
    from toolkit.errors import ToolkitError

    cfg = json.loads((d / "config.json").read_text())
    n_err = 0
    for key in cfg:
        for bad in BAD_CONFIG_VALUES:
            (d / "config.json").write_text(json.dumps({**cfg, key: bad}))
            try:
                make_plan(str(d))
            except ToolkitError:
                n_err += 1
    return n_err
