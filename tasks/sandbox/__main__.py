"""``python -m rlsuite.tasks.sandbox [--python PATH]``: print which sandbox layers work here, and the
share of the reward hacks (:mod:`rlsuite.tasks.sandbox.battery`) each one catches."""

from __future__ import annotations

import tempfile
from pathlib import Path

from rlsuite.tasks.sandbox import LAYERS, Sandbox, SandboxConfig, SandboxUnavailable, detect
from rlsuite.tasks.sandbox.battery import hacks_claimed, run_reward_hacks


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Show which sandbox layers work on this machine, and the share of "
                                             "the reward hacks each one catches.")
    ap.add_argument("--python", default=None)
    ap.add_argument("--no-hacks", action="store_true", help="only the detection report")
    args = ap.parse_args()
    d = detect(args.python)
    print(d.report())
    try:
        print("auto uses:", "+".join(d.choose(SandboxConfig(python=args.python))))
    except SandboxUnavailable as e:
        print("auto:", e)
    if args.no_hacks:
        return
    print("reward hacks caught (wrong HumanEval and MBPP answers graded by the code tasks' judged jobs):")
    for layers in [(x,) for x in LAYERS if d.available[x]] + [("auto",)]:
        try:
            sb = Sandbox(SandboxConfig(layers=layers, python=args.python, workers=2, allow_unisolated=True))
        except SandboxUnavailable as e:
            print(f"  {'+'.join(layers):<26} not available: {e}")
            continue
        try:
            with tempfile.TemporaryDirectory() as tmp:
                outs = run_reward_hacks(sb, Path(tmp) / "gold")
        finally:
            sb.close()
        must = hacks_claimed(sb.layers)
        missed = [o.hack + ("" if o.hack in must else " (not claimed: this layer hides no files)")
                  for o in outs if not o.caught]
        print(f"  {'+'.join(sb.layers):<26} {sum(o.caught for o in outs)}/{len(outs)}"
              + (f"; not caught: {', '.join(missed)}" if missed else ""))



if __name__ == "__main__":
    main()
