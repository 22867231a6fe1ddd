"""`make study NAME=... ARGS="..."`: run one study as its own module would run.

python -m benchmarks.studies                    # the studies and the page each writes
python -m benchmarks.studies NAME [ARGS ...]    # = python -m benchmarks.studies.NAME ARGS
"""

from __future__ import annotations

import runpy
import sys

from benchmarks.studies import STUDIES


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip() + "\n")
        for name, s in STUDIES.items():
            print(f"  {name:26} {s.doc:42} {s.what}")
        return 0
    name = argv[0]
    if name not in STUDIES:
        print(f"NAME: no study {name!r}; the studies: {', '.join(STUDIES)} "
              "(`make study` lists them)", file=sys.stderr)  # fmt: skip
        return 2
    sys.argv = [f"benchmarks.studies.{name}", *argv[1:]]
    runpy.run_module(f"benchmarks.studies.{name}", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
