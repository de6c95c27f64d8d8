"""The Julia side's outside surface: what julia/*.jl and JKernel's src/*.jl take from Julia.

``julia/JKernel/surface.toml`` is the reviewed list of every name the Julia sources take from
outside JKernel (qualified names, names reached with getfield/isdefined, globals assigned in
Base, ccall/cglobal symbols, Base types we subtype). This module reads Julia source the way the
checks need it: comments and string bodies blanked (docstrings too), interpolated code kept,
line numbers unchanged; then it finds every outside use, and every struct of ours that gives an
IO subtype a field Base reserves. Pure Python: no Julia needed. tests/test_surface.py holds the
code and the list to each other.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # the test extra installs tomli, which tomllib came from, on 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
SURFACE_TOML = ROOT / "julia" / "JKernel" / "surface.toml"
BRANCHES = ("release-1.10", "release-1.12", "master")

# Modules whose qualified names are outside JKernel. `Base64`, `Logging`, `Sockets`, `REPL`,
# `Pkg` and `Distributed` are stdlibs; the rest are Base's or Core's own submodules.
ROOTS = ("Base", "Core", "REPL", "Pkg", "Distributed", "Sockets", "Logging", "Libc", "Sys",
         "Threads", "Meta", "Docs", "Markdown", "Base64", "GC", "InteractiveUtils")  # fmt: skip

# Base's abstract IO types, and the fields Base >= 1.7 reserves on them: base/io.jl defines
# `getproperty(pipe::AbstractPipe, name::Symbol)`, which returns `getfield(pipe, name)::IO`
# for these names (JuliaLang/julia base/io.jl, release-1.10, release-1.12 and master; the
# docstring: "`pipe.err` or `pipe.err_stream`, if present, must be of type `IO`"). A field of
# another type under one of these names makes every read of it throw a TypeError.
IO_TYPES = ("IO", "AbstractPipe", "LibuvStream", "LibuvServer", "GenericIOBuffer", "IOContext")
RESERVED_IO_FIELDS = ("in", "out", "err", "in_stream", "out_stream", "err_stream")

_IDENT = r"[A-Za-z_\u00a1-\U0010ffff][A-Za-z0-9_!\u00a1-\U0010ffff]*"
_ROOT_ALT = "|".join(ROOTS)


# ---- reading Julia source ----


def strip_julia(text: str) -> str:
    """``text`` with comments and string/char/command bodies blanked, line breaks kept.

    Interpolated code in strings and commands (``"$(Base.x())"``, `` `$(Base.julia_cmd())` ``)
    is kept, since Julia runs it; prefixed literals (``r"..."``, ``ip"..."``, ``raw"..."``) have
    none. The body of ``Symbol("...")`` is kept too: ``isdefined(M, Symbol("@name"))`` names a
    macro that way.
    """
    return _Stripper(text).run()


class _Stripper:
    def __init__(self, text: str) -> None:
        self.s = text
        self.n = len(text)
        self.out: list[str] = []

    def run(self) -> str:
        end = self.code(0, stop_at_close=False)
        assert end == self.n
        return "".join(self.out)

    def blank(self, a: int, b: int) -> None:
        self.out.append("".join(c if c == "\n" else " " for c in self.s[a:b]))

    def keep(self, a: int, b: int) -> None:
        self.out.append(self.s[a:b])

    def prev_code_char(self) -> str:
        """The last character written, for telling a char literal from the adjoint `'`."""
        for chunk in reversed(self.out):
            if chunk:
                return chunk[-1]
        return "\n"

    def code(self, i: int, stop_at_close: bool) -> int:
        """Copy code from ``i``; with ``stop_at_close``, stop after the unmatched ``)``."""
        s, n = self.s, self.n
        depth = 0
        while i < n:
            c = s[i]
            if c == "#":
                i = self.comment(i)
            elif c == '"' or c == "`":
                # r"...", ip"...", raw"...", MIME"...": a macro gets the text, nothing runs
                prefix = re.search(_IDENT + r"$", s[max(0, i - 64) : i])
                i = self.string(i, interpolate=prefix is None, symbol=self.after_symbol_call())
            elif c == "'" and self.is_char_literal(i):
                i = self.char(i)
            else:
                if c == "(":
                    depth += 1
                elif c == ")":
                    if depth == 0 and stop_at_close:
                        self.keep(i, i + 1)
                        return i + 1
                    depth -= 1
                self.keep(i, i + 1)
                i += 1
        return i

    def after_symbol_call(self) -> bool:
        tail = "".join(self.out[-8:])
        return bool(re.search(r"\bSymbol\($", tail))

    def is_char_literal(self, i: int) -> bool:
        prev = self.prev_code_char()
        # x', a[i]', f(x)', x'' are adjoints; anything else opens a char literal
        return not (prev.isalnum() or prev in "_)]}'!" or (ord(prev) > 127 and prev.isalpha()))

    def comment(self, i: int) -> int:
        s = self.s
        if s.startswith("#=", i):
            depth, j = 0, i
            while j < self.n:
                if s.startswith("#=", j):
                    depth += 1
                    j += 2
                elif s.startswith("=#", j):
                    depth -= 1
                    j += 2
                    if depth == 0:
                        break
                else:
                    j += 1
            self.blank(i, j)
            return j
        j = s.find("\n", i)
        j = self.n if j < 0 else j
        self.blank(i, j)
        return j

    def char(self, i: int) -> int:
        s = self.s
        j = i + 1
        if j < self.n and s[j] == "\\":
            j += 2
            while j < self.n and s[j] != "'":
                j += 1
        else:
            j += 1
        self.blank(i, min(j + 1, self.n))
        return j + 1

    def string(self, i: int, interpolate: bool, symbol: bool) -> int:
        s = self.s
        q = s[i]
        delim = q * 3 if s.startswith(q * 3, i) else q
        j = i + len(delim)
        self.keep(i, j)  # the quotes stay, so `x = ""` still reads as an assignment
        start = j
        while j < self.n:
            if s[j] == "\\":
                j += 2
            elif s.startswith(delim, j):
                (self.keep if symbol else self.blank)(start, j)
                self.keep(j, j + len(delim))
                return j + len(delim)
            elif interpolate and s[j] == "$" and j + 1 < self.n:
                self.blank(start, j + 1)
                if s[j + 1] == "(":
                    self.keep(j + 1, j + 2)
                    j = self.code(j + 2, stop_at_close=True)
                else:
                    m = re.compile(_IDENT).match(s, j + 1)
                    k = m.end() if m else j + 1
                    self.keep(j + 1, k)
                    j = k
                start = j
            else:
                j += 1
        self.blank(start, j)
        return j


# ---- finding outside uses ----


@dataclass(frozen=True)
class Use:
    name: str  # "Base.x", "Distributed.Worker.manager", "ccall :setvbuf", "<: Base.AbstractPipe"
    file: str  # relative to the repository root
    line: int
    text: str  # the stripped source line, for the message
    via: str = ""  # the binding variable that reached it, if any

    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Binding:
    """A variable in one file that holds an outside module or object (surface.toml [[binding]])."""

    file: str
    var: str
    is_: str


@dataclass
class Source:
    path: Path
    rel: str
    stripped: str
    lines: list[str] = field(default_factory=list)

    def line_of(self, offset: int) -> int:
        return self.stripped.count("\n", 0, offset) + 1


def julia_files(root: Path = ROOT) -> list[Path]:
    """The Julia sources the surface covers: server.jl, launcher.jl and JKernel's src/*.jl."""
    julia = root / "julia"
    return sorted([*julia.glob("*.jl"), *(julia / "JKernel" / "src").glob("*.jl")])


