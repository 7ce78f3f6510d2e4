"""Record the attributes of every HF configuration class toolkit converts, as data for the
config audit (``tests/fixtures/hf_config_attrs.json``; read by tests/unit/test_config_audit.py
and tools/config_audit_doc.py).

Run it in a scratch venv outside the repository that has transformers (no torch needed, the
configuration classes import without it), never in the project's venv:

    python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install transformers==5.24.0
    /tmp/tfvenv/bin/python tools/hf_config_attrs.py > tests/fixtures/hf_config_attrs.json

For each class a converter names in its ``hf_configs`` (read from toolkit/convert/families/*.py,
so a new family's classes are recorded with no list to edit here), in ``model_type`` order, it
writes the dataclass fields the class adds to ``PreTrainedConfig`` (name -> the annotation and the value of ``Config()``), its
``attribute_map`` (alias -> field), and once the fields of ``PreTrainedConfig`` itself.
A composite class (``text_config`` / ``vision_config``) lists only its own fields; its text
class is listed under its own model_type.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import math
import pathlib
import sys

FAMILIES_DIR = pathlib.Path(__file__).resolve().parents[1] / "toolkit" / "convert" / "families"


def hf_config_classes() -> list[str]:
    """The ``hf_configs`` of every converter under toolkit/convert/families/ (read from the source
    with ``ast``: this venv has no toolkit dependencies), each class name once, sorted."""
    names: set[str] = set()
    for path in sorted(FAMILIES_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "hf_configs"
                                                    for t in node.targets):
                names.update(ast.literal_eval(node.value))
    return sorted(names)


def plain(v):
    """``v`` as JSON can hold it: tuples as lists, inf / nan as strings, objects by repr."""
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return repr(v)


def type_name(t) -> str:
    s = t if isinstance(t, str) else getattr(t, "__name__", None) or str(t)
    return s.replace("typing.", "")


def describe(cls, skip: set[str]) -> dict:
    try:
        inst = cls()
    except Exception:   # a class whose defaults do not validate alone: field defaults then
        inst = None
    attrs = {}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if inst is not None:
            v = getattr(inst, f.name, None)
        elif f.default is not dataclasses.MISSING:
            v = f.default
        elif f.default_factory is not dataclasses.MISSING:
            v = f.default_factory()
        else:
            v = None
        attrs[f.name] = {"type": type_name(f.type), "default": plain(v)}
    return attrs


def main() -> int:
    import transformers
    from transformers import PreTrainedConfig

    base = {f.name for f in dataclasses.fields(PreTrainedConfig)}
    out = {
        "transformers": transformers.__version__,
        "generated_by": "tools/hf_config_attrs.py (python with transformers, no torch)",
        "base": describe(PreTrainedConfig, set()),
        "classes": {},
    }
    for cls in sorted((getattr(transformers, n) for n in hf_config_classes()), key=lambda c: c.model_type):
        mt = cls.model_type
        subs = set(getattr(cls, "sub_configs", {}) or {})
        out["classes"][cls.__name__] = {
            "model_type": mt,
            "sub_configs": sorted(subs),
            "attribute_map": dict(getattr(cls, "attribute_map", {}) or {}),
            "attrs": describe(cls, base | subs),
        }
    json.dump(out, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
