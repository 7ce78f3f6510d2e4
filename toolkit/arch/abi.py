"""``tk_hparams`` (toolkit/native/toolkit.h): where each C field's value comes from.

Generated from the declarations of :mod:`toolkit.arch.fields` (as the C struct is).  The runtime
fills the struct from this list alone (``toolkit.runtime.model``), and tests/unit/test_arch_table.py
holds it equal to the cffi layout with :func:`struct_mismatches`: every C field is filled, every
:class:`toolkit.arch.HParams` field reaches C or is listed in :data:`PYTHON_ONLY` with the reason,
and the value kinds agree.  C fields are named by their path (``kda.head_dim``: ``hp->kda.head_dim``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable

from toolkit.arch import fields as F
from toolkit.arch.table import ArchSpec

# C type spelling (as cffi reports it: ffi.typeof(...).fields[i][1].type.cname) -> value kind
C_KINDS = {"int32_t": "int32", "float": "float", "int32_t *": "int32[]", "int32_t const *": "int32[]",
           "uint64_t *": "uint64[]", "uint64_t const *": "uint64[]", "char *": "str", "char const *": "str"}


@dataclass(frozen=True)
class CField:
    """One ``tk_hparams`` field: its C path (``member`` or ``group.member``), value kind and source.

    ``kind``: ``"int32"``, ``"float"``, ``"int32[]"`` (a per-layer array of n_layer ints; an
    empty list is passed as NULL), ``"uint64[]"`` (exact unsigned 64-bit values; empty: NULL) or
    ``"str"`` (a NUL-terminated name).
    ``source``: an :class:`HParams` attribute, or ``"spec.ATTR"`` for an :class:`ArchSpec` one.
    """

    name: str
    kind: str
    source: str = ""

    @property
    def src(self) -> str:
        return self.source or self.name

    def set(self, c: Any, v: Any) -> None:
        """Store ``v`` in this field of the cffi ``tk_hparams`` ``c`` (walking its sub-struct)."""
        *grp, name = self.name.split(".")
        for g in grp:
            c = getattr(c, g)
        setattr(c, name, v)

    def get(self, c: Any) -> Any:
        """This field of the cffi ``tk_hparams`` ``c``."""
        for part in self.name.split("."):
            c = getattr(c, part)
        return c

    def value(self, hp: Any, spec: ArchSpec) -> Any:
        """The raw value for this field from ``hp`` (HParams) and its row ``spec``."""
        if self.src.startswith("spec."):
            return getattr(spec, self.src[5:])
        return getattr(hp, self.src)


def _cfield(h: F.HParam) -> CField:
    kind = "int32" if h.type == "bool" else h.type
    return CField(h.c_path, kind, h.source or h.name)


# generated from the declarations (toolkit.arch.fields), in the C struct's order
TK_HPARAMS: tuple[CField, ...] = tuple(_cfield(h) for h in F.c_fields())

# HParams fields the C side does not take, and why
PYTHON_ONLY: dict[str, str] = {h.name: h.why for h in F.hparams_fields() if h.c_name is None}


def flat_fields(ctype: Any, prefix: str = "") -> list[tuple[str, str]]:
    """(``group.member`` path, C type spelling) of every leaf field of a cffi struct type
    (``ffi.typeof("tk_hparams")``), sub-structs walked in order."""
    out = []
    for n, f in ctype.fields:
        if f.type.kind == "struct":
            out += flat_fields(f.type, f"{prefix}{n}.")
        else:
            out.append((prefix + n, f.type.cname))
    return out


def struct_mismatches(c_fields: Iterable[tuple[str, str]], py_fields: Iterable[str],
                      table: Iterable[CField] = TK_HPARAMS,
                      python_only: dict[str, str] | None = None) -> list[str]:
    """What disagrees between the C struct, the HParams fields and the field list; [] when all agree.

    Args:
        c_fields: (name, C type spelling) of every ``tk_hparams`` field, in any order.
        py_fields: names of every HParams field.
        table: the field list (default :data:`TK_HPARAMS`).
        python_only: HParams fields deliberately not passed (default :data:`PYTHON_ONLY`).
    Returns:
        one line per problem.  Raises nothing.
    """
    python_only = PYTHON_ONLY if python_only is None else python_only
    c = dict(c_fields)
    py = set(py_fields)
    spec_attrs = {f.name for f in dataclasses.fields(ArchSpec)} | {n for n, v in vars(ArchSpec).items()
                                                                  if isinstance(v, property)}
    rows = {f.name: f for f in table}
    out = [f"tk_hparams.{n} ({t}) is not filled from Python" for n, t in c.items() if n not in rows]
    for f in rows.values():
        if f.name not in c:
            out.append(f"field list fills tk_hparams.{f.name}, which the C struct lacks")
        elif C_KINDS.get(c[f.name]) != f.kind:
            out.append(f"tk_hparams.{f.name} is {c[f.name]} in C, {f.kind} in the field list")
        ok = f.src[5:] in spec_attrs if f.src.startswith("spec.") else f.src in py
        if not ok:
            out.append(f"tk_hparams.{f.name}: source {f.src!r} is not a field of "
                       f"{'ArchSpec' if f.src.startswith('spec.') else 'HParams'}")
    used = {f.src for f in rows.values()}
    out += [f"HParams.{n} is not passed to C (nor listed as Python-only)"
            for n in sorted(py - used - set(python_only))]
    out += [f"HParams.{n} is listed as Python-only but also passed to C" for n in sorted(set(python_only) & used)]
    out += [f"Python-only {n!r} is not an HParams field" for n in sorted(set(python_only) - py)]
    return out
