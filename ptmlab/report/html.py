"""A small self-contained HTML report: headings, paragraphs, tables and matplotlib figures inlined as PNG."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from ptmlab.core.io import atomic_write_text
from ptmlab.report.table import columns_of


def new_figure(w: float = 6.0, h: float = 3.6):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(w, h), dpi=110)


def fig_to_png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 1000 else f"{v:,.1f}"
    return html.escape(str(v))


class Report:
    def __init__(self, title: str):
        self.title = title
        self.parts: list[str] = []
        self.images: dict[str, bytes] = {}

    def heading(self, text: str, level: int = 2) -> Report:
        self.parts.append(f"<h{level}>{html.escape(text)}</h{level}>")
        return self

    def text(self, text: str) -> Report:
        self.parts.append(f"<p>{html.escape(text)}</p>")
        return self

    def table(self, rows: list[dict], columns: list[str] | None = None) -> Report:
        if not rows:
            return self
        columns = columns or columns_of(rows)
        head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
        body = "".join("<tr>" + "".join(f"<td>{_fmt(r.get(c, ''))}</td>" for c in columns) + "</tr>"
                       for r in rows)
        self.parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        return self

    def figure(self, fig, name: str, caption: str = "") -> Report:
        png = fig_to_png(fig)
        self.images[name] = png
        b64 = base64.b64encode(png).decode()
        cap = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
        self.parts.append(f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,{b64}"/>{cap}'
                          f"</figure>")
        return self

    def render(self) -> str:
        style = ("body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;color:#222}"
                 "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;"
                 "text-align:right}th{background:#f3f3f3}figure{margin:1em 0}img{max-width:100%}")
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
                f"<style>{style}</style></head><body><h1>{html.escape(self.title)}</h1>"
                + "\n".join(self.parts) + "</body></html>\n")

    def write(self, path: str | Path, save_pngs: bool = True) -> Path:
        """Write the HTML (and each figure as a PNG beside it, under plots/)."""
        path = Path(path)
        if save_pngs:
            from ptmlab.core.io import atomic_write_bytes

            for name, png in self.images.items():
                atomic_write_bytes(path.parent / "plots" / f"{name}.png", png)
        atomic_write_text(path, self.render())
        return path
