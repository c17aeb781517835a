"""report.html renders in headless Chromium: every table is present and every embedded image
decodes, with no load or script errors; the interactive figures draw (every plot has an SVG),
a legend click hides an algorithm, the per-seed and x-axis controls work, the tables sort, and
the page requests nothing (Chromium runs with every host name unresolvable). At a 1280 px wide
window the page opens on its figures (the first one's top above 800 px, the learning curves
beside the verdicts, every figure before the summary and the first wide table), no table row is
taller than 120 px, and a wide table scrolls inside its own box while the page keeps the
window's width.

Needs Debian's `chromium` (apt-get install -y chromium). Skipped when it is absent, unless
RLSUITE_REQUIRE_CHROMIUM=1, which turns the skip into a failure. Screenshots go to the test's
tmp_path and, when RLSUITE_ARTIFACTS is set, are copied there.
Run: python -m pytest tests/reports/test_reports_html_chromium.py -q
"""

from __future__ import annotations

import html as htmllib
import json
import os
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest

from rlsuite.reports import ReportConfig, build_report, synthetic
from rlsuite.reports.interactive import plotly_js

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
"""Committed compact run copies the tests read (tests/fixtures/README.md says where each comes from)."""
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]
"""No network: every host name fails to resolve, and anything else would go to a closed proxy port."""
# Injected into a copy of the report: record resource/script errors and, once loaded,
# write the counts into the DOM for --dump-dom to return.
PROBE_HEAD = """<script>window.__errors=[];window.addEventListener('error',function(e){
window.__errors.push(String(e.message||(e.target&&e.target.tagName)||e.type));},true);</script>"""
PROBE_BODY = """<script>window.addEventListener('load',function(){var im=[].slice.call(document.images);
var p=document.createElement('pre');p.id='render-check';p.textContent=JSON.stringify({images:im.length,
broken:im.filter(function(i){return !i.complete||i.naturalWidth===0;}).length,
tables:document.querySelectorAll('table').length,errors:window.__errors});document.body.appendChild(p);});
</script>"""
# The interactive probe (in <head>, before the page's scripts): collects errors, console errors and
# rejected promises; after the page's figures are drawn (window.rlsuiteReady) checks that every plot
# has an SVG; clicks the first legend entry of the first learning-curve plot (the mouse events
# plotly's legend listens to) and checks that the algorithm's traces become 'legendonly' and leave
# the SVG; turns the per-seed traces on; switches the x-axis to `step`; sorts the leaderboard by its
# `mean` column both ways and back; lists every resource the page fetched; writes it all as JSON
# into <pre id="probe"> (and drops the scripts, so that --dump-dom stays small).
PROBE_INTERACTIVE = r"""<script>(function () {
  var out = {errors: [], console: []};
  window.addEventListener("error", function (e) {
    var t = e.target;
    out.errors.push(String(e.message || (t && (t.tagName + " " + (t.src || t.href))) || e.type));
  }, true);
  window.addEventListener("unhandledrejection", function (e) { out.errors.push("unhandled rejection: " + e.reason); });
  var ce = console.error;
  console.error = function () {
    out.console.push([].map.call(arguments, String).join(" "));
    return ce.apply(console, arguments);
  };
  function wait(ms) { return new Promise(function (r) { setTimeout(r, ms); }); }
  function drawn(gd) { return gd.querySelectorAll(".scatterlayer .trace").length; }
  function finish() {
    out.resources = performance.getEntriesByType("resource").map(function (e) { return e.name; })
      .filter(function (n) { return n.indexOf("data:") !== 0; });
    [].forEach.call(document.querySelectorAll("script"), function (s) { s.remove(); });
    var p = document.createElement("pre"); p.id = "probe"; p.textContent = JSON.stringify(out);
    document.body.appendChild(p);
  }
  function sortCheck() {
    var table = document.querySelector("#leaderboard table.sortable");
    var th = [].filter.call(table.tHead.rows[0].cells, function (c) { return c.textContent.trim() === "mean"; })[0];
    var col = [].indexOf.call(table.tHead.rows[0].cells, th);
    function values() {
      return [].map.call(table.tBodies[0].rows, function (r) {
        var v = r.cells[col].getAttribute("data-v"); return v === "" ? null : parseFloat(v); });
    }
    function ordered(vs, sign) {
      var f = vs.filter(function (v) { return v !== null; });
      var last = vs.slice(f.length).every(function (v) { return v === null; });
      return last && f.every(function (v, i) { return i === 0 || sign * (v - f[i - 1]) >= 0; });
    }
    var original = values();
    th.click(); var asc = ordered(values(), 1) && th.getAttribute("data-sort") === "asc";
    th.click(); var desc = ordered(values(), -1) && th.getAttribute("data-sort") === "desc";
    th.click(); var reset = JSON.stringify(values()) === JSON.stringify(original);
    return {asc: asc, desc: desc, reset: reset, rows: original.length};
  }
  window.addEventListener("load", function () {
    Promise.resolve(window.rlsuiteReady).then(function () {
      var divs = [].slice.call(document.querySelectorAll(".plotly-div"));
      out.plots = divs.map(function (d) { return d.id; });
      out.empty = divs.filter(function (d) {
        var svg = d.querySelector(".main-svg");
        return !(svg && svg.childNodes.length && svg.getBoundingClientRect().width > 0) && !d.querySelector("canvas");
      }).map(function (d) { return d.id; });
      out.plot_errors = window.rlsuitePlotErrors || ["rlsuitePlotErrors missing"];
      out.sort = sortCheck();
      var gd = document.querySelector(".plotly-div[data-kind='curves']");
      var i = gd.data.findIndex(function (t) { return t.showlegend !== false; });
      var item = gd.querySelector(".legend .traces .legendtoggle");
      out.legend = {name: gd.data[i].name, before: drawn(gd), group: gd.data.filter(function (t) {
        return t.legendgroup === gd.data[i].legendgroup && t.visible === true; }).length};
      var r = item.getBoundingClientRect();
      var at = {bubbles: true, cancelable: true, button: 0, clientX: r.left + r.width / 2,
                clientY: r.top + r.height / 2};
      item.dispatchEvent(new MouseEvent("mousedown", at));
      item.dispatchEvent(new MouseEvent("mouseup", at));
      return wait(1500).then(function () {
        out.legend.visible = gd.data[i].visible;
        out.legend.after = drawn(gd);
        gd.parentNode.querySelector("input[data-control='seeds']").click();
        return wait(500);
      }).then(function () {
        out.seeds = {drawn: drawn(gd), traces: gd.data.length};
        var sel = gd.parentNode.querySelector("select[data-control='x-axis']");
        sel.value = "step"; sel.dispatchEvent(new Event("change"));
        return wait(500);
      }).then(function () {
        out.xaxis = {title: gd.layout.xaxis.title.text, drawn: drawn(gd), hidden: gd.data[i].visible};
      });
    }).catch(function (e) { out.errors.push("probe: " + e); }).then(finish);
  });
})();</script>"""


