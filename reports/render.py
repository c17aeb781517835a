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
from reports.scores import BASE_LABEL
from reports.tables import NOT_DISTINGUISHABLE, UNTESTABLE, Table

BlockKind = Literal["h2", "h3", "p", "note", "list", "table", "figure", "pre"]


@dataclass(frozen=True)
class Block:
    """One piece of a report: a heading, paragraph, footer-style note, bullet list, table, figure
    or preformatted text."""

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


# --- summary: verdicts per task -------------------------------------------------------

def _fmt(percent: bool):
    return (lambda v: f"{100 * v:.1f}%") if percent else (lambda v: f"{v:.3g}")


def _fmt_diff(percent: bool):
    return (lambda v: f"{100 * v:+.1f} pp") if percent else (lambda v: f"{v:+.3g}")


def _listing(items: list[str], max_items: int) -> str:
    shown = items[:max_items]
    more = f" and {len(items) - len(shown)} more (table `verdicts`)" if len(items) > len(shown) else ""
    return ", ".join(shown) + more


def _seeds(rows: pd.DataFrame) -> str:
    n = rows["n_seeds"]
    return f"{n.min()}" if n.min() == n.max() else f"{n.min()}-{n.max()}"


def summary_lines(verdicts: pd.DataFrame, lb: pd.DataFrame, percent: bool, max_items: int = 8) -> list[str]:
    """One sentence per task: which algorithms beat (or fall below) the base, which pairs are
    distinguishable, saying plainly when none is (verdicts from `tables.verdict_table`:
    Holm-adjusted over the task's family). Means are not ranked: a higher mean that is not
    distinguishable is not a win."""
    f, g = _fmt(percent), _fmt_diff(percent)

    def held(r) -> str:
        return f"{g(r.diff)} [Holm {g(r.holm_ci_low).replace(' pp', '')}, {g(r.holm_ci_high).replace(' pp', '')}]"
    out = []
    for task, v in verdicts.groupby("task", sort=True):
        rows = lb[lb["task"] == task]
        algs = rows[rows["algorithm"] != BASE_LABEL]
        base = rows[rows["algorithm"] == BASE_LABEL]
        head = f"On {task} ({len(algs)} algorithm(s), {_seeds(algs)} seed(s) each)"
        means = dict(zip(algs["algorithm"], algs["mean"], strict=True))
        decided = ~v["verdict"].isin([NOT_DISTINGUISHABLE, UNTESTABLE])
        vb, vp = v[v["algorithm_y"] == BASE_LABEL], v[v["algorithm_y"] != BASE_LABEL]
        base_txt = f"the base ({BASE_LABEL}, {f(base['mean'].iloc[0])})" if len(base) else "the base"
        parts = []
        if not decided.any() and (v["verdict"] != UNTESTABLE).any():
            what = f"from {base_txt} or from another algorithm" if len(vb) and len(vp) else \
                (f"from {base_txt}" if len(vb) else "from another algorithm")
            mean_txt = ", ".join(f"{a} {f(m)}" for a, m in list(means.items())[:max_items])
            parts.append(f"{head}: no algorithm is distinguishable {what} (means: {mean_txt})")
        else:
            parts.append(head)
            if len(vb):
                above = [f"{r.algorithm_x} {f(means[r.algorithm_x])} ({held(r)})"
                         for r in vb[decided[vb.index] & (vb["diff"] > 0)].itertuples()]
                below = [f"{r.algorithm_x} ({held(r)})" for r in vb[decided[vb.index] & (vb["diff"] < 0)].itertuples()]
                same = [r.algorithm_x for r in vb[vb["verdict"] == NOT_DISTINGUISHABLE].itertuples()]
                bits = []
                if above:
                    bits.append(f"above {base_txt}: {_listing(above, max_items)}")
                else:
                    bits.append(f"no algorithm is above {base_txt}")
                if below:
                    bits.append(f"below it: {_listing(below, max_items)}")
                if same:
                    bits.append(f"not distinguishable from it: {_listing(same, max_items)}")
                parts.append("; ".join(bits))
            elif len(algs):
                parts.append("no step-0 eval, so no comparison with the base")
            if len(vp):
                win = [f"{r.verdict} ({held(r)})" for r in vp[decided[vp.index]].itertuples()]
                testable = int((vp["verdict"] != UNTESTABLE).sum())
                if win:
                    rest = testable - len(win)
                    parts.append(f"distinguishable pairs: {_listing(win, max_items)}"
                                 + (f"; the other {rest} of {testable} pairs are not distinguishable" if rest else ""))
                else:
                    parts.append(f"no pair of algorithms is distinguishable ({testable} pair(s))")
        few = [f"{r.algorithm} ({r.n_seeds})" for r in algs.itertuples() if r.n_seeds < 2]
        if few:
            parts.append(f"too few seeds for a verdict: {_listing(few, max_items)}")
        unstable = [f"{r.algorithm} {r.stable_k}/{r.stable_n}" for r in algs.itertuples()
                    if pd.notna(r.stable_k) and r.stable_k < r.stable_n]
        parts.append(f"stable in k/n runs: {_listing(unstable, max_items)} (all other runs stable)" if unstable
                     else "every run stable")
        out.append(_join(parts, head))
    return out


def _join(parts: list[str], head: str) -> str:
    first, rest = parts[0], parts[1:]
    if first == head:
        return f"{first}: " + "; ".join(rest) + "."
    return "; ".join([first, *rest]) + "."


def verdict_footer(verdicts: pd.DataFrame, confidence: float) -> str:
    """The summary's footer: the test, the multiplicity adjustment and each task's family."""
    if verdicts.empty:
        return ""
    groups: dict[tuple[int, int], list[str]] = {}
    for task, v in verdicts.groupby("task", sort=True):
        ok = v[v["verdict"] != UNTESTABLE]
        nb = int((ok["algorithm_y"] == BASE_LABEL).sum())
        groups.setdefault((len(ok) - nb, nb), []).append(task)
    fams = []
    for (npairs, nb), tasks in groups.items():
        parts = ([f"the {nb} comparisons with the base"] if nb else []) + \
            ([f"the {npairs} pairs of algorithms"] if npairs else [])
        fams.append(f"{' and '.join(parts)} of task{'s' if len(tasks) > 1 else ''} "
                    f"{', '.join(tasks)}{' (each)' if len(tasks) > 1 else ''}")
    return (f"Verdicts: paired t-tests of the differences over shared seeds (Welch t where a pair shares fewer than "
            f"2 seeds), Holm-adjusted within each family — {'; '.join(fams)} — at family-wise alpha = "
            f"{1 - confidence:.2g} per family. "
            "[Holm a, b] is the t interval at the level Holm tested that comparison (it excludes 0 exactly when "
            "the verdict is a difference); the unadjusted intervals stay in the tables, and table `verdicts` "
            "lists every comparison with its MDD (80% power) and the seeds its observed difference would need.")


# --- whole reports --------------------------------------------------------------------

def render_markdown(title: str, blocks: list[Block]) -> str:
    """report.md: figures are linked as relative paths (figures/<name>.png)."""
    parts = [f"# {title}\n"]
    for b in blocks:
        if b.kind in ("h2", "h3"):
            parts.append(("## " if b.kind == "h2" else "### ") + b.content + "\n")
        elif b.kind == "p":
            parts.append(b.content + "\n")
        elif b.kind == "note":
            parts.append(f"*{b.content}*\n")
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
    if b.kind == "note":
        return f"<p class='footer'>{_inline(b.content)}</p>"
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
