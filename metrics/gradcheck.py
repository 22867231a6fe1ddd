"""Gradient checks by central finite differences.

``numeric_gradient`` gives the full gradient of a scalar function (small shapes only).
``directional_gradcheck`` checks a vector-Jacobian product at any size: for random directions
``v`` the directional derivative of ``phi(x) = <cotangent, f(x)>``, by central differences, must
equal ``<grad, v>`` where ``grad`` is the analytic vector-Jacobian product under test.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from suite.metrics.correctness import OWN_SIZE_LIMIT


def numeric_gradient(
    f: Callable[[np.ndarray], float], x: np.ndarray, h: float = 1e-6
) -> np.ndarray:
    """Central-difference gradient of a scalar function ``f`` at ``x`` (float64)."""
    x = np.array(x, dtype=np.float64)
    grad = np.empty_like(x)
    flat = x.reshape(-1)
    gflat = grad.reshape(-1)
    for i in range(flat.size):
        orig = flat[i]
        flat[i] = orig + h
        fp = f(x)
        flat[i] = orig - h
        fm = f(x)
        flat[i] = orig
        gflat[i] = (fp - fm) / (2.0 * h)
    return grad


def directional_gradcheck(
    f: Callable[[np.ndarray], np.ndarray],
    x: np.ndarray,
    cotangent: np.ndarray,
    grad: np.ndarray,
    *,
    n_directions: int = 3,
    h: float = 1e-4,
    seed: int = 0,
    terms: np.ndarray | None = None,
    tolerance: float | None = None,
) -> float:
    """Largest relative mismatch between ``<grad, v>`` and the central difference of
    ``<cotangent, f(x + t v)>`` at ``t = 0`` over ``n_directions`` random unit directions.

    ``f`` is evaluated in float64; ``grad`` is the gradient under test (any precision).
    The mismatch is ``|analytic - numeric| / max(|numeric|, ||grad|| / sqrt(size))``: the
    second term, the derivative's typical size, keeps a direction nearly orthogonal to ``grad``
    from turning a tiny absolute difference into a huge ratio. ``terms`` (the size of
    the terms each gradient element sums, ``metrics.correctness``): a gradient that is a
    cancelling sum is known only to within the rounding of its terms, so their typical size
    ``||terms|| / sqrt(size)`` is a third floor of the scale, at most ``OWN_SIZE_LIMIT /
    tolerance`` times the derivative's own typical size (the root mean square of the central
    differences), so that a gradient of zeros, or one half off, still fails ``tolerance``.
    """
    x = np.asarray(x, dtype=np.float64)
    cot = np.asarray(cotangent, dtype=np.float64)
    g = np.asarray(grad, dtype=np.float64)
    if g.shape != x.shape:
        raise ValueError(f"gradient shape {g.shape} does not match input shape {x.shape}")
    floor = float(np.linalg.norm(g.ravel())) / np.sqrt(x.size)
    terms_floor = 0.0
    if terms is not None:
        t = np.asarray(terms, dtype=np.float64)
        if t.shape != x.shape:
            raise ValueError(f"terms shape {t.shape} does not match input shape {x.shape}")
        terms_floor = float(np.linalg.norm(t.ravel())) / np.sqrt(x.size)
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(n_directions):
        v = rng.standard_normal(x.shape)
        v /= np.linalg.norm(v.ravel())
        fp = float(np.vdot(cot, f(x + h * v)))
        fm = float(np.vdot(cot, f(x - h * v)))
        numeric = (fp - fm) / (2.0 * h)
        pairs.append((numeric, float(np.vdot(g, v))))
    if terms_floor > 0.0:
        # over random unit directions <g, v> has the mean square ||g||^2 / size
        own = float(np.sqrt(np.mean([n * n for n, _ in pairs])))
        if tolerance is not None:
            terms_floor = min(terms_floor, own * OWN_SIZE_LIMIT / tolerance)
        floor = max(floor, terms_floor)
    worst = 0.0
    for numeric, analytic in pairs:
        # Scale: the derivative is <g, v>, bounded by ||g||; use it so a direction nearly
        # orthogonal to g does not turn a tiny absolute difference into a huge ratio.
        scale = max(abs(numeric), floor, 1e-300)
        worst = max(worst, abs(analytic - numeric) / scale)
    return float(worst)
