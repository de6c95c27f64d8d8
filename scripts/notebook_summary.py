"""Print one line per code cell of an executed notebook: its id and the outputs it produced."""

from __future__ import annotations

import itertools
import sys

import nbformat


def describe(output: dict) -> str:
    detail = output.get("name") or output.get("ename") or ", ".join(output.get("data", {}))
    return f"{output['output_type']}({detail})"


def main(path: str) -> None:
    print(f"Executed notebook: {path}. Outputs per code cell:")
    for cell in nbformat.read(path, 4).cells:
        if cell.cell_type != "code":
            continue
        runs = [(k, len(list(g))) for k, g in itertools.groupby(map(describe, cell.outputs))]
        shown = " | ".join(k if n == 1 else f"{n} x {k}" for k, n in runs) or "-"
        print(f"  {f'[{cell.execution_count}]':>5} {cell.id:<15} {shown}")


if __name__ == "__main__":
    main(sys.argv[1])