# The layout probe (in <head>): once the figures are drawn (and plotly has resized them to their
# boxes), measures in page coordinates (px from the top of the page) every figure shown (not the
# static ones collapsed under <details>), the summary's heading and every table: its top, width,
# its parent box (clientWidth, scrollWidth, overflow-x, how many elements it holds) and its tallest
# row; and the window's and the page's widths. Written as JSON into <pre id="layout">.
PROBE_LAYOUT = r"""<script>(function () {
  function top(e) { return e.getBoundingClientRect().top + window.scrollY; }
  function shown(e) {
    var r = e.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && !e.closest("details:not([open])");
  }
  function measure() {
    var out = {inner_width: window.innerWidth, inner_height: window.innerHeight,
               page_width: document.documentElement.scrollWidth,
               body_width: document.body.getBoundingClientRect().width};
    out.figures = [].filter.call(document.querySelectorAll("figure"), shown).map(function (f) {
      return {id: f.id, top: top(f), left: f.getBoundingClientRect().left}; });
    var s = document.getElementById("sec-summary");
    out.summary_top = s ? top(s) : null;
    out.tables = [].map.call(document.querySelectorAll("table.tbl"), function (t) {
      var box = t.parentElement, rows = [].slice.call(t.rows);
      var tall = rows.reduce(function (a, r) { var h = r.getBoundingClientRect().height; return h > a.h ? {h: h,
        text: r.textContent.slice(0, 120)} : a; }, {h: 0, text: ""});
      return {id: (t.closest("section") || {}).id || "", top: top(t), width: t.getBoundingClientRect().width,
              box_client: box.clientWidth, box_scroll: box.scrollWidth, box_overflow: getComputedStyle(box).overflowX,
              box_children: box.children.length, max_row: tall.h, max_row_text: tall.text};
    });
    [].forEach.call(document.querySelectorAll("script"), function (e) { e.remove(); });
    var p = document.createElement("pre"); p.id = "layout"; p.textContent = JSON.stringify(out);
    document.body.appendChild(p);
  }
  window.addEventListener("load", function () {
    Promise.resolve(window.rlsuiteReady).then(function () { return new Promise(function (r) { setTimeout(r, 500); }); })
      .then(measure, measure);
  });
})();</script>"""
FOLD_PX = 800
"""The fold of a 1280x800 screen: the first figure starts above it."""
MAX_ROW_PX = 120
"""The tallest a table row may be (about five lines of a table's 13 px text)."""


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="module")
def browser():
    exe = chromium()
    if exe is None:
        if os.environ.get("RLSUITE_REQUIRE_CHROMIUM") == "1":
            pytest.fail("RLSUITE_REQUIRE_CHROMIUM=1 but no chromium on PATH (apt-get install -y chromium)")
        pytest.skip("headless check needs Debian's chromium (apt-get install -y chromium); not on PATH")
    return exe


