"""HF safetensors checkpoint -> GGUF, streamed (``toolkit convert``).

    from toolkit.convert import convert, make_plan
    plan = make_plan("hf-dir", "bf16")          # headers only: key/values, tensor map, types
    summary = convert("hf-dir", "out.gguf", "bf16")
"""
from toolkit.convert.core import BAND_ELEMENTS, Summary, convert, make_plan, out_path, plan_to_dict  # noqa: F401
from toolkit.convert.families import REGISTRY, supported  # noqa: F401
from toolkit.convert.base import OUTTYPES  # noqa: F401