def load_source(path: Path, root: Path = ROOT, text: str | None = None) -> Source:
    raw = path.read_text() if text is None else text
    stripped = strip_julia(raw)
    rel = path.relative_to(root).as_posix() if path.is_absolute() else path.as_posix()
    return Source(path, rel, stripped, stripped.split("\n"))


_QUALIFIED = re.compile(rf"(?<![\w.@!])(?:{_ROOT_ALT})(?:\.@?{_IDENT})+")
_REFLECT = re.compile(
    rf"\b(getfield|isdefined|hasproperty|getproperty|getglobal|setglobal!)\(\s*"
    rf"((?:{_IDENT})(?:\.{_IDENT})*)\s*,\s*"
    rf"(?::({_IDENT})|Symbol\(\"(@?{_IDENT})\"\))"
)
_EVAL_ASSIGN = re.compile(
    rf"\bCore\.eval\(\s*((?:{_ROOT_ALT})(?:\.{_IDENT})*)\s*,\s*:\(\s*({_IDENT})\s*="
)
_CCALL = re.compile(rf"\b(ccall|cglobal)\(\s*\(?\s*:({_IDENT})")
_IMPORT = re.compile(
    rf"^[ \t]*(?:using|import)\s+((?:{_ROOT_ALT})(?:\.{_IDENT})*)\s*:\s*(.+)$", re.M
)
_STRUCT = re.compile(
    rf"^[ \t]*(?:mutable\s+)?struct\s+({_IDENT})(?:\{{[^}}]*\}})?\s*(?:<:\s*([\w.]+))?", re.M
)
_ABSTRACT = re.compile(
    rf"^[ \t]*abstract\s+type\s+({_IDENT})(?:\{{[^}}]*\}})?\s*(?:<:\s*([\w.]+))?", re.M
)