def dump_dom(browser: str, page: Path, profile: Path, budget_ms: int = 10000, window: str | None = None) -> str:
    cmd = [browser, *FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", "--dump-dom",
           *([f"--window-size={window}"] if window else []), page.as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def screenshot(browser: str, html: Path, tmp_path: Path, name: str) -> Path:
    """A 1280x2400 screenshot of the report's figures (what precedes them is dropped from a copy of the
    page; a headless screenshot shows the top of the page); copied to RLSUITE_ARTIFACTS too."""
    page = tmp_path / f"{name}_shot.html"
    cut = ("<script>(function(){var f=document.getElementById('sec-figures');"
           "while(f&&f.previousElementSibling)f.previousElementSibling.remove();})();</script>")
    page.write_text(html.read_text().replace("</body>", cut + "</body>", 1))
    shot = tmp_path / f"{name}.png"
    subprocess.run([browser, *FLAGS, f"--user-data-dir={tmp_path / (name + '_profile')}", f"--screenshot={shot}",
                    "--virtual-time-budget=10000", "--window-size=1280,2400", page.as_uri()],
                   capture_output=True, timeout=180, check=True)
    if os.environ.get("RLSUITE_ARTIFACTS"):
        dest = Path(os.environ["RLSUITE_ARTIFACTS"])
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, dest / f"report_{name}.png")
    return shot


