"""Optimizers, framework-neutral: float64 update rules with every documented variant
(:mod:`.rules`), the parameter sets and seeded gradients every framework is driven with
(:mod:`.gradients`), the reference run and its rounding bound (:mod:`.bounds`), and which
variant each framework documents (:mod:`.documented`, each framework folder's ``optimizers.toml``).

NumPy (and onnx, for the zoo's parameter sets) only: no deep-learning framework.
"""

from suite.optimizers.rules import FAMILIES, Rule, Traffic, make

__all__ = ["FAMILIES", "Rule", "Traffic", "make"]
