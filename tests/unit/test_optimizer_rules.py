"""The float64 update rules (suite/optimizers/rules.py) against steps computed by hand, and
against each other where variants coincide."""

from __future__ import annotations

import math

import numpy as np
import pytest

from suite.errors import ConfigError
from suite.optimizers.rules import (
    FAMILIES,
    all_variants,
    make,
    norm_roundings,
)

P0 = np.array([0.5, -1.0, 2.0, 1e-3])
G1 = np.array([0.1, -0.2, 3e-7, -4.0])
G2 = np.array([-0.3, 0.05, 1e-6, 2.0])


def run(rule, grads, lrs=None, p0=P0):  # type: ignore[no-untyped-def]
    params = {"w": p0.copy()}
    state = rule.init(params)
    for k, g in enumerate(grads, start=1):
        params, state = rule.step(params, {"w": g}, state, k, None if lrs is None else lrs[k - 1])
    return params["w"], state["w"]


def close(a: np.ndarray, b: np.ndarray) -> bool:
    # relative to the values and to the inputs' scale (an update may cancel a parameter)
    return bool(np.allclose(a, b, rtol=1e-13, atol=1e-13))


# -- SGD ------------------------------------------------------------------------------------------


def test_sgd_plain() -> None:
    p, st = run(make("sgd", lr=0.1), [G1, G2])
    assert close(p, P0 - 0.1 * G1 - 0.1 * G2) and st == {}


def test_sgd_momentum_dampening_first_step_is_the_gradient() -> None:
    mu, tau, lr = 0.9, 0.5, 0.1
    p, st = run(make("sgd", lr=lr, momentum=mu, dampening=tau), [G1, G2])
    b1 = G1  # PyTorch: the buffer starts as the first gradient, undamped
    b2 = mu * b1 + (1 - tau) * G2
    assert close(p, P0 - lr * b1 - lr * b2) and close(st["momentum"], b2)
    p0, _ = run(make("sgd", {"first_step": "zero"}, lr=lr, momentum=mu, dampening=tau), [G1, G2])
    z1 = (1 - tau) * G1
    assert close(p0, P0 - lr * z1 - lr * (mu * z1 + (1 - tau) * G2))


def test_sgd_first_step_variants_coincide_without_dampening() -> None:
    a, _ = run(make("sgd", lr=0.1, momentum=0.9), [G1, G2])
    b, _ = run(make("sgd", {"first_step": "zero"}, lr=0.1, momentum=0.9), [G1, G2])
    assert close(a, b)


def test_sgd_velocity_forms_coincide_at_constant_lr_and_differ_after_a_change() -> None:
    outside = make("sgd", lr=0.1, momentum=0.9)
    inside = outside.with_variant(velocity="lr_inside")
    assert close(run(outside, [G1, G2])[0], run(inside, [G1, G2])[0])
    lrs = [0.1, 0.05]
    po, _ = run(outside, [G1, G2], lrs)
    pi, _ = run(inside, [G1, G2], lrs)
    # outside: p -= 0.05 * (0.9 g1 + g2); inside: p -= 0.9 * 0.1 g1 + 0.05 g2
    assert close(po, P0 - 0.1 * G1 - 0.05 * (0.9 * G1 + G2))
    assert close(pi, P0 - 0.1 * G1 - (0.9 * 0.1 * G1 + 0.05 * G2))
    assert not close(po, pi)


def test_nesterov_by_hand_both_forms() -> None:
    mu, lr = 0.9, 0.1
    torch_form = make("sgd", lr=lr, momentum=mu, nesterov=True)
    p, _ = run(torch_form, [G1, G2])
    b1 = G1
    b2 = mu * b1 + G2
    assert close(p, P0 - lr * (G1 + mu * b1) - lr * (G2 + mu * b2))
    keras_form, _ = run(torch_form.with_variant(velocity="lr_inside"), [G1, G2])
    assert close(p, keras_form)  # the same at a constant learning rate


def test_sgd_weight_decay_coupled_and_decoupled() -> None:
    lr, wd = 0.1, 0.01
    l2, _ = run(make("sgd", lr=lr, weight_decay=wd), [G1])
    dec, _ = run(make("sgd", {"weight_decay": "decoupled_lr"}, lr=lr, weight_decay=wd), [G1])
    raw, _ = run(make("sgd", {"weight_decay": "decoupled"}, lr=lr, weight_decay=wd), [G1])
    assert close(l2, P0 - lr * (G1 + wd * P0))
    assert close(dec, l2)  # plain SGD: the same update
    assert close(raw, P0 - wd * P0 - lr * G1)
    # with momentum the coupled decay enters the buffer: different after two steps
    a, _ = run(make("sgd", lr=lr, momentum=0.9, weight_decay=wd), [G1, G2])
    b, _ = run(
        make("sgd", {"weight_decay": "decoupled_lr"}, lr=lr, momentum=0.9, weight_decay=wd),
        [G1, G2],
    )
    assert not close(a, b)


