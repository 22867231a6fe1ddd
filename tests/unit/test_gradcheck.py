"""metrics.gradcheck: central differences against analytic gradients, and wrong ones caught."""

from __future__ import annotations

import numpy as np
import pytest

from suite.metrics import directional_gradcheck, numeric_gradient


def test_numeric_gradient_quadratic() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 5))
    b = rng.standard_normal(5)
    x = rng.standard_normal(5)

    def f(z: np.ndarray) -> float:
        return float(z @ a @ z + b @ z)

    g = numeric_gradient(f, x)
    np.testing.assert_allclose(g, (a + a.T) @ x + b, rtol=1e-7, atol=1e-8)


def test_numeric_gradient_sin_on_matrix() -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(-3, 3, size=(3, 4))
    g = numeric_gradient(lambda z: float(np.sum(np.sin(z))), x)
    assert g.shape == x.shape
    np.testing.assert_allclose(g, np.cos(x), rtol=1e-7, atol=1e-8)


def test_numeric_gradient_coupled_function() -> None:
    # f(x, y) = x^2 y + exp(y): df/dx = 2xy, df/dy = x^2 + exp(y)
    def f(z: np.ndarray) -> float:
        return float(z[0] ** 2 * z[1] + np.exp(z[1]))

    x = np.array([1.5, -0.5])
    g = numeric_gradient(f, x)
    np.testing.assert_allclose(g, [2 * 1.5 * -0.5, 1.5**2 + np.exp(-0.5)], rtol=1e-7)


def test_numeric_gradient_leaves_input_unchanged_and_is_float64() -> None:
    x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    before = x.copy()
    g = numeric_gradient(lambda z: float(np.sum(z**3)), x)
    np.testing.assert_array_equal(x, before)
    assert g.dtype == np.float64
    np.testing.assert_allclose(g, 3 * before.astype(np.float64) ** 2, rtol=1e-6)


def _linear_problem() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, 6))
    x = rng.standard_normal(6)
    cot = rng.standard_normal(6)
    return a, x, cot


def test_directional_gradcheck_linear_correct() -> None:
    a, x, cot = _linear_problem()
    err = directional_gradcheck(lambda z: a @ z, x, cot, a.T @ cot)
    assert err < 1e-8


def test_directional_gradcheck_nonlinear_correct() -> None:
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 7))
    x = rng.standard_normal((7, 3))
    cot = rng.standard_normal((4, 3))

    def f(z: np.ndarray) -> np.ndarray:
        return np.tanh(w @ z)

    grad = w.T @ (cot * (1.0 - np.tanh(w @ x) ** 2))
    err = directional_gradcheck(f, x, cot, grad, n_directions=5)
    assert err < 1e-6


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_directional_gradcheck_catches_scaled_gradient(seed: int) -> None:
    a, x, cot = _linear_problem()
    err = directional_gradcheck(lambda z: a @ z, x, cot, 1.1 * (a.T @ cot), seed=seed)
    assert err > 1e-2


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_directional_gradcheck_catches_transposed_gradient(seed: int) -> None:
    a, x, cot = _linear_problem()
    err = directional_gradcheck(lambda z: a @ z, x, cot, a @ cot, seed=seed)  # a, not a.T
    assert err > 1e-2


def test_directional_gradcheck_catches_wrong_nonlinear_gradient() -> None:
    rng = np.random.default_rng(4)
    w = rng.standard_normal((5, 5))
    x = rng.standard_normal(5)
    cot = rng.standard_normal(5)
    wrong = w.T @ cot  # forgets the tanh' factor
    err = directional_gradcheck(lambda z: np.tanh(w @ z), x, cot, wrong)
    assert err > 1e-2


def test_directional_gradcheck_accepts_low_precision_gradient_with_small_error() -> None:
    a, x, cot = _linear_problem()
    g32 = (a.T @ cot).astype(np.float32)
    err = directional_gradcheck(lambda z: a @ z, x, cot, g32)
    assert 0.0 < err < 1e-5


def test_directional_gradcheck_shape_mismatch() -> None:
    a, x, cot = _linear_problem()
    with pytest.raises(ValueError, match="shape"):
        directional_gradcheck(lambda z: a @ z, x, cot, np.ones(5))
