"""report.html renders in headless Chromium: every table is present and every embedded image
decodes, with no load or script errors.

Needs Debian's `chromium` (apt-get install -y chromium). Skipped when it is absent, unless
RLSUITE_REQUIRE_CHROMIUM=1, which turns the skip into a failure.
Run: python -m pytest tests/reports/test_reports_html_chromium.py -q
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from reports import ReportConfig, build_report

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
# Injected into a copy of the report: record resource/script errors and, once loaded,
# write the counts into the DOM for --dump-dom to return.
PROBE_HEAD = """<script>window.__errors=[];window.addEventListener('error',function(e){
window.__errors.push(String(e.message||(e.target&&e.target.tagName)||e.type));},true);</script>"""
PROBE_BODY = """<script>window.addEventListener('load',function(){var im=[].slice.call(document.images);
var p=document.createElement('pre');p.id='render-check';p.textContent=JSON.stringify({images:im.length,
broken:im.filter(function(i){return !i.complete||i.naturalWidth===0;}).length,
tables:document.querySelectorAll('table').length,errors:window.__errors});document.body.appendChild(p);});
</script>"""


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


@pytest.mark.slow
def test_report_renders(browser, synthetic_root_ro, tmp_path):
    html = build_report(synthetic_root_ro, tmp_path / "report", ReportConfig(reps=100, scaling_reps=5))
    text = html.read_text()
    n_images, n_tables = text.count("<img "), text.count("<table")
    probe = tmp_path / "probe.html"
    probe.write_text(text.replace("</head>", PROBE_HEAD + "</head>", 1).replace("</body>", PROBE_BODY + "</body>", 1))
    cmd = [browser, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000",
           "--dump-dom", probe.as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    m = re.search(r'<pre id="render-check">(.*?)</pre>', res.stdout, re.S)
    assert m, "load event never fired: " + res.stdout[-500:]
    check = json.loads(m.group(1).replace("&quot;", '"'))
    assert check == {"images": n_images, "broken": 0, "tables": n_tables, "errors": []}
    assert n_images >= 5 and n_tables >= 10
    shot = tmp_path / "shot.png"
    subprocess.run([browser, *FLAGS, f"--user-data-dir={tmp_path / 'profile2'}", f"--screenshot={shot}",
                    "--window-size=1280,2000", html.as_uri()], capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 10_000
