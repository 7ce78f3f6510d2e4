"""The help screens (``toolkit -h``, ``toolkit CMD -h``), drawn with rich from click's public
parameter attributes.

typer's own renderer lives in private functions (``typer.rich_utils._print_options_panel``, ...)
that change between releases; this module replaces it through typer's documented hook, the
``cls=`` command / group class (:class:`HelpCommand`, :class:`HelpGroup`, whose ``format_help``
and ``collect_usage_pieces`` are click's public methods).  It draws the layout typer 0.29 draws
(usage line, help text, Arguments / Options / Commands panels, the same styles and highlighters,
taken from rich-click as typer takes them) with these differences of ours:

- each option is one cell, as llama.cpp's help writes it (``-p, --prompt <str>``,
  ``-e, --escape / --no-escape``), its help beside it on a terminal of 100 columns or more and on
  the lines below it, indented, on a narrower one (typer's six columns cut long flags at 80);
- an on/off flag has no type (not ``<bool>``);
- an argument is written as the README writes it: its metavar verbatim (``HF_DIR``,
  ``[OUT.gguf]``), else its name in capitals, bracketed when optional (``[PROMPT]``); typer writes
  ``{model}`` / ``[prompt]``;
- in the command list a docstring's first paragraph is reflowed (its line breaks are not the
  terminal's);
- ``{families}`` in a help text is the converter registry's family list (:func:`expand`).

The type cell comes from the command function's annotations (``<int>``, ``<list[str]>``) and the
commands are listed in the order they were registered, so the screens read the same under every
typer of the range pyproject pins (compared byte for byte under 0.24.2 and 0.29.2).
"""
from __future__ import annotations

import inspect
import os
import types
import typing
from collections import defaultdict
from enum import Enum
from typing import Any

import typer.core
from rich import box
from rich.align import Align
from rich.columns import Columns
from rich.console import Console, group
from rich.highlighter import RegexHighlighter
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from rich.theme import Theme

# styles (typer's, after rich-click's)
STYLE_OPTION = "bold cyan"
STYLE_NEGATIVE_OPTION = "bold magenta"
STYLE_TYPES = "bold yellow"
STYLE_USAGE_COMMAND = "bold"
STYLE_DEPRECATED = "red"
STYLE_HELPTEXT = "dim"
STYLE_OPTION_DEFAULT = "dim"
STYLE_OPTION_ENVVAR = "dim yellow"
STYLE_REQUIRED_SHORT = "red"
STYLE_REQUIRED_LONG = "dim red"
STYLE_PANEL_BORDER = "dim"
STYLE_COMMAND_NAME = "bold cyan"
THEME = Theme({"option": STYLE_OPTION, "switch": "bold green", "negative_option": STYLE_NEGATIVE_OPTION,
               "negative_switch": "bold red", "types": STYLE_TYPES, "types_sep": "dim", "usage": "yellow"})


class OptionHighlighter(RegexHighlighter):
    """``-x`` / ``--xx`` spellings, ``<type>`` and ``Usage:`` in help text."""
    highlights = [
        r"(^|\W)(?P<switch>\-\w+)(?![a-zA-Z0-9])",
        r"(^|\W)(?P<option>\-\-[\w\-]+)(?![a-zA-Z0-9])",
        r"(?P<types>\<[^\>]+\>)",
        r"(?P<usage>Usage: )",
    ]


highlighter = OptionHighlighter()


def console() -> Console:
    """The help's console (stdout): colour when the terminal has it or FORCE_COLOR / PY_COLORS /
    GITHUB_ACTIONS is set; width from TERMINAL_WIDTH, else COLUMNS / the terminal."""
    force = True if (os.getenv("GITHUB_ACTIONS") or os.getenv("FORCE_COLOR") or os.getenv("PY_COLORS")) else None
    width = os.getenv("TERMINAL_WIDTH")
    return Console(theme=THEME, highlighter=highlighter, color_system="auto", force_terminal=force,
                   width=int(width) if width else None)


def _markup(text: str, style: str = "") -> Text:
    """``text`` dedented, read as rich markup (typer's "rich" markup mode), options highlighted."""
    return highlighter(Text.from_markup(inspect.cleandoc(text), style=style))


FAMILIES = "{families}"   # in a command's help: the converter registry's family names, in its order


def expand(text: str) -> str:
    """``text`` with :data:`FAMILIES` replaced by the registry's ``family_names()`` (the converters
    are imported only when a help text asks for them)."""
    if FAMILIES in text:
        from toolkit.convert.families import family_names
        text = text.replace(FAMILIES, ", ".join(family_names()))
    return text


def _is_argument(param) -> bool:
    return getattr(param, "param_type_name", "") == "argument"


def usage_name(param) -> str:
    """An argument as the usage line writes it: ``HF_DIR``, ``[OUT.gguf]``, ``[PROMPT]``."""
    if param.metavar is not None:
        name = param.metavar
    else:
        name = (param.name or "").upper()
        name = name if param.required else f"[{name}]"
    return name + ("..." if param.nargs != 1 else "")