# -- Adam ---------------------------------------------------------------------------------------


def test_adam_first_step_by_hand() -> None:
    lr, eps = 1e-3, 1e-8
    p, st = run(make("adam", lr=lr, eps=eps), [G1])
    # m^ = g, v^ = g^2 at t = 1
    assert close(p, P0 - lr * G1 / (np.abs(G1) + eps))
    assert close(st["m"], 0.1 * G1) and close(st["v"], 0.001 * G1**2)
    hat, _ = run(make("adam", {"epsilon": "hat"}, lr=lr, eps=eps), [G1])
    assert close(hat, P0 - lr * G1 / (np.abs(G1) + eps / math.sqrt(0.001)))
    # the tiny gradient (3e-7) is where the placement shows: 3 % of its update
    assert abs(hat[2] - p[2]) > 0.01 * abs(p[2] - P0[2])


def test_adam_two_steps_by_hand_and_eps_root() -> None:
    lr, b1, b2, eps, root = 1e-2, 0.8, 0.99, 1e-6, 1e-10
    p, _ = run(make("adam", lr=lr, beta1=b1, beta2=b2, eps=eps, eps_root=root), [G1, G2])
    m1, v1 = (1 - b1) * G1, (1 - b2) * G1**2
    x1 = P0 - lr * (m1 / (1 - b1)) / (np.sqrt(v1 / (1 - b2) + root) + eps)
    m2, v2 = b1 * m1 + (1 - b1) * G2, b2 * v1 + (1 - b2) * G2**2
    x2 = x1 - lr * (m2 / (1 - b1**2)) / (np.sqrt(v2 / (1 - b2**2) + root) + eps)
    assert close(p, x2)


def test_adam_epsilon_forms_coincide_at_zero_eps() -> None:
    a, _ = run(make("adam", eps=0.0), [G1, G2])
    b, _ = run(make("adam", {"epsilon": "hat"}, eps=0.0), [G1, G2])
    assert close(a, b)


def test_adam_weight_decay_forms_one_step() -> None:
    lr, wd, eps = 1e-3, 0.1, 1e-8
    l2, _ = run(make("adam", lr=lr, eps=eps, weight_decay=wd), [G1])
    g = G1 + wd * P0
    assert close(l2, P0 - lr * g / (np.abs(g) + eps))
    w, _ = run(
        make("adam", {"weight_decay": "decoupled_lr"}, lr=lr, eps=eps, weight_decay=wd), [G1]
    )
    assert close(w, P0 - lr * wd * P0 - lr * G1 / (np.abs(G1) + eps))
    paper, _ = run(
        make("adam", {"weight_decay": "decoupled"}, lr=lr, eps=eps, weight_decay=wd), [G1]
    )
    assert close(paper, P0 - wd * P0 - lr * G1 / (np.abs(G1) + eps))


def test_amsgrad_forms() -> None:
    big, small = np.full(4, 2.0), np.full(4, 0.01)
    rule = make("adam", {"amsgrad": "max_raw"}, lr=1e-3, eps=0.0)
    corr = rule.with_variant(amsgrad="max_corrected")
    off = rule.with_variant(amsgrad="off")
    # step 1: max(0, v) = v for both
    assert close(run(rule, [big])[0], run(corr, [big])[0])
    assert close(run(rule, [big])[0], run(off, [big])[0])
    p_raw, st_raw = run(rule, [big, small])
    p_cor, st_cor = run(corr, [big, small])
    v1, v2 = 0.001 * 4.0, 0.999 * 0.001 * 4.0 + 0.001 * 1e-4
    assert close(st_raw["vmax"], np.full(4, max(v1, v2)))  # raw v: v1 > v2
    vh1, vh2 = v1 / 0.001, v2 / (1 - 0.999**2)
    assert close(st_cor["vmax"], np.full(4, max(vh1, vh2)))  # corrected: vh1 > vh2 too
    m2 = 0.9 * 0.1 * 2.0 + 0.1 * 0.01
    x1 = P0 - 1e-3 * 1.0  # m^/sqrt(v^) = 1 at step 1
    assert close(p_raw, x1 - 1e-3 * (m2 / (1 - 0.81)) / np.sqrt(max(v1, v2) / (1 - 0.999**2)))
    assert close(p_cor, x1 - 1e-3 * (m2 / (1 - 0.81)) / np.sqrt(max(vh1, vh2)))
    assert not close(p_raw, p_cor)


