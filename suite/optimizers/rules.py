"""Optimizer update rules in float64 NumPy: the reference each framework's optimizer is held to.

A :class:`Rule` is one optimizer family (SGD, Adam, RMSprop, Adagrad, LAMB, LARS) with its
hyperparameters and its *variant*: the choices on which frameworks' documented rules differ
(where epsilon goes, whether weight decay is coupled to the gradient, where the learning rate
sits in a momentum buffer, ...). Every variant has a stable name (:attr:`Rule.name`), so a
record can say "framework F follows ``adam[amsgrad=off,bias_correction=on,epsilon=hat,...]``".

A rule is pure: :meth:`Rule.step` takes parameters, gradients and state (dicts of arrays keyed
by tensor name) and returns new ones; it never mutates its inputs. Everything is computed in
float64 from whatever the inputs hold. Steps are numbered from 1.

Besides the values, a rule says what an implementation must move through memory per
parameter (:meth:`Rule.traffic`, the roofline's byte count) and how much state it keeps
(:meth:`Rule.state_bytes_per_param`), and it evaluates its update on absolute values
(:meth:`Rule.magnitude_step`), which the rounding-error bound in :mod:`suite.optimizers.bounds`
is built from.

Imports NumPy only: usable on the host and in every framework's environment.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from suite.errors import ConfigError

Array = np.ndarray
Params = dict[str, Array]
#: per tensor name: state buffer name -> array
State = dict[str, dict[str, Array]]
#: a rule's hyperparameter values
Hyper = dict[str, Any]
#: the value inputs (param, grad, state) of a step, given to the magnitude pass; None otherwise
Ref = tuple[Array, Array, dict[str, Array]] | None


@dataclass(frozen=True)
class Traffic:
    """The buffers a minimal (fused, one pass where possible) implementation reads and writes
    per parameter element in one step. Names are ``"param"``, ``"grad"`` and the rule's state
    buffers; a name appears twice where a second pass over it is unavoidable (the trust-ratio
    rules need each tensor's norms before they can update it)."""

    reads: tuple[str, ...]
    writes: tuple[str, ...]

    def bytes_per_param(
        self,
        param_itemsize: int,
        grad_itemsize: int | None = None,
        state_itemsize: int | None = None,
        master_itemsize: int | None = None,
    ) -> tuple[int, int]:
        """(bytes read, bytes written) per parameter element.

        ``grad_itemsize`` and ``state_itemsize`` default to the parameter's. With
        ``master_itemsize`` (fp32 master weights beside bf16/fp16 parameters) the rule reads
        and writes the master copy where it names ``"param"`` and also writes the
        low-precision copy once.
        """
        grad = param_itemsize if grad_itemsize is None else grad_itemsize
        state = param_itemsize if state_itemsize is None else state_itemsize
        pbytes = param_itemsize if master_itemsize is None else master_itemsize

        def size(name: str) -> int:
            return pbytes if name == "param" else grad if name == "grad" else state

        read = sum(size(n) for n in self.reads)
        written = sum(size(n) for n in self.writes)
        if master_itemsize is not None:
            written += param_itemsize
        return read, written


#: the ranges a hyperparameter may be declared to take (:attr:`Rule.bounds`): a decay rate in
#: [0, 1), a non-negative term, a positive one
BOUNDS: dict[str, Callable[[float], bool]] = {
    "in [0, 1)": lambda v: 0.0 <= v < 1.0,
    ">= 0": lambda v: v >= 0.0,
    "positive": lambda v: v > 0.0,
}
#: the ranges every family that has these hyperparameters checks, before its own :attr:`Rule.bounds`
COMMON_BOUNDS: dict[str, str] = {"lr": "positive", "weight_decay": ">= 0", "eps": ">= 0"}


#: the ``weight_decay`` variants :meth:`Rule._tensor_step` applies: into the gradient (``l2``),
#: ``p -= lr*wd*p`` (``decoupled_lr``) or ``p -= wd*p`` (``decoupled``)
WEIGHT_DECAY_MODES: tuple[str, ...] = ("l2", "decoupled_lr", "decoupled")


class Rule:
    """One optimizer family with its hyperparameters and variant.

    Subclasses set :attr:`family`, :attr:`defaults` (hyperparameter -> default value; the
    type of the default is the type accepted), :attr:`variants` (flag -> allowed values, the
    first one the default) and implement :meth:`_direction`, :meth:`_init_tensor`,
    :meth:`state_buffers`, :meth:`traffic`, :meth:`horizon` and :meth:`conditioning`.
    """

    family: ClassVar[str]
    defaults: ClassVar[dict[str, Any]]
    variants: ClassVar[dict[str, tuple[str, ...]]]
    #: hyperparameter -> its range, a key of :data:`BOUNDS` (with a hint after it, if any),
    #: checked with the error naming the field; ``lr`` (positive), ``weight_decay`` and ``eps``
    #: (>= 0) are checked for every family that has them. :meth:`_check` holds what involves
    #: more than one field
    bounds: ClassVar[dict[str, str]] = {}
    #: roundings in one element's update (a generous count; see suite/optimizers/bounds.py)
    update_roundings: ClassVar[int] = 10

    def __init__(self, variant: Mapping[str, str] | None = None, **hyper: Any) -> None:
        self.variant: dict[str, str] = {k: v[0] for k, v in self.variants.items()}
        for key, value in (variant or {}).items():
            if key not in self.variants:
                raise ConfigError(
                    f"{self.family} variant {key!r}: unknown; known: {', '.join(self.variants)}"
                )
            if value not in self.variants[key]:
                raise ConfigError(
                    f"{self.family} variant {key}={value!r}: choose one of "
                    f"{', '.join(self.variants[key])}"
                )
            self.variant[key] = value
        self.hyper: Hyper = dict(self.defaults)
        for key, value in hyper.items():
            if key not in self.defaults:
                raise ConfigError(
                    f"{self.family}.{key}: unknown hyperparameter; known: "
                    f"{', '.join(self.defaults)}"
                )
            default = self.defaults[key]
            if isinstance(default, bool):
                if not isinstance(value, bool):
                    raise ConfigError(f"{self.family}.{key}: expected true or false, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{self.family}.{key}: expected a number, got {value!r}")
            elif not math.isfinite(value):
                raise ConfigError(f"{self.family}.{key}: must be finite, got {value!r}")
            self.hyper[key] = value if isinstance(default, bool) else float(value)
        for key, bound in {**COMMON_BOUNDS, **self.bounds}.items():
            within = BOUNDS[bound.split(" (")[0]]  # the range, without its hint
            if key in self.hyper and not within(self.hyper[key]):
                raise ConfigError(f"{self.family}.{key}: must be {bound}, got {self.hyper[key]!r}")
        self._check()

    # -- identity ------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The stable variant name: ``family[flag=value,...]`` with every flag, sorted."""
        flags = ",".join(f"{k}={self.variant[k]}" for k in sorted(self.variant))
        return f"{self.family}[{flags}]" if flags else self.family

    def __repr__(self) -> str:
        hyper = ", ".join(f"{k}={v!r}" for k, v in self.hyper.items())
        return f"<{self.name} {hyper}>"

    def with_variant(self, **flags: str) -> Rule:
        """The same hyperparameters under another variant."""
        return type(self)({**self.variant, **flags}, **self.hyper)

    # -- what subclasses provide ---------------------------------------------------------------
    def _check(self) -> None:
        """Cross-field checks of the hyperparameters (ConfigError naming the field)."""

    def state_buffers(self) -> tuple[str, ...]:
        """Names of the state buffers this configuration keeps per tensor."""
        raise NotImplementedError

    def _init_tensor(self, p: Array) -> dict[str, Array]:
        return {name: np.zeros(p.shape, dtype=np.float64) for name in self.state_buffers()}

    def _direction(
        self,
        name: str,
        p: Array,
        g: Array,
        st: dict[str, Array],
        t: int,
        lr: float,
        ref: Ref,
    ) -> tuple[Array, dict[str, Array]]:
        """The step ``d`` (``p_new = p - d`` before decoupled weight decay) and the new state.

        With ``ref`` None this is the value computation. Otherwise it is the magnitude pass:
        ``p``, ``g`` and ``st`` hold absolute values (and state evaluated on absolute values),
        ``ref`` the value inputs (for denominators and trust ratios, which are evaluated on
        values), and the result bounds ``|d|`` term by term."""
        raise NotImplementedError

    def traffic(self) -> Traffic:
        """The tensors one step moves; the default is one pass: read the parameter, the
        gradient and every state buffer, write the parameter and every state buffer."""
        s = self.state_buffers()
        return Traffic(("param", "grad", *s), ("param", *s))

    def horizon(self) -> float:
        """Steps over which a state buffer accumulates rounding error: 1/(1-decay) of its
        longest moving average, ``inf`` for a running sum (Adagrad), 0 without state."""
        raise NotImplementedError

    def conditioning(self) -> float:
        """How much the update's value depends on the hyperparameters' last bits: the sum of
        beta/(1-beta) over every decay used as ``1 - beta`` (an implementation that stores
        beta in fp32 computes ``1 - beta`` with that relative error times this factor)."""
        raise NotImplementedError

    def reduction_roundings(self, size: int, reduction: str = "pairwise") -> float:
        """Extra roundings of a per-tensor reduction (the trust-ratio rules' norms): none here;
        see :func:`norm_roundings`."""
        return 0.0

    def param_roundings(self) -> int:
        """How many times an implementation may round the parameter itself in one step: twice
        where weight decay is a separate decoupled update (Keras: ``p -= p*wd*lr``, then
        ``p -= d``), else once."""
        decoupled = self._weight_decay_mode() in ("decoupled", "decoupled_lr")
        return 2 if decoupled and self.hyper.get("weight_decay") else 1

    # -- what every rule does the same way -------------------------------------------------------
    def init(self, params: Mapping[str, Array]) -> State:
        """Fresh state for ``params``."""
        return {name: self._init_tensor(np.asarray(p)) for name, p in params.items()}

    def _weight_decay_mode(self) -> str:
        return self.variant.get("weight_decay", "l2")

    def step(
        self,
        params: Mapping[str, Array],
        grads: Mapping[str, Array],
        state: State,
        t: int,
        lr: float | None = None,
    ) -> tuple[Params, State]:
        """One step (``t`` counts from 1) with the rule's learning rate or ``lr`` for this
        step; returns new float64 parameters and state."""
        if t < 1:
            raise ValueError(f"step index counts from 1, got {t}")
        lr_t = self.hyper["lr"] if lr is None else float(lr)
        new_params: Params = {}
        new_state: State = {}
        for name, p in params.items():
            p64 = np.asarray(p, dtype=np.float64)
            g64 = np.asarray(grads[name], dtype=np.float64)
            p_new, st = self._tensor_step(name, p64, g64, state[name], t, lr_t, None)
            new_params[name], new_state[name] = p_new, st
        return new_params, new_state

    def _tensor_step(
        self,
        name: str,
        p: Array,
        g: Array,
        st: dict[str, Array],
        t: int,
        lr: float,
        ref: Ref,
    ) -> tuple[Array, dict[str, Array]]:
        wd = self.hyper.get("weight_decay", 0.0)
        mode = self._weight_decay_mode()
        if wd and mode == "l2":
            g = g + wd * p
            if ref is not None:
                ref = (ref[0], ref[1] + wd * ref[0], ref[2])
        d, st_new = self._direction(name, p, g, st, t, lr, ref)
        if wd and mode == "decoupled_lr":
            decay = lr * wd * p
        elif wd and mode == "decoupled":
            decay = wd * p
        else:
            decay = None
        if ref is not None:  # magnitude: every term adds
            return (d if decay is None else d + decay), st_new
        p_new = p - d if decay is None else p - decay - d
        return p_new, st_new

    def magnitude_step(
        self,
        params: Mapping[str, Array],
        grads: Mapping[str, Array],
        state: State,
        abs_state: State,
        t: int,
        lr: float | None = None,
    ) -> tuple[Params, State]:
        """The update evaluated on absolute values (``|p|``, ``|g|``, state run on absolute
        values) given the *value* inputs of the same step: per tensor the magnitude ``A`` that
        bounds every term of the update, and the new absolute state. ``abs_state`` starts as
        :meth:`init` of ``|params|``."""
        lr_t = self.hyper["lr"] if lr is None else float(lr)
        out: Params = {}
        new_abs: State = {}
        for name, p in params.items():
            p64 = np.asarray(p, dtype=np.float64)
            g64 = np.asarray(grads[name], dtype=np.float64)
            a, st = self._tensor_step(
                name, np.abs(p64), np.abs(g64), abs_state[name], t, lr_t, (p64, g64, state[name])
            )
            out[name], new_abs[name] = a, st
        return out, new_abs

    def state_bytes_per_param(self, state_itemsize: int = 4, master_itemsize: int = 0) -> int:
        """Bytes of optimizer state per parameter element (fp32 master weights count as
        state when ``master_itemsize`` is given)."""
        return len(self.state_buffers()) * state_itemsize + master_itemsize


# ------------------------------------------------------------------------------------------------
# SGD
# ------------------------------------------------------------------------------------------------


class SGD(Rule):
    """SGD, with momentum, dampening and Nesterov.

    Variants:

    * ``velocity=lr_outside``: ``b = mu*b + (1-tau)*g; p -= lr*b`` (PyTorch, MXNet's NAG);
      ``lr_inside``: ``v = mu*v + lr*g; p -= v`` (Keras, MXNet's SGD, Sutskever et al.).
      Identical at a constant learning rate; they differ after the learning rate changes.
    * ``first_step=gradient``: the buffer starts as the first gradient, so dampening is not
      applied on step 1 (PyTorch); ``zero``: it starts at zero (everyone else).
    * Nesterov: ``p -= lr*(g + mu*b)`` (lr_outside) / ``p -= mu*v + lr*g`` (lr_inside).
    * ``weight_decay=l2`` adds ``wd*p`` to the gradient; ``decoupled_lr`` subtracts
      ``lr*wd*p`` from the parameter (Keras 3's ``weight_decay`` on every optimizer).
    """

    family = "sgd"
    defaults: ClassVar[dict[str, Any]] = {
        "lr": 0.01,
        "momentum": 0.0,
        "dampening": 0.0,
        "nesterov": False,
        "weight_decay": 0.0,
    }
    variants: ClassVar[dict[str, tuple[str, ...]]] = {
        "velocity": ("lr_outside", "lr_inside"),
        "first_step": ("gradient", "zero"),
        "weight_decay": WEIGHT_DECAY_MODES,
    }

    bounds: ClassVar[dict[str, str]] = {"momentum": "in [0, 1)", "dampening": "in [0, 1)"}

    def _check(self) -> None:
        if self.hyper["nesterov"] and (self.hyper["momentum"] == 0 or self.hyper["dampening"]):
            raise ConfigError(
                "sgd.nesterov: needs momentum > 0 and dampening = 0 (as in every framework)"
            )

    def state_buffers(self) -> tuple[str, ...]:
        return ("momentum",) if self.hyper["momentum"] else ()

    def param_roundings(self) -> int:
        """Nesterov's step has two terms, ``mu*b`` and ``lr*g``, which an implementation may
        add to the parameter one after the other (MXNet's ``nag_mom_update`` evaluates
        ``weight + momentum*mom - lr*grad`` left to right: two roundings of the parameter's
        size per step, measured at 1.3 times the one-rounding bound on step 2)."""
        if self.hyper["nesterov"] and self.hyper["momentum"]:
            return max(2, super().param_roundings())
        return super().param_roundings()

    def _direction(
        self, name: str, p: Array, g: Array, st: dict[str, Array], t: int, lr: float, ref: Ref
    ) -> tuple[Array, dict[str, Array]]:
        mu, tau = self.hyper["momentum"], self.hyper["dampening"]
        if not mu:
            return lr * g, {}
        inside = self.variant["velocity"] == "lr_inside"
        scale = lr if inside else 1.0
        if t == 1 and self.variant["first_step"] == "gradient":
            b = scale * g
        else:
            b = mu * st["momentum"] + (1.0 - tau) * scale * g
        if self.hyper["nesterov"]:
            d = mu * b + lr * g if inside else lr * (g + mu * b)
        else:
            d = b if inside else lr * b
        return d, {"momentum": b}

    def horizon(self) -> float:
        mu = self.hyper["momentum"]
        return 1.0 / (1.0 - mu) if mu else 0.0

    def conditioning(self) -> float:
        tau = self.hyper["dampening"]
        return tau / (1.0 - tau)


# ------------------------------------------------------------------------------------------------
# Adam / AdamW / AMSGrad
# ------------------------------------------------------------------------------------------------


class Adam(Rule):
    """Adam and its relatives (AdamW, AMSGrad, Adam + L2).

    ``m = b1*m + (1-b1)*g``, ``v = b2*v + (1-b2)*g^2``, ``m^ = m/(1-b1^t)``,
    ``v^ = v/(1-b2^t)``, then ``p -= lr * m^ / (sqrt(v^ + eps_root) + eps')``.

    Variants:

    * ``epsilon=outside``: ``eps' = eps`` (PyTorch, optax's ``eps``); ``hat``:
      ``eps' = eps/sqrt(1-b2^t)``, i.e. Kingma & Ba's "epsilon hat" of the efficient form
      ``lr*sqrt(1-b2^t)/(1-b1^t) * m/(sqrt(v)+eps)`` (Keras, TF1, MXNet). ``eps_root`` (optax)
      is a hyperparameter, added inside the square root.
    * ``amsgrad=max_raw``: ``vmax = max(vmax, v)``, ``v^ = vmax/(1-b2^t)`` (PyTorch, Keras);
      ``max_corrected``: ``v^ = max(v^_prev, v/(1-b2^t))`` (optax's ``amsgrad``).
    * ``bias_correction=off`` drops both corrections; ``swapped`` exchanges them, which is
      what MXNet 1.9.1's Adam docstring writes (``lr * sqrt(1 - beta1**t) / (1 - beta2**t)``
      with epsilon hat); no implementation does it: it exists so that a documentation check
      can measure that docstring against the implementation.
    * ``weight_decay``: ``l2`` (into the gradient, so into m and v: PyTorch's Adam),
      ``decoupled_lr`` (``p -= lr*wd*p``: PyTorch's AdamW, optax's adamw, Keras),
      ``decoupled`` (``p -= wd*p``, the paper's form with a schedule multiplier of 1).
    """

    family = "adam"
    defaults: ClassVar[dict[str, Any]] = {
        "lr": 0.001,
        "beta1": 0.9,
        "beta2": 0.999,
        "eps": 1e-8,
        "eps_root": 0.0,
        "weight_decay": 0.0,
    }
    variants: ClassVar[dict[str, tuple[str, ...]]] = {
        "epsilon": ("outside", "hat"),
        "amsgrad": ("off", "max_raw", "max_corrected"),
        "bias_correction": ("on", "off", "swapped"),
        "weight_decay": WEIGHT_DECAY_MODES,
    }

    bounds: ClassVar[dict[str, str]] = {
        "beta1": "in [0, 1)", "beta2": "in [0, 1)", "eps_root": ">= 0",
    }  # fmt: skip

    def state_buffers(self) -> tuple[str, ...]:
        return ("m", "v") if self.variant["amsgrad"] == "off" else ("m", "v", "vmax")

    def _corrections(self, t: int) -> tuple[float, float]:
        mode = self.variant["bias_correction"]
        if mode == "off":
            return 1.0, 1.0
        bc1, bc2 = 1.0 - self.hyper["beta1"] ** t, 1.0 - self.hyper["beta2"] ** t
        return (bc2, bc1) if mode == "swapped" else (bc1, bc2)

    def _direction(
        self, name: str, p: Array, g: Array, st: dict[str, Array], t: int, lr: float, ref: Ref
    ) -> tuple[Array, dict[str, Array]]:
        b1, b2 = self.hyper["beta1"], self.hyper["beta2"]
        m = b1 * st["m"] + (1.0 - b1) * g
        v = b2 * st["v"] + (1.0 - b2) * g * g
        bc1, bc2 = self._corrections(t)
        new = {"m": m, "v": v}
        amsgrad = self.variant["amsgrad"]
        if amsgrad == "max_raw":
            new["vmax"] = np.maximum(st["vmax"], v)
            v_hat = new["vmax"] / bc2
        elif amsgrad == "max_corrected":
            new["vmax"] = np.maximum(st["vmax"], v / bc2)
            v_hat = new["vmax"]
        else:
            v_hat = v / bc2
        eps = self.hyper["eps"]
        if self.variant["epsilon"] == "hat":
            eps = eps / math.sqrt(bc2)
        d = lr * (m / bc1) / (np.sqrt(v_hat + self.hyper["eps_root"]) + eps)
        return d, new

    def horizon(self) -> float:
        return 1.0 / (1.0 - max(self.hyper["beta1"], self.hyper["beta2"]))

    def conditioning(self) -> float:
        b1, b2 = self.hyper["beta1"], self.hyper["beta2"]
        return b1 / (1.0 - b1) + b2 / (1.0 - b2)


# ------------------------------------------------------------------------------------------------
# RMSprop
# ------------------------------------------------------------------------------------------------


class RMSprop(Rule):
    """RMSprop, plain or centred (Graves 2013), with optional momentum.

    ``v = rho*v + (1-rho)*g^2``; centred: ``gbar = rho*gbar + (1-rho)*g``, ``w = v - gbar^2``,
    else ``w = v``; ``q = g / den``.

    Variants:

    * ``epsilon=outside``: ``den = sqrt(w) + eps`` (PyTorch); ``inside``:
      ``den = sqrt(w + eps)`` (Keras/TF, MXNet, optax's default ``eps_in_sqrt=True``).
    * ``velocity`` with momentum: ``lr_outside``: ``b = mu*b + q; p -= lr*b`` (PyTorch,
      optax); ``lr_inside``: ``b = mu*b + lr*q; p -= b`` (Keras, MXNet's centred update).
    * ``initial_scale`` (hyperparameter): the starting value of ``v`` (0 almost everywhere;
      TF1's RMSPropOptimizer started at 1).
    """

    family = "rmsprop"
    defaults: ClassVar[dict[str, Any]] = {
        "lr": 0.01,
        "rho": 0.99,
        "eps": 1e-8,
        "momentum": 0.0,
        "centered": False,
        "weight_decay": 0.0,
        "initial_scale": 0.0,
    }
    variants: ClassVar[dict[str, tuple[str, ...]]] = {
        "epsilon": ("outside", "inside"),
        "velocity": ("lr_outside", "lr_inside"),
        "weight_decay": WEIGHT_DECAY_MODES,
    }

    bounds: ClassVar[dict[str, str]] = {
        "rho": "in [0, 1)", "momentum": "in [0, 1)", "initial_scale": ">= 0",
    }  # fmt: skip

    def state_buffers(self) -> tuple[str, ...]:
        out = ["v"]
        if self.hyper["centered"]:
            out.append("gbar")
        if self.hyper["momentum"]:
            out.append("momentum")
        return tuple(out)

    def _init_tensor(self, p: Array) -> dict[str, Array]:
        st = super()._init_tensor(p)
        st["v"] = np.full(p.shape, self.hyper["initial_scale"], dtype=np.float64)
        return st

    def _direction(
        self, name: str, p: Array, g: Array, st: dict[str, Array], t: int, lr: float, ref: Ref
    ) -> tuple[Array, dict[str, Array]]:
        rho, eps, mu = self.hyper["rho"], self.hyper["eps"], self.hyper["momentum"]
        v = rho * st["v"] + (1.0 - rho) * g * g
        new = {"v": v}
        w = v
        cond = None
        if self.hyper["centered"]:
            new["gbar"] = rho * st["gbar"] + (1.0 - rho) * g
            if ref is None:
                w = v - new["gbar"] ** 2
            else:
                # magnitude pass: the denominator is evaluated on values; the subtraction
                # v - gbar^2 can cancel, which multiplies its rounding by (v + gbar^2)/w
                gv = ref[1]
                gbar_val = rho * ref[2]["gbar"] + (1.0 - rho) * gv
                w = v - gbar_val**2
                cond = (v + gbar_val**2) / np.maximum(w, np.finfo(np.float64).tiny)
        inside = self.variant["epsilon"] == "inside"
        den = np.sqrt(w + eps) if inside else np.sqrt(w) + eps
        q = g / den if cond is None else g / den * cond
        if mu:
            if self.variant["velocity"] == "lr_inside":
                b = mu * st["momentum"] + lr * q
                d = b
            else:
                b = mu * st["momentum"] + q
                d = lr * b
            new["momentum"] = b
        else:
            d = lr * q
        return d, new

    def horizon(self) -> float:
        return 1.0 / (1.0 - max(self.hyper["rho"], self.hyper["momentum"]))

    def conditioning(self) -> float:
        rho = self.hyper["rho"]
        return rho / (1.0 - rho)


# ------------------------------------------------------------------------------------------------
# Adagrad
# ------------------------------------------------------------------------------------------------


class Adagrad(Rule):
    """Adagrad: ``s = s + g^2``, ``p -= lr_t * g / den`` with ``lr_t = lr/(1 + (t-1)*lr_decay)``.

    Variants: ``epsilon=outside`` (``den = sqrt(s) + eps``: PyTorch, MXNet) or ``inside``
    (``den = sqrt(s + eps)``: Keras, optax). ``initial_accumulator`` (hyperparameter) is the
    starting ``s`` (PyTorch 0, Keras and optax 0.1, MXNet 0). ``weight_decay=l2`` adds ``wd*p``
    to the gradient before it is accumulated (PyTorch); ``decoupled_lr`` subtracts
    ``lr*wd*p`` outside the accumulator (MXNet's AdaGrad, Keras).
    """

    family = "adagrad"
    defaults: ClassVar[dict[str, Any]] = {
        "lr": 0.01,
        "eps": 1e-10,
        "initial_accumulator": 0.0,
        "lr_decay": 0.0,
        "weight_decay": 0.0,
    }
    variants: ClassVar[dict[str, tuple[str, ...]]] = {
        "epsilon": ("outside", "inside"),
        "weight_decay": WEIGHT_DECAY_MODES,
    }

    bounds: ClassVar[dict[str, str]] = {"initial_accumulator": ">= 0", "lr_decay": ">= 0"}

    def state_buffers(self) -> tuple[str, ...]:
        return ("sum",)

    def _init_tensor(self, p: Array) -> dict[str, Array]:
        return {"sum": np.full(p.shape, self.hyper["initial_accumulator"], dtype=np.float64)}

    def _direction(
        self, name: str, p: Array, g: Array, st: dict[str, Array], t: int, lr: float, ref: Ref
    ) -> tuple[Array, dict[str, Array]]:
        s = st["sum"] + g * g
        eps = self.hyper["eps"]
        den = np.sqrt(s + eps) if self.variant["epsilon"] == "inside" else np.sqrt(s) + eps
        lr_t = lr / (1.0 + (t - 1) * self.hyper["lr_decay"])
        return lr_t * g / den, {"sum": s}

    def horizon(self) -> float:
        return math.inf

    def conditioning(self) -> float:
        return 0.0


# ------------------------------------------------------------------------------------------------
# Trust-ratio rules: LAMB and LARS (per-tensor norms)
# ------------------------------------------------------------------------------------------------


#: how a norm's sum of squares is accumulated (the bound's allowance depends on it)
REDUCTIONS = ("pairwise", "sequential")


def norm_roundings(size: int, reduction: str = "pairwise") -> float:
    """Roundings (relative error in units of u) of a trust ratio built from two norms over
    ``size`` elements: ``2*(ceil(log2 n) + 2)`` for a pairwise or blocked sum (NumPy, XLA,
    PyTorch), ``n + 4`` for a sequential fp32 accumulation (the worst case of a left-to-right
    sum of positive terms)."""
    if reduction not in REDUCTIONS:
        raise ConfigError(f"reduction {reduction!r}: choose one of {', '.join(REDUCTIONS)}")
    if reduction == "sequential":
        return float(size + 4)
    return 2.0 * (math.ceil(math.log2(max(size, 2))) + 2)


def _norm(x: Array) -> float:
    return float(np.sqrt(np.sum(x * x)))


def _safe_ratio(num: float, den: float, ratio: float) -> float:
    """The trust ratio, or 1 where either norm is zero (optax, MXNet)."""
    return ratio if num > 0 and den > 0 else 1.0


class LAMB(Rule):
    """LAMB (You et al. 2019): Adam's direction, then a per-tensor trust ratio.

    ``u = m^/(sqrt(v^) + eps)`` (+ ``wd*p`` when ``weight_decay=in_trust_ratio``: optax,
    MXNet), ``r = ||p|| / ||u||`` (1 where a norm is zero; MXNet clips ``||p||`` to
    ``[lower_bound, upper_bound]`` when set), ``p -= lr * r * u``. ``weight_decay=decoupled_lr``
    applies ``p -= lr*wd*p`` outside the ratio. ``bias_correction=off`` drops Adam's
    corrections (MXNet's option).
    """

    family = "lamb"
    defaults: ClassVar[dict[str, Any]] = {
        "lr": 0.001,
        "beta1": 0.9,
        "beta2": 0.999,
        "eps": 1e-6,
        "weight_decay": 0.0,
        "lower_bound": 0.0,
        "upper_bound": 0.0,
    }
    variants: ClassVar[dict[str, tuple[str, ...]]] = {
        "weight_decay": ("in_trust_ratio", "decoupled_lr"),
        "bias_correction": ("on", "off"),
        "epsilon": ("outside", "hat"),
    }

    bounds: ClassVar[dict[str, str]] = {
        "beta1": "in [0, 1)", "beta2": "in [0, 1)",
        "lower_bound": ">= 0 (0 means no bound)", "upper_bound": ">= 0 (0 means no bound)",
    }  # fmt: skip

    def state_buffers(self) -> tuple[str, ...]:
        return ("m", "v")

    def _direction(
        self, name: str, p: Array, g: Array, st: dict[str, Array], t: int, lr: float, ref: Ref
    ) -> tuple[Array, dict[str, Array]]:
        b1, b2, eps = self.hyper["beta1"], self.hyper["beta2"], self.hyper["eps"]
        m = b1 * st["m"] + (1.0 - b1) * g
        v = b2 * st["v"] + (1.0 - b2) * g * g
        if self.variant["bias_correction"] == "on":
            bc1, bc2 = 1.0 - b1**t, 1.0 - b2**t
        else:
            bc1 = bc2 = 1.0
        if self.variant["epsilon"] == "hat":
            eps = eps / math.sqrt(bc2)
        u = (m / bc1) / (np.sqrt(v / bc2) + eps)
        wd = self.hyper["weight_decay"]
        if wd and self.variant["weight_decay"] == "in_trust_ratio":
            u = u + wd * p
        if ref is None:
            ratio = self._ratio(p, u)
        else:  # the ratio of the value computation
            pv, gv, sv = ref
            mv = b1 * sv["m"] + (1.0 - b1) * gv
            vv = b2 * sv["v"] + (1.0 - b2) * gv * gv
            uv = (mv / bc1) / (np.sqrt(vv / bc2) + eps)
            if wd and self.variant["weight_decay"] == "in_trust_ratio":
                uv = uv + wd * pv
            ratio = self._ratio(pv, uv)
        return lr * ratio * u, {"m": m, "v": v}

    def _ratio(self, p: Array, u: Array) -> float:
        pn, un = _norm(p), _norm(u)
        lo, hi = self.hyper["lower_bound"], self.hyper["upper_bound"]
        if lo:
            pn = max(pn, lo)
        if hi:
            pn = min(pn, hi)
        return _safe_ratio(pn, un, pn / un if un else 1.0)

    def _weight_decay_mode(self) -> str:
        mode = self.variant["weight_decay"]
        return "none" if mode == "in_trust_ratio" else mode

    def traffic(self) -> Traffic:
        # pass 1: read p, g, m, v; write m, v; accumulate ||p||, ||u||.
        # pass 2: recompute u from p, m, v; write p.
        return Traffic(("param", "grad", "m", "v", "param", "m", "v"), ("param", "m", "v"))

    def horizon(self) -> float:
        return 1.0 / (1.0 - max(self.hyper["beta1"], self.hyper["beta2"]))

    def conditioning(self) -> float:
        b1, b2 = self.hyper["beta1"], self.hyper["beta2"]
        return b1 / (1.0 - b1) + b2 / (1.0 - b2)

    def reduction_roundings(self, size: int, reduction: str = "pairwise") -> float:
        return norm_roundings(size, reduction)


class LARS(Rule):
    """LARS (You et al. 2017): SGD with momentum and a per-tensor trust ratio.

    ``u = g + wd*p``; ``r = trust_coefficient * ||p|| / den`` (1 where a norm is zero) with
    ``den = ||u|| + eps`` (``denominator=norm_of_sum``: optax) or
    ``den = ||g|| + wd*||p|| + eps`` (``sum_of_norms``: the paper, MXNet); then momentum with
    the learning rate inside the velocity: ``v = mu*v + lr*r*u; p -= v`` (Nesterov:
    ``p -= mu*v + lr*r*u``). ``exclude=bias_gamma_beta``: tensors whose name ends in ``bias``,
    ``gamma`` or ``beta`` get ratio 1 and no weight decay (MXNet 1.9's LARS decides this by
    parameter name: ratio 1 for those suffixes, weight decay only for names ending in
    ``_weight``).
    """

    family = "lars"
    defaults: ClassVar[dict[str, Any]] = {
        "lr": 0.1,
        "momentum": 0.9,
        "weight_decay": 0.0,
        "trust_coefficient": 0.001,
        "eps": 0.0,
        "nesterov": False,
    }
    variants: ClassVar[dict[str, tuple[str, ...]]] = {
        "denominator": ("norm_of_sum", "sum_of_norms"),
        "exclude": ("none", "bias_gamma_beta"),
    }

    bounds: ClassVar[dict[str, str]] = {"momentum": "in [0, 1)", "trust_coefficient": "positive"}

    def state_buffers(self) -> tuple[str, ...]:
        return ("momentum",) if self.hyper["momentum"] else ()

    def _weight_decay_mode(self) -> str:
        return "none"  # inside the trust ratio

    def _ratio(self, p: Array, g: Array, name: str) -> float:
        if self._excluded(name):
            return 1.0
        wd, eps = self.hyper["weight_decay"], self.hyper["eps"]
        pn = _norm(p)
        if self.variant["denominator"] == "norm_of_sum":
            un = _norm(g + wd * p)
        else:
            un = _norm(g) + wd * pn
        return _safe_ratio(pn, un, self.hyper["trust_coefficient"] * pn / (un + eps))

    def _excluded(self, name: str) -> bool:
        return self.variant["exclude"] == "bias_gamma_beta" and name.endswith(
            ("bias", "gamma", "beta")
        )

    def _direction(
        self, name: str, p: Array, g: Array, st: dict[str, Array], t: int, lr: float, ref: Ref
    ) -> tuple[Array, dict[str, Array]]:
        wd, mu = self.hyper["weight_decay"], self.hyper["momentum"]
        if self._excluded(name):
            wd = 0.0
        ratio = self._ratio(p, g, name) if ref is None else self._ratio(ref[0], ref[1], name)
        u = lr * ratio * (g + wd * p)
        if not mu:
            return u, {}
        b = mu * st["momentum"] + u
        d = mu * b + u if self.hyper["nesterov"] else b
        return d, {"momentum": b}

    def traffic(self) -> Traffic:
        s = self.state_buffers()
        # pass 1: norms of p and g; pass 2: the update
        return Traffic(("param", "grad", "param", "grad", *s), ("param", *s))

    def horizon(self) -> float:
        mu = self.hyper["momentum"]
        return 1.0 / (1.0 - mu) if mu else 0.0

    def conditioning(self) -> float:
        return 0.0

    def reduction_roundings(self, size: int, reduction: str = "pairwise") -> float:
        return norm_roundings(size, reduction)


FAMILIES: dict[str, type[Rule]] = {
    cls.family: cls for cls in (SGD, Adam, RMSprop, Adagrad, LAMB, LARS)
}


def make(family: str, variant: Mapping[str, str] | None = None, **hyper: Any) -> Rule:
    """The rule ``family`` (``sgd``, ``adam``, ``rmsprop``, ``adagrad``, ``lamb``, ``lars``)."""
    try:
        cls = FAMILIES[family]
    except KeyError:
        raise ConfigError(
            f"optimizer {family!r}: unknown; choose one of {', '.join(FAMILIES)}"
        ) from None
    return cls(variant, **hyper)


def all_variants(rule: Rule) -> list[Rule]:
    """``rule``'s hyperparameters under every combination of its family's variant flags."""
    import itertools

    keys = sorted(rule.variants)
    return [
        rule.with_variant(**dict(zip(keys, combo, strict=True)))
        for combo in itertools.product(*(rule.variants[k] for k in keys))
    ]
