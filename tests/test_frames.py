"""The frame protocol is declared once, in jutul_jkernel/protocol/frames.toml, and both sides
hold to it.

Pure Python, no Julia. scripts/frames.py generates Python's protocol/kinds.py and Julia's
src/frames.jl from the declaration; these tests fail while either is not what it generates,
while a declared kind has no handler on the side that receives it (Python: the tables of
supervisor/routing.py and supervisor/execution.py; Julia: a branch of wire.jl's handle_frame)
or is never sent by the other, and while anything else declares frame kinds. That the running
Julia holds the same tables is test_supervisor_julia.py::test_frame_kinds_match_the_server.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from jutul_jkernel import _resources
from jutul_jkernel.protocol.kinds import ARGS, FROM_JULIA, TO_JULIA, FrameKind
from jutul_jkernel.supervisor.execution import _FRAMES as EXECUTION_FRAMES
from jutul_jkernel.supervisor.routing import _CONNECTION_FRAMES

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import frames  # noqa: E402  (scripts/ is no package)

JULIA_SRC = _resources.julia_package_dir() / "src"
PACKAGE = ROOT / "jutul_jkernel"


def _julia_code(path: Path) -> str:
    """A Julia file without its comment lines."""
    lines = path.read_text().splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith("#"))


def _kinds(names: set[str]) -> set[FrameKind]:
    unknown = names - {k.name for k in FrameKind}
    assert not unknown, f"not declared in frames.toml: {sorted(unknown)}"
    return {FrameKind[n] for n in names}


# ---- the generated files ----


def test_the_generated_files_are_up_to_date() -> None:
    """kinds.py and frames.jl are what scripts/frames.py makes of the declaration, byte for
    byte: neither is edited by hand, and neither lags a change of frames.toml."""
    decl = frames.load()
    for path, render in frames.OUTPUTS:
        assert path.read_text(encoding="utf-8") == render(decl), (
            f"{path.relative_to(ROOT)} is out of date with frames.toml: run `make frames`"
        )


def test_the_check_option_agrees() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "frames.py"), "--check"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_python_module_holds_what_is_declared() -> None:
    """Read back from the module mypy sees: every kind, its direction and its arguments."""
    decl = frames.load()
    assert [k.name for k in FrameKind] == [k.name for k in decl.kinds]
    assert {k.name for k in TO_JULIA} == {k.name for k in decl.way(frames.TO_JULIA)}
    assert {k.name for k in FROM_JULIA} == {k.name for k in decl.way(frames.FROM_JULIA)}
    for kind in decl.kinds:
        declared = [(a.name, a.rule, a.words) for a in kind.args]
        assert [tuple(a) for a in ARGS[FrameKind[kind.name]]] == declared, kind.name


def test_a_change_of_the_declaration_shows_in_both_files() -> None:
    """A kind removed from frames.toml leaves both generated files, which are then stale."""
    text = frames.DECLARATION.read_text(encoding="utf-8")
    block = re.search(r'\[\[kind\]\]\nname = "SYN"\n.*?(?=\n\[\[kind\]\]|\Z)', text, re.DOTALL)
    assert block is not None
    decl = frames.parse(text.replace(block.group(0), ""))
    assert "SYN" not in [k.name for k in decl.kinds]
    assert 'SYN = "SYN"' not in frames.render_python(decl)
    assert 'const SYN = "SYN"' not in frames.render_julia(decl)
    assert "FrameKind.SYN =>" not in frames.render_julia(decl)
    assert frames.stale(decl) == [frames.PYTHON_OUT, frames.JULIA_OUT]


KIND = """
[[kind]]
name = "{name}"
direction = "{direction}"
args = {args}
payload = "none"
doc = "d"
"""
RULES = '[rules]\nid = "i"\ncount = "c"\ntoken = "t"\n'


def _declaration(*kinds: str) -> str:
    both = [
        KIND.format(name="AAA", direction="julia->python", args="[]"),
        KIND.format(name="BBB", direction="python->julia", args='[{ name = "id", rule = "id" }]'),
    ]
    return RULES + "".join(both) + "".join(kinds)


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        pytest.param(KIND.format(name="AAA", direction="julia->python", args="[]"),
                     "AAA declared twice", id="twice"),
        pytest.param(KIND.format(name="Ab1", direction="julia->python", args="[]"),
                     "three upper-case", id="name"),
        pytest.param(KIND.format(name="CCC", direction="both", args="[]"),
                     "direction", id="direction"),
        pytest.param(KIND.format(name="CCC", direction="julia->python",
                                 args='[{ name = "x", rule = "number" }]'),
                     "rule 'number'", id="rule"),
        pytest.param(KIND.format(name="CCC", direction="julia->python",
                                 args='[{ name = "x", rule = [] }]'),
                     "words allowed", id="no-words"),
        pytest.param(KIND.format(name="CCC", direction="julia->python",
                                 args='[{ name = "x", rule = ["a b"] }]'),
                     "words allowed", id="spaced-word"),
        pytest.param(KIND.format(name="CCC", direction="julia->python",
                                 args='[{ name = "x", rule = "id" }, { name = "x", rule = "id" }]'),
                     "share a name", id="same-names"),
        pytest.param(KIND.format(name="CCC", direction="python->julia",
                                 args='[{ name = "n", rule = "count" }]'),
                     "starts with", id="to-julia-without-id"),
        pytest.param(KIND.format(name="CCC", direction="julia->python", args="[]")
                     + "size = 3\n", "unknown key 'size'", id="unknown-key"),
    ],
)  # fmt: skip
def test_a_malformed_declaration_is_an_error_that_says_where(extra: str, error: str) -> None:
    frames.parse(_declaration())  # the rest is well-formed
    with pytest.raises(frames.DeclarationError, match=re.escape(error)):
        frames.parse(_declaration(extra))


# ---- the handlers on each side ----


def test_every_kind_from_julia_has_one_python_handler() -> None:
    """Each kind Julia sends is in exactly one of the supervisor's frame tables: the
    connection's (routing.py) or an execution's (execution.py), and no kind sent to Julia is.
    An execution's frame is routed by its first argument, so it must be an id."""
    connection, execution = set(_CONNECTION_FRAMES), set(EXECUTION_FRAMES)
    assert not connection & execution, "a kind in both tables: the execution's never runs"
    assert connection | execution == FROM_JULIA, (
        f"no handler: {sorted(k.name for k in FROM_JULIA - connection - execution)}; "
        f"not Julia's: {sorted(k.name for k in (connection | execution) - FROM_JULIA)}"
    )
    for kind in execution:
        assert ARGS[kind][:1] and ARGS[kind][0].rule == "id", kind.name


