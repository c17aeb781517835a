"""Rendering: tables to Markdown / LaTeX / HTML / CSV, and whole reports to report.md and a
self-contained report.html: inline CSS, PNG figures as base64 data URIs, sortable tables (a
small inline script), and the interactive figures of `reports.interactive` (plotly.js embedded
once, the figures as one JSON element). Nothing external is referenced or fetched. Written by
hand: no jinja2, no tabulate.
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

from rlsuite.reports.atomic import atomic_write_text
from rlsuite.reports.figures import Figure
from rlsuite.reports.interactive import PLOTS_JS, Plot, to_json
from rlsuite.reports.scores import BASE_LABEL
from rlsuite.reports.tables import NOT_DISTINGUISHABLE, UNTESTABLE, Table

BlockKind = Literal["h2", "h3", "p", "note", "list", "table", "figure", "pre", "plot", "html_only", "details",
                    "notice", "row"]


@dataclass(frozen=True)
class Block:
    """One piece of a report: a heading, paragraph, footer-style note, bullet list, table, figure,
    preformatted text, or, for report.html: an interactive figure (`plot`: a
    `rlsuite.reports.interactive.Plot`), blocks shown only there (`html_only`: a list of blocks; report.md
    skips them), a collapsed section (`details`: (summary, blocks); report.md shows the blocks) or
    columns side by side (`row`: a list of block lists, stacked on a narrow page; report.md shows
    them one after the other)."""

    kind: BlockKind
    content: Any


def section_id(title: str) -> str:
    """The anchor of an h2 section in report.html (`sec-<slug>`)."""
    return "sec-" + "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-")


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


def _sort_key(value: Any) -> str | None:
    """The raw number a sortable column orders by (`data-v`; "" = missing, sorted last); None for
    text and booleans."""
    if value is None or value is pd.NA:
        return ""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    v = float(value)
    return "" if math.isnan(v) else repr(v) if math.isfinite(v) else ("1e999" if v > 0 else "-1e999")


LONG_CELL = 40
"""Characters above which a cell's text is clipped to `CSS`'s few lines (`div.clip`: it scrolls, and
the full text is the cell's `title`), so that no row of report.html is more than a few lines tall."""


def _cell(text: str) -> tuple[str, str]:
    """(extra attributes, inner HTML) of one cell's text."""
    if len(text) <= LONG_CELL:
        return "", html.escape(text)
    return f" title='{html.escape(text)}'", f"<div class='clip'>{html.escape(text)}</div>"


def to_html_table(table: Table) -> str:
    """A sortable HTML <table> (escaped; numeric cells carry their raw value in `data-v`, marked
    cells the class `best`; text over `LONG_CELL` characters is clipped, in full in the cell's
    `title`) in its own horizontally scrolling box (`div.tbl-scroll`), the meaning of the marks, and
    the footer."""
    d = display(table)
    if not len(d):
        body = "<p class='empty'>(no rows)</p>"
    else:
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in d.columns)
        rows = []
        raw = table.frame.reset_index(drop=True)
        for i, row in enumerate(d.itertuples(index=False)):
            cells = []
            for col, text in zip(d.columns, row, strict=True):
                key = _sort_key(raw.at[i, col])
                attrs = "" if key is None else f" data-v='{key}'"
                if (i, col) in table.marked:
                    attrs += " class='best'"
                extra, inner = _cell(str(text))
                cells.append(f"<td{attrs}{extra}>{inner}</td>")
            rows.append("<tr>" + "".join(cells) + "</tr>")
        body = (f"<div class='tbl-scroll'><table class='tbl sortable'><thead><tr>{head}</tr></thead><tbody>"
                + "".join(rows) + "</tbody></table></div>")
        if table.marked and table.mark_note:
            body += f"<p class='marks'><span class='best'>bold</span>: {_inline(table.mark_note)}</p>"
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
            testable = v[v["verdict"] != UNTESTABLE]
            if "mdd" in v and len(testable) and np.isinf(pd.to_numeric(testable["mdd"], errors="coerce")).all():
                parts.append(f"at {_seeds(algs)} seed(s) none can be: the randomization test's best p is 2/2^n, "
                             "above the families' adjusted levels, so no difference is resolvable "
                             "(column `resolution_floor`)")
            if "diff_min" in v and len(vb):
                def rng(r) -> str:
                    return f"{g(r.diff_min).replace(' pp', '')} to {g(r.diff_max)}"
                up = [f"{r.algorithm_x} ({rng(r)})" for r in vb.itertuples() if r.diff_min > 0]
                down = [f"{r.algorithm_x} ({rng(r)})" for r in vb.itertuples() if r.diff_max < 0]
                if up:
                    parts.append("above the base on every seed (a description, not a verdict): "
                                 + _listing(up, max_items))
                if down:
                    parts.append(f"below it on every seed: {_listing(down, max_items)}")
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
    return (f"Verdicts: exact randomization tests (sign flips of the per-seed differences over shared seeds; "
            f"relabellings of the pooled runs where a pair shares fewer than 2 seeds: one rule at every n, so n "
            f"paired seeds reach at best p = 2/2^n and fewer than 6 cannot reject at 5%), Holm-adjusted within each "
            f"family — {'; '.join(fams)} — at family-wise alpha = {1 - confidence:.2g} per family. "
            "[Holm a, b] is the test's interval at the level Holm tested that comparison (it excludes 0 exactly "
            "when the verdict is a difference; (-inf, inf): too few seeds to reject any shift); the unadjusted "
            "intervals stay in the tables, and table `verdicts` lists every comparison with its MDD at the "
            "family's adjusted level (80% power) and the seeds its observed difference would need.")


