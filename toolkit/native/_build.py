"""cffi builder (out-of-line API mode) for toolkit's C runtime: ``toolkit._native``.

Run by ``pip install .`` through setup.py's ``cffi_modules``.  Compiles every ``*.c`` in
this folder and its sub-folders (layers/, memory/, kernels/, quants/ with quants/x86/ and
quants/arm/: ARCHITECTURE.md's code map) with portable flags (no -march=native: SIMD paths
are chosen at run time).  Includes are written from this folder, the one include directory
(``#include "layers/layer.h"``).

Environment:
    TOOLKIT_SANITIZE=1   build with AddressSanitizer + UndefinedBehaviorSanitizer
                         (run Python with LD_PRELOAD=$(gcc -print-file-name=libasan.so))
    TOOLKIT_DEBUG_BUILD=1  -O0 -g
"""
import glob
import os
import re

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))


_CDEF_HEADERS = ("toolkit.h", "tk_testing.h")   # the public API, then the test entry points


def sources() -> list[str]:
    """Every C source of the runtime (this folder and below), relative to the current
    directory, sorted."""
    return sorted(os.path.relpath(p) for p in glob.glob(os.path.join(HERE, "**", "*.c"), recursive=True))


def _cdef() -> str:
    parts = []
    for name in _CDEF_HEADERS:
        with open(os.path.join(HERE, name)) as fh:
            text = fh.read()
        m = re.search(r"/\* CDEF-BEGIN \*/(.*)/\* CDEF-END \*/", text, re.S)
        if not m:
            raise RuntimeError(f"{name}: CDEF-BEGIN/CDEF-END markers not found")
        parts.append(m.group(1))
    return "\n".join(parts)


def _flags():
    cflags = ["-std=gnu11", "-fno-strict-aliasing", "-Wall", "-Wno-unused-function"]
    ldflags = ["-lm", "-lpthread"]
    if os.environ.get("TOOLKIT_DEBUG_BUILD") == "1":
        cflags += ["-O0", "-g"]
    else:
        cflags += ["-O3"]
    if os.environ.get("TOOLKIT_SANITIZE") == "1":
        san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
        cflags += san + ["-g"]
        ldflags += san
    return cflags, ldflags


ffibuilder = FFI()
ffibuilder.cdef(_cdef())
_cflags, _ldflags = _flags()
ffibuilder.set_source(
    "toolkit._native",
    '#include "toolkit.h"\n#include "tk_testing.h"\n',
    sources=sources(),
    include_dirs=[os.path.relpath(HERE)],
    extra_compile_args=_cflags,
    extra_link_args=_ldflags,
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
