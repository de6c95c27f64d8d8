"""make frames: both sides' frame kinds, generated from the one declaration of the protocol.

jutul_jkernel/protocol/frames.toml declares every frame kind: its direction, its header
arguments with the rule each follows, its payload and what it says. Neither side reads it at
run time (JKernel is standard-library-only and Julia 1.5.3 has no TOML parser; Python's
FrameKind must stay an enum that mypy sees). This script writes what each side reads instead:

- jutul_jkernel/protocol/kinds.py: ``FrameKind``, each kind's arguments (``ARGS``) and the
  kinds each way (``FROM_JULIA``, ``TO_JULIA``), which protocol/wire.py checks frames by;
- julia/JKernel/src/frames.jl: the documented table, ``FrameKind`` and the incoming kinds'
  arguments (``INCOMING``), which wire.jl's ``parse_frames!`` checks frames by.

tests/test_frames.py fails while either file is not what this script writes. Standard library
only (tomllib, or tomli on Python 3.10, as scripts/mutants.py).

    python scripts/frames.py --write    # rewrite both files
    python scripts/frames.py --check    # exit 1 if either is out of date
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # the test extra installs tomli, which tomllib came from, on 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
DECLARATION = ROOT / "jutul_jkernel" / "protocol" / "frames.toml"
PYTHON_OUT = ROOT / "jutul_jkernel" / "protocol" / "kinds.py"
JULIA_OUT = ROOT / "julia" / "JKernel" / "src" / "frames.jl"

FROM_JULIA = "julia->python"
TO_JULIA = "python->julia"
RULES = ("id", "count", "token")  # the named rules; a list of words is the fourth
_LINE = 100  # both languages' line length (pyproject's ruff, the Julia side's habit)


class DeclarationError(Exception):
    """frames.toml is not TOML, or not in the shape its header comment describes."""


@dataclass(frozen=True)
class Arg:
    name: str
    rule: str  # "id", "count", "token" or "words"
    words: tuple[str, ...] = ()

    def shown(self) -> str:
        """How the table shows it: ``<id>``, ``<status ok|err|int>``."""
        return f"<{self.name} {'|'.join(self.words)}>" if self.rule == "words" else f"<{self.name}>"


@dataclass(frozen=True)
class Kind:
    name: str
    direction: str  # FROM_JULIA or TO_JULIA
    args: tuple[Arg, ...]
    payload: str
    doc: str

    def signature(self) -> str:
        """``RES <id> <status ok|err|int> <n>``: the header as the table shows it."""
        size = "0" if self.payload == "none" else "<n>"
        return " ".join((self.name, *(a.shown() for a in self.args), size))


@dataclass(frozen=True)
class Declaration:
    rules: dict[str, str]  # each named rule and what it allows
    kinds: tuple[Kind, ...]

    def way(self, direction: str) -> tuple[Kind, ...]:
        return tuple(k for k in self.kinds if k.direction == direction)


# ---- reading the declaration ----

_TOP_KEYS = {"rules": dict, "kind": list}
_KIND_KEYS = {"name": str, "direction": str, "args": list, "payload": str, "doc": str}
_ARG_KEYS = {"name": str, "rule": (str, list)}
_WORD = re.compile(r"[!-~]+")  # a token: printable ASCII without spaces


def _table(value: object, keys: dict[str, Any], where: str) -> dict[str, Any]:
    """``value``, once it is a table with exactly ``keys``, each of its type."""
    if not isinstance(value, dict):
        msg = f"{where}: {type(value).__name__} where a table belongs"
        raise DeclarationError(msg)
    problems = [f"no {k}" for k in keys if k not in value]
    problems += [f"unknown key {k!r}" for k in value if k not in keys]
    problems += [
        f"{k} is {type(v).__name__}"
        for k, v in value.items()
        if k in keys and not isinstance(v, keys[k])
    ]
    if problems:
        msg = f"{where}: {'; '.join(problems)}"
        raise DeclarationError(msg)
    return value


def _arg(value: object, where: str) -> Arg:
    raw = _table(value, _ARG_KEYS, where)
    name, rule = raw["name"], raw["rule"]
    where = f"{where} ({name})"
    if not re.fullmatch(r"[a-z][a-z_]*", name):
        msg = f"{where}: a name is lower-case letters and underscores"
        raise DeclarationError(msg)
    if isinstance(rule, str):
        if rule not in RULES:
            msg = f"{where}: rule {rule!r} is none of {', '.join(RULES)}, nor a list of words"
            raise DeclarationError(msg)
        return Arg(name, rule)
    words = tuple(rule)
    if not words or not all(isinstance(w, str) and _WORD.fullmatch(w) for w in words):
        msg = f"{where}: the words allowed are one or more printable ASCII words, no spaces"
        raise DeclarationError(msg)
    if len(set(words)) != len(words):
        msg = f"{where}: a word is allowed twice"
        raise DeclarationError(msg)
    return Arg(name, "words", words)


def _kind(value: object, where: str) -> Kind:
    raw = _table(value, _KIND_KEYS, where)
    name = raw["name"]
    where = f"{where} ({name})"
    if not re.fullmatch(r"[A-Z]{3}", name):
        msg = f"{where}: a kind's name is three upper-case ASCII letters"
        raise DeclarationError(msg)
    if raw["direction"] not in (FROM_JULIA, TO_JULIA):
        msg = f"{where}: direction is {FROM_JULIA!r} or {TO_JULIA!r}"
        raise DeclarationError(msg)
    args = tuple(_arg(a, f"{where}, argument {n}") for n, a in enumerate(raw["args"], 1))
    if len({a.name for a in args}) != len(args):
        msg = f"{where}: two arguments share a name"
        raise DeclarationError(msg)
    # wire.jl's handle_frame(kind, id, args, payload) takes the first argument apart.
    if raw["direction"] == TO_JULIA and (not args or args[0] != Arg("id", "id")):
        msg = f"{where}: a kind sent to Julia starts with {{ name = 'id', rule = 'id' }}"
        raise DeclarationError(msg)
    payload, doc = raw["payload"].strip(), " ".join(raw["doc"].split())
    if not payload or not doc:
        msg = f"{where}: payload and doc say something"
        raise DeclarationError(msg)
    return Kind(name, raw["direction"], args, payload, doc)


def parse(text: str, where: str = "frames.toml") -> Declaration:
    """The declaration that ``text`` holds; DeclarationError says what is wrong and where."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = f"{where}: {exc}"
        raise DeclarationError(msg) from exc
    raw = _table(data, _TOP_KEYS, where)
    rules = raw["rules"]
    if set(rules) != set(RULES) or not all(isinstance(v, str) and v for v in rules.values()):
        msg = f"{where}: [rules] says what each of {', '.join(RULES)} allows, and no more"
        raise DeclarationError(msg)
    kinds = tuple(_kind(k, f"{where}, kind {n}") for n, k in enumerate(raw["kind"], 1))
    names = [k.name for k in kinds]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        msg = f"{where}: {', '.join(twice)} declared twice"
        raise DeclarationError(msg)
    if not any(k.direction == FROM_JULIA for k in kinds) or not any(
        k.direction == TO_JULIA for k in kinds
    ):
        msg = f"{where}: kinds both ways are needed"
        raise DeclarationError(msg)
    return Declaration({r: rules[r] for r in RULES}, kinds)


