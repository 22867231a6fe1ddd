"""The suite measured against things that are not the suite, in two kinds (docs/README.md):

- ``benchmarks.validation``: the claims the README makes about the suite's own cost, each a
  script printing the suite's figure next to a bare framework loop's, from the same run
  (`make validate`; a smoke of each runs in CI, tests/integration/test_validation_smoke.py);
- ``benchmarks.studies``: the studies that write a page of docs/ (`make study NAME=...`).

Each runs as a module from the checkout's root (``python -m benchmarks.validation.overhead``);
nothing here is installed with the suite.
"""
