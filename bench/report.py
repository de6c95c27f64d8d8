"""Rows of results, their summary statistics, the printed table and the JSON file.

A :class:`Row` holds one figure for the kernel under test, the baseline figure measured in the
same run, their ratio, and the target it is held to. Tables print medians and maxes in
human units; the JSON keeps every raw sample so later runs can be compared.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


def summary(values: Sequence[float]) -> dict[str, Any]:
    """n, median, min, max, p90 and the raw values."""
    xs = sorted(values)
    if not xs:
        return {"n": 0, "median": math.nan, "min": math.nan, "max": math.nan, "p90": math.nan}
    p90 = xs[min(len(xs) - 1, math.ceil(0.9 * len(xs)) - 1)]
    return {
        "n": len(xs),
        "median": statistics.median(xs),
        "min": xs[0],
        "max": xs[-1],
        "p90": p90,
        "values": list(values),
    }


@dataclass
class Row:
    """One line of the table. ``value`` is the kernel under test, ``base`` the baseline."""

    section: str
    metric: str
    unit: str  # "s", "ms", "MB", "MiB/s", "n", "x" or "" (text)
    value: float | str | None
    base: float | str | None = None
    base_name: str = ""
    target: str = ""  # e.g. "<= 0.5x", "<= 100 ms"
    met: bool | None = None
    note: str = ""
    ratio: float | None = field(default=None)

    def __post_init__(self) -> None:
        if (
            self.ratio is None
            and isinstance(self.value, int | float)
            and isinstance(self.base, int | float)
            and self.base
            and not math.isnan(self.base)
        ):
            self.ratio = float(self.value) / float(self.base)


def ratio_target(row: Row, limit: float) -> Row:
    """Hold ``row.ratio`` to at most ``limit``."""
    row.target = f"<= {limit:g}x"
    row.met = row.ratio is not None and row.ratio <= limit
    return row


def value_target(row: Row, limit: float, shown: str) -> Row:
    """Hold ``row.value`` to at most ``limit`` (in the row's unit)."""
    row.target = shown
    row.met = isinstance(row.value, int | float) and row.value <= limit
    return row


_SCALE = {"s": 1.0, "ms": 1e3, "MB": 1e-6, "MiB": 1 / (1 << 20), "MiB/s": 1.0, "n": 1.0}


def fmt(value: float | str | None, unit: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    if unit == "ms":
        v = value * 1e3
        return f"{v:.1f} ms" if v < 100 else f"{v:.0f} ms"
    if unit == "s":
        return f"{value:.2f} s" if value < 100 else f"{value:.0f} s"
    if unit == "MiB":
        return f"{value / (1 << 20):.0f} MiB"
    if unit == "MiB/s":
        return f"{value:.1f} MiB/s"
    if unit == "n":
        return f"{value:.0f}"
    return f"{value:g}"


def table(rows: Sequence[Row]) -> str:
    """The rows as an aligned text table, one block per section."""
    head = ("metric", "julia-supervised", "baseline", "ratio", "target", "met", "note")
    lines: list[tuple[str, ...]] = []
    section = None
    out: list[str] = []
    cells: list[tuple[str, ...] | str] = []
    for r in rows:
        if r.section != section:
            section = r.section
            cells.append(f"== {section}")
        base = fmt(r.base, r.unit) if r.base is not None else ""
        if r.base_name and r.base is not None:
            base = f"{base} ({r.base_name})"
        met = "" if r.met is None else ("yes" if r.met else "NO")
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else ""
        metric = r.metric if len(r.metric) <= 100 else r.metric[:97] + "..."
        cell = (metric, fmt(r.value, r.unit), base, ratio, r.target, met, r.note)
        cells.append(cell)
        lines.append(cell)
    widths = [
        max(len(h), *(len(c[i]) for c in lines)) if lines else len(h) for i, h in enumerate(head)
    ]

    def join(cols: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) if i in (1, 2, 3) else c.ljust(w)
            for i, (c, w) in enumerate(zip(cols, widths, strict=True))
        ).rstrip()

    out.append(join(head))
    out.append(join(["-" * w for w in widths]))
    for c in cells:
        out.append(c if isinstance(c, str) else join(c))
    return "\n".join(out)


def write_json(
    path: Path, meta: dict[str, Any], sections: dict[str, Any], rows: Sequence[Row]
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"meta": meta, "rows": [asdict(r) for r in rows], "sections": sections}
    path.write_text(json.dumps(doc, indent=1, default=_jsonable, allow_nan=True) + "\n")


def _jsonable(x: Any) -> Any:
    if isinstance(x, Path):
        return str(x)
    if hasattr(x, "__dict__"):
        return vars(x)
    return repr(x)