def _chain_after(text: str, pos: int) -> str:
    m = re.compile(rf"(?:\.@?{_IDENT})*").match(text, pos)
    return m.group(0) if m else ""


def find_uses(src: Source, bindings: Iterable[Binding] = ()) -> list[Use]:
    """Every outside name ``src`` uses, once per line and name."""
    text = src.stripped
    found: dict[tuple[str, int], Use] = {}

    def add(name: str, offset: int, via: str = "") -> None:
        line = src.line_of(offset)
        text_ = src.lines[line - 1].strip()
        found.setdefault((name, line), Use(name, src.rel, line, text_, via))

    for m in _QUALIFIED.finditer(text):
        # `struct X <: Base.AbstractPipe`: the [[subtype]] entry covers the supertype
        before = text[text.rfind("\n", 0, m.start()) + 1 : m.start()]
        if re.search(r"\bstruct\b[^\n]*<:\s*$", before):
            continue
        add(m.group(0), m.start())
    bound = {b.var: b.is_ for b in bindings if b.file == src.rel}
    for m in _REFLECT.finditer(text):
        owner, sym = m.group(2), m.group(3) or m.group(4)
        head = owner.split(".")[0]
        if head in ROOTS:
            add(f"{owner}.{sym}", m.start())
        elif owner in bound or head in bound:
            var = owner if owner in bound else head
            add(f"{bound[var]}{owner[len(var) :]}.{sym}", m.start(), var)
    for var, target in bound.items():
        for m in re.finditer(rf"(?<![\w.@$:]){re.escape(var)}(?=\.@?{_IDENT})", text):
            add(target + _chain_after(text, m.end()), m.start(), var)
    for m in _EVAL_ASSIGN.finditer(text):
        add(f"{m.group(1)}.{m.group(2)}", m.start())
    for m in _CCALL.finditer(text):
        add(f"{m.group(1)} :{m.group(2)}", m.start())
    for m in _IMPORT.finditer(text):
        for name in re.findall(rf"@?{_IDENT}", m.group(2)):
            add(f"{m.group(1)}.{name}", m.start())
    for st in structs(src):
        if st.super and st.super.split(".")[0] != "JKernel":
            add(f"<: {st.super}", st.offset)
    return sorted(found.values(), key=lambda u: (u.file, u.line, u.name))


# ---- our types, and the fields Base reserves ----


@dataclass(frozen=True)
class Struct:
    name: str
    super: str | None
    fields: tuple[tuple[str, int], ...]  # (field name, line)
    file: str
    line: int
    offset: int


_BLOCK_WORDS = re.compile(
    r"\b(end|function|macro|module|baremodule|struct|if|for|while|let|begin|quote|try|do)\b"
)


