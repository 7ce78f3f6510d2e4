"""Write ``tk_hparams`` and its sub-structs into toolkit/native/toolkit.h from toolkit/arch/fields.py.

    python tools/gen_hparams.py            # rewrite the block between HPARAMS-BEGIN and HPARAMS-END
    python tools/gen_hparams.py --check    # exit 1 (and say so) when the header's block differs

The declarations in toolkit/arch/fields.py are the one place an hparam is written down; the header
block is their C spelling (tests/unit/test_arch_table.py runs the check).  Rebuild the C library
afterwards (``pip install -e .``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from toolkit.arch.fields import header_with_struct  # noqa: E402

HEADER = ROOT / "toolkit" / "native" / "toolkit.h"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 when the header differs")
    a = ap.parse_args()
    text = HEADER.read_text()
    new = header_with_struct(text)
    if a.check:
        if new != text:
            print(f"{HEADER}: tk_hparams differs from toolkit/arch/fields.py; run python tools/gen_hparams.py")
            return 1
        return 0
    if new != text:
        tmp = HEADER.with_suffix(".h.part")
        tmp.write_text(new)
        tmp.replace(HEADER)
    return 0


if __name__ == "__main__":
    sys.exit(main())
