"""Check that submitit works against the local Slurm cluster.

    python scripts/slurm/check_submitit.py [FOLDER]

1. submits a function with AutoExecutor(cluster="slurm") and checks its result;
2. submits a long job, cancels it with job.cancel() and waits until submitit
   sees it as done with state CANCELLED (submitit reads states via sacct).
Exits non-zero on failure; prints timings.
"""

import sys
import tempfile
import time

import submitit


def add(a, b):
    return a + b


def sleep_long(seconds):
    time.sleep(seconds)
    return "not cancelled"


def wait_state(job, predicate, timeout):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if predicate(job):
            return time.monotonic() - t0
        time.sleep(0.5)
    raise SystemExit(f"FAIL: job {job.job_id} timed out after {timeout}s (state {job.state})")


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="submitit-check-")
    ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
    ex.update_parameters(timeout_min=5, slurm_partition="debug")

    t0 = time.monotonic()
    job = ex.submit(add, 2, 3)
    result = job.result()
    assert result == 5, result
    wait_state(job, lambda j: j.state == "COMPLETED", 30)
    print(f"OK result: job {job.job_id} -> {result}, state {job.state}, {time.monotonic() - t0:.1f}s")

    job = ex.submit(sleep_long, 300)
    wait_state(job, lambda j: j.state == "RUNNING", 60)
    t0 = time.monotonic()
    job.cancel()
    dt = wait_state(job, lambda j: j.done(), 30)
    state = job.state
    if not state.startswith("CANCELLED"):
        raise SystemExit(f"FAIL: cancelled job {job.job_id} ended in state {state}")
    print(f"OK cancel: job {job.job_id} done with state {state} {dt:.1f}s after job.cancel()")


if __name__ == "__main__":
    main()