def structs(src: Source) -> list[Struct]:
    """The structs and abstract types ``src`` defines, with their fields (inner constructors
    and other nested blocks skipped)."""
    text = src.stripped
    out: list[Struct] = []
    for m in _ABSTRACT.finditer(text):
        out.append(Struct(m.group(1), m.group(2), (), src.rel, src.line_of(m.start()), m.start()))
    for m in _STRUCT.finditer(text):
        first = src.line_of(m.start())
        rest = text[m.end() :]
        fields: list[tuple[str, int]] = []
        # `struct X end` on one line, or a body up to the `end` that closes it
        if not re.match(r"\s*end\b", rest):
            depth = 1
            for k, line in enumerate(src.lines[first:], start=first + 1):
                words = _BLOCK_WORDS.findall(line)
                if depth == 1 and not words:
                    f = re.match(rf"\s*({_IDENT})\s*(?:::|$)", line)
                    if f and f.group(1) not in ("const",):
                        fields.append((f.group(1), k))
                for w in words:
                    depth += -1 if w == "end" else 1
                if depth <= 0:
                    break
        out.append(Struct(m.group(1), m.group(2), tuple(fields), src.rel, first, m.start()))
    return out


@dataclass(frozen=True)
class Problem:
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


def io_subtypes(sources: Iterable[Source]) -> dict[str, Struct]:
    """Our types that are Base IO types, directly or through another type of ours."""
    ours = {st.name: st for src in sources for st in structs(src)}
    io: dict[str, Struct] = {}
    changed = True
    while changed:
        changed = False
        for name, st in ours.items():
            sup = (st.super or "").split(".")[-1]
            if name not in io and (sup in IO_TYPES or sup in io):
                io[name] = st
                changed = True
    return io


def reserved_field_problems(sources: list[Source]) -> list[Problem]:
    """Fields named as Base's `getproperty(::AbstractPipe, ...)` reserves, on our IO subtypes,
    and methods of ours for `Base.getproperty` on them (they would override Base's contract)."""
    problems = []
    io = io_subtypes(sources)
    for st in io.values():
        for name, line in st.fields:
            if name in RESERVED_IO_FIELDS:
                problems.append(Problem(
                    f"{st.file}:{line}",
                    f"field `{name}` of {st.name} <: {st.super}: Base reserves it on IO pipes "
                    f"(base/io.jl getproperty(::AbstractPipe, name) returns getfield(pipe, "
                    f"name)::IO for {', '.join(RESERVED_IO_FIELDS)}); rename the field",
                ))  # fmt: skip
    if io:
        names = "|".join(re.escape(n) for n in io)
        defn = re.compile(
            rf"^\s*(?:function\s+)?(?:Base\.)?getproperty\s*\(\s*{_IDENT}?\s*::\s*({names})\b"
            rf"(?:\{{[^}}]*\}})?", re.M,
        )  # fmt: skip
        for src in sources:
            for m in defn.finditer(src.stripped):
                problems.append(Problem(
                    f"{src.rel}:{src.line_of(m.start())}",
                    f"a method of Base.getproperty for {m.group(1)}, an IO subtype of ours: "
                    "Base's AbstractPipe getproperty contract must keep holding for it",
                ))  # fmt: skip
    return problems


# ---- the declared surface ----


@dataclass
class Surface:
    names: dict[str, dict]  # "Base.x" / "ccall :sym" / "<: Base.AbstractPipe" -> its entry
    bindings: list[Binding]
    duplicates: list[str]


def entry_key(table: str, entry: dict) -> str:
    if table == "name":
        return str(entry["name"])
    if table == "c_symbol":
        return f"{entry['via']} :{entry['symbol']}"
    return f"<: {entry['type']}"


def load_surface(path: Path = SURFACE_TOML) -> Surface:
    data = tomllib.loads(path.read_text())
    names: dict[str, dict] = {}
    duplicates = []
    for table in ("name", "c_symbol", "subtype"):
        for entry in data.get(table, []):
            key = entry_key(table, entry)
            if key in names:
                duplicates.append(key)
            names[key] = {**entry, "_table": table}
    bindings = [Binding(b["file"], b["var"], b["is"]) for b in data.get("binding", [])]
    return Surface(names, bindings, duplicates)


def scan(root: Path = ROOT, surface: Surface | None = None) -> tuple[list[Source], list[Use]]:
    surface = surface or load_surface()
    sources = [load_source(p, root) for p in julia_files(root)]
    uses = [u for src in sources for u in find_uses(src, surface.bindings)]
    return sources, uses


