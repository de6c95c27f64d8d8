"""tests/README.md, the map from promises to tests and mutants, is what scripts/mutants.py says.

Pure Python: no Julia, no kernel. The map is generated (scripts/promise_map.py); these tests
fail when a mutant was added or changed without `make promise-map`, and check that the
generator cannot drop, duplicate or misfile a mutant.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import mutants  # noqa: E402  (scripts/ is no package)
import promise_map  # noqa: E402


def _rows(text: str) -> dict[str, str]:
    """Each table row of the map by its mutant id (the last cell)."""
    rows: dict[str, str] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| ") and cells[-1].startswith("M") and cells[-1][1:].isdigit():
            assert cells[-1] not in rows, f"{cells[-1]} has two rows"
            rows[cells[-1]] = line
    return rows


def test_the_map_is_up_to_date() -> None:
    on_disk = promise_map.MAP.read_text()
    assert on_disk == promise_map.render(), (
        "tests/README.md is out of date with scripts/mutants.py: run `make promise-map`"
    )


def test_the_check_option_agrees() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "promise_map.py"), "--check"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_mutant_has_one_row_with_its_promise_and_tests() -> None:
    rows = _rows(promise_map.render())
    assert set(rows) == {m.id for m in mutants.MUTANTS}
    for m in mutants.MUTANTS:
        assert m.promise.replace("|", "\\|") in rows[m.id]
        for test in m.tests:
            assert test.removeprefix("tests/") in rows[m.id], (m.id, test)


def test_areas_name_each_existing_mutant_at_most_once() -> None:
    ids = {m.id for m in mutants.MUTANTS}
    seen: dict[str, str] = {}
    for area in promise_map.AREAS:
        for mid in area.ids:
            assert mid in ids, f"{area.title} names {mid}, which scripts/mutants.py lacks"
            assert mid not in seen, f"{mid} is in both {seen[mid]} and {area.title}"
            seen[mid] = area.title


def test_every_mutant_today_is_placed_in_an_area() -> None:
    assert "## Not yet placed" not in promise_map.render()


def test_a_changed_promise_puts_the_map_out_of_date() -> None:
    first = mutants.MUTANTS[0]
    changed = (dataclasses.replace(first, promise="something else"), *mutants.MUTANTS[1:])
    assert promise_map.render(changed) != promise_map.render()
    assert "| something else |" in promise_map.render(changed)


def test_a_new_mutant_goes_by_its_test_file_or_is_shown_unplaced() -> None:
    by_file = mutants.Mutant("M9001", "a new prompt promise", (), ("tests/test_prompts.py::x",))
    nowhere = mutants.Mutant("M9002", "a new promise", (), ("tests/test_nothing_yet.py::y",))
    text = promise_map.render((*mutants.MUTANTS, by_file, nowhere))
    prompts = text.split("## Input and prompts")[1].split("\n## ")[0]
    assert "| M9001 |" in prompts
    unplaced = text.split("## Not yet placed")[1]
    assert "| M9002 |" in unplaced and "| M9001 |" not in unplaced


def test_every_guarding_test_exists() -> None:
    """A mutant whose guarding test was renamed guards nothing: make mutants can only report
    it as "survived (no guarding test)" after a full run (M39 did, after a rename)."""
    defined: dict[str, set[str]] = {}
    missing = []
    for m in mutants.MUTANTS:
        for test in m.tests:
            path, _, name = test.partition("::")
            if path not in defined:
                source = (ROOT / path).read_text()
                defined[path] = {
                    line.split("def ", 1)[1].split("(", 1)[0]
                    for line in source.splitlines()
                    if line.startswith(("def test", "async def test"))
                }
            function = name.split("[", 1)[0]
            if not any(d.startswith(function) for d in defined[path]):
                missing.append(f"{m.id}: {test}")
    assert not missing, "guarding tests that do not exist:\n" + "\n".join(missing)
