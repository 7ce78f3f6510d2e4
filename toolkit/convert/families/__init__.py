"""One module per family; the registry maps HF ``architectures[0]`` to its family class."""
from __future__ import annotations

from toolkit.convert.base import Family
from toolkit.convert.families.mamba import MambaFamily
from toolkit.convert.families.falconmamba import FalconMambaFamily
from toolkit.convert.families.mamba2 import Mamba2Family
from toolkit.convert.families.granitehybrid import GraniteHybridFamily
from toolkit.convert.families.jamba import JambaFamily
from toolkit.convert.families.qwen4exp import Qwen4ExpFamily
from toolkit.convert.families.nemotronh import NemotronHFamily
from toolkit.convert.families.qwen3next import Qwen35Family, Qwen35MoeFamily, Qwen3NextFamily
from toolkit.convert.families.falconh1 import FalconH1Family
from toolkit.convert.families.lfm2 import LFM2Family, LFM2MoeFamily
from toolkit.convert.families.zamba2 import Zamba2Family
from toolkit.convert.families.zamba import ZambaFamily
from toolkit.convert.families.olmo_hybrid import OlmoHybridFamily

FAMILIES: tuple[type[Family], ...] = (MambaFamily, FalconMambaFamily, Mamba2Family, GraniteHybridFamily, JambaFamily, Qwen4ExpFamily,
                                      Qwen3NextFamily, Qwen35Family, Qwen35MoeFamily, NemotronHFamily,
                                      FalconH1Family, LFM2Family, LFM2MoeFamily, Zamba2Family, ZambaFamily,
                                      OlmoHybridFamily)

REGISTRY: dict[str, type[Family]] = {name: fam for fam in FAMILIES for name in fam.hf_archs}


def supported() -> list[str]:
    """The HF architecture names convert accepts, sorted."""
    return sorted(REGISTRY)