def _annotation_label(ann: Any) -> str:
    """``int`` -> 'int', ``Optional[list[str]]`` -> 'list[str]', an Enum -> its values 'a|b'."""
    args = [a for a in typing.get_args(ann) if a is not type(None)]
    if typing.get_origin(ann) in (typing.Union, types.UnionType) and len(args) == 1:
        return _annotation_label(args[0])
    if typing.get_origin(ann) in (list, tuple) and args:
        return f"{typing.get_origin(ann).__name__}[{','.join(_annotation_label(a) for a in args)}]"
    if isinstance(ann, type) and issubclass(ann, Enum):
        return "|".join(str(m.value) for m in ann)
    return getattr(ann, "__name__", str(ann))


def type_label(param, ctx) -> str | None:
    """The type cell, from the annotation of the command function's parameter: ``<str>``,
    ``<int>``, ``<float>``, ``<list[str]>``; an option's metavar as given; None for an on/off
    flag or a parameter the function does not declare (typer's --install-completion)."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return None
    if not _is_argument(param) and param.metavar is not None:
        return param.metavar
    callback = getattr(ctx.command, "callback", None)
    try:
        ann = typing.get_type_hints(callback).get(param.name) if callback is not None else None
    except (NameError, TypeError):
        ann = None
    if ann is None:
        return None
    label = f"<{_annotation_label(ann)}>"
    if not _is_argument(param) and param.nargs != 1:
        label += "..."
    return label


def _split_opt(opt: str) -> str:
    return opt.lstrip("-/+") if opt[:1] in "-/+" else opt


def default_text(param, ctx) -> str:
    """What ``[default: ...]`` shows ('' for none): a flag pair's spelling without dashes
    (``escape``, ``no-conversation``), a list joined by ', ', an enum's value."""
    if isinstance(param.show_default, str):
        return f"({param.show_default})"
    resilient, ctx.resilient_parsing = ctx.resilient_parsing, True
    try:
        value = param.get_default(ctx, call=False)
    finally:
        ctx.resilient_parsing = resilient
    if value is None or not (param.show_default or ctx.show_default):
        return ""
    return _default_string(param, value)


def _default_string(param, value: Any) -> str:
    if isinstance(value, (list, tuple)):
        parts = [_default_string(param, v) for v in value]
        return "" if not any(parts) else ", ".join(parts)
    if isinstance(value, Enum):
        return str(value.value)
    if inspect.isfunction(value):
        return "(dynamic)"
    if getattr(param, "is_bool_flag", False):
        if param.secondary_opts:
            return _split_opt(param.opts[0] if value else param.secondary_opts[0])
        if not value:
            return ""
    return str(value)


def parameter_help(param, ctx) -> Columns:
    """The help cell: the help text (one paragraph per blank line), the env var, the default,
    ``[required]``."""
    items: list[Text] = []
    if param.help:
        paragraphs = [p.replace("\n", " ").strip() if not p.startswith("\b") else "{}\n".format(p.strip("\b\n"))
                      for p in param.help.split("\n\n")]
        items.append(_markup("\n".join(paragraphs).strip()))
    envvar = getattr(param, "envvar", None)
    if envvar and getattr(param, "show_envvar", False):
        items.append(Text(f"[env var: {envvar if isinstance(envvar, str) else ', '.join(map(str, envvar))}]",
                          style=STYLE_OPTION_ENVVAR))
    default = default_text(param, ctx)
    if default:
        items.append(Text(f"[default: {default}]", style=STYLE_OPTION_DEFAULT))
    if param.required:
        items.append(Text("[required]", style=STYLE_REQUIRED_LONG))
    return Columns(items)


def parameter_names(param, ctx) -> Text:
    """The name cell: ``-p, --prompt <str>``, ``-e, --escape / --no-escape``, ``IN.gguf <str>``;
    `` *`` after a required option."""
    t = Text()
    if _is_argument(param):
        t.append(usage_name(param).strip("[]"), style=STYLE_OPTION)
    else:
        t.append(", ".join(sorted(param.opts, key=lambda o: (o.startswith("--"), len(o)))), style=STYLE_OPTION)
        neg = sorted(param.secondary_opts, key=lambda o: (o.startswith("--"), len(o)))
        if neg:
            t.append(" / ")
            t.append(", ".join(neg), style=STYLE_NEGATIVE_OPTION)
    kind = type_label(param, ctx)
    if kind:
        t.append(" " + kind, style=STYLE_TYPES)
    if param.required and not _is_argument(param):
        t.append(" *", style=STYLE_REQUIRED_SHORT)
    return t


