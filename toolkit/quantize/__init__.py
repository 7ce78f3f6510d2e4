"""quantize: ggml type registry, llama-quantize's mixture rules, and the row-band driver.

    from toolkit.quantize import quantize_file, Options
    summary = quantize_file("model.f32.gguf", "model.Q4_K_M.gguf", "Q4_K_M", Options(), n_threads=2)
"""
from toolkit.quantize.driver import QuantPlan, Summary, TensorPlan, make_plan, quantize_file  # noqa: F401
from toolkit.quantize.rules import Options  # noqa: F401
from toolkit.quantize.types import ALIASES, FILE_TYPES, TENSOR_TYPES, file_type, tensor_type  # noqa: F401
