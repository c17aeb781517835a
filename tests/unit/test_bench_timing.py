"""The benchmarks' fair-timing helpers: ``benchmarks/vs_trl/vs_trl.py``'s rotated side order and the
interval over rounds, ``benchmarks/reference_runs/reference_runs.py``'s metric comparison (hand-computed),
and ``benchmarks/common.py``'s results-file tail (the machine, the command, the write)."""

from __future__ import annotations

import os
import platform
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import load_script

_BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):
    sys.path.insert(0, str(_BENCH))  # the scripts import the shared modules (common.py) by name
    try:
        return load_script(f"benchmarks/{name}/{name}.py", f"{name}_bench")  # <study>/<script>
    finally:
        sys.path.remove(str(_BENCH))


vs_trl = _load("vs_trl")
reference_runs = _load("reference_runs")
common = sys.modules["common"]  # benchmarks/common.py, as the scripts import it


def test_latin_orders_balance_every_side_over_every_position():
    orders = vs_trl.latin_orders(["trl", "ours", "levers"], 6)
    assert len(set(orders)) == 6  # every permutation once
    for pos in range(3):
        assert Counter(o[pos] for o in orders) == {"trl": 2, "ours": 2, "levers": 2}
    assert vs_trl.latin_orders(["trl", "ours"], 4) == [("trl", "ours"), ("ours", "trl")] * 2
    assert vs_trl.latin_orders(["trl", "ours"], 3)[2] == ("trl", "ours")


def test_median_interval_is_the_sign_test_order_statistics():
    lo, hi, cov = vs_trl.median_interval([1.3, 1.1, 1.2, 1.6, 1.4, 1.5])
    assert (lo, hi) == (1.1, 1.6) and cov == pytest.approx(1 - 2 / 64)  # 6 rounds: the range, 96.9%
    xs = list(range(1, 13))  # 12 values: P(Bin(12, .5) <= 2) = 79/4096, so [x_(3), x_(10)] covers 96.1%
    lo, hi, cov = vs_trl.median_interval(xs)
    assert (lo, hi) == (3, 10) and cov == pytest.approx(1 - 2 * 79 / 4096)
    lo, hi, cov = vs_trl.median_interval([2.0, 1.0, 3.0])  # too few for 95%: the range and its coverage
    assert (lo, hi) == (1.0, 3.0) and cov == pytest.approx(0.75)


def test_round_lines_report_per_round_ratios_and_their_median():
    rounds = [{"order": ("trl", "ours"), "times": {"trl": [2.0, 2.2, 2.4], "ours": [1.0, 1.1, 1.2]}, "load": 1.0},
              {"order": ("ours", "trl"), "times": {"trl": [3.0], "ours": [1.0]}, "load": 2.0}]
    text = "\n".join(vs_trl.round_lines(rounds, [("TRL", "trl"), ("rlsuite", "ours")], threads=2))
    assert "| 0 | TRL > rlsuite | 1.00 | 2.2000 | 1.1000 | 2.00 |" in text
    assert "| 1 | rlsuite > TRL | 2.00 | 3.0000 | 1.0000 | 3.00 |" in text
    assert "**rlsuite: 2.50× TRL**" in text and "2 thread(s)" in text


def test_reference_compare_names_the_differing_keys_and_ignores_noise_in_the_ratio():
    a = [{"loss/total": 1.0, "mismatch/kl": 1e-8, "budget/flops": 10, "adv/mean": 1e-9, "reward/mean": 0.5}]
    b = [{"loss/total": 1.0 + 2e-6, "mismatch/kl": 3e-8, "budget/flops": 5, "adv/mean": 3e-9, "reward/mean": 0.5}]
    diff, rel = reference_runs.compare(a, b)
    assert diff == ["adv/mean", "budget/flops", "loss/total", "mismatch/kl"]
    assert rel == pytest.approx(2e-6 / (1 + 2e-6))  # only loss/total counts
    assert reference_runs.compare(a, a) == ([], 0.0)
    assert reference_runs.compare(a, a + a)[0] == sorted(a[0])  # a missing row differs everywhere


def test_the_results_tail_names_the_machine_and_the_command_and_writes_the_file(tmp_path, capsys):
    from rlsuite.suite.runfolder import cpu_model

    assert common.machine() == f"{cpu_model()} ({platform.machine()}), {os.cpu_count()} cores"
    script = _BENCH / "vs_trl" / "vs_trl.py"
    assert common.command(script, "--threads", "1") == "python benchmarks/vs_trl/vs_trl.py --threads 1"
    assert common.command(str(script), python="python3.11") == "python3.11 benchmarks/vs_trl/vs_trl.py"
    assert common.command(tmp_path / "x.py") == f"python {(tmp_path / 'x.py').resolve().as_posix()}"  # outside
    out = tmp_path / "new" / "r.md"
    common.write_results(out, "# table\n", keep="\n<!-- kept -->\n")
    assert out.read_text() == "# table\n\n<!-- kept -->\n" and capsys.readouterr().out == "# table\n\n"
    common.write_results(out, "# again\n")
    assert out.read_text() == "# again\n"
