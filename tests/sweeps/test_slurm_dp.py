"""A data-parallel run (``dist.world_size=2``) as one SLURM job with two tasks, through
submitit (ranks from ``submitit.JobEnvironment()``, rendezvous on the job's first node).

Marked ``slurm``; skipped when no cluster answers (unless RLSUITE_REQUIRE_SLURM=1) or when the
node offers fewer than 2 CPUs (``SLURM_NODE_CPUS`` in scripts/slurm/README.md).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rlsuite.suite.cli import main
from rlsuite.suite.runfolder import read_jsonl
from tests.sweeps.test_slurm import _cluster_up

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

SPEC = """
name: dp_slurm
tasks: [arith]
algorithms: [grpo]
seeds: [1]
budget: {samples: 48}
set: {eval.max_prompts: 8, eval.test_prompts: 8, rollout.prompts_per_step: 4, rollout.group_size: 4, rollout.rng: row,
      dist.world_size: 2}
resources: {timeout_min: 10, mem_gb: 2, cpus_per_task: 1, tasks_per_node: 2}
"""


def _node_cpus() -> int:
    out = subprocess.run(["sinfo", "-h", "-o", "%c"], capture_output=True, text=True, timeout=10).stdout.split()
    return max((int(x.rstrip("+")) for x in out if x.rstrip("+").isdigit()), default=0)


@pytest.fixture(autouse=True)
def need_slurm_with_two_cpus():
    if not _cluster_up():
        msg = "no SLURM cluster answers (start one with: bash scripts/slurm/cluster.sh install && ... start)"
        if os.environ.get("RLSUITE_REQUIRE_SLURM") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    if _node_cpus() < 2:
        pytest.skip("the SLURM node offers fewer than 2 CPUs (start it with SLURM_NODE_CPUS=2)")


def _slurm_run(tmp_path: Path, spec_text: str, name: str, capsys) -> Path:
    """Run the one-run sweep on the cluster; its run folder, checked completed at step 3 on 2 ranks."""
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(spec_text)
    code = main(["sweep", "run", str(spec), "--cluster", "slurm", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 0, err
    (run,) = [p.parent for p in (tmp_path / "out" / name).glob("*/status.json")]
    st = json.loads((run / "status.json").read_text())
    assert st["state"] == "completed" and st["step"] == 3, st
    assert json.loads((run / "env.json").read_text())["world_size"] == 2
    return run


def _one_process_run(tmp_path: Path, algo: str, run_id: str, capsys, *sets: str) -> Path:
    """The same run (world size and sharding are not in the run id) in one local process."""
    code = main(["run", "--task", "arith", "--algo", algo, "--seed", "1", "--budget", "samples=48",
                 "--set", "eval.max_prompts=8",
                 "--set", "eval.test_prompts=8", "--set", "rollout.prompts_per_step=4", "--set", "rollout.group_size=4",
                 "--set", "rollout.rng=row", *[a for s in sets for a in ("--set", s)], "--out", str(tmp_path / "ref")])
    out = capsys.readouterr().out
    assert code == 0
    ref = tmp_path / "ref" / run_id
    assert ref.is_dir(), out
    return ref


def test_two_task_slurm_job_runs_one_data_parallel_run(tmp_path, capsys):
    run = _slurm_run(tmp_path, SPEC, "dp_slurm", capsys)
    ref = _one_process_run(tmp_path, "grpo", run.name, capsys)  # the same samples and rewards
    m1, m2 = read_jsonl(ref / "metrics.jsonl"), read_jsonl(run / "metrics.jsonl")
    assert [r["reward/mean"] for r in m1] == [r["reward/mean"] for r in m2]
    assert [r["budget/gen_tokens"] for r in m1] == [r["budget/gen_tokens"] for r in m2]


SHARDED_SPEC = """
name: fsdp_slurm
tasks: [arith]
algorithms: [{algo}]
seeds: [1]
budget: {{samples: 48}}
set: {{eval.max_prompts: 8, eval.test_prompts: 8, rollout.prompts_per_step: 4, rollout.group_size: 4, rollout.rng: row,
      dist.world_size: 2, dist.shard: fsdp, train.share_prefix: false, optim.fused: false}}
resources: {{timeout_min: 10, mem_gb: 2, cpus_per_task: 1, nodes: 1, tasks_per_node: 2, gpus_per_node: 0}}
"""


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_two_task_slurm_job_runs_one_sharded_run(algo, tmp_path, capsys):
    """`dist.shard=fsdp` through submitit: one job, two tasks (two gloo ranks that rendezvous on
    the job's node as data parallelism does), one run folder written by rank 0 with the sharded
    checkpoint gone and a loadable `final/`; its first two steps sample the same tokens and
    rewards as one unsharded process with the same global batch (later steps may drift by float
    summation order, as in tests/integration/test_fsdp.py). PPO adds a sharded critic."""
    spec = tmp_path / "fsdp.yaml"
    spec.write_text(SHARDED_SPEC.format(algo=algo))
    code = main(["sweep", "run", str(spec), "--cluster", "slurm", "--out", str(tmp_path / "dry"), "--dry-run"])
    dry = capsys.readouterr().out
    assert code == 0 and "mem_rank=" in dry, dry
    run = _slurm_run(tmp_path, SHARDED_SPEC.format(algo=algo), "fsdp_slurm", capsys)
    assert json.loads((run / "spec.json").read_text())["dist"]["shard"] == "fsdp"
    assert (run / "final" / "config.json").is_file() and not (run / "checkpoint").exists()
    ref = _one_process_run(tmp_path, algo, run.name, capsys, "train.share_prefix=false", "optim.fused=false")
    m1, m2 = read_jsonl(ref / "metrics.jsonl"), read_jsonl(run / "metrics.jsonl")
    assert len(m1) == len(m2) == 3
    assert [r["reward/mean"] for r in m1[:2]] == [r["reward/mean"] for r in m2[:2]]
    assert [r["budget/gen_tokens"] for r in m1[:2]] == [r["budget/gen_tokens"] for r in m2[:2]]
    assert m2[0]["stats/grad_norm"] == pytest.approx(m1[0]["stats/grad_norm"], rel=1e-5)