def load(path: Path = DECLARATION) -> Declaration:
    return parse(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))


# ---- the Python module ----

_PY_HEAD = '''\
"""The frame kinds and the rules of their header arguments.

Generated by scripts/frames.py from jutul_jkernel/protocol/frames.toml, the one declaration of
the frame protocol: do not edit by hand; change the declaration, then run `make frames`.
protocol/wire.py checks every frame it encodes or decodes by these rules; Julia's
julia/JKernel/src/frames.jl is generated from the same declaration.
"""

from __future__ import annotations

import enum
from typing import Literal, NamedTuple


class Arg(NamedTuple):
    """A header argument: its name, its rule, and the words allowed when the rule is "words"."""

    name: str
    rule: Literal["id", "count", "token", "words"]
    words: tuple[str, ...] = ()


class FrameKind(enum.Enum):
    """Every frame kind; the value is the kind's name on the wire."""
'''

_PY_ARITY = '''
    @property
    def arity(self) -> int:
        """How many arguments stand between KIND and NBYTES."""
        return len(ARGS[self])

'''


def _comment(text: str, indent: str, first: str = "", width: int = _LINE) -> list[str]:
    """``text`` as comment lines of at most ``width`` characters, the first after ``first``."""
    lines = textwrap.wrap(
        first + text,
        width=width,
        initial_indent=f"{indent}# ",
        subsequent_indent=f"{indent}# ",
        break_long_words=False,
        break_on_hyphens=False,
    )
    return lines


