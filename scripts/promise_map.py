"""make promise-map: tests/README.md, the map from each promise to its tests and its mutant.

Every promise the README and docs/ make has a mutant in scripts/mutants.py that breaks it and
names the tests that must catch the break. This script reads those mutants and prints them as
Markdown, grouped by the area of the kernel a promise belongs to, so the map is never written
by hand and never drifts: tests/test_promise_map.py fails when tests/README.md is not what
this prints.

    python scripts/promise_map.py            # print the map
    python scripts/promise_map.py --write    # rewrite tests/README.md
    python scripts/promise_map.py --check    # exit 1 if tests/README.md is out of date

A new mutant lands in the area of its first guarding test's file (FILE_AREAS); name its id in
AREAS when that is the wrong place. One whose file has no area is listed under "Not yet placed".
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mutants  # noqa: E402  (a script beside this one, not a package)

ROOT = Path(__file__).resolve().parent.parent
MAP = ROOT / "tests" / "README.md"


class Area:
    """One area of the kernel: its title, the page that makes its promises, its mutant ids."""

    def __init__(self, title: str, page: str, ids: Iterable[str] = ()) -> None:
        self.title = title
        self.page = page  # relative to the repository's root
        self.ids = frozenset(ids)


# In the order the map shows them. Ids listed here win over FILE_AREAS.
AREAS: tuple[Area, ...] = (
    Area(
        "Interrupts",
        "docs/interrupts.md",
        ["M2", "M3", "M5", "M7", "M9", "M10", "M22", "M23", "M28", "M29", "M30", "M47",
         "M90", "M140", "M141", "M142", "M143", "M144", "M145", "M146", "M147", "M148",
         "M191"],
    ),  # fmt: skip
    Area(
        "Processes an interrupted cell started",
        "docs/interrupts.md",
        ["M120", "M121", "M122", "M124", "M125", "M126", "M127"],
    ),
    Area(
        "Output",
        "docs/architecture.md",
        ["M4", "M8", "M20", "M42", "M43", "M44", "M45", "M46"],
    ),
    Area(
        "Rich output and its context",
        "docs/clients.md#rich-output",
        ["M110", "M111", "M112", "M114", "M118", "M173", "M174", "M175", "M176"],
    ),
    Area(
        "Comms and widgets",
        "docs/comms.md",
        ["M177", "M178", "M179", "M180", "M181", "M182", "M183", "M184", "M185", "M186",
         "M187", "M188", "M189", "M190"],
    ),  # fmt: skip
    Area("Input and prompts", "docs/clients.md#input", ["M113", "M115", "M116", "M117", "M119"]),
    Area("Clients", "docs/clients.md", ["M26", "M27"]),
    Area("Julia sessions over MCP", "docs/mcp.md"),
    Area(
        "Coming from IJulia or the REPL",
        "README.md#coming-from-ijulia-or-the-repl",
        ["M24", "M50", "M51", "M52", "M53", "M217", "M219", "M220", "M221", "M222"],
    ),
    Area(
        "Packages that know IJulia",
        "docs/ijulia-packages.md",
        ["M99", "M100", "M101", "M102", "M103", "M104", "M105", "M106", "M107", "M108",
         "M109"],
    ),  # fmt: skip
    Area(
        "Julia versions: newer Base contracts and the outside names",
        "docs/julia-versions.md",
        ["M48", "M49", "M54", "M55", "M60", "M61", "M216"],
    ),
    Area(
        "Start-up",
        "docs/architecture.md",
        ["M37", "M38", "M40", "M94", "M162", "M170"],
    ),
    Area(
        "The compile cache",
        "docs/architecture.md",
        ["M31", "M32", "M33", "M34", "M35", "M41", "M56", "M130", "M131", "M132", "M133",
         "M134", "M135", "M136", "M137", "M138", "M139"],
    ),  # fmt: skip
    Area(
        "Faults: deaths, stalls and bad settings",
        "docs/troubleshooting.md",
        ["M1", "M15", "M16", "M17", "M19", "M39", "M160", "M161", "M163"],
    ),
    Area("The frame protocol", "docs/architecture.md", ["M11", "M12", "M13", "M14", "M21"]),
    Area("Security", "docs/architecture.md", ["M18", "M91", "M92"]),
    Area(
        "Distributed workers",
        "docs/interrupts.md",
        ["M93", "M123", "M150", "M151", "M152", "M153", "M154", "M155", "M156"],
    ),
    Area("Configuration", "docs/configuration.md", ["M6", "M218"]),
    Area(
        "Installing, juliaup channels and the doctor",
        "docs/installing.md",
        ["M36", "M70", "M71", "M72", "M73", "M74", "M80", "M81", "M82", "M83", "M84", "M85",
         "M86", "M87"],
    ),  # fmt: skip
)
UNPLACED = Area("Not yet placed", "scripts/promise_map.py")

# Where a mutant not named in AREAS goes: by the file of its first guarding test.
FILE_AREAS: dict[str, str] = {
    "test_interrupts.py": "Interrupts",
    "test_cell_children.py": "Processes an interrupted cell started",
    "test_capture.py": "Output",
    "test_load.py": "Output",
    "test_output_context.py": "Rich output and its context",
    "test_prompts.py": "Input and prompts",
    "test_console.py": "Clients",
    "test_jupyterlab.py": "Clients",
    "test_papermill.py": "Clients",
    "test_notebooks.py": "Clients",
    "test_agent.py": "Clients",
    "test_mcp.py": "Julia sessions over MCP",
    "test_repl_parity.py": "Coming from IJulia or the REPL",
    "test_environment.py": "Coming from IJulia or the REPL",
    "test_kernel_environment.py": "Coming from IJulia or the REPL",
    "test_ijulia_packages.py": "Packages that know IJulia",
    "test_contracts.py": "Julia versions: newer Base contracts and the outside names",
    "test_surface.py": "Julia versions: newer Base contracts and the outside names",
    "test_early_launch.py": "Start-up",
    "test_settings.py": "Configuration",
    "test_precompile.py": "The compile cache",
    "test_faults.py": "Faults: deaths, stalls and bad settings",
    "test_protocol.py": "The frame protocol",
    "test_fuzz.py": "The frame protocol",
    "test_security.py": "Security",
    "test_distributed.py": "Distributed workers",
    "test_distributed_ssh.py": "Distributed workers",
    "test_install.py": "Installing, juliaup channels and the doctor",
    "test_doctor.py": "Installing, juliaup channels and the doctor",
}

HEADER = """\
# Promises and the tests that hold them

