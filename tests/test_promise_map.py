"""The mutants' data files hold together, and tests/README.md, the map, is what they say.

Pure Python: no Julia, no kernel. Each area's mutants live in its data file in
scripts/mutants/ (read by scripts/mutants.py), and the map is generated from them
(scripts/promise_map.py). These tests fail when a mutant was added or changed without `make
promise-map`, when a data file names a page, file or test that does not exist, or when an
edit's pattern no longer matches exactly once (the code it breaks changed), and check that the
generator cannot drop, duplicate or misfile a mutant.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

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


def _slug(heading: str) -> str:
    """A heading's anchor, as GitHub makes it for the headings of these pages."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.lower()).replace(" ", "-")


def _section(text: str, title: str) -> str:
    return text.split(f"\n## {title}\n")[1].split("\n## ")[0]


# ---- the map ----


def test_the_map_is_up_to_date() -> None:
    on_disk = promise_map.MAP.read_text()
    assert on_disk == promise_map.render(), (
        "tests/README.md is out of date with scripts/mutants/: run `make promise-map`"
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


def test_each_mutant_is_shown_in_the_section_of_its_file() -> None:
    text = promise_map.render()
    for area in mutants.AREAS:
        assert set(_rows(_section(text, area.title))) == {m.id for m in area.mutants}, area.path


def test_a_changed_promise_puts_the_map_out_of_date() -> None:
    first, *rest = mutants.AREAS
    changed = dataclasses.replace(first.mutants[0], promise="something else")
    areas = (dataclasses.replace(first, mutants=(changed, *first.mutants[1:])), *rest)
    assert promise_map.render(areas) != promise_map.render()
    assert "| something else |" in promise_map.render(areas)


def test_a_new_data_file_is_a_new_section(tmp_path: Path) -> None:
    (tmp_path / "01-new.toml").write_text(
        'title = "A new area"\npage = "docs/new.md"\n\n'
        '[[mutant]]\nid = "M9001"\npromise = "a new promise"\n'
        'tests = ["tests/test_new.py::test_it"]\n'
        "[[mutant.edit]]\nfile = 'x.py'\nfind = 'a'\nreplace = 'b'\n"
    )
    text = promise_map.render((*mutants.AREAS, *mutants.load_areas(tmp_path)))
    new = _section(text, "A new area")
    assert "[docs/new.md](../docs/new.md)" in new and "[01-new.toml]" in new
    assert "| a new promise | `test_new.py::test_it` | M9001 |" in new


def test_a_misspelt_key_is_an_error_that_names_its_file(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text(
        'title = "T"\npage = "docs/t.md"\n[[mutant]]\nid = "M1"\npromise = "p"\n'
        'test = ["tests/test_t.py::x"]\n'
        "[[mutant.edit]]\nfile = 'x.py'\nfind = 'a'\nreplace = 'b'\n"
    )
    with pytest.raises(mutants.CatalogueError, match=r"bad\.toml, mutant M1: no tests; unknown"):
        mutants.load_areas(tmp_path)


# ---- the data files ----


def test_every_area_has_mutants_and_a_page_that_exists() -> None:
    titles = [area.title for area in mutants.AREAS]
    assert len(titles) == len(set(titles)), "two data files share a title"
    for area in mutants.AREAS:
        assert area.mutants, f"{area.path.name} has no mutant"
        page, _, anchor = area.page.partition("#")
        assert (ROOT / page).is_file(), f"{area.path.name}: no page {page}"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (ROOT / page).read_text(), re.MULTILINE)
            slugs = {_slug(h) for h in headings}
            assert anchor in slugs, f"{area.path.name}: {page} has no heading #{anchor}"


def test_ids_are_unique_and_in_order_in_each_file() -> None:
    seen: dict[str, str] = {}
    for area in mutants.AREAS:
        ids = [m.id for m in area.mutants]
        assert re.fullmatch(r"\d\d-[a-z-]+\.toml", area.path.name), area.path.name
        assert ids == [m.id for m in sorted(area.mutants, key=mutants.id_key)], area.path.name
        for mid in ids:
            assert re.fullmatch(r"M\d+", mid), f"{area.path.name}: id {mid}"
            assert mid not in seen, f"{mid} is in both {seen[mid]} and {area.path.name}"
            seen[mid] = area.path.name


def test_every_edit_applies_once_to_the_current_tree() -> None:
    """What `make mutants` checks first, without copying the tree: each edit's file exists and
    its pattern matches exactly once (after the mutant's earlier edits)."""
    failures = []
    for m in mutants.MUTANTS:
        try:
            mutants.mutate(m, lambda name: (ROOT / name).read_text())
        except (mutants.PatternError, FileNotFoundError) as exc:
            failures.append(f"{m.id}: {exc}")
    assert not failures, "edits that do not apply:\n" + "\n".join(failures)


def test_every_guarding_test_exists() -> None:
    """A mutant whose guarding test was renamed guards nothing: make mutants can only report
    it as "survived (no guarding test)" after a full run (M39 did, after a rename)."""
    defined: dict[str, set[str]] = {}
    missing = []
    for m in mutants.MUTANTS:
        for test in m.tests:
            path, _, name = test.partition("::")
            if not path.startswith("tests/") or not (ROOT / path).is_file():
                missing.append(f"{m.id}: {test} (no file {path})")
                continue
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
