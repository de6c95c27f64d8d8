"""Table rows from samples: :class:`RowSpec` (a line of the table, as data) and :class:`Row`.

A :class:`RowSpec` names a sample, the baseline sample measured in the same run, the statistic
shown (median unless it says otherwise) and the target; :func:`rows` turns specs and samples
into :class:`Row` s with their ratio and verdict. Tables print human units; the JSON keeps every
raw sample so later runs can be compared.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RowSpec:
    """One line of the table: ``value`` against ``base`` (sample keys), held to ``target``.

    ``target`` is ``""``, ``"<= 3x"`` (the ratio), ``"<= 100 ms"`` / ``"<= 285 MiB"`` (the
    value) or ``"<= +0.3 s"`` (the value against the baseline plus that much).
    """

    section: str
    label: str
    unit: str  # "s", "ms" or "MiB"; samples are seconds or bytes
    value: str
    base: str | None = None
    stat: str = "median"  # "median", "p90" or "max"
    target: str = ""
    note: str = ""
    base_label: str = ""  # what the baseline is, when its subject does not say it


@dataclass
class Row:
    section: str
    metric: str
    unit: str
    value: float | None
    base: float | None
    base_name: str
    target: str
    met: bool | None
    note: str
    n: int

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.base:
            return None
        return self.value / self.base


def stat(values: Sequence[float], which: str) -> float | None:
    xs = sorted(values)
    if not xs:
        return None
    if which == "max":
        return xs[-1]
    if which == "p90":
        return xs[min(len(xs) - 1, math.ceil(0.9 * len(xs)) - 1)]
    return statistics.median(xs)


_UNITS = {"s": 1.0, "ms": 1e-3, "MiB": float(1 << 20)}
_TARGET = re.compile(r"<= (\+?)([\d.]+) ?(x|s|ms|MiB)$")


def verdict(target: str, value: float | None, base: float | None) -> bool | None:
    """Whether ``value`` meets ``target``; None when there is no target."""
    if not target:
        return None
    m = _TARGET.match(target)
    if m is None:
        msg = f"cannot read the target {target!r}"
        raise ValueError(msg)
    if value is None:
        return False
    plus, number, unit = m.group(1), float(m.group(2)), m.group(3)
    if unit == "x":
        return base is not None and base > 0 and value <= number * base
    limit = number * _UNITS[unit]
    if plus:
        return base is not None and value <= base + limit
    return value <= limit


def _subject(key: str) -> str:
    return {
        "julia": "julia-supervised",
        "ijulia": "IJulia",
        "ipykernel": "ipykernel",
        "kfloor": "bare ipykernel Kernel",
        "bare": "bare julia -e nothing",
        "floor": "Julia to /dev/null",
        "late": "late launch",
    }.get(key.split(":", 1)[0], key)


def rows(specs: Sequence[RowSpec], samples: dict[str, list[float]], **fmt: str) -> list[Row]:
    """The rows whose samples (value and baseline) were measured; ``fmt`` fills ``{size}`` and
    the like in labels. A row against IJulia is left out where IJulia was not measured."""
    out = []
    for spec in specs:
        if spec.value not in samples or (spec.base and spec.base not in samples):
            continue
        xs = samples[spec.value]
        value = stat(xs, spec.stat)
        base = stat(samples.get(spec.base, []), spec.stat) if spec.base else None
        label = spec.label.format(**fmt) + ("" if spec.stat == "median" else f", {spec.stat}")
        out.append(
            Row(
                spec.section,
                label,
                spec.unit,
                value,
                base,
                spec.base_label or (_subject(spec.base) if spec.base else ""),
                spec.target,
                verdict(spec.target, value, base),
                spec.note,
                len(xs),
            )
        )
    return out


def fmt(value: float | None, unit: str) -> str:
    if value is None or math.isnan(value):
        return "-"
    if unit == "ms":
        v = value * 1e3
        return f"{v:.1f} ms" if v < 100 else f"{v:.0f} ms"
    if unit == "MiB":
        return f"{value / (1 << 20):.0f} MiB"
    return f"{value:.2f} s"


def table(got: Sequence[Row]) -> str:
    """The rows as an aligned text table, one block per section."""
    head = ("metric", "value", "baseline", "ratio", "target", "met", "n", "note")
    cells: list[tuple[str, ...] | str] = []
    section = None
    for r in got:
        if r.section != section:
            section = r.section
            cells.append(f"== {section}")
        base = f"{fmt(r.base, r.unit)} ({r.base_name})" if r.base_name else ""
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else ""
        met = "" if r.met is None else ("yes" if r.met else "NO")
        cells.append((r.metric, fmt(r.value, r.unit), base, ratio, r.target, met, str(r.n), r.note))
    lines = [c for c in cells if not isinstance(c, str)]
    widths = [max([len(h), *(len(c[i]) for c in lines)]) for i, h in enumerate(head)]

    def join(cols: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in (1, 2, 3, 6) else c.ljust(w)
            for i, (c, w) in enumerate(zip(cols, widths, strict=True))
        ).rstrip()

    out = [join(head), join(["-" * w for w in widths])]
    out += [c if isinstance(c, str) else join(c) for c in cells]
    return "\n".join(out)


def write_json(
    path: Path, meta: dict[str, Any], samples: dict[str, Any], got: Sequence[Row]
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"meta": meta, "rows": [asdict(r) for r in got], "samples": samples}
    path.write_text(json.dumps(doc, indent=1, allow_nan=True) + "\n")
