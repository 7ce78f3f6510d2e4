"""What an architecture is: hparams schema, layer kinds, GGUF tensor names.

Shared by convert (what to write), quantize (type rules) and the runtime (what to run).
"""
from toolkit.arch.hparams import HParams, LayerKind, FFNKind  # noqa: F401
