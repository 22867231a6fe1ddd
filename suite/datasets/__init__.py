"""Datasets of the training level: the suite's seeded ImageNet-like image set and its packed
copies (:mod:`~suite.datasets.make`, :mod:`~suite.datasets.formats`), a user's dataset
detected and checked (:mod:`~suite.datasets.layout`), a user's packed dataset indexed by the
format's own keys (:mod:`~suite.datasets.packed`), the storage under it and its page-cache
state (:mod:`~suite.datasets.storage`), where datasets live
(:mod:`~suite.datasets.location`), and ``dlsuite data`` (:mod:`suite.cli.data`).

Host side: NumPy and Pillow only. The format writers (``writers_*``) are the exception: each
runs as a subprocess in its framework's environment.
"""
