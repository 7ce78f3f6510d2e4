"""docs/config-audit.md is the output of tools/config_audit_doc.py (the families' config
declarations and transformers' attribute lists), and each refused row names a refusal case
that tests/cli/test_config_refusals.py runs."""
from __future__ import annotations

import importlib.util
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent


def _tool():
    spec = importlib.util.spec_from_file_location("config_audit_doc", ROOT / "tools" / "config_audit_doc.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_doc_is_the_declarations():
    doc = (ROOT / "docs" / "config-audit.md").read_text()
    assert doc == _tool().render(), "docs/config-audit.md is stale: run python tools/config_audit_doc.py"


def test_every_refused_row_names_a_refusal_case():
    sys.path.insert(0, str(ROOT / "tests" / "cli"))
    from test_config_refusals import case_id, refusal_cases
    ids = {case_id(f, k) for f, k, _ in refusal_cases()}
    doc = (ROOT / "docs" / "config-audit.md").read_text()
    named = re.findall(r"\| refused \|[^\n]*test_refused\[([^\]]+)\]", doc)
    assert named and set(named) == ids
    assert not re.search(r"\| undeclared \|", doc)
