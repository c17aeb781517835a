"""Calibrate a reasoning-gym battery for SmolLM2-135M-Instruct (issue 34 §1), in stages.

``screen`` (100 test problems) and ``confirm`` (≥ 300): per candidate dataset configuration, the
base model's greedy accuracy and, at the sampling temperature of the ``hf`` preset (1.0), avg@4 and
pass@4 over 4 samples a problem, with the standard error of avg@4 over problems, the problem space
(distinct questions in the pool and the estimated space size) and the CPU seconds the stage took.
(``--temperature``: another sampling temperature for the same stage.)
A candidate is kept when 0.15 ≤ avg@4 ≤ 0.60, greedy < 0.80, the estimated space is ≥ 10× the
problems a run uses (test + val + the train prompts of a 4,096-sample budget at group 8), and, where
one gold answer covers ≥ 15% of the test problems (Yes/No, True/False), avg@4 beats that constant
answer's share by more than 0.10 (the `const` column: a model that always says "No" to a syllogism
scores the share of invalid ones). A candidate whose pool is capped (``task.max_answer_share``: no gold
answer above that share) is judged on the window and the space alone; its constant check moves to the
pilot, whose ``learns`` needs the score off the final policy's best gold (the answer value it gets
right most often) to rise on every seed.

    python benchmarks/rgym_battery/rgym_battery.py screen [--only LABEL ...] [--workers 2]
    python benchmarks/rgym_battery/rgym_battery.py confirm --only LABEL ... [--n-test 300]
    python benchmarks/rgym_battery/rgym_battery.py pilot --only LABEL ... [--seeds 100 101] [--temperature 0.6]
    python benchmarks/rgym_battery/rgym_battery.py pilot RUN... --only LABEL ... [--n-test 150]   # re-tabulate
    python benchmarks/rgym_battery/rgym_battery.py answers RUN...

``pilot`` (the learnability check): one GRPO run per tuning seed on the *mixture* of the labels
(the composite battery task: one run trains on all and evaluates each), or on one label alone (a
single-dataset pilot: every step trains that dataset), the SmolLM2 settings of
``sweeps/real_model.yaml`` (4 prompts × 8 samples a step, lr 2e-5, no KL term, π_old = μ) at the
screen's temperature, greedy accuracy on each dataset's ``--n-test`` test problems before and after;
the table gives each dataset's gain per seed and its mean with the standard error of a difference
of two proportions at that n.

Each stage appends its table to ``benchmarks/rgym_battery/rgym_battery.md`` (with the command, the
CPU model and the date). Evaluation uses the suite's own code path (``rlsuite eval``: the task's
prompt through the chat template, ``extract=auto``, the instruction below), one torch thread a
worker.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).with_name("rgym_battery.md")
MODEL = "smollm2-135m"
INSTRUCTION = "Reply with only the answer."
SAMPLES, KS = 4, (1, 4)
BUDGET_SAMPLES, GROUP = 4096, 8  # the hf preset's budget: prompts a run draws = samples / group

CANDIDATES = {  # label -> (kind, dataset spec[, task settings of its own])
    "chain_sum_2x2d": ("arithmetic", "chain_sum:min_terms=2,max_terms=2,min_digits=1,max_digits=2"),
    "add_sub_2d": ("arithmetic", "basic_arithmetic:min_terms=2,max_terms=2,max_digits=2,operators=[+,-],"
                                 "allow_parentheses=false,allow_negation=false"),
    "products_1x2d": ("arithmetic", "products:min_terms=2,max_terms=2,min_digits=1,max_digits=2"),
    "gcd_50": ("arithmetic", "gcd:max_value=50"),
    "legs_1": ("counting", "leg_counting:min_animals=1,max_animals=1,max_instances=5"),
    "legs_2": ("counting", "leg_counting:min_animals=1,max_animals=2,max_instances=3"),
    "letters_2w": ("counting", "letter_counting:min_words=1,max_words=2"),
    "bits_63": ("counting", "count_bits:max_n=63"),  # 63 problems: refused (kept to show the refusal)
    "spell_back_4": ("string", "spell_backward:min_word_len=3,max_word_len=4"),
    "word_rev_3": ("string", "word_sequence_reversal:min_words=2,max_words=3"),
    "syllogism_50": ("logic", "syllogism:invalid_ratio=0.5"),
    "sort_words_3": ("ordering", "word_sorting:min_words=2,max_words=3"),
    "sort_numbers_3": ("ordering", "number_sorting:min_numbers=3,max_numbers=3,max_decimals=0"),
    # second round (2026-12-06): simpler logic and relations, wider value ranges, binary string checks
    "gcd_150": ("arithmetic", "gcd:max_value=150"),
    "lcm_3x20": ("arithmetic", "lcm:min_numbers=2,max_numbers=3,min_value=2,max_value=20"),
    "add_1d_3t": ("arithmetic", "basic_arithmetic:min_terms=3,max_terms=3,max_digits=1,operators=[+,-],"
                                "allow_parentheses=false,allow_negation=false"),
    "aiw_sib": ("logic", "aiw:task_types=[siblings],task_type_weights=[1.0],max_entities=6"),
    "aiw_6": ("logic", "aiw:max_entities=6"),
    "family_4": ("logic", "family_relationships:min_family_size=3,max_family_size=4"),
    "seq_simple": ("sequence", "number_sequence:min_terms=4,max_terms=5,min_value=-20,max_value=20,max_complexity=1"),
    "weekday": ("counting", "calendar_arithmetic:tasks=[weekday_of_date]"),
    "letters_1w": ("counting", "letter_counting:min_words=1,max_words=1"),
    "isomorphic_4": ("string", "isomorphic_strings:min_string_length=2,max_string_length=4"),
    "ransom_4": ("string", "ransom_note:max_note_length=3,max_magazine_length=8"),
    # third round (2026-12-06): difficulty variants of the two that learn, and easier string / ordering
    "gcd_100": ("arithmetic", "gcd:max_value=100"),
    "gcd_200": ("arithmetic", "gcd:max_value=200"),
    "letters_3w": ("counting", "letter_counting:min_words=1,max_words=3"),
    "aiw_sib_10": ("logic", "aiw:task_types=[siblings],task_type_weights=[1.0],max_entities=10"),
    "spell_back_3": ("string", "spell_backward:min_word_len=3,max_word_len=3"),
    "palindrome_5": ("string", "palindrome_generation:min_length=3,max_length=5"),
    "sort_words_2": ("ordering", "word_sorting:min_words=2,max_words=2,min_word_length=3,max_word_length=6"),
    "sort_numbers_2": ("ordering", "number_sorting:min_numbers=2,max_numbers=2,max_decimals=0"),
    "pick_2": ("ordering", "number_format:min_num_candidates=2,max_num_candidates=2,min_n=10,max_n=1000"),
    # ransom_note is generated at a pinned string-hash seed since 64b70b0 (its generator iterates a set)
    "ransom_5": ("string", "ransom_note:max_note_length=4,max_magazine_length=10"),
    # fourth screen (2026-12-06, third session): other kinds a 135M model might answer at all
    "needle_6": ("retrieval", "needle_haystack:min_num_statements=3,max_num_statements=6"),
    "needle_10": ("retrieval", "needle_haystack:min_num_statements=6,max_num_statements=10"),
    "reorder_4": ("ordering", "sentence_reordering:min_words_in_sentence=3,max_words_in_sentence=4"),
    "reorder_6": ("ordering", "sentence_reordering:min_words_in_sentence=3,max_words_in_sentence=6"),
    "eq_add_20": ("arithmetic", "simple_equations:min_terms=2,max_terms=2,min_value=1,max_value=20,"
                  "operators=[+,-],operators_weights=[0.5,0.5]"),
    "eq_add_50": ("arithmetic", "simple_equations:min_terms=2,max_terms=2,min_value=1,max_value=50,"
                  "operators=[+,-],operators_weights=[0.5,0.5]"),
    "jumble_2w": ("string", "letter_jumble:min_words=1,max_words=2,min_word_len=3,max_word_len=6,"
                  "min_corruption_level=0.1,max_corruption_level=0.3"),
    "filter_4": ("ordering", "number_filtering:min_numbers=3,max_numbers=4,min_decimals=0,max_decimals=0,"
                 "min_value=-20,max_value=20"),
    # fifth screen (2026-12-06, fourth session): spread answers. task.max_answer_share caps the share of any
    # one gold answer in the pool (the constant strategy's score), so a gain must come from the skill
    "letters_5w_c25": ("counting", "letter_counting:min_words=3,max_words=5", {"task.max_answer_share": 0.25}),
    "letters_8w_c25": ("counting", "letter_counting:min_words=5,max_words=8", {"task.max_answer_share": 0.25}),
    "gcd_150_c20": ("arithmetic", "gcd:max_value=150", {"task.max_answer_share": 0.2}),
    "letters_8w_c20": ("counting", "letter_counting:min_words=5,max_words=8", {"task.max_answer_share": 0.2}),
    "gcd_60_c20": ("arithmetic", "gcd:max_value=60", {"task.max_answer_share": 0.2}),
    "aiw_sib_c20": ("logic", "aiw:task_types=[siblings],task_type_weights=[1.0],max_entities=6",
                    {"task.max_answer_share": 0.2}),
    "add_2d": ("arithmetic", "basic_arithmetic:min_terms=2,max_terms=2,max_digits=2,operators=[+],"
                             "allow_parentheses=false,allow_negation=false"),
    "legs_1_c20": ("counting", "leg_counting:min_animals=1,max_animals=1,max_instances=8",
                   {"task.max_answer_share": 0.2}),
}


def run_timed(args: list[str], **kw) -> tuple[subprocess.CompletedProcess, float]:
    """``subprocess.run(args, capture_output=True, text=True, **kw)`` and the CPU seconds of that child
    alone (``os.wait4``'s rusage: ``os.times()``'s children totals would also count a child another
    worker thread reaped meanwhile)."""
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(args, stdout=out, stderr=err, text=True, **kw)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        res = subprocess.CompletedProcess(args, p.returncode, out.read(), err.read())
    return res, ru.ru_utime + ru.ru_stime


def extra_sets(labels: list[str]) -> list[str]:
    """The candidates' own task settings (``task.max_answer_share``) as ``--set`` strings; a mixture's
    labels must agree on them (they are fields of the one task)."""
    own = {json.dumps(CANDIDATES[x][2] if len(CANDIDATES[x]) > 2 else {}, sort_keys=True) for x in labels}
    if len(own) > 1:
        raise SystemExit(f"error: the labels {', '.join(labels)} set different task settings ({' vs '.join(own)}); "
                         "a mixture is one task: choose labels that agree")
    return [f"{k}={v}" for k, v in json.loads(own.pop()).items()]


def sets_for(spec: str, n_test: int, temperature: float, label: str) -> list[str]:
    return [*extra_sets([label]), f"task.datasets={json.dumps([spec])}", f"task.n_test={n_test}", "task.n_val=50",
            "task.extract=auto", f"task.instruction={INSTRUCTION}", "eval.max_prompts=0",
            f"eval.n_samples={SAMPLES}", f"eval.ks={json.dumps(list(KS))}", f"eval.temperature={temperature}"]


def evaluate(label: str, n_test: int, temperature: float) -> dict:
    """The base model on ``n_test`` test problems of ``label`` (one ``rlsuite eval`` process)."""
    kind, spec = CANDIDATES[label][:2]
    code = ("import json, sys, time\n"
            "from rlsuite.suite.cli import main\n"
            "from rlsuite import tasks\n"
            "from rlsuite.tasks.base import TASKS\n"
            "from rlsuite.suite.spec import resolve\n"
            "from rlsuite.suite.cli import parse_assignment\n"
            "sets = [parse_assignment(s, '--set') for s in json.loads(sys.argv[1])]\n"
            "spec = resolve('reasoning_gym', None, 'smollm2-135m', 0, [], sets, need_algo=False)\n"
            "t = TASKS.get('reasoning_gym')(spec.task)\n"
            "print('SPACE ' + json.dumps(t.problem_space()[0]), flush=True)\n"
            "from collections import Counter\n"
            "golds = [e.answer for e in t.splits()['test']]\n"
            "top = Counter(g for g in golds if g is not None).most_common(1)\n"
            "print('CONSTANT ' + json.dumps({'answer': top[0][0] if top else None,\n"
            "      'share': top[0][1] / len(golds) if top else 0.0}), flush=True)\n"
            "args = ['eval', '--task', 'reasoning_gym', '--model', 'smollm2-135m', '--split', 'test', '--json']\n"
            "for s in json.loads(sys.argv[1]): args += ['--set', s]\n"
            "sys.exit(main(args))\n")
    t0 = time.time()
    sets = json.dumps(sets_for(spec, n_test, temperature, label))
    res, cpu = run_timed([sys.executable, "-c", code, sets], cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if res.returncode != 0:  # bad input (too few distinct problems, ...) is a row with its reason
        why = (res.stderr.strip().splitlines() or ["?"])[-1]
        if "BadInput" not in why and res.returncode != 2:  # an internal failure: a row that says so, never a score
            print(f"{label}: eval failed (exit {res.returncode}):\n{res.stderr[-3000:]}", file=sys.stderr)
            why = f"eval FAILED (exit {res.returncode}): {why}"
        if len(CANDIDATES[label]) > 2:
            spec += " + " + " ".join(f"{k}={v}" for k, v in CANDIDATES[label][2].items())
        return {"label": label, "kind": kind, "spec": spec, "error": why.split("BadInput: ")[-1],
                "cpu_s": cpu}
    lines = res.stdout.strip().splitlines()
    space = json.loads(next(x for x in lines if x.startswith("SPACE "))[6:])
    const = json.loads(next(x for x in lines if x.startswith("CONSTANT "))[9:])
    m = json.loads(lines[-1])
    g = lambda k: m[f"eval/reasoning_gym/{k}"]  # noqa: E731
    avg, n = g(f"avg@{SAMPLES}"), m["n_prompts"]
    if "kept_by_answer_cap" in space:  # the cap thins the space the runs draw from in the same proportion
        space["space_estimate"] *= space["kept_by_answer_cap"] / space["distinct"]
        space["distinct"] = space["kept_by_answer_cap"]
    if len(CANDIDATES[label]) > 2:
        spec += " + " + " ".join(f"{k}={v}" for k, v in CANDIDATES[label][2].items())
    return {"label": label, "kind": kind, "spec": spec, "n": n, "greedy": g("greedy_acc"), "avg4": avg,
            "pass4": g(f"pass@{SAMPLES}"), "se_avg4": math.sqrt(max(avg * (1 - avg), 1e-12) / n),
            "distinct": space["distinct"], "space": space["space_estimate"],
            "space_lower": space["space_is_lower_bound"], "constant": const["share"],
            "constant_answer": const["answer"], "wall_s": time.time() - t0, "cpu_s": cpu}


PILOT = ["rollout.prompts_per_step=4", "rollout.group_size=8", "rollout.max_new_tokens=32", "optim.lr=2e-5",
         "algo.kl_coef=0.0", "rollout.old_logp=behaviour", "eval.every=1.0", "eval.greedy=true", "eval.n_samples=0",
         "eval.max_prompts=0", "task.n_val=20", "eval.batch_size=64"]


def pilot(labels: list[str], seed: int, n_test: int, temperature: float, samples: int, out: Path) -> dict:
    """One GRPO run on the mixture of ``labels``: per dataset, greedy test accuracy before and after."""
    specs = [CANDIDATES[x][1] for x in labels]
    sets = [*extra_sets(labels), f"task.datasets={json.dumps(specs)}", f"task.n_test={n_test}", "task.extract=auto",
            f"task.instruction={INSTRUCTION}", f"rollout.temperature={temperature}", *PILOT]
    args = [sys.executable, "-m", "rlsuite.suite.cli", "run", "--task", "reasoning_gym", "--algo", "grpo",
            "--model", MODEL, "--seed", str(seed), "--budget", f"samples={samples}", "--out", str(out)]
    for x in sets:
        args += ["--set", x]
    t0 = time.time()
    res, cpu = run_timed(args, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if res.returncode != 0:
        raise RuntimeError(f"pilot seed {seed} failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
    run_dir = Path(res.stdout.strip().splitlines()[-1].split("run_dir: ")[1])
    return {**read_pilot(run_dir, labels), "wall_s": time.time() - t0, "cpu_s": cpu}


def read_pilot(run_dir: Path, labels: list[str]) -> dict:
    """A pilot run's row, from its folder: per dataset the greedy test accuracy before and after, the
    scores off the common gold and off the final policy's best gold (:func:`answers`), and the run's
    step metrics; ``wall_s`` is the run's own training clock (``pilot`` puts the process's wall and CPU)."""
    from rlsuite.tasks.reasoning_gym import battery_labels

    specs = [CANDIDATES[x][1] for x in labels]
    evals = [json.loads(x) for x in (run_dir / "evals.jsonl").read_text().splitlines()]
    test = [e for e in evals if e["split"] == "test"]
    first, last = test[0], test[-1]
    keys = battery_labels(specs)
    # one dataset: the task's own greedy_acc (per-dataset metrics are a mixture's)
    key = {lab: f"eval/reasoning_gym/greedy_acc_{k}" if len(labels) > 1 else "eval/reasoning_gym/greedy_acc"
           for lab, k in zip(labels, keys)}
    per = {lab: (first[key[lab]], last[key[lab]]) for lab in labels}
    by_task_label = {r["label"]: r for r in answers(run_dir)}
    off = {lab: by_task_label[k] for lab, k in zip(labels, keys) if k in by_task_label}
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    mixed = [r["group/mixed_frac"] for r in rows if "group/mixed_frac" in r]
    spec = json.loads((run_dir / "spec.json").read_text())
    return {"seed": spec["seed"], "per": per, "off": off, "steps": len(rows),
            "errors": sum(r.get("reward/grade_errors", 0) for r in rows),
            "mixed": sum(mixed) / max(1, len(mixed)),
            # a step whose groups are all right or all wrong has zero advantages: no update at all
            "no_update": sum(1 for r in rows if r.get("stats/grad_norm") == 0.0),
            "reward_first": rows[0].get("reward/mean"), "reward_last": rows[-1].get("reward/mean"),
            "wall_s": rows[-1].get("budget/wall_s", float("nan")), "cpu_s": float("nan"), "run_dir": str(run_dir)}


def _learns(runs: list[dict], lab: str, mean: float, se: float) -> str:
    """``yes`` when the mean gain is above 2 SE and, on every seed, the score off the final policy's best
    gold (the answer value it gets right most often) rose over the base's (where the run saved the base's
    per-problem rows). Otherwise ``constant`` when every seed that did not rise answers its best gold right
    on ≥ 80% of those problems (one reply explains the gain), else ``not on every seed``."""
    if mean <= 2 * se:
        return "not shown"
    offs = [r.get("off", {}).get(lab) for r in runs]
    if any(a is None or a.get("p_base_rest") is None for a in offs):
        return "yes (off-gold not checked)"
    # the seeds that did not rise off their best gold: `constant` when each answers that gold right on
    # ≥ 80% of its problems (one reply), else the gain is simply not on every seed
    behind = [a for a in offs if a["p_rest"][0] <= a["p_base_rest"][0]]
    if not behind:
        return "yes"
    if all(a["p_top"][1] and a["p_top"][0] >= 0.8 * a["p_top"][1] for a in behind):
        return "constant"
    return "not on every seed"


def _sd(values: list[float]) -> str:
    """The sample standard deviation (points, one decimal); — for fewer than two values."""
    return f"{statistics.stdev(values):.1f}" if len(values) > 1 else "—"


def _off(a: dict | None) -> str:
    if not a:
        return "—"
    c, n = a["p_rest"]
    before = f"{a['p_base_rest'][0]}/{a['p_base_rest'][1]} → " if a.get("p_base_rest") else ""
    return f"{before}{c}/{n} (`{a['pgold']}`: {a['p_top'][0]}/{a['p_top'][1]})"


def render_pilot(runs: list[dict], labels: list[str], n_test: int, argv: list[str], temperature: float,
                 samples: int) -> str:
    what = "the mixture" if len(labels) > 1 else f"`{labels[0]}` alone"
    lines = [f"## pilot: GRPO on {what}, {samples} samples a run, greedy on {n_test} test problems a dataset "
             f"({dt.date.today().isoformat()})", "",
             f"`python benchmarks/rgym_battery/rgym_battery.py {' '.join(argv)}`; "
             f"machine: {_cpu()} ({platform.machine()}), "
             f"{os.cpu_count()} cores, the runs side by side, 1 torch thread each. One run per seed trains "
             f"{MODEL} on {what} (`{' '.join(PILOT)}`, temperature {temperature}); "
             "gain = greedy test accuracy after − before, in points; SE = √(2·p(1−p)/n) at the mean accuracy "
             "(two proportions on the same problems, an upper bound for paired ones); S/N = mean gain / SE, the "
             "dataset's signal-to-noise figure (a study comparing two arms on it resolves gaps of a few SE); "
             "sd = the gain's standard deviation over seeds (the seed-to-seed spread, which seeds do shrink). "
             "`off its best gold`: the "
             "greedy score, before → after, on the test problems whose gold is not the one the final policy gets right "
             "most often (that gold and the final policy's score on it in brackets): a policy that has converged on "
             "one reply scores 0 there, whichever reply it is.", "",
             "| label | kind | before | " + " | ".join(f"after (seed {r['seed']})" for r in runs)
             + " | mean gain | ± SE | S/N | sd | learns | "
             + " | ".join(f"off its best gold (seed {r['seed']})" for r in runs)
             + " |", "|---|---|---|" + "---|" * len(runs) + "---|---|---|---|---|" + "---|" * len(runs)]
    for lab in labels:
        before = runs[0]["per"][lab][0]
        gains = [100 * (r["per"][lab][1] - r["per"][lab][0]) for r in runs]
        mean = sum(gains) / len(gains)
        pbar = min(max((before + before + mean / 100) / 2, 1e-3), 1 - 1e-3)
        se = 100 * math.sqrt(2 * pbar * (1 - pbar) / n_test)  # the problems are shared: seeds do not shrink it
        lines.append(f"| {lab} | {CANDIDATES[lab][0]} | {before:.3f} | "
                     + " | ".join(f"{r['per'][lab][1]:.3f} ({g:+.1f})" for r, g in zip(runs, gains))
                     + f" | {mean:+.1f} | {se:.1f} | {mean / se:+.1f} | {_sd(gains)} | "
                     + f"{_learns(runs, lab, mean, se)} | "
                     + " | ".join(_off(r.get("off", {}).get(lab)) for r in runs) + " |")
    if len(labels) > 1:  # the composite's pooled score: equal test splits, so the mean over the datasets
        pooled = [100 * sum(r["per"][lab][1] - r["per"][lab][0] for lab in labels) / len(labels) for r in runs]
        base = sum(runs[0]["per"][lab][0] for lab in labels) / len(labels)
        lines += ["", f"Pooled over the {len(labels)} datasets (the composite's one score, `score: {{per_dataset: "
                  f"false}}`: the mean of the datasets' accuracies, their test splits being equal): before {base:.3f}; "
                  "gain by seed " + ", ".join(f"{g:+.1f}" for g in pooled)
                  + f"; mean {sum(pooled) / len(pooled):+.1f}, sd over seeds {_sd(pooled)} points."]

    def run_line(r: dict) -> str:
        return (f"seed {r['seed']}: {r['steps']} steps, reward {r['reward_first']:.3f} → {r['reward_last']:.3f}, "
                f"groups with mixed rewards {r.get('mixed', float('nan')):.2f} (mean over steps), "
                f"{r['no_update']} steps with no update (every group all right or all wrong), "
                f"grade errors {r['errors']:.0f}, {r['wall_s']:.0f} s wall, "
                + (f"{r['cpu_s']:.0f} CPU s" if r["cpu_s"] == r["cpu_s"] else "CPU s not recorded (re-tabulated)"))

    lines += ["", "Runs: " + "; ".join(run_line(r) for r in runs)
              + (f"; {sum(r['cpu_s'] for r in runs) / 3600:.2f} CPU-hours"
                 if all(r["cpu_s"] == r["cpu_s"] for r in runs) else "")
              + ". `learns` = mean gain > 2 SE and, on every "
              "seed, more problems right off the final policy's best gold than the base; otherwise `constant` "
              "when each seed that fell short answers its best gold right on ≥ 80% of those problems (one "
              "reply), else `not on every seed`.", ""]
    return "\n".join(lines)


def answers(run_dir: Path) -> list[dict]:
    """Per dataset of a pilot run (its folder): the most common gold answer of its test problems and
    its share, and the final greedy accuracy on the problems with that gold and on the rest (from the
    run's per-problem results; the tokenizer's chat template gives each problem's key); the same for the
    gold the final policy gets right most often (``pgold``), and the base's scores off each (from the
    base's step-0 rows, where the run saved them)."""
    from collections import Counter, defaultdict

    from transformers import AutoTokenizer

    from rlsuite.suite import pinned_models
    from rlsuite.suite.evaluate import problem_key
    from rlsuite.tasks.base import TASKS

    spec = json.loads((run_dir / "spec.json").read_text())
    task_cls = TASKS.get("reasoning_gym")
    fields = task_cls.Config.__dataclass_fields__
    cfg = task_cls.Config(**{k: tuple(v) if isinstance(v, list) else v for k, v in spec["task"].items() if k in fields})
    task = task_cls(cfg)
    tok = AutoTokenizer.from_pretrained(str(pinned_models.verified_dir(pinned_models.get(MODEL))))
    # every test problem with its dataset and gold; a question two datasets share (a sum in a sums
    # dataset and in a sums-and-differences one) is a problem of each, with one per-problem result
    test = [(problem_key(tok.apply_chat_template(task.prompt(e), add_generation_prompt=True, tokenize=False)),
             e.label, e.answer) for e in task.splits()["test"]]
    by_label = defaultdict(list)
    for _, lab, g in test:
        by_label[lab].append(g)
    top = {lab: Counter(g).most_common(1)[0] for lab, g in by_label.items()}
    rows = [json.loads(x) for x in (run_dir / "problems.jsonl").read_text().splitlines()]
    last = max(r["step"] for r in rows if r["split"] == "test" and r["final"])

    def results(step: int, final: bool) -> dict:
        return {r["problem"]: r["greedy"] for r in rows if r["split"] == "test" and r["step"] == step
                and r["final"] == final}

    def tally(step: int, final: bool, pick: dict) -> dict:
        acc = defaultdict(lambda: [0, 0, 0, 0])  # correct and n on the picked gold, then on the rest
        res = results(step, final)
        for key, lab, g in test:
            if key in res:
                a = acc[lab]
                k = 0 if g == pick.get(lab) else 2
                a[k] += res[key]
                a[k + 1] += 1
        return acc

    # the policy's best gold: the answer value it gets right most often at the end (a policy that has
    # converged on one reply is right on that gold's problems alone, whichever gold it is)
    right = defaultdict(Counter)
    final = results(last, True)
    for key, lab, g in test:
        if key in final:
            right[lab][g] += final[key]
    best = {lab: max(by_label[lab], key=lambda g: (right[lab][g], by_label[lab].count(g))) for lab in by_label}
    common = {lab: t[0] for lab, t in top.items()}
    acc, base = tally(last, True, common), tally(0, False, common)  # base rows: runs since the base's were saved
    pacc, pbase = tally(last, True, best), tally(0, False, best)
    return [{"label": lab, "gold": top[lab][0], "share": top[lab][1] / len(by_label[lab]), "step": last,
             "top": (a[0], a[1]), "rest": (a[2], a[3]),
             "base_top": tuple(base[lab][:2]) if lab in base else None,
             "base_rest": tuple(base[lab][2:]) if lab in base else None,
             "pgold": best[lab], "pshare": by_label[lab].count(best[lab]) / len(by_label[lab]),
             "p_top": tuple(pacc[lab][:2]), "p_rest": tuple(pacc[lab][2:]),
             "p_base_rest": tuple(pbase[lab][2:]) if lab in pbase else None} for lab, a in sorted(acc.items())]


def kept(r: dict, n_test: int) -> tuple[bool, str]:
    if "error" in r:
        return False, f"refused: {r['error']}"
    used = n_test + 50 + BUDGET_SAMPLES // GROUP
    why = []
    if not 0.15 <= r["avg4"] <= 0.60:
        why.append(f"avg@4 {r['avg4']:.2f} outside [0.15, 0.60]")
    if r["greedy"] >= 0.80:
        why.append(f"greedy {r['greedy']:.2f} ≥ 0.80")
    if r["space"] < 10 * used:
        why.append(f"space {r['space']:.0f} < 10 × {used}")
    capped = "max_answer_share" in r["spec"]  # the constant's score is bounded by the cap: judged at the pilot
    if r.get("constant", 0.0) >= 0.15 and r["avg4"] <= r["constant"] + 0.10 and not capped:
        why.append(f"avg@4 {r['avg4']:.2f} within 0.10 of the constant answer "
                   f"{r['constant_answer']!r}'s {r['constant']:.2f}")
    capped_ok = "kept (capped pool: the pilot judges it off the final policy's best gold)"
    return not why, "; ".join(why) or (capped_ok if capped else "kept")


def render(stage: str, rows: list[dict], n_test: int, argv: list[str], workers: int, temperature: float) -> str:
    lines = [f"## {stage} at {n_test} test problems, temperature {temperature} ({dt.date.today().isoformat()})", "",
             f"`python benchmarks/rgym_battery/rgym_battery.py {' '.join(argv)}`; "
             f"machine: {_cpu()} ({platform.machine()}), "
             f"{os.cpu_count()} cores, {workers} evals at a time, 1 torch thread each. Model {MODEL} (base, no RL); "
             f"prompt = the question + `{INSTRUCTION}` as the user turn; `extract=auto`; greedy, then {SAMPLES} "
             f"samples a problem at temperature {temperature}, at most 48 new tokens (the hf preset).", "",
             "| label | kind | dataset spec | n | greedy | avg@4 | ± SE | pass@4 | const | distinct in pool "
             "| space est. | verdict | CPU s |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ok, why = kept(r, n_test)
        if "error" in r:
            lines.append(f"| {r['label']} | {r['kind']} | `{r['spec']}` | — | — | — | — | — | — | — | — | {why} | "
                         f"{r['cpu_s']:.0f} |")
            continue
        space = f"≥ {r['space']:.3g}" if r["space_lower"] else f"{r['space']:.3g}"
        lines.append(f"| {r['label']} | {r['kind']} | `{r['spec']}` | {r['n']} | {r['greedy']:.3f} | {r['avg4']:.3f} | "
                     f"{r['se_avg4']:.3f} | {r['pass4']:.3f} | {r.get('constant', 0.0):.2f} | {r['distinct']} | "
                     f"{space} | "
                     f"{'**kept**' if ok else why} | {r['cpu_s']:.0f} |")
    cpu_h = sum(r["cpu_s"] for r in rows) / 3600
    kinds = sorted({r["kind"] for r in rows if kept(r, n_test)[0]})
    lines += ["", f"Kept {sum(kept(r, n_test)[0] for r in rows)} of {len(rows)} ({len(kinds)} kinds: "
              f"{', '.join(kinds) or 'none'}); {cpu_h:.2f} CPU-hours for this stage.", ""]
    return "\n".join(lines)


def _cpu() -> str:
    from rlsuite.suite.warmstart import cpu_model

    return cpu_model()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage", choices=["screen", "confirm", "pilot", "answers"])
    ap.add_argument("runs", nargs="*", type=Path, help="answers: pilot run folders (their spec.json, problems.jsonl); "
                    "pilot: finished runs to tabulate again instead of running")
    ap.add_argument("--only", nargs="+", default=None, help=f"labels ({', '.join(CANDIDATES)})")
    ap.add_argument("--n-test", type=int, default=None, help="test problems (screen 100, confirm 300)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of avg@4 / pass@4")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--seeds", type=int, nargs="+", default=[100, 101], help="pilot: tuning seeds (≥ 100)")
    ap.add_argument("--samples", type=int, default=384, help="pilot: the run's budget in samples (12 steps)")
    a = ap.parse_args()
    labels = a.only or list(CANDIDATES)
    bad = [x for x in labels if x not in CANDIDATES]
    if bad:
        ap.error(f"unknown label(s) {', '.join(bad)}; valid: {', '.join(CANDIDATES)}")
    n_test = a.n_test or (100 if a.stage in ("screen", "pilot") else 300)
    head = "# A reasoning-gym battery for SmolLM2-135M-Instruct (issue 34 §1)\n\n"
    if a.stage == "answers":  # prints; the results file quotes it by hand with the runs' provenance
        if not a.runs:
            ap.error("answers: give one or more pilot run folders")
        print("| run | dataset | most common gold | its share | final greedy: on that gold | on the rest "
              "| base greedy: on that gold | on the rest | the final policy's best gold | final off it | base off it |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for run in a.runs:
            for r in answers(run):
                (c1, n1), (c2, n2) = r["top"], r["rest"]
                b = [f"{c}/{n}" for c, n in (r["base_top"], r["base_rest"])] if r["base_top"] else ["—", "—"]
                pb = "{}/{}".format(*r["p_base_rest"]) if r["p_base_rest"] else "—"
                print(f"| `{run.name}` | {r['label']} | `{r['gold']}` | {r['share']:.2f} | {c1}/{n1} | {c2}/{n2} "
                      f"| {b[0]} | {b[1]} | `{r['pgold']}` ({r['p_top'][0]}/{r['p_top'][1]} right) | "
                      f"{r['p_rest'][0]}/{r['p_rest'][1]} | {pb} |")
        return
    if a.stage == "pilot":
        if not labels or min(a.seeds) < 100:
            ap.error("pilot: give one label (a single-dataset pilot) or several (their mixture) with --only, "
                     "and tuning seeds ≥ 100")
        import tempfile

        if a.runs:  # finished pilot runs (their folders): the table again, by the rules of this code
            runs = [read_pilot(r, labels) for r in a.runs]
        else:
            out = Path(tempfile.mkdtemp(prefix="rlsuite-rgym-pilot-"))
            with cf.ThreadPoolExecutor(a.workers) as pool:
                runs = list(pool.map(lambda sd: pilot(labels, sd, n_test, a.temperature, a.samples, out), a.seeds))
        text = render_pilot(runs, labels, n_test, sys.argv[1:], a.temperature, a.samples)
        print(text)
        old = a.results.read_text() if a.results.exists() else head
        a.results.write_text(old.rstrip() + "\n\n" + text)
        return
    with cf.ThreadPoolExecutor(a.workers) as pool:
        rows = []
        for r in pool.map(lambda lab: evaluate(lab, n_test, a.temperature), labels):
            print(json.dumps(r), flush=True)
            rows.append(r)
    text = render(a.stage, rows, n_test, sys.argv[1:], a.workers, a.temperature)
    print(text)
    old = a.results.read_text() if a.results.exists() else head
    a.results.write_text(old.rstrip() + "\n\n" + text)


if __name__ == "__main__":
    main()
