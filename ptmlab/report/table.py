"""Tables on stdout: the one formatter every command, study and benchmark prints its rows with."""

from __future__ import annotations


def format_cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 100 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def columns_of(rows: list[dict]) -> list[str]:
    """Every key of every row, in order of first appearance (rows of different kinds share one table)."""
    return list(dict.fromkeys(k for r in rows for k in r))


def print_table(rows: list[dict], columns: list[str] | None = None) -> None:
    """Left-aligned columns (every row's keys by default); floats to 4 decimals, big numbers with commas."""
    if not rows:
        return
    columns = columns or columns_of(rows)
    cells = [[format_cell(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
