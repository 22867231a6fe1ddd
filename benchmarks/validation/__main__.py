"""`make validate`: each validation script in turn, in its own process, then one line each.

    python -m benchmarks.validation [--smoke] [--only NAME,...] [--list]

Every script prints its own suite/bare table as it goes; the summary at the end gives each
one's exit code, wall time and ratio line. Exit code 1 when any script failed.
"""

from __future__ import annotations

import argparse
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.validation import VALIDATIONS, default_set

ROOT = Path(__file__).resolve().parents[2]


#: a line giving a suite/bare ratio: "ratio suite/bare = 1.012", "suite / bare = 0.998 ...",
#: "gemm ... ratio 1.003 [0.99, 1.01] ...", "worst ratio for sizes >= 1 MiB: 0.97 ..."
RATIO = re.compile(r"(ratio|suite ?/ ?bare)\b.*?\d\.\d{2}")


def ratio_line(output: str) -> str:
    """The script's last line giving its ratio (each prints one under its table)."""
    lines = [ln.strip() for ln in output.splitlines() if RATIO.search(ln)]
    return lines[-1] if lines else ""


def _children_cpu() -> float:
    """User and system seconds of the finished child processes (and theirs) so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.validation", description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="each script with --smoke (CI)")
    ap.add_argument(
        "--only", help="comma-separated names (default: " + ",".join(default_set()) + ")"
    )
    ap.add_argument("--list", action="store_true", help="list the scripts and exit")
    args = ap.parse_args(argv)
    if args.list:
        for name, v in VALIDATIONS.items():
            print(
                f"{name:18} {v.doc:28} {v.claim}"
                + (f" [not run by default: {v.why_not}]" if v.why_not else "")
            )
        return 0
    names = args.only.split(",") if args.only else default_set()
    unknown = [n for n in names if n not in VALIDATIONS]
    if unknown:
        print(f"--only: no validation script {', '.join(unknown)}; the scripts: "
              f"{', '.join(VALIDATIONS)}", file=sys.stderr)  # fmt: skip
        return 2
    results = []
    for name in names:
        cmd = [
            sys.executable,
            "-m",
            f"benchmarks.validation.{name}",
            *(["--smoke"] if args.smoke else []),
        ]
        print(f"== {' '.join(cmd[1:])}", flush=True)
        t0, cpu0 = time.monotonic(), _children_cpu()
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert proc.stdout is not None
        out = []
        for line in proc.stdout:  # shown as it comes, kept for the summary
            sys.stdout.write(line)
            sys.stdout.flush()
            out.append(line)
        rc = proc.wait()
        wall, cpu = time.monotonic() - t0, _children_cpu() - cpu0
        results.append((name, rc, wall, cpu, ratio_line("".join(out))))
    print("\n== validation" + (" (smoke: tiny sizes, no verdicts)" if args.smoke else ""))
    # wall time moves with the machine's load; the CPU time (the script's processes, user and
    # system, all cores) much less
    for name, rc, wall, cpu, line in results:
        status = "ok" if rc == 0 else f"FAILED (exit {rc})"
        print(
            f"{name:18} {status:16} {wall:5.0f} s wall {cpu:5.0f} s CPU  {line or '(no ratio line)'}"
        )
    return 0 if all(r[1] == 0 for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