def test_adam_bias_correction_off_and_swapped() -> None:
    lr = 1e-3
    off, _ = run(make("adam", {"bias_correction": "off"}, lr=lr, eps=0.0), [G1])
    assert close(off, P0 - lr * 0.1 * G1 / np.sqrt(0.001 * G1**2))
    sw, _ = run(
        make("adam", {"bias_correction": "swapped", "epsilon": "hat"}, lr=lr, eps=1e-8), [G1]
    )
    # MXNet's docstring: lr * sqrt(1 - b1^t) / (1 - b2^t) * m / (sqrt(v) + eps)
    m, v = 0.1 * G1, 0.001 * G1**2
    assert close(sw, P0 - lr * math.sqrt(0.1) / 0.001 * m / (np.sqrt(v) + 1e-8))


# -- RMSprop, Adagrad ---------------------------------------------------------------------------


def test_rmsprop_first_step_both_epsilons_and_centred() -> None:
    lr, rho, eps = 0.01, 0.9, 1e-4
    out, _ = run(make("rmsprop", lr=lr, rho=rho, eps=eps), [G1])
    v = 0.1 * G1**2
    assert close(out, P0 - lr * G1 / (np.sqrt(v) + eps))
    ins, _ = run(make("rmsprop", {"epsilon": "inside"}, lr=lr, rho=rho, eps=eps), [G1])
    assert close(ins, P0 - lr * G1 / np.sqrt(v + eps))
    cen, st = run(make("rmsprop", lr=lr, rho=rho, eps=eps, centered=True), [G1])
    w = v - (0.1 * G1) ** 2  # = 0.09 g^2
    assert close(cen, P0 - lr * G1 / (np.sqrt(w) + eps)) and close(st["gbar"], 0.1 * G1)
    init, _ = run(make("rmsprop", lr=lr, rho=rho, eps=eps, initial_scale=1.0), [G1])
    assert close(init, P0 - lr * G1 / (np.sqrt(0.9 + v) + eps))


def test_rmsprop_momentum_forms() -> None:
    base = make("rmsprop", lr=0.01, rho=0.9, eps=1e-8, momentum=0.9)
    inside = base.with_variant(velocity="lr_inside")
    assert close(run(base, [G1, G2])[0], run(inside, [G1, G2])[0])
    assert not close(run(base, [G1, G2], [0.01, 0.002])[0], run(inside, [G1, G2], [0.01, 0.002])[0])


def test_adagrad_two_steps_decay_and_accumulator() -> None:
    lr, eps, acc, decay = 0.1, 1e-10, 0.1, 0.5
    p, st = run(make("adagrad", lr=lr, eps=eps, initial_accumulator=acc, lr_decay=decay), [G1, G2])
    s1 = acc + G1**2
    s2 = s1 + G2**2
    x = P0 - lr * G1 / (np.sqrt(s1) + eps) - lr / (1 + decay) * G2 / (np.sqrt(s2) + eps)
    assert close(p, x) and close(st["sum"], s2)
    ins, _ = run(make("adagrad", {"epsilon": "inside"}, lr=lr, eps=1e-3), [G1])
    assert close(ins, P0 - lr * G1 / np.sqrt(G1**2 + 1e-3))
    # L2 decay enters the accumulator; decoupled does not
    l2, st2 = run(make("adagrad", lr=lr, eps=0.0, weight_decay=0.1), [G1])
    g = G1 + 0.1 * P0
    assert close(l2, P0 - lr * g / np.abs(g)) and close(st2["sum"], g**2)
    dec, st3 = run(
        make("adagrad", {"weight_decay": "decoupled_lr"}, lr=lr, eps=0.0, weight_decay=0.1), [G1]
    )
    assert close(dec, P0 - lr * 0.1 * P0 - lr * np.sign(G1)) and close(st3["sum"], G1**2)


# -- LAMB, LARS ---------------------------------------------------------------------------------


def test_lamb_first_step_by_hand() -> None:
    lr, eps, wd = 1e-3, 1e-6, 0.01
    p, _ = run(make("lamb", lr=lr, eps=eps, weight_decay=wd), [G1])
    u = G1 / (np.abs(G1) + eps) + wd * P0
    ratio = np.linalg.norm(P0) / np.linalg.norm(u)
    assert close(p, P0 - lr * ratio * u)
    dec, _ = run(
        make("lamb", {"weight_decay": "decoupled_lr"}, lr=lr, eps=eps, weight_decay=wd), [G1]
    )
    u2 = G1 / (np.abs(G1) + eps)
    assert close(dec, P0 - lr * wd * P0 - lr * np.linalg.norm(P0) / np.linalg.norm(u2) * u2)
    bounded, _ = run(make("lamb", lr=lr, eps=eps, upper_bound=1.0), [G1])
    assert close(bounded, P0 - lr * 1.0 / np.linalg.norm(u2) * u2)  # ||p|| clipped to 1


