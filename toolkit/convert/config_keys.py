"""What a family does with each attribute of its HF configuration class: reads it, declares it
irrelevant (with why), or refuses it unless at a value it converts (with why).

Every family sets ``Family.config_keys`` (a :class:`ConfigKeys`); :meth:`ConfigKeys.enforce`
runs before any tensor is looked at, so a refused setting is one line naming config.json and
the key (``UnsupportedError``, exit 3), never a wrong file.  ``tests/unit/test_config_audit.py``
checks that, for each family, read | irrelevant | refused covers every attribute of its HF
classes as transformers defines them (``tests/fixtures/hf_config_attrs.json``, written by
``tools/hf_config_attrs.py``), so an attribute a future transformers adds fails that test
instead of being dropped; ``docs/config-audit.md`` is generated from these declarations
(``tools/config_audit_doc.py``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from toolkit.errors import UnsupportedError

# what a refused key is set to in the audit's refusal test when the declaration gives no
# ``bad`` value and the default is neither a bool nor a number
_BAD_STR = "unsupported-value"


@dataclass(frozen=True)
class Refused:
    """A key converted only at one of ``accepts`` (the first is HF's default; an absent or
    null key is HF's default, accepted).  ``why``: what the runtime lacks.  ``bad``: a value
    HF accepts and this refuses (the audit's refusal test sets it; derived when None)."""

    accepts: tuple[Any, ...]
    why: str
    bad: Any = None

    def example(self) -> Any:
        """A value this refuses: ``bad``, else flipped / changed from the default."""
        if self.bad is not None:
            return self.bad
        d = self.accepts[0]
        if isinstance(d, bool):
            return not d
        if isinstance(d, (int, float)):
            return d + 1 if not isinstance(d, float) else d * 2 + 0.5
        if isinstance(d, (list, tuple)):
            return [*d, d[-1]] if d else [1]
        return _BAD_STR


def json_number(v: Any) -> Any:
    """A config.json number as HF reads it: transformers 5 writes inf as ``{"__float__": "Infinity"}``,
    json reads ``Infinity``; the strings "inf" / "Infinity" / "-inf" / "NaN" become floats."""
    if isinstance(v, dict) and set(v) == {"__float__"}:
        v = v["__float__"]
    if isinstance(v, str) and v in ("inf", "Infinity", "-inf", "-Infinity", "NaN"):
        return float(v)
    return v


def same(a: Any, b: Any) -> bool:
    """JSON values equal as HF compares them (tuples as lists, 1 == 1.0, inf spelled
    ``"inf"``, ``Infinity`` or ``{"__float__": "Infinity"}``)."""
    a, b = json_number(a), json_number(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


# Attributes whose meaning is the same in every HF class that has them, and that change
# neither the tensors nor the computation of the logits.  A family adds its own.
COMMON_IRRELEVANT: dict[str, str] = {
    # PreTrainedConfig's own fields
    "transformers_version": "the transformers version that saved the file",
    "architectures": "read by the registry (picks the family), not a model setting",
    "output_hidden_states": "HF's return options",
    "return_dict": "HF's return options",
    "dtype": "storage dtype: convert reads each tensor's own dtype (--outtype auto follows it)",
    "chunk_size_feed_forward": "HF's FFN chunking over tokens: the same result",
    "is_encoder_decoder": "always false for these decoder-only classes",
    "id2label": "classification heads only",
    "label2id": "classification heads only",
    "problem_type": "classification heads only",
    # init / training / generation only
    "initializer_range": "weight initialisation only",
    "rescale_prenorm_residual": "weight initialisation only",
    "use_cache": "HF's cache switch: the same logits",
    "num_logits_to_keep": "generation: how many positions HF computes logits for",
    "pad_token_id": "token ids: the tokenizer export reads them from the tokenizer files",
    "bos_token_id": "token ids: the tokenizer export reads them from the tokenizer files",
    "eos_token_id": "token ids: the tokenizer export reads them from the tokenizer files",
    "attention_dropout": "training only (dropout)",
    "hidden_dropout": "training only (dropout)",
    "output_router_logits": "training only (router loss)",
    "router_aux_loss_coef": "training only (router loss)",
    "z_loss_coefficient": "training only (loss)",
    "mtp_loss_scaling_factor": "training only (loss)",
    "router_jitter_noise": "training only (router noise)",
    "pretraining_tp": "training only (tensor-parallel degree of pretraining)",
    "time_step_min": "dt_bias initialisation only",
    "time_step_max": "dt_bias initialisation only",
    "time_step_floor": "dt_bias initialisation only",
    "time_step_scale": "dt_bias initialisation only",
    "time_step_init_scheme": "dt_bias initialisation only",
    # which HF kernel runs the same math
    "use_mambapy": "which HF kernel runs the scan: the same math",
    "use_associative_scan": "which HF kernel runs the scan: the same math",
    "use_mamba_kernels": "which HF kernel runs the scan: the same math",
    "use_mem_eff_path": "which HF kernel runs the scan: the same math",
    "chunk_size": "chunk length of HF's chunked scan: an evaluation order, the same math",
    "mamba_chunk_size": "chunk length of HF's chunked scan: an evaluation order, the same math",
    "residual_in_fp32": "the runtime keeps the residual in float32 always",
}


# why a family whose HF code applies the RoPE scaling types refuses them (no variant fixture here yet)
ROPE_NOT_YET = "RoPE scaling is converted only where a variant fixture checks it against HF"


@dataclass(frozen=True)
class ConfigKeys:
    """One family's declaration.

    read:        keys the converter honours (each one changes the file as HF's model changes)
    irrelevant:  key -> why it changes neither tensors nor logits (init, training, generation);
                 :data:`COMMON_IRRELEVANT` is added to it
    refused:     key -> :class:`Refused` (converted only at the values it accepts)
    rope_types:  ``rope_parameters.rope_type`` values converted (others refused: ``rope_parameters``
                 / ``rope_scaling``, or each per-layer-type dict in them); () when the family's HF
                 code applies no RoPE (``rope_parameters`` is then declared irrelevant)
    aliases:     alias -> key (the HF class's ``attribute_map``): an alias in config.json is
                 checked as its key
    rope_why:    why the other RoPE types are refused (in the error and docs/config-audit.md);
                 :data:`ROPE_NOT_YET` when not given

    RoPE types.  The families whose HF rotary embedding runs ``ROPE_INIT_FUNCTIONS`` and whose
    variant fixtures pass convert ``linear`` and ``yarn`` as llama.cpp's ``rope.scaling.*`` keys
    (:mod:`toolkit.convert.rope_scaling`: OLMo-Hybrid, Falcon-H1, LFM2, LFM2-MoE, Qwen3-Next, Qwen3.5, Qwen3.5-MoE,
    Bamba, Granite 4.0-H, qwen4exp, Lara-Mini, MiniMax, Zamba2, Ling 3 (its MLA, with DeepSeek's mscale_all_dim),
    LFM3 (the full layers' RoPE, as llama.cpp scales the non-sliding layers)); ``dynamic``, ``llama3``
    and ``longrope`` stay refused there (:data:`toolkit.convert.rope_scaling.SCALED_WHY`).  A family
    whose HF code applies no other type keeps refusing them for that reason (RecurrentGemma:
    RecurrentGemmaRotaryEmbedding raises for any type but "default"); the other families'
    HF code applies the types but no variant fixture checks them here yet (:data:`ROPE_NOT_YET`).
    """

    read: frozenset[str]
    irrelevant: Mapping[str, str] = field(default_factory=dict)
    refused: Mapping[str, Refused] = field(default_factory=dict)
    rope_types: tuple[str, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)
    rope_why: str = ""

    @classmethod
    def of(cls, read: str, irrelevant: Mapping[str, str] | None = None, refused: Mapping[str, Refused] | None = None,
           rope_types: tuple[str, ...] = (), aliases: Mapping[str, str] | None = None,
           rope_why: str = "") -> "ConfigKeys":
        """``read`` as one whitespace-separated string; COMMON_IRRELEVANT less the keys read
        or refused is added to ``irrelevant``."""
        r = frozenset(read.split())
        ref = dict(refused or {})
        irr = {k: v for k, v in COMMON_IRRELEVANT.items() if k not in r and k not in ref}
        irr.update(irrelevant or {})
        return cls(r, irr, ref, tuple(rope_types), dict(aliases or {}), rope_why or (ROPE_NOT_YET if rope_types else ""))

    def status(self, key: str) -> str:
        """``read``, ``irrelevant``, ``refused`` or ``undeclared``."""
        if key in self.read:
            return "read"
        if key in self.refused:
            return "refused"
        if key in self.irrelevant:
            return "irrelevant"
        return "undeclared"

    def enforce(self, path: str, d: Mapping[str, Any]) -> None:
        """Refuse ``d`` (config.json, ``text_config`` merged over the root) where it sets a
        refused key (or its alias) to a value not accepted, or a RoPE type not converted.

        Raises:
            UnsupportedError: one line naming ``path``, the key, the value and why.
        """
        for key, ref in self.refused.items():
            for spelled in (key, *(a for a, k in self.aliases.items() if k == key)):
                v = d.get(spelled)
                if v is None or any(same(v, a) for a in ref.accepts):
                    continue
                only = " or ".join(_short(a) for a in ref.accepts)
                raise UnsupportedError(f"{path}: key {spelled!r} = {_short(v)} is not supported (only {only}: {ref.why})")
        self._enforce_rope(path, d)

    def _enforce_rope(self, path: str, d: Mapping[str, Any]) -> None:
        if not self.rope_types:      # no RoPE in the family's HF code: rope_parameters is declared irrelevant
            return
        for key in ("rope_parameters", "rope_scaling"):
            rp = d.get(key)
            if not isinstance(rp, dict):
                continue
            # one dict, or one per layer type (LFM3: {"sliding_attention": {...}, ...})
            subs = [(f"{key}.{n}", v) for n, v in rp.items() if isinstance(v, dict)] or [(key, rp)]
            for where, p in subs:
                t = p.get("rope_type", p.get("type"))
                if t is None or t in self.rope_types:
                    continue
                why = f"only {' or '.join(_short(x) for x in self.rope_types)} converted: {self.rope_why}"
                raise UnsupportedError(f"{path}: key '{where}.rope_type' = {_short(t)} is not supported ({why})")


def _short(v: Any) -> str:
    """``v`` as config.json spells it (true, null, "silu", [0.0, Infinity]), cut at 60 characters."""
    s = json.dumps(json_number(v) if not isinstance(v, tuple) else list(v))
    return s if len(s) <= 60 else s[:57] + "..."