def _normal(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


def evidence_found(entry: dict, sources: list[Source]) -> bool:
    """An entry the scanner cannot see (a field read on a value) names the text that uses it."""
    seen = _normal(entry["seen_as"])
    return any(seen in _normal(src.stripped) for src in sources if src.rel == entry["seen_in"])


KEYS = {"name", "type", "symbol", "via", "library", "ours", "reserved", "repo", "file", "relies",
        "checked", "missing", "unverified", "gated", "public", "evidence", "seen_in", "seen_as",
        "planned", "_table"}  # fmt: skip


def unlisted(uses: list[Use], surface: Surface) -> list[Problem]:
    """Outside names the code uses that surface.toml does not list."""
    return [
        Problem(u.where(), f"{u.name} is not in julia/JKernel/surface.toml (line: {u.text})")
        for u in uses
        if u.name not in surface.names
    ]


def stale(uses: list[Use], sources: list[Source], surface: Surface) -> list[Problem]:
    """Entries and bindings the code no longer uses (planned entries excepted), and planned
    entries that are now in use (their `planned` line must go)."""
    used = {u.name for u in uses}
    problems = []
    for key, entry in surface.names.items():
        in_use = evidence_found(entry, sources) if "seen_as" in entry else key in used
        if "planned" in entry:
            if in_use:
                msg = f"{key} is used now: delete its `planned` line"
                problems.append(Problem("surface.toml", msg))
        elif not in_use:
            how = f" ({entry['seen_as']!r} in {entry['seen_in']})" if "seen_as" in entry else ""
            problems.append(Problem("surface.toml", f"{key} is listed but no longer used{how}"))
    vias = {(u.file, u.via) for u in uses if u.via}
    for b in surface.bindings:
        if (b.file, b.var) not in vias:
            msg = f"binding {b.var} in {b.file} is no longer used"
            problems.append(Problem("surface.toml", msg))
    return problems


def entry_problems(surface: Surface, sources: list[Source]) -> list[Problem]:
    """Entries that do not say what they must: where, what we rely on, the evidence, and for
    each branch whether it was checked, found missing (then gated) or left unverified."""
    problems = [Problem("surface.toml", f"{k} is listed twice") for k in surface.duplicates]
    code = " ".join(_normal(src.stripped) for src in sources)
    for key, e in surface.names.items():

        def bad(msg: str, key: str = key) -> None:
            problems.append(Problem("surface.toml", f"{key}: {msg}"))

        for k in sorted(set(e) - KEYS):
            bad(f"unknown key {k!r}")
        where = "library" if e["_table"] == "c_symbol" else "file"
        for k in (where, "relies", "evidence"):
            if not e.get(k):
                bad(f"says no {k!r}")
        lists = {k: list(e.get(k, [])) for k in ("checked", "missing", "unverified")}
        for k, branches in lists.items():
            for b in branches:
                if b not in BRANCHES:
                    bad(f"{k} names {b!r}, not one of {', '.join(BRANCHES)}")
        for b in BRANCHES:
            n = sum(b in v for v in lists.values())
            if n != 1:
                bad(f"{b} must be in exactly one of checked, missing, unverified (is in {n})")
        if e.get("public") and lists["checked"] != list(BRANCHES):
            bad("a public name must be checked on every branch")
        if lists["missing"] and not e.get("gated"):
            bad(f"missing on {', '.join(lists['missing'])} but says no `gated` guard")
        if e.get("gated") and "planned" not in e and _normal(e["gated"]) not in code:
            bad(f"its guard {e['gated']!r} is not in the Julia sources")
        if ("seen_as" in e) != ("seen_in" in e):
            bad("seen_as and seen_in go together")
    return problems


def main() -> None:
    """Print every outside use, by name, with where it is used (for reviewing surface.toml)."""
    surface = load_surface()
    _, uses = scan(surface=surface)
    by_name: dict[str, list[Use]] = {}
    for u in uses:
        by_name.setdefault(u.name, []).append(u)
    for name in sorted(by_name):
        mark = "  " if name in surface.names else "!!"
        print(f"{mark} {name:55} {', '.join(u.where() for u in by_name[name])}")
    print("\nnot verified on every branch, or missing somewhere:")
    for key, e in sorted(surface.names.items()):
        if e.get("missing") or e.get("unverified"):
            print(f"  {key:55} missing={e.get('missing', [])} unverified={e.get('unverified', [])}")


if __name__ == "__main__":
    main()