# --- whole reports --------------------------------------------------------------------

def render_markdown(title: str, blocks: list[Block]) -> str:
    """report.md: figures are linked as relative paths (figures/<name>.png)."""
    parts = [f"# {title}\n"]
    for b in _flatten_md(blocks):
        if b.kind in ("h2", "h3"):
            parts.append(("## " if b.kind == "h2" else "### ") + b.content + "\n")
        elif b.kind == "p":
            parts.append(b.content + "\n")
        elif b.kind == "note":
            parts.append(f"*{b.content}*\n")
        elif b.kind == "notice":
            parts.append(f"> **Note:** {b.content}\n")
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


def _flatten_md(blocks: list[Block]) -> list[Block]:
    """report.md's blocks: `html_only` and `plot` dropped, `details` and `row` opened."""
    out = []
    for b in blocks:
        if b.kind == "details":
            out += _flatten_md(b.content[1])
        elif b.kind == "row":
            out += [c for col in b.content for c in _flatten_md(col)]
        elif b.kind not in ("html_only", "plot"):
            out.append(b)
    return out


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
section.table{overflow-x:auto}div.tbl-scroll{overflow-x:auto;max-width:100%}
table.tbl th,table.tbl td{white-space:nowrap}
table.tbl td div.clip{max-height:4.4em;max-width:32em;min-width:12em;overflow-y:auto;white-space:normal;text-align:left}
p.footer,section.table>p{overflow-wrap:anywhere}
div.row{display:flex;flex-wrap:wrap;gap:0 24px;align-items:flex-start}
div.row>div.col{flex:2 1 420px;min-width:0}div.row>div.col:first-child{flex:3 1 560px}
div.row>div.col>h3{margin-top:.6em}
table.sortable th{cursor:pointer;user-select:none}table.sortable th:hover{background:#e2e2e2}
table.sortable th[data-sort=asc]::after{content:" \\25B2"}table.sortable th[data-sort=desc]::after{content:" \\25BC"}
td.best,span.best{font-weight:700;background:#eef5ff}p.marks{font-size:12px;color:#333;margin:.2em 0}
figure.plot{margin:1.2em 0}.plot-controls{font-size:13px;margin:.2em 0 .4em}.plot-controls label{margin-right:1.2em}
.plotly-div{min-height:200px}details>summary{cursor:pointer;font-weight:600;margin:.8em 0}
p.notice{background:#fff6e0;border:1px solid #e5c07b;padding:.5em .8em}nav.toc{font-size:13px;margin:.5em 0}
"""

TABLES_JS = r"""
(function () {
  "use strict";
  [].forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    var body = table.tBodies[0], heads = table.tHead.rows[0].cells;
    [].forEach.call(body.rows, function (r, i) { r.setAttribute("data-i", i); });
    [].forEach.call(heads, function (th, col) {
      th.title = "click to sort (again: reverse, a third time: original order)";
      th.addEventListener("click", function () {
        var dir = {"": "asc", asc: "desc", desc: ""}[th.getAttribute("data-sort") || ""];
        [].forEach.call(heads, function (h) { h.removeAttribute("data-sort"); });
        if (dir) th.setAttribute("data-sort", dir);
        var rows = [].slice.call(body.rows);
        var numeric = rows.every(function (r) { return r.cells[col].hasAttribute("data-v"); });
        function key(r) {
          var c = r.cells[col];
          if (!numeric) return c.textContent;
          var v = c.getAttribute("data-v");
          return v === "" ? null : parseFloat(v);
        }
        rows.sort(function (a, b) {
          if (!dir) return a.getAttribute("data-i") - b.getAttribute("data-i");
          var x = key(a), y = key(b);
          if (x === null || y === null) return (x === null) - (y === null);
          var c = numeric ? x - y : String(x).localeCompare(String(y), undefined, {numeric: true});
          return dir === "asc" ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
})();
"""
"""Sortable tables: click a header to sort by it (numbers by their raw value, missing last)."""


def _html_block(b: Block) -> str:
    if b.kind == "h2":
        return f"<h2 id='{section_id(b.content)}'>{html.escape(b.content)}</h2>"
    if b.kind == "h3":
        return f"<h3>{html.escape(b.content)}</h3>"
    if b.kind == "notice":
        return f"<p class='notice'>{_inline(b.content)}</p>"
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
    if b.kind == "plot":
        p: Plot = b.content
        return (f"<figure class='plot' id='{html.escape(p.name)}-figure'><div class='plot-controls'></div>"
                f"<div class='plotly-div' id='{html.escape(p.name)}' data-kind='{p.kind}'></div>"
                f"<figcaption>{_inline(p.caption)}</figcaption></figure>")
    if b.kind == "html_only":
        return "\n".join(_html_block(c) for c in b.content)
    if b.kind == "details":
        summary, inner = b.content
        return (f"<details><summary>{html.escape(summary)}</summary>\n"
                + "\n".join(_html_block(c) for c in inner) + "\n</details>")
    if b.kind == "row":
        return ("<div class='row'>" + "".join("<div class='col'>" + "\n".join(_html_block(c) for c in col)
                                              + "</div>" for col in b.content) + "</div>")
    return f"<pre>{html.escape(b.content)}</pre>"


def _plots(blocks: list[Block]) -> list[Plot]:
    out = []
    for b in blocks:
        if b.kind == "plot":
            out.append(b.content)
        elif b.kind == "html_only":
            out += _plots(b.content)
        elif b.kind == "details":
            out += _plots(b.content[1])
        elif b.kind == "row":
            out += [p for col in b.content for p in _plots(col)]
    return out


def _inline(text: str) -> str:
    """Escape text and turn `code` spans into <code>."""
    parts = html.escape(str(text)).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def section_first(blocks: list[Block], title: str) -> list[Block]:
    """`blocks` with the h2 section `title` (its heading up to the next h2) moved to the front;
    unchanged without one."""
    start = next((i for i, b in enumerate(blocks) if b.kind == "h2" and b.content == title), None)
    if start is None:
        return list(blocks)
    end = next((i for i in range(start + 1, len(blocks)) if blocks[i].kind == "h2"), len(blocks))
    return blocks[start:end] + blocks[:start] + blocks[end:]


def render_html(title: str, blocks: list[Block], plotly_js: str | None = None) -> str:
    """report.html: one file, inline CSS, figures embedded as base64 PNG, sortable tables and,
    when `plotly_js` is given, the interactive figures (the library once, then every figure's
    JSON in one element and the script that draws them). Blocks render in the order given (the
    report puts its figures first: `section_first`)."""
    body = "\n".join(_html_block(b) for b in blocks)
    toc = " · ".join(f"<a href='#{section_id(b.content)}'>{html.escape(b.content)}</a>" for b in blocks
                     if b.kind == "h2")
    plots = _plots(blocks)
    scripts = f"<script>{TABLES_JS}</script>"
    if plots:
        if plotly_js is None:
            raise ValueError("interactive figures need plotly_js (reports.interactive.plotly_js())")
        specs = {p.name: {"kind": p.kind, "spec": p.spec} for p in plots}
        scripts += (f"\n<script>{plotly_js}</script>\n<script type='application/json' id='rlsuite-plots'>"
                    f"{to_json(specs)}</script>\n<script>{PLOTS_JS}</script>")
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head>\n"
            f"<body><h1>{html.escape(title)}</h1>\n<nav class='toc'>{toc}</nav>\n{body}\n{scripts}\n"
            "</body></html>\n")
