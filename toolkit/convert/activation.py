"""HF ``hidden_act`` of the FFN gate, into ``{arch}.feed_forward.activation`` (ours), and of the
mixer's causal conv (Mamba-1 / Mamba-2 / GDN / KDA: HF's ``causal_conv1d_fn(..., activation=
config.hidden_act)``), into ``{arch}.ssm.activation`` (ours).

llama.cpp has no activation key for these architectures (it hard-codes each one's), so the key
is written only when the value is not the family's default: default files stay byte-identical,
and a file that has the key runs with the wrong activation in llama.cpp (README's table).
The runtime reads them in :func:`toolkit.arch.readers.read_ffn` (hparams ``ffn_act``, C
``hp.ffn.act``) and :func:`toolkit.arch.readers.read_ssm_act` (``ssm_act``, C ``hp.ssm.act``),
``TK_ACT_*`` of toolkit/native/layers/layer.h.
"""
from __future__ import annotations

import json
from typing import Any, Callable

from toolkit.arch.readers import FFN_ACTS
from toolkit.convert.plan import KV, kv_str
from toolkit.errors import UnsupportedError
from toolkit.gguf_io import Keys

ACCEPTED = tuple(FFN_ACTS)   # HF ACT2FN names (transformers 5.24 activations.py ACT2CLS) the runtime has


def ffn_act_kv(path: str, d: dict[str, Any], key: Callable[[str], str], attr: str = "hidden_act",
               default: str = "silu") -> list[KV]:
    """The KV list for config ``d[attr]`` (absent / null: ``default``): [] at the default (or an
    alias of it, ``swish`` for ``silu``), else the one string key with HF's name.

    Raises:
        UnsupportedError: one line naming ``path`` and ``attr`` when the value is not in :data:`ACCEPTED`.
    """
    return _act_kv(path, d, key(Keys.LLM.FEED_FORWARD_ACTIVATION), attr, default, "FFN")


def ssm_act_kv(path: str, d: dict[str, Any], key: Callable[[str], str], attr: str = "hidden_act") -> list[KV]:
    """The KV list for the activation after the mixer's causal conv, config ``d[attr]`` (absent /
    null: silu, HF's default and llama.cpp's fixed one): [] at silu / swish, else ``{arch}.ssm.activation``
    with HF's name.  ``attr``: ``hidden_act``; Nemotron-H ``mamba_hidden_act``, Zamba ``hidden_mamba_act``.

    Raises:
        UnsupportedError: one line naming ``path`` and ``attr`` when the value is not in :data:`ACCEPTED`.
    """
    return _act_kv(path, d, key(Keys.SSM.ACTIVATION), attr, "silu", "conv")


def _act_kv(path: str, d: dict[str, Any], name: str, attr: str, default: str, what: str) -> list[KV]:
    v = d.get(attr)
    if v is None:
        v = default
    if not isinstance(v, str) or v not in FFN_ACTS:
        raise UnsupportedError(f"{path}: key {attr!r} = {json.dumps(v)} is not supported (the runtime's {what} "
                               f"activations: {', '.join(ACCEPTED)})")
    if FFN_ACTS[v] == FFN_ACTS[default]:
        return []
    return [kv_str(name, v)]
