"""Rendering: tables to Markdown / LaTeX / HTML / CSV, and whole reports to report.md and a
self-contained report.html (inline CSS, PNG figures as base64 data URIs, no scripts, no
external resources). Written by hand: no jinja2, no tabulate.
"""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from reports.atomic import atomic_write_text
from reports.figures import Figure
from reports.tables import Table

BlockKind = Literal["h2", "h3", "p", "list", "table", "figure", "pre"]


@dataclass(frozen=True)
class Block:
    """One piece of a report: a heading, paragraph, bullet list, table, figure or preformatted text."""

    kind: BlockKind
    content: Any


# --- cell formatting ------------------------------------------------------------------

def fmt_cell(value: Any, percent: bool = False) -> str:
    """Display string of one cell: n/a for missing, inf as "inf", scores x100 when `percent`."""
    if value is None or value is pd.NA:
        return "n/a"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if not isinstance(value, (float, np.floating)):
        return str(value)
    v = float(value)
    if math.isnan(v):
        return "n/a"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if percent:
        return f"{100 * v:.1f}"
    if abs(v) >= 1e5:
        return f"{v:.3g}"
    if v.is_integer() and (v == 0 or abs(v) >= 1):
        return str(int(v))
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3f}"


def display(table: Table) -> pd.DataFrame:
    """The table as strings, formatted for reading (the CSV keeps raw values)."""
    frame = table.frame
    out = pd.DataFrame(index=range(len(frame)))
    for col in frame.columns:
        pct = col in table.percent
        out[col] = [fmt_cell(v, pct) for v in frame[col].tolist()]
    return out


# --- per-format tables ----------------------------------------------------------------

def to_markdown(table: Table) -> str:
    """GitHub-flavoured Markdown table with the footer as an italic line below."""
    d = display(table)
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(esc(c) for c in d.columns) + " |",
             "|" + "|".join("---" for _ in d.columns) + "|"]
    lines += ["| " + " | ".join(esc(v) for v in row) + " |" for row in d.itertuples(index=False)]
    if not len(d):
        lines.append("| " + " | ".join("" for _ in d.columns) + " |")
    text = "\n".join(lines) + "\n"
    return text + (f"\n*{table.footer}*\n" if table.footer else "")


LATEX_SPECIAL = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
                 "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}"}


def latex_escape(text: str) -> str:
    """Escape LaTeX special characters."""
    return "".join(LATEX_SPECIAL.get(c, c) for c in str(text))


def to_latex(table: Table) -> str:
    """A booktabs `table` environment (needs \\usepackage{booktabs}); footer as a small note."""
    d = display(table)
    numeric = [pd.api.types.is_numeric_dtype(table.frame[c]) for c in table.frame.columns]
    align = "".join("r" if n else "l" for n in numeric)
    body = [" & ".join(latex_escape(v) for v in row) + r" \\" for row in d.itertuples(index=False)]
    return "\n".join([
        r"\begin{table}[t]", r"\centering", r"\small",
        rf"\caption{{{latex_escape(table.title)}}}", rf"\label{{tab:{table.name}}}",
        rf"\begin{{tabular}}{{{align}}}", r"\toprule",
        " & ".join(latex_escape(c) for c in d.columns) + r" \\", r"\midrule", *body, r"\bottomrule",
        r"\end{tabular}",
        (rf"\par\smallskip\footnotesize {latex_escape(table.footer)}" if table.footer else ""),
        r"\end{table}", "",
    ])


def to_html_table(table: Table) -> str:
    """An HTML <table> (escaped) followed by its footer."""
    d = display(table)
    if not len(d):
        body = "<p class='empty'>(no rows)</p>"
    else:
        body = d.to_html(index=False, escape=True, border=0, classes="tbl", na_rep="n/a")
    return body + (f"<p class='footer'>{html.escape(table.footer)}</p>" if table.footer else "")


def write_table(table: Table, out: Path) -> list[str]:
    """Write <name>.csv/.md/.tex into `out`; return the relative paths."""
    files = {f"{table.name}.csv": table.frame.to_csv(index=False, na_rep=""),
             f"{table.name}.md": f"## {table.title}\n\n" + to_markdown(table),
             f"{table.name}.tex": to_latex(table)}
    for name, text in files.items():
        atomic_write_text(out / name, text)
    return list(files)


# --- whole reports --------------------------------------------------------------------

def render_markdown(title: str, blocks: list[Block]) -> str:
    """report.md: figures are linked as relative paths (figures/<name>.png)."""
    parts = [f"# {title}\n"]
    for b in blocks:
        if b.kind in ("h2", "h3"):
            parts.append(("## " if b.kind == "h2" else "### ") + b.content + "\n")
        elif b.kind == "p":
            parts.append(b.content + "\n")
        elif b.kind == "list":
            parts.append("\n".join(f"- {item}" for item in b.content) + "\n")
        elif b.kind == "table":
            desc = f"{b.content.description}\n\n" if b.content.description else ""
            parts.append(desc + to_markdown(b.content))
        elif b.kind == "figure":
            fig: Figure = b.content
            png = next((f for f in fig.files if f.endswith(".png")), f"figures/{fig.name}.png")
            parts.append(f"![{fig.title}]({png})\n\n*{fig.caption}*\n")
        elif b.kind == "pre":
            parts.append("```\n" + b.content + "\n```\n")
    return "\n".join(parts)


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1200px;
margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
h1{border-bottom:2px solid #444}h2{margin-top:2em;border-bottom:1px solid #bbb}
table.tbl{border-collapse:collapse;font-size:13px;margin:.5em 0}
table.tbl th,table.tbl td{border:1px solid #ccc;padding:3px 7px;text-align:right}
table.tbl th{background:#f0f0f0}table.tbl td:first-child,table.tbl td:nth-child(2){text-align:left}
p.footer{font-size:12px;color:#555;font-style:italic}figure{margin:1em 0}
figure img{max-width:100%;border:1px solid #ddd}figcaption{font-size:12px;color:#555}
pre{background:#f7f7f7;padding:.7em;overflow-x:auto;font-size:12px}.empty{color:#777}
section.table{overflow-x:auto}
"""


def _html_block(b: Block) -> str:
    if b.kind in ("h2", "h3"):
        return f"<{b.kind}>{html.escape(b.content)}</{b.kind}>"
    if b.kind == "p":
        return f"<p>{_inline(b.content)}</p>"
    if b.kind == "list":
        return "<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b.content) + "</ul>"
    if b.kind == "table":
        t: Table = b.content
        desc = f"<p>{_inline(t.description)}</p>" if t.description else ""
        return f"<section class='table' id='{html.escape(t.name)}'>{desc}{to_html_table(t)}</section>"
    if b.kind == "figure":
        fig: Figure = b.content
        data = base64.b64encode(fig.png).decode("ascii")
        return (f"<figure id='{html.escape(fig.name)}'><img alt='{html.escape(fig.title)}' "
                f"src='data:image/png;base64,{data}'><figcaption>{html.escape(fig.caption)}</figcaption></figure>")
    return f"<pre>{html.escape(b.content)}</pre>"


def _inline(text: str) -> str:
    """Escape text and turn `code` spans into <code>."""
    parts = html.escape(str(text)).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def render_html(title: str, blocks: list[Block]) -> str:
    """report.html: one file, inline CSS, figures embedded as base64 PNG."""
    body = "\n".join(_html_block(b) for b in blocks)
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head>\n"
            f"<body><h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n")
