"""THE GGUF reader/writer: every subcommand reads and writes GGUF through this package."""
from toolkit.gguf_io.constants import (  # noqa: F401
    ARCH_GRANITE_HYBRID, ARCH_JAMBA, ARCH_MAMBA, ARCH_MAMBA2, ARCH_NEMOTRON_H, ARCH_NEMOTRON_H_MOE,
    GGMLType, Keys, k, row_nbytes, type_size,
)
from toolkit.gguf_io.header import GGUFHeader, KV  # noqa: F401
from toolkit.gguf_io.reader import GGUFFile, TensorInfo  # noqa: F401
from toolkit.gguf_io.writer import GGUFStreamWriter, atomic_output, check_output, tensor_nbytes  # noqa: F401