@pytest.mark.slow
def test_report_renders(browser, synthetic_root_ro, tmp_path):
    html = build_report(synthetic_root_ro, tmp_path / "report", ReportConfig(reps=100, scaling_reps=5))
    text = html.read_text()
    n_images, n_tables = text.count("<img "), text.count("<table")
    probe = tmp_path / "probe.html"
    probe.write_text(text.replace("</head>", PROBE_HEAD + "</head>", 1).replace("</body>", PROBE_BODY + "</body>", 1))
    out = dump_dom(browser, probe, tmp_path / "profile")
    m = re.search(r'<pre id="render-check">(.*?)</pre>', out, re.S)
    assert m, "load event never fired: " + out[-500:]
    check = json.loads(htmllib.unescape(m.group(1)))
    assert check == {"images": n_images, "broken": 0, "tables": n_tables, "errors": []}
    assert n_images >= 5 and n_tables >= 10
    shot = tmp_path / "shot.png"
    subprocess.run([browser, *FLAGS, f"--user-data-dir={tmp_path / 'profile2'}", f"--screenshot={shot}",
                    "--window-size=1280,2000", html.as_uri()], capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 10_000


def _roots(kind: str, synthetic_root_ro: Path, tmp_path: Path) -> list[Path]:
    if kind == "single":
        return [synthetic_root_ro]
    if kind == "compare":
        roots = []
        for machine, top in (("a", 0.55), ("b", 0.6)):
            arms = [synthetic.Arm(algo="grpo", asymptote=top), synthetic.Arm(algo="ppo", sweep="abl", factors={}),
                    synthetic.Arm(algo="ppo", variant="lowlr", sweep="abl", factors={"optim.lr": 1e-5},
                                  asymptote=0.55)]
            synthetic.write_root(tmp_path / machine / "sweep", arms, ["arith"], [0, 1, 2])
            roots.append(tmp_path / machine / "sweep")
        return roots
    real = FIXTURES / {"real": "effects", "quickstart": "quickstart"}[kind]
    assert real.is_dir(), f"the fixture {real} is missing (tests/fixtures/README.md)"
    return [real]


@pytest.fixture(scope="module")
def report_of(synthetic_root_ro, tmp_path_factory):
    """kind -> the path of its report.html, built once per module (`_roots` has the kinds)."""
    built: dict[str, Path] = {}

    def build(kind: str) -> Path:
        if kind not in built:
            base = tmp_path_factory.mktemp(f"report_{kind}")
            roots = _roots(kind, synthetic_root_ro, base)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the committed runs' fits warn (overflow in exp)
                built[kind] = build_report(roots if len(roots) > 1 else roots[0], base / "report",
                                           ReportConfig(reps=100, scaling_reps=3))
        return built[kind]
    return build


KINDS = ["single", "compare", "real", "quickstart"]
"""`real`: compact copies of a suite sweep's runs as `rlsuite sweep run` writes them (tests/fixtures/effects:
the chain task, the 30 runs of the staleness effect's 6 arms × 5 seeds, from benchmarks/effects/runs);
`quickstart`: the 12 runs of `rlsuite quickstart` (tests/fixtures/quickstart, compact copies), so
the page tested is the quickstart's report.html."""


@pytest.mark.slow
@pytest.mark.skipif(plotly_js() is None, reason="the interactive figures need plotly (pip install -e '.[report]')")
@pytest.mark.parametrize("kind", KINDS)
def test_interactive_report_in_browser(kind, browser, report_of, tmp_path):
    """The figures draw and respond, the tables sort, nothing is fetched (`KINDS` has the pages)."""
    html = report_of(kind)
    text = html.read_text()
    assert not re.search(r"<(script|link|img)\b[^>]*\b(src|href)\s*=\s*['\"]?https?:", text, re.I)
    probe = tmp_path / "probe.html"
    probe.write_text(text.replace("<head>", "<head>" + PROBE_INTERACTIVE, 1))
    out = dump_dom(browser, probe, tmp_path / "profile", budget_ms=30000)
    m = re.search(r'<pre id="probe">(.*?)</pre>', out, re.S)
    assert m, "the probe never finished: " + out[-800:]
    r = json.loads(htmllib.unescape(m.group(1)))
    assert r["errors"] == [] and r["console"] == [] and r["plot_errors"] == []
    assert r["resources"] == []  # nothing requested: no CDN, no font, no tile server
    ids = re.findall(r"class='plotly-div' id='([^']+)'", text)
    assert r["plots"] == ids and len(ids) >= (5 if kind in ("real", "quickstart") else 6) and r["empty"] == []
    leg = r["legend"]
    assert leg["visible"] == "legendonly", leg
    assert leg["after"] == leg["before"] - leg["group"] and leg["group"] == 2  # its band and mean left the SVG
    assert r["seeds"]["drawn"] > leg["after"]  # per-seed traces drawn (not the hidden algorithm's)
    assert r["xaxis"]["title"] == "step" and r["xaxis"]["hidden"] == "legendonly" and r["xaxis"]["drawn"] > 0
    assert r["sort"] == {"asc": True, "desc": True, "reset": True, "rows": r["sort"]["rows"]} and r["sort"]["rows"] > 2
    if kind == "compare":
        assert "grpo [a/sweep]" in text and "ppo:lowlr [b/sweep]" in text and "ablation_plot" in ids
    shot = screenshot(browser, html, tmp_path, kind)
    assert shot.stat().st_size > 20_000


@pytest.mark.slow
@pytest.mark.skipif(plotly_js() is None, reason="the interactive figures need plotly (pip install -e '.[report]')")
@pytest.mark.parametrize("kind", KINDS)
def test_report_layout_in_browser(kind, browser, report_of, tmp_path):
    """At a 1280x800 window: (1) the page opens on its figures: the first one's top is above the fold
    (800 px), a task's verdicts sit beside its learning curves (also above the fold), and every figure
    comes before the summary and the first wide table; (2) no table row is taller than 120 px;
    (3) a wide table scrolls inside its own box (the table alone in a box with overflow-x auto, whose
    scrollWidth exceeds its clientWidth) while the page stays as wide as the window."""
    html = report_of(kind)
    probe = tmp_path / "layout.html"
    probe.write_text(html.read_text().replace("<head>", "<head>" + PROBE_LAYOUT, 1))
    out = dump_dom(browser, probe, tmp_path / "profile", budget_ms=30000, window="1280,800")
    m = re.search(r'<pre id="layout">(.*?)</pre>', out, re.S)
    assert m, "the layout probe never finished: " + out[-800:]
    r = json.loads(htmllib.unescape(m.group(1)))
    assert r["inner_width"] == 1280, r["inner_width"]
    figs, tabs = r["figures"], r["tables"]
    assert figs and tabs
    # (1) figures first, above the fold
    first = figs[0]
    assert first["top"] < FOLD_PX, f"the first figure ({first['id']}) starts at {first['top']:.0f} px"
    assert first["id"].startswith("curves_"), first["id"]
    verdicts = [f for f in figs if f["id"].startswith("verdicts_")]
    assert verdicts and verdicts[0]["top"] < FOLD_PX and verdicts[0]["left"] > first["left"], verdicts[:1]
    wide = [t for t in tabs if t["width"] > t["box_client"] + 1]
    assert wide, "no table is wider than its box on this page: nothing to check for (3)"
    last_fig = max(f["top"] for f in figs)
    assert last_fig < wide[0]["top"], f"figure at {last_fig:.0f} px after the wide table {wide[0]['id']}"
    assert r["summary_top"] is not None and last_fig < r["summary_top"], (last_fig, r["summary_top"])
    assert last_fig < min(t["top"] for t in tabs)
    # (2) every row a few lines at most
    tall = [(t["id"], round(t["max_row"]), t["max_row_text"]) for t in tabs if t["max_row"] > MAX_ROW_PX]
    assert not tall, tall
    # (3) wide tables scroll in their own box; the page does not scroll sideways
    for t in wide:
        assert t["box_children"] == 1 and t["box_overflow"] in ("auto", "scroll"), t
        assert t["box_scroll"] > t["box_client"], t
    assert r["page_width"] <= r["inner_width"] and r["body_width"] <= r["inner_width"], r