def _py_arg(arg: Arg) -> str:
    if arg.rule != "words":
        return f'Arg("{arg.name}", "{arg.rule}")'
    words = ", ".join(f'"{w}"' for w in arg.words)
    return f'Arg("{arg.name}", "words", ({words}{"," if len(arg.words) == 1 else ""}))'


def _py_entry(kind: Kind) -> list[str]:
    """The kind's line of ARGS, as ruff format writes it (exploded when it is too long)."""
    args = [_py_arg(a) for a in kind.args]
    inline = f"({', '.join(args)}{',' if len(args) == 1 else ''})"
    line = f"    FrameKind.{kind.name}: {inline},"
    if len(line) <= _LINE:
        return [line]
    return [f"    FrameKind.{kind.name}: (", *(f"        {a}," for a in args), "    ),"]


def _py_to_julia(kinds: tuple[Kind, ...]) -> list[str]:
    """TO_JULIA, as ruff format writes it: one member a line."""
    members = [f"        FrameKind.{k.name}," for k in kinds]
    return ["TO_JULIA = frozenset(", "    {", *members, "    }", ")"]


def render_python(decl: Declaration) -> str:
    """The text of jutul_jkernel/protocol/kinds.py."""
    out = [_PY_HEAD]
    for direction, title in ((FROM_JULIA, "Julia -> Python"), (TO_JULIA, "Python -> Julia")):
        out.append(f"    # ---- {title} ----")
        for k in decl.way(direction):
            out += _comment(k.doc, "    ", f"{k.signature()}: ")
            out.append(f'    {k.name} = "{k.name}"')
        out.append("")
    out[-1:] = [_PY_ARITY]
    out += _comment(
        "Each kind's header arguments between KIND and NBYTES, in order. The rules: "
        + "; ".join(f"{r}: {text}" for r, text in decl.rules.items())
        + "; words: one of the words listed.",
        "",
    )
    out.append("ARGS: dict[FrameKind, tuple[Arg, ...]] = {")
    for k in decl.kinds:
        out += _py_entry(k)
    out += ["}", "", "# The kinds Julia receives (Python sends them); Julia sends the others."]
    out += _py_to_julia(decl.way(TO_JULIA))
    out.append("FROM_JULIA = frozenset(FrameKind) - TO_JULIA")
    return "\n".join(out) + "\n"


# ---- the Julia file ----

_JL_HEAD = """\
# frames.jl: the frame kinds. Generated by scripts/frames.py from
# jutul_jkernel/protocol/frames.toml, the one declaration of the frame protocol: do not edit by
# hand; change the declaration, then run `make frames` (JKernel reads no TOML at run time).
#
# Once the server has connected (a Unix socket on POSIX, loopback TCP on Windows: main.jl,
# connect_supervisor), everything travels as frames: an ASCII header line
# `KIND arg... NBYTES\\n` followed by exactly NBYTES payload bytes (<n>; 0: always empty).
# wire.jl sends and reads them, checking each incoming header by INCOMING below;
# jutul_jkernel/protocol/kinds.py, generated from the same declaration, is Python's FrameKind.
#"""

_JL_TYPES = '''
"""
The frame kinds, one constant each, named as on the wire and as protocol/kinds.py's `FrameKind`
members (`FrameKind.RES` on both sides); the table above says what each carries. Code names a
kind only through these.
"""
baremodule FrameKind'''