def test_every_kind_to_julia_has_a_branch_in_handle_frame() -> None:
    """wire.jl's handle_frame has a branch for exactly the kinds sent to Julia."""
    code = _julia_code(JULIA_SRC / "wire.jl")
    body = re.search(r"^function handle_frame\(.*?^end$", code, re.MULTILINE | re.DOTALL)
    assert body is not None, "wire.jl has no handle_frame"
    assert not re.search(r'kind == "', body.group(0)), "a kind compared as a bare literal"
    handled = _kinds(set(re.findall(r"kind == FrameKind\.([A-Z]+)", body.group(0))))
    assert handled == TO_JULIA, (
        f"no branch: {sorted(k.name for k in TO_JULIA - handled)}; "
        f"not sent to Julia: {sorted(k.name for k in handled - TO_JULIA)}"
    )


def test_each_side_sends_exactly_the_kinds_of_its_direction() -> None:
    """JKernel sends (send_frame, or in_mark for the frames that carry one) exactly the kinds
    from Julia and the supervisor encodes exactly the kinds to Julia: a kind nobody sends is a
    declaration to drop. Julia names a kind only through FrameKind (Python's encode takes
    nothing else, as mypy checks)."""
    julia = "\n".join(_julia_code(p) for p in sorted(JULIA_SRC.glob("*.jl")))
    assert not re.search(r'(send_frame|in_mark)\("', julia), "a kind sent as a bare literal"
    sent = set(re.findall(r"(?:send_frame|in_mark)\(FrameKind\.([A-Z]+)", julia))
    assert _kinds(sent) == FROM_JULIA
    python = "\n".join(p.read_text() for p in sorted(PACKAGE.rglob("*.py")))
    assert _kinds(set(re.findall(r"encode\(\s*FrameKind\.([A-Z]+)", python))) == TO_JULIA


def test_only_the_generated_files_declare_kinds() -> None:
    """No hand-written table beside the generated ones: FrameKind and INCOMING are defined
    only in frames.jl (included before wire.jl, which uses them) and FrameKind only in
    kinds.py."""
    for path in sorted(JULIA_SRC.glob("*.jl")):
        code = _julia_code(path)
        declares = re.search(r"^\s*(baremodule FrameKind|const INCOMING\b)", code, re.MULTILINE)
        assert (declares is not None) == (path.name == "frames.jl"), path.name
    includes = re.findall(r'^include\("([a-z_]+\.jl)"\)$', _julia_code(JULIA_SRC / "JKernel.jl"),
                          re.MULTILINE)  # fmt: skip
    assert includes.index("frames.jl") < includes.index("wire.jl")
    for path in sorted(PACKAGE.rglob("*.py")):
        declares = re.search(r"^class FrameKind\b", path.read_text(), re.MULTILINE)
        assert (declares is not None) == (path.name == "kinds.py"), path
