"""runtime: models, contexts, sampling, tokenizers and generation over the C library
(reached through :mod:`toolkit.binding`, never directly).

    from toolkit.runtime import Model, Context
"""
from toolkit.binding.cpu import cpu_info  # noqa: F401
from toolkit.runtime.options import RuntimeOptions  # noqa: F401
from toolkit.runtime.model import Model  # noqa: F401
from toolkit.runtime.context import Context, Memory, memory_estimate  # noqa: F401