def test_lars_both_denominators_and_exclusion() -> None:
    lr, mu, wd, eta = 0.1, 0.9, 1e-2, 1e-3
    rule = make("lars", lr=lr, momentum=mu, weight_decay=wd, trust_coefficient=eta)
    p, st = run(rule, [G1])
    u = G1 + wd * P0
    r = eta * np.linalg.norm(P0) / np.linalg.norm(u)
    assert close(p, P0 - lr * r * u) and close(st["momentum"], lr * r * u)
    s, _ = run(rule.with_variant(denominator="sum_of_norms"), [G1])
    r2 = eta * np.linalg.norm(P0) / (np.linalg.norm(G1) + wd * np.linalg.norm(P0))
    assert close(s, P0 - lr * r2 * u)
    ex = rule.with_variant(exclude="bias_gamma_beta")
    params = {"fc.weight": P0.copy(), "fc.bias": P0.copy()}
    out, _ = ex.step(params, {"fc.weight": G1, "fc.bias": G1}, ex.init(params), 1)
    assert close(out["fc.weight"], p)
    assert close(out["fc.bias"], P0 - lr * G1)  # ratio 1, no weight decay


def test_trust_ratio_is_one_where_a_norm_is_zero() -> None:
    rule = make("lars", lr=0.1, momentum=0.0)
    zero = np.zeros(4)
    p, _ = run(rule, [G1], p0=zero)
    assert close(p, -0.1 * G1)


# -- the rule object --------------------------------------------------------------------------------


def test_step_is_pure_and_names_are_stable() -> None:
    rule = make("adam", lr=1e-3)
    params = {"w": P0.copy()}
    state = rule.init(params)
    before = {k: v.copy() for k, v in state["w"].items()}
    rule.step(params, {"w": G1}, state, 1)
    assert close(params["w"], P0) and all(close(state["w"][k], before[k]) for k in before)
    assert rule.name == "adam[amsgrad=off,bias_correction=on,epsilon=outside,weight_decay=l2]"
    assert make("lars").name == "lars[denominator=norm_of_sum,exclude=none]"
    for family in FAMILIES:
        names = [r.name for r in all_variants(make(family))]
        assert len(names) == len(set(names))
    assert len(all_variants(make("adam"))) == 2 * 3 * 3 * 3


def test_traffic_and_state_bytes() -> None:
    adam = make("adam")
    assert adam.traffic().bytes_per_param(4) == (16, 12)  # read p g m v, write p m v
    # bf16 params and grads, fp32 master and state: read master 4 + g 2 + m 4 + v 4; write
    # master 4 + m 4 + v 4 + the bf16 copy 2
    assert adam.traffic().bytes_per_param(2, 2, 4, master_itemsize=4) == (14, 14)
    assert adam.state_bytes_per_param(4) == 8
    assert adam.with_variant(amsgrad="max_raw").state_bytes_per_param(4) == 12
    assert adam.state_bytes_per_param(4, master_itemsize=4) == 12
    assert make("sgd").traffic().bytes_per_param(4) == (8, 4)
    assert make("sgd", momentum=0.9).traffic().bytes_per_param(4) == (12, 8)
    assert make("lamb").traffic().bytes_per_param(4) == (28, 12)  # two passes
    assert make("rmsprop", centered=True, momentum=0.9).state_buffers() == ("v", "gbar", "momentum")


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: make("adamx"), "adamx"),
        (lambda: make("adam", lr=-1e-3), "adam.lr"),
        (lambda: make("adam", lr=0.0), "adam.lr"),
        (lambda: make("adam", betas=0.9), "adam.betas"),
        (lambda: make("adam", beta2=1.0), "adam.beta2"),
        (lambda: make("adam", eps=-1.0), "adam.eps"),
        (lambda: make("adam", lr="fast"), "adam.lr"),
        (lambda: make("adam", lr=float("nan")), "adam.lr"),
        (lambda: make("adam", {"epsilon": "inside"}), "epsilon"),
        (lambda: make("adam", {"placement": "x"}), "placement"),
        (lambda: make("sgd", nesterov=True), "sgd.nesterov"),
        (lambda: make("sgd", momentum=0.9, weight_decay=-0.1), "sgd.weight_decay"),
        (lambda: make("rmsprop", centered=1), "rmsprop.centered"),
    ],
)
def test_bad_hyperparameters_name_the_field(call, field) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        call()


def test_norm_roundings() -> None:
    assert norm_roundings(1024) == 2 * (10 + 2)
    assert norm_roundings(1024, "sequential") == 1028
    with pytest.raises(ConfigError, match="reduction"):
        norm_roundings(10, "tree")
