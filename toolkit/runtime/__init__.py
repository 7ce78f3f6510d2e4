"""The only Python code (with toolkit.quantize) that touches the C library.

    from toolkit.runtime import Model, Context
"""
from toolkit.runtime.model import Model  # noqa: F401
from toolkit.runtime.context import Context, Memory  # noqa: F401