<!-- Generated by scripts/promise_map.py from scripts/mutants.py: do not edit by hand.
     `make promise-map` rewrites it; tests/test_promise_map.py fails while it is out of date. -->

Each promise the [README](../README.md) and [docs/](../docs/) make is held by the tests named
beside it, and broken on purpose by its mutant in
[scripts/mutants.py](../scripts/mutants.py): the mutant's edit is applied to a temporary copy of
the tree, and the promise's tests must then fail ("killed"). A promise without a mutant is a
promise nothing checks: add one with every new promise, then `make promise-map`.

To run one promise's tests, then its mutant (here the forced interrupt, M2):

```sh
.venv/bin/python -m pytest -x -q tests/test_supervisor_julia.py \\
    -k test_interrupt_of_a_loop_without_safepoints_is_forced
.venv/bin/python scripts/mutants.py M2       # its tests on the unbroken copy, then broken
.venv/bin/python scripts/mutants.py --list   # every mutant, its promise and its tests
make mutants                                 # all of them (not part of make test)
```

A test named here is a name prefix (`-k`), so it covers a parametrized test's every case; a
file alone means all of its tests.
"""


def area_of(mutant: mutants.Mutant, by_title: dict[str, Area]) -> Area:
    """The area that AREAS names for this mutant, else its first guarding test file's."""
    for area in AREAS:
        if mutant.id in area.ids:
            return area
    first_file = Path(mutant.tests[0].split("::")[0]).name if mutant.tests else ""
    return by_title.get(FILE_AREAS.get(first_file, ""), UNPLACED)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _test(test: str) -> str:
    """``tests/f.py::name`` as `f.py::name`, the way pytest prints it from tests/."""
    return f"`{test.removeprefix('tests/')}`"


def _id_key(mutant: mutants.Mutant) -> tuple[int, str]:
    digits = "".join(ch for ch in mutant.id if ch.isdigit())
    return (int(digits) if digits else 0, mutant.id)


def render(all_mutants: Iterable[mutants.Mutant] = mutants.MUTANTS) -> str:
    """The map as Markdown: one section per area, one row per promise."""
    by_title = {area.title: area for area in AREAS}
    groups: dict[str, list[mutants.Mutant]] = {}
    for m in all_mutants:
        groups.setdefault(area_of(m, by_title).title, []).append(m)
    total = sum(len(ms) for ms in groups.values())
    out = [HEADER]
    contents = []
    for area in (*AREAS, UNPLACED):
        if area.title in groups:
            anchor = "".join(
                ch for ch in area.title.lower().replace(" ", "-") if ch.isalnum() or ch == "-"
            )
            contents.append(f"[{area.title}](#{anchor}) ({len(groups[area.title])})")
    out.append(f"{total} promises: " + " · ".join(contents) + ".\n")
    for area in (*AREAS, UNPLACED):
        ms = sorted(groups.get(area.title, []), key=_id_key)
        if not ms:
            continue
        out.append(f"## {area.title}\n")
        if area is UNPLACED:
            out.append("Name these mutants' ids in AREAS in scripts/promise_map.py.\n")
        else:
            out.append(f"Promised in [{area.page}](../{area.page}).\n")
        out.append("| promise | tests that hold it | mutant |")
        out.append("| --- | --- | --- |")
        for m in ms:
            tests = "<br>".join(_test(t) for t in m.tests)
            out.append(f"| {_cell(m.promise)} | {tests} | {m.id} |")
        out.append("")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--write", action="store_true", help=f"rewrite {MAP.relative_to(ROOT)}")
    what.add_argument("--check", action="store_true", help="exit 1 if the map is out of date")
    args = parser.parse_args()
    text = render()
    if args.write:
        MAP.write_text(text)
        return 0
    if args.check:
        if not MAP.exists() or MAP.read_text() != text:
            print(f"{MAP.relative_to(ROOT)} is out of date: run `make promise-map`")
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
