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
from toolkit.convert.families.lfm3 import LFM3Family
from toolkit.convert.families.zamba2 import Zamba2Family
from toolkit.convert.families.zamba import ZambaFamily
from toolkit.convert.families.olmo_hybrid import OlmoHybridFamily
from toolkit.convert.families.lara_mini import LaraMiniFamily
from toolkit.convert.families.minimax import MiniMaxFamily
from toolkit.convert.families.recurrent_gemma import RecurrentGemmaFamily
from toolkit.convert.families.kimi_linear import KimiLinearFamily
from toolkit.convert.families.glm5_next import Glm5NextFamily
from toolkit.convert.families.bailingmoe3 import BailingMoe3Family

FAMILIES: tuple[type[Family], ...] = (MambaFamily, FalconMambaFamily, Mamba2Family, GraniteHybridFamily, JambaFamily, Qwen4ExpFamily,
                                      Qwen3NextFamily, Qwen35Family, Qwen35MoeFamily, NemotronHFamily,
                                      FalconH1Family, LFM2Family, LFM2MoeFamily, LFM3Family, Zamba2Family, ZambaFamily,
                                      OlmoHybridFamily, LaraMiniFamily, MiniMaxFamily, RecurrentGemmaFamily,
                                      KimiLinearFamily,
                                      Glm5NextFamily, BailingMoe3Family)

REGISTRY: dict[str, type[Family]] = {name: fam for fam in FAMILIES for name in fam.hf_archs}


def family_names() -> list[str]:
    """Every family's name (``Mamba``, ``Granite 4.0-H``, ...), once each, in FAMILIES order."""
    return list(dict.fromkeys(n for fam in FAMILIES for n in fam.families))


def arch_table() -> list[dict]:
    """One row per HF architecture: ``hf_architecture``, ``family``, ``gguf_architecture``,
    ``llama_cpp`` (llama.cpp loads the file), ``vllm`` (vLLM runs the HF checkpoint)."""
    rows = []
    for fam in FAMILIES:
        for i, name in enumerate(fam.hf_archs):
            rows.append({"hf_architecture": name,
                         "family": fam.families[min(i, len(fam.families) - 1)] if fam.families else "",
                         "gguf_architecture": fam.gguf_archs or fam.arch,
                         "llama_cpp": fam.llama_cpp, "vllm": fam.vllm})
    return rows


def closest(name: str) -> str | None:
    """The supported HF architecture ``name`` misspells (case, a letter, ``CasualLM``), or
    None: the model names (before ``For...``) must be close and have the same digits, so that
    another model (``LlamaForCausalLM``, ``Mamba3ForCausalLM``) is not offered as a typo."""
    import difflib
    import re

    def split(n: str) -> tuple[str, str]:
        i = n.lower().find("for")
        return (n.lower(), "") if i <= 0 else (n.lower()[:i], n.lower()[i:])

    stem, tail = split(name)
    best, score = None, 0.0
    for cand in REGISTRY:
        cs, ct = split(cand)
        if re.sub(r"\D", "", cs) != re.sub(r"\D", "", stem):
            continue
        r = difflib.SequenceMatcher(None, stem, cs).ratio()
        t = difflib.SequenceMatcher(None, tail, ct).ratio() if tail or ct else 1.0
        if r >= 0.85 and t >= 0.75 and r + t > score:
            best, score = cand, r + t
    return best


def supported() -> list[str]:
    """The HF architecture names convert accepts, sorted."""
    return sorted(REGISTRY)
