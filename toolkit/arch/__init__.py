"""What an architecture is: the architecture table, hparams schema, layer kinds, GGUF tensor names.

Shared by convert (what to write), quantize (type rules) and the runtime (what to run).
"""
from toolkit.arch.kinds import FFNKind, LayerKind, Norm, Residual  # noqa: F401
from toolkit.arch.table import ARCHES, ArchSpec, arch_spec  # noqa: F401
from toolkit.arch.hparams import HParams  # noqa: F401
