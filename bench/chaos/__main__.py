"""``python -m bench.chaos [--jobs N] [--minutes T] [--seed S]``: see ``bench/chaos/__init__.py``.

Progress goes to stderr, the seed first; the verdict is the last line of stdout, one
JSON object. The exit status is 1 when the verdict counts any broken promise (each
finding is on stderr), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys

from bench.chaos.drive import Options, run, say
from bench.chaos.faults import KINDS
from bench.chaos.verdict import failed, judge


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("--jobs", type=int, default=60, help="jobs to submit over the run (default 60)")
    parser.add_argument("--minutes", type=float, default=5.0, help="the most the run may take (default 5)")
    parser.add_argument("--seed", type=int, default=None, help="repeat a run (default: a random one)")
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"comma-separated faults to inject (default all: {','.join(KINDS)})",
    )
    parser.add_argument("--keep", action="store_true", help="keep the stack's home (logs, ledgers) after")
    args = parser.parse_args()
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not kinds or args.jobs < 1 or args.minutes <= 0:
        parser.error(f"--jobs and --minutes must be positive; --kinds from {', '.join(KINDS)}, not {unknown}")
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    say(f"seed {seed} (repeat with --seed {seed}): {args.jobs} jobs, at most {args.minutes:g} minutes")
    evidence = run(Options(jobs=args.jobs, minutes=args.minutes, seed=seed, kinds=kinds, keep=args.keep))
    verdict, findings = judge(evidence)
    for finding in findings:
        say(finding)
    print(json.dumps(verdict), flush=True)
    return 1 if failed(verdict) else 0


if __name__ == "__main__":
    sys.exit(main())
