#!/usr/bin/env python3
"""Whether a run's per-step losses equal a reference run's, bit for bit.

Usage: compare_losses.py BASELINE_SUMMARY RUN_SUMMARY

Both are dcp_summary.json files (dcp_local_job --work-dir writes one). Prints
one line saying which steps ran and whether their losses match; exits 0 when
every step of the run has the baseline's loss for that step, 1 when any
differs, a step is missing from the baseline, the run has no steps, or a
summary cannot be read.
"""
import json
import sys


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    try:
        base = {s["step"]: s["loss"] for s in json.load(open(argv[1]))["steps"]}
        steps = json.load(open(argv[2]))["steps"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"no summary to compare ({error})")
        return 1
    if not steps:
        print("the run has no steps to compare")
        return 1
    bad = [s["step"] for s in steps if s["step"] not in base or base[s["step"]] != s["loss"]]
    ran = f"steps {steps[0]['step']}..{steps[-1]['step']}"
    if bad:
        print(f"losses DIFFER from the uninterrupted run at steps {bad} ({ran})")
        return 1
    print(f"losses match the uninterrupted run exactly ({ran}: " +
          ", ".join(f"{s['loss']:.4f}" for s in steps) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
