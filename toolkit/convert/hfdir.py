"""A Hugging Face checkpoint directory: config.json (transformers 4 and 5 forms), shards, tokenizer files.

Nothing here reads tensor data; :class:`HFDir` holds the headers of every shard and the
normalised config.  Inputs are never modified.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any

from toolkit.convert.st_reader import STTensor, read_header
from toolkit.errors import InputError

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"

# layer_types spellings: transformers 5 ("full_attention"/"linear_attention") and 4 ("attention"/"mamba")
_ATTN_TYPES = ("full_attention", "attention")
_RECURRENT_TYPES = ("linear_attention", "mamba", "mamba2", "ssm")


def load_json(path: str) -> Any:
    """Read a JSON file; InputError naming the file on a missing or malformed one."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:  # RecursionError: "[[[[..." nested too deep
        raise InputError(f"{path}: not valid JSON ({e})") from None


class Config:
    """config.json with lookups that understand both transformers forms.

    ``get("d_conv")`` tries ``d_conv`` and then the hybrid prefix form ``mamba_d_conv``.
    ``rope(...)`` reads the transformers-5 ``rope_parameters`` dict first, then the flat
    transformers-4 key (``rope_theta``, ``partial_rotary_factor``) and ``rope_scaling``.
    Every error names config.json and the key.
    """

    def __init__(self, path: str, d: dict[str, Any]):
        if not isinstance(d, dict):
            raise InputError(f"{path}: expected a JSON object")
        self.path = path
        self.d = d

    def has(self, *names: str) -> bool:
        return any(self._find(n) is not None for n in names)

    def _find(self, name: str) -> Any:
        for key in (name, "mamba_" + name):
            if key in self.d and self.d[key] is not None:
                return self.d[key]
        return None

    def get(self, *names: str, default: Any = None) -> Any:
        for n in names:
            v = self._find(n)
            if v is not None:
                return v
        return default

    def int(self, *names: str, default: Any = None, min_value: int = 1) -> int:
        """An integer hparam; InputError naming the key when missing, not an int or < min_value."""
        for n in names:
            v = self._find(n)
            if v is None:
                continue
            key = n if n in self.d else "mamba_" + n
            if isinstance(v, bool) or not isinstance(v, int):
                if isinstance(v, float) and v.is_integer():
                    v = int(v)
                else:
                    raise InputError(f"{self.path}: key {key!r} = {v!r} is not an integer")
            if v < min_value:
                raise InputError(f"{self.path}: key {key!r} = {v} is out of range (must be >= {min_value})")
            if v > 0xFFFFFFFF:   # no hparam is larger; a GGUF UINT32 key could not hold it
                raise InputError(f"{self.path}: key {key!r} = {v} is out of range (must be <= {0xFFFFFFFF})")
            return v
        if default is not None:
            return default
        raise InputError(f"{self.path}: missing key {' / '.join(repr(n) for n in names)}")

    def float(self, *names: str, default: Any = None) -> float:
        for n in names:
            v = self._find(n)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise InputError(f"{self.path}: key {n!r} = {v!r} is not a finite number")
            if abs(v) > 3.4028234663852886e38:      # written as float32 (GGUF f32 keys)
                raise InputError(f"{self.path}: key {n!r} = {v!r} is out of the float32 range")
            return float(v)
        if default is not None:
            return float(default)
        raise InputError(f"{self.path}: missing key {' / '.join(repr(n) for n in names)}")

    def eps(self, *names: str, default: Any = None) -> float:
        """A norm epsilon (:meth:`float`); InputError naming the key when it is negative (the
        loader refuses such a file: ``toolkit.arch.readers.check_rms_eps``)."""
        v = self.float(*names, default=default)
        if v < 0:
            key = next((k for n in names for k in (n, "mamba_" + n) if self.d.get(k) is not None), names[0])
            raise InputError(f"{self.path}: key {key!r} = {v!r} is not a valid epsilon (must be >= 0)")
        return v

    def flag(self, name: str, default: bool) -> bool:
        """A boolean hparam: JSON ``true`` / ``false`` (absent or null: ``default``).
        InputError naming the key for anything else (``"false"`` is a non-empty string, so
        ``bool()`` of it would be True)."""
        v = self.d.get(name)
        if v is None:
            return bool(default)
        if not isinstance(v, bool):
            raise InputError(f"{self.path}: key {name!r} = {v!r} is not true or false")
        return v

    def rope(self, name: str, default: Any = None) -> Any:
        """A RoPE parameter: ``rope_parameters[name]`` (transformers 5), else the flat key
        (transformers 4), else ``rope_scaling[name]``."""
        rp = self.d.get("rope_parameters")
        if isinstance(rp, dict) and rp.get(name) is not None:
            return rp[name]
        if self.d.get(name) is not None:
            return self.d[name]
        rs = self.d.get("rope_scaling")
        if isinstance(rs, dict) and rs.get(name) is not None:
            return rs[name]
        return default

    def rope_theta(self, default: float) -> float:
        """The RoPE base (:meth:`rope` ``rope_theta``, ``default`` when absent) as a float.

        Raises:
            InputError: not a positive number (names the file).
        """
        theta = self.rope("rope_theta", default)
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
            raise InputError(f"{self.path}: rope_theta = {theta!r} must be a positive number")
        return float(theta)

    def layer_list(self, n_layer: int, *, types_key: str = "layer_types", indices_key: str, period_key: str,
                   offset_key: str, match_types: tuple[str, ...] = _ATTN_TYPES,
                   other_types: tuple[str, ...] = _RECURRENT_TYPES) -> list[int] | None:
        """The explicit sorted list of layers of one kind, from whichever form config.json uses:
        ``layer_types`` (both spellings), an explicit index list, or period/offset
        (layer i is selected when ``i % period == offset``).  None when no form is present.

        Raises:
            InputError: malformed values, or two forms present that disagree (names both keys).
        """
        found: list[tuple[str, list[int]]] = []
        lt = self.d.get(types_key) if types_key else None
        if lt is not None:
            if not isinstance(lt, list) or len(lt) != n_layer:
                raise InputError(f"{self.path}: key {types_key!r} must be a list of {n_layer} layer types, got {lt!r}")
            sel = []
            for i, t in enumerate(lt):
                if t in match_types:
                    sel.append(i)
                elif t not in other_types:
                    raise InputError(f"{self.path}: key {types_key!r}[{i}] = {t!r} is not a known layer type "
                                     f"({', '.join(match_types + other_types)})")
            found.append((types_key, sel))
        idx = self.d.get(indices_key) if indices_key else None
        if idx is not None:
            if not isinstance(idx, list) or not all(isinstance(i, int) and 0 <= i < n_layer for i in idx):
                raise InputError(f"{self.path}: key {indices_key!r} = {idx!r} must list layer indices in [0, {n_layer})")
            found.append((indices_key, sorted(set(idx))))
        per = self.d.get(period_key) if period_key else None
        if per is not None:
            off = self.d.get(offset_key)
            if not isinstance(per, int) or per <= 0:
                raise InputError(f"{self.path}: key {period_key!r} = {per!r} must be a positive integer")
            if not isinstance(off, int) or not (0 <= off < per):
                raise InputError(f"{self.path}: key {offset_key!r} = {off!r} must be an integer in [0, {period_key}={per})")
            found.append((f"{period_key}/{offset_key}", [i for i in range(n_layer) if i % per == off]))
        if not found:
            return None
        for key, sel in found[1:]:
            if sel != found[0][1]:
                raise InputError(f"{self.path}: keys {found[0][0]!r} ({found[0][1]}) and {key!r} ({sel}) disagree")
        return found[0][1]


class HFDir:
    """A checkpoint directory: normalised config, every shard's tensors, tokenizer file paths.

    Attributes:
        path:      the directory
        config:    :class:`Config` of config.json
        arch_name: ``architectures[0]`` of config.json (the registry key)
        tensors:   {HF name: STTensor}, from the index (or the single file), headers validated

    Raises:
        InputError: not a directory, no config.json, no safetensors, malformed index, a
            missing shard, a tensor named in the index but absent from its shard (or the reverse).
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        if not os.path.isdir(self.path):
            raise InputError(f"{self.path}: " + ("not a directory" if os.path.exists(self.path) else "no such directory"))
        cfg_path = os.path.join(self.path, "config.json")
        if not os.path.isfile(cfg_path):
            raise InputError(f"{self.path}: no config.json (not a Hugging Face checkpoint directory)")
        self.config = Config(cfg_path, load_json(cfg_path))
        archs = self.config.d.get("architectures")
        if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
            raise InputError(f"{cfg_path}: key 'architectures' must be a non-empty list of class names")
        self.arch_name: str = archs[0]
        self.shards, self.tensors = self._index()

    def file(self, name: str) -> str | None:
        p = os.path.join(self.path, name)
        return p if os.path.isfile(p) else None

    def _index(self) -> tuple[list[str], dict[str, STTensor]]:
        idx_path = os.path.join(self.path, INDEX_FILE)
        single = os.path.join(self.path, SINGLE_FILE)
        if os.path.isfile(idx_path):
            idx = load_json(idx_path)
            wm = idx.get("weight_map") if isinstance(idx, dict) else None
            if not isinstance(wm, dict) or not wm or not all(isinstance(v, str) for v in wm.values()):
                raise InputError(f"{idx_path}: key 'weight_map' must map tensor names to shard files")
            shards = list(dict.fromkeys(wm.values()))
            tensors: dict[str, STTensor] = {}
            for sh in shards:
                if os.path.basename(sh) != sh:
                    raise InputError(f"{idx_path}: shard name {sh!r} is not a plain file name")
                sp = os.path.join(self.path, sh)
                if not os.path.isfile(sp):
                    raise InputError(f"{sp}: no such file (shard named in {INDEX_FILE})")
                hdr = read_header(sp)
                for name, t in hdr.items():
                    if wm.get(name) != sh:
                        raise InputError(f"{sp}: tensor {name!r} is not listed for this shard in {INDEX_FILE}")
                    tensors[name] = t
            missing = [n for n in wm if n not in tensors]
            if missing:
                raise InputError(f"{os.path.join(self.path, wm[missing[0]])}: tensor {missing[0]!r} named in "
                                 f"{INDEX_FILE} is not in this shard ({len(missing)} missing)")
            return [os.path.join(self.path, s) for s in shards], tensors
        if os.path.isfile(single):
            return [single], read_header(single)
        others = sorted(f for f in os.listdir(self.path) if f.endswith(".safetensors"))
        if others:
            raise InputError(f"{self.path}: {len(others)} safetensors files but no {INDEX_FILE}")
        if any(f.endswith((".bin", ".pt", ".pth")) for f in os.listdir(self.path)):
            raise InputError(f"{self.path}: only PyTorch pickle weights; convert needs safetensors")
        raise InputError(f"{self.path}: no {SINGLE_FILE} or {INDEX_FILE}")