def _options_panel(con: Console, name: str, params: list, ctx) -> None:
    if not params:
        return
    wide = con.width >= 100
    table = Table(show_header=False, expand=True, box=None, pad_edge=False, padding=(0, 1))
    if wide:
        cells = [parameter_names(p, ctx) for p in params]
        table.add_column(no_wrap=False, max_width=max(20, min(max(c.cell_len for c in cells), con.width * 2 // 5)))
        table.add_column(ratio=1)
        for p, c in zip(params, cells):
            table.add_row(c, parameter_help(p, ctx))
    else:
        table.add_column(ratio=1)
        for p in params:
            table.add_row(parameter_names(p, ctx))
            table.add_row(Padding(parameter_help(p, ctx), (0, 0, 0, 4)))
    con.print(Panel(table, border_style=STYLE_PANEL_BORDER, title=name, title_align="left", box=box.ROUNDED))


def _command_help(help_text: str) -> Text:
    """A command's line in the command list: its first paragraph, reflowed."""
    first = inspect.cleandoc(expand(help_text)).partition("\n\n")[0]
    if first.startswith("\b"):
        first = first.replace("\b\n", "")
    else:
        first = " ".join(first.split())
    return _markup(first.strip())


def _commands_panel(con: Console, name: str, commands: list, width: int) -> None:
    table = Table(highlight=False, show_header=False, expand=True, box=None, show_lines=False, leading=0,
                  pad_edge=False, padding=(0, 1))
    table.add_column(style=STYLE_COMMAND_NAME, no_wrap=True, width=width)
    table.add_column("Description", justify="left", no_wrap=False, ratio=10)
    deprecated = any(c.deprecated for c in commands)
    for c in commands:
        row = [Text(c.name or "", style="dim" if c.deprecated else ""), _command_help(c.short_help or c.help or "")]
        if deprecated:
            row.append(Text("(deprecated) ", style=STYLE_DEPRECATED) if c.deprecated else None)
        table.add_row(*row)
    if table.row_count:
        con.print(Panel(table, border_style=STYLE_PANEL_BORDER, title=name, title_align="left"))


@group()
def _help_text(command):
    if command.deprecated:
        yield Text("(deprecated) ", style=STYLE_DEPRECATED)
    first, *rest = inspect.cleandoc(expand(command.help or "")).partition("\f")[0].split("\n\n")
    if not first.startswith("\b"):
        first = first.replace("\n", " ")
    yield _markup(first.strip())
    if rest:
        yield Text("")
        yield _markup("\n\n".join(rest), style=STYLE_HELPTEXT)


def render(command, ctx) -> None:
    """Print ``command``'s help screen (a click Command or Group) on stdout."""
    con = console()
    con.print(Padding(highlighter(command.get_usage(ctx)), 1), style=STYLE_USAGE_COMMAND)
    if command.help:
        con.print(Padding(Align(_help_text(command), pad=False), (0, 1, 1, 1)))
    panels: dict[str, dict[str, list]] = {"argument": defaultdict(list), "option": defaultdict(list)}
    for p in command.get_params(ctx):
        kind = getattr(p, "param_type_name", "")
        if kind in panels and not getattr(p, "hidden", False):
            default = "Arguments" if kind == "argument" else "Options"
            panels[kind][getattr(p, "rich_help_panel", None) or default].append(p)
    for kind, default in (("argument", "Arguments"), ("option", "Options")):
        _options_panel(con, default, panels[kind].get(default, []), ctx)
        for name, params in panels[kind].items():
            if name != default:
                _options_panel(con, name, params, ctx)
    if hasattr(command, "list_commands"):
        by_panel: dict[str, list] = defaultdict(list)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                by_panel[getattr(sub, "rich_help_panel", None) or "Commands"].append(sub)
        width = max((len(c.name or "") for cs in by_panel.values() for c in cs), default=0)
        _commands_panel(con, "Commands", by_panel.get("Commands", []), width)
        for name, commands in by_panel.items():
            if name != "Commands":
                _commands_panel(con, name, commands, width)
    if command.epilog:
        con.print(Padding(Align(_markup(command.epilog), pad=False), 1))


class HelpCommand(typer.core.TyperCommand):
    """A command whose help and usage line are this module's."""

    def format_help(self, ctx, formatter) -> None:
        render(self, ctx)

    def collect_usage_pieces(self, ctx) -> list[str]:
        return ([self.options_metavar] if self.options_metavar else []) + \
            [usage_name(p) for p in self.get_params(ctx) if _is_argument(p)]


class HelpGroup(typer.core.TyperGroup):
    """The root group, with this module's help; commands listed in the order they were
    registered (click sorts them by name, as typer did before 0.13)."""

    def format_help(self, ctx, formatter) -> None:
        render(self, ctx)

    def list_commands(self, ctx) -> list[str]:
        return list(self.commands)


class Typer(typer.Typer):
    """``typer.Typer`` whose commands default to :class:`HelpCommand` and whose group is
    :class:`HelpGroup`."""

    def __init__(self, **kw) -> None:
        kw.setdefault("cls", HelpGroup)
        super().__init__(**kw)

    def command(self, *args, cls=None, **kw):
        return super().command(*args, cls=cls or HelpCommand, **kw)