_JL_ARG = '''
"""
    FrameArg(name, rule, words)

One header argument of a frame Julia accepts: its `name`, and its `rule`: `:id`, `:count`,
`:token`, or `:words` (then one of `words`). wire.jl's `parse_frames!` checks each header by
them (`wire_arg_ok`).
"""
struct FrameArg
    name::String
    rule::Symbol
    words::Vector{String}
end
'''

_SIGNATURE_COLUMN = 31  # the table's descriptions start this far after "#   "


def _jl_row(kind: Kind) -> list[str]:
    sig = kind.signature()
    pad = " " * (4 + _SIGNATURE_COLUMN)
    lines = textwrap.wrap(
        kind.doc,
        width=_LINE - len(pad),
        break_long_words=False,
        break_on_hyphens=False,
    )
    if len(sig) < _SIGNATURE_COLUMN:
        first = f"#   {sig.ljust(_SIGNATURE_COLUMN)}{lines[0]}"
        rest = lines[1:]
    else:
        first, rest = f"#   {sig}", lines
    return [first, *(f"#{pad[1:]}{line}" for line in rest)]


def _jl_arg(arg: Arg) -> str:
    quoted = ", ".join(f'"{w}"' for w in arg.words)
    words = f"[{quoted}]" if arg.words else "String[]"
    return f'FrameArg("{arg.name}", :{arg.rule}, {words})'


def render_julia(decl: Declaration) -> str:
    """The text of julia/JKernel/src/frames.jl."""
    out = [_JL_HEAD]
    for direction, title in ((FROM_JULIA, "Julia -> Python"), (TO_JULIA, "Python -> Julia")):
        out.append(f"# {title}")
        for k in decl.way(direction):
            out += _jl_row(k)
    out.append("#")
    out += _comment(
        "Arguments: " + "; ".join(f"{r}: {text}" for r, text in decl.rules.items()) + ".",
        "",
    )
    out.append(_JL_TYPES)
    for direction, title in ((FROM_JULIA, "Julia -> Python"), (TO_JULIA, "Python -> Julia")):
        out.append(f"# {title}")
        out += [f'const {k.name} = "{k.name}"' for k in decl.way(direction)]
    out.append("end")
    out.append(_JL_ARG)
    out.append("# The kinds Julia accepts, each with its header arguments between KIND and NBYTES.")
    out.append("const INCOMING = Dict{String,Vector{FrameArg}}(")
    for k in decl.way(TO_JULIA):
        line = f"    FrameKind.{k.name} => [{', '.join(_jl_arg(a) for a in k.args)}],"
        if len(line) > _LINE:
            inner = [f"        {_jl_arg(a)}," for a in k.args]
            line = "\n".join([f"    FrameKind.{k.name} => [", *inner, "    ],"])
        out.append(line)
    out.append(")")
    return "\n".join(out) + "\n"


# ---- the command ----

OUTPUTS = ((PYTHON_OUT, render_python), (JULIA_OUT, render_julia))


def stale(decl: Declaration | None = None) -> list[Path]:
    """The generated files that are not what the declaration makes of them."""
    decl = decl if decl is not None else load()
    return [
        path
        for path, render in OUTPUTS
        if not path.is_file() or path.read_text(encoding="utf-8") != render(decl)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the generated files")
    mode.add_argument("--check", action="store_true", help="exit 1 if one is out of date")
    args = parser.parse_args(argv)
    try:
        decl = load()
    except DeclarationError as exc:
        print(exc, file=sys.stderr)
        return 1
    if args.write:
        for path, render in OUTPUTS:
            path.write_text(render(decl), encoding="utf-8")
        return 0
    old = stale(decl)
    for path in old:
        print(f"{path.relative_to(ROOT)} is out of date with {DECLARATION.relative_to(ROOT)}: "
              "run `make frames`", file=sys.stderr)  # fmt: skip
    return 1 if old else 0


if __name__ == "__main__":
    sys.exit(main())
