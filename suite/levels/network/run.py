"""How the network benchmarks run in the worker (called by their ``run``): build, check against
onnxruntime, time, verify; the digits time-to-accuracy; this framework's part of the
cross-framework agreement."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import onnx

from suite import metrics as M
from suite.adapters.base import Adapter, NetworkOptions
from suite.benchmark import Context, Result
from suite.errors import AdapterError, UnsupportedError
from suite.levels.network import agreement as A
from suite.levels.network import workload as B
from suite.measure import MeasureConfig, measure, timer_check
from suite.onnx import zoo
from suite.onnx.importer import (
    first_output_only,
    import_graph,
    inference_form,
    unsupported_op,
)
from suite.onnx.numpy_eval import NumpyGraph, cross_entropy

# Logit agreement with onnxruntime: a network chains hundreds of ops, so the operator
# tolerances are scaled up; mixed precision (bf16/fp16 autocast) gets the dtype's tolerance.
NETWORK_TOLERANCE_SCALE = 10.0
CHECK_BATCH = 4  # samples fed to onnxruntime and the framework for the logit check


def _has_dropout(model: Any) -> bool:
    """Whether the graph has a Dropout: its training loss is noisy step to step, so the network
    level judges training by the loss in inference mode, with the loss-falls bound (0.999)."""
    return any(n.op_type == "Dropout" for n in model.graph.node)


def _fed_dtype(model: Any, spec: Any) -> Any:
    """What onnxruntime is fed: float32, or an integer input's own type (uint8 pixels, int32
    ids); the frameworks take integers as int64 and the graph's Cast or Gather reads them the
    same."""
    if spec.kind != "int64":
        return np.float32
    elem = next(i for i in model.graph.input if i.name == spec.name).type.tensor_type.elem_type
    return onnx.helper.tensor_dtype_to_np_dtype(elem)


def ort_logits(model: Any, x: np.ndarray, spec: Any) -> np.ndarray:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 0
    model, _ = inference_form(model)  # logits in inference mode, as the framework's forward
    model, _ = first_output_only(model)  # the graph to the logits, as every framework runs it
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feed = {spec.name: x.astype(_fed_dtype(model, spec))}
    out: np.ndarray = sess.run(None, feed)[0]
    return out.astype(np.float64)


def _to_device(adapter: Adapter, x: np.ndarray, spec: Any) -> Any:
    if spec.kind == "int64":
        return adapter.labels_from_numpy(x)
    return adapter.from_numpy(x, "fp32")


def first_unmapped(model: Any, onnx_ops: frozenset[str], batch: int = 1) -> Any:
    """The first step of the imported plan (after constant folding, for inputs of ``batch``
    samples), in topological order, whose op is not in ``onnx_ops``; None when an adapter with
    these kernels runs the whole graph. It has the node's ``op_type`` and ``name``."""
    graph = import_graph(model)
    return graph.first_unmapped(onnx_ops, graph.input_shape(batch))


def unmapped_reason(node: Any, adapter_name: str) -> str:
    return unsupported_op(node.op_type, node.name or "?", adapter_name)


def _check_ops(adapter: Adapter, model: Any, batch: int = 1) -> None:
    if "network" not in adapter.words:
        raise UnsupportedError(
            f"{adapter.name} does not implement the network words"
            + adapter.missing_because(["network"])
        )
    node = first_unmapped(model, adapter.onnx_ops, batch)
    if node is not None:
        raise UnsupportedError(unmapped_reason(node, adapter.name))


# The learning rate of a user's model trained without an lr (a config's size gives one): one
# step below the largest of these under which a freshly built network's loss is finite at
# every one of LR_PROBE_STEPS steps on the task's batch and falls (see lr_range_check), then
# confirmed for as long as the timed run will train. An unknown network has no tuned rate; one
# that is too large diverges to NaN within a few steps, one that is too small measures a
# network that does not learn, and one that passes the short probe may still diverge later:
# MobileNetV3-Small (torchvision, its batch norms folded into the convolutions by an
# inference-mode export) at batch 3 falls for 6 steps at 0.01, 0.003 and 0.001 and is NaN at
# steps 9, 13 and 27 (PyTorch and JAX alike), once the batch is learnt (loss 0.005 at 0.001);
# 3e-4 trains 100 steps. Down to 1e-5: a network without normalisation may train only there
# (MNASNet 0.5 at batch 3: 1e-5).
LR_CANDIDATES = (0.1, 0.03, 0.01, 0.003, 0.001, 3e-4, 1e-4, 3e-5, 1e-5)
LR_PROBE_STEPS = 6
#: the confirmation of the chosen rate trains at least this many steps, and at least 1.5x the
#: timed run's time budget (its warm-up included), so that it covers the steps the run takes
LR_CONFIRM_MIN_STEPS = 30
LR_CONFIRM_BUDGET_FACTOR = 1.5


def lr_range_check(
    adapter: Adapter, w: B.Workload, dtype: str, options: NetworkOptions, x: np.ndarray,
    y: np.ndarray, cfg: MeasureConfig, give_an_lr: str | None = None,
) -> tuple[float, list[dict[str, Any]]]:  # fmt: skip
    """A learning rate of :data:`LR_CANDIDATES` under which a fresh network trains on the
    batch for as long as the timed run will (``cfg``'s time budget).

    The probe: every loss of :data:`LR_PROBE_STEPS` steps finite, and the loss falling (with
    dropout, the inference-mode loss on the batch after the steps below the one before;
    otherwise the mean of the last two training losses below the first). The largest such rate
    is the edge of stability, so the next smaller candidate is chosen when it trains too (a
    margin of about 3x); otherwise the largest. The confirmation: a fresh network trains at the
    chosen rate for at least :data:`LR_CONFIRM_MIN_STEPS` steps and 1.5x the time budget with
    every loss finite, the last below the first, and the inference-mode loss on the batch not
    above the one before (the record's own checks); a rate that fails it gives way to the next
    smaller candidate, confirmed the same way. Returns the rate and what was tried (recorded);
    when none trains, the error ends with ``give_an_lr`` (how to give one: the network level's
    config size by default)."""
    give_an_lr = give_an_lr or _GIVE_AN_LR
    xt, yt = _to_device(adapter, x, w.input), adapter.labels_from_numpy(y)
    dropout = _has_dropout(w.model)
    tried: list[dict[str, Any]] = []
    largest: float | None = None
    chosen: float | None = None
    for lr in LR_CANDIDATES:
        net = adapter.build_network(w.model, dtype, replace(options, lr=lr))
        before = cross_entropy(adapter.to_numpy(adapter.forward(net, xt)), y)
        losses = [
            float(adapter.to_numpy(adapter.train_step(net, xt, yt))) for _ in range(LR_PROBE_STEPS)
        ]
        finite = bool(np.all(np.isfinite(losses)))
        if dropout:
            after = cross_entropy(adapter.to_numpy(adapter.forward(net, xt)), y)
            falls = finite and bool(np.isfinite(after)) and after < before
        else:
            falls = finite and float(np.mean(losses[-2:])) < losses[0]
        tried.append({"lr": lr, "losses": [v if np.isfinite(v) else None for v in losses],
                      "finite": finite, "falls": falls})  # fmt: skip
        if largest is not None:  # the margin's probe: this rate if it trains, else the largest
            chosen = lr if falls else largest
            break
        if falls:
            largest = lr
    chosen = chosen if chosen is not None else largest  # the smallest was the largest to train
    if chosen is None:
        raise RuntimeError(
            f"no learning rate of {list(LR_CANDIDATES)} made this network's loss fall in "
            f"{LR_PROBE_STEPS} steps (first losses per rate: "
            f"{[(t['lr'], t['losses'][:2]) for t in tried]}); {give_an_lr}"
        )
    for lr in LR_CANDIDATES[LR_CANDIDATES.index(chosen) :]:
        confirmed = _confirm_lr(adapter, w, dtype, replace(options, lr=lr), xt, yt, y, cfg)
        entry = next((t for t in tried if t["lr"] == lr), None)
        if entry is None:
            entry = {"lr": lr}
            tried.append(entry)
        entry["confirmed"] = confirmed
        if confirmed["trains"]:
            return lr, tried
    last = tried[-1]["confirmed"]
    why = (
        f"non-finite from step {last['non_finite_step']}"
        if last["non_finite_step"] is not None
        else f"training loss {last['first_loss']:.4g} -> {last['last_loss']:.4g}, inference-mode "
        f"loss {last['inference_loss_before']:.4g} -> {last['inference_loss_after']}"
    )
    raise RuntimeError(
        f"every learning rate from {chosen} down to {LR_CANDIDATES[-1]} fell for "
        f"{LR_PROBE_STEPS} steps but did not train for the timed run's length (at "
        f"{LR_CANDIDATES[-1]}: {last['steps']} steps, {why}); {give_an_lr}"
    )


_GIVE_AN_LR = (
    "give one in a --config file: "
    '[network.train] sizes = [{ network = "onnx", model = "FILE", batch = B, lr = 0.001 }]'
)


def _confirm_lr(
    adapter: Adapter, w: B.Workload, dtype: str, options: NetworkOptions, xt: Any, yt: Any,
    y: np.ndarray, cfg: MeasureConfig,
) -> dict[str, Any]:  # fmt: skip
    """Train a fresh network at ``options.lr`` for the confirmation's length (see
    :func:`lr_range_check`); stop at the first non-finite loss. It trains when every loss is
    finite, the last below the first, and the inference-mode loss on the batch after it not
    above the one before, as the record's checks will hold it: with batch norms the running
    statistics lag behind weights that still change fast (a GoogLeNet exported in training
    mode, at batch 4: 2.3 before, 8.7 after 30 steps at 0.003 while its training loss was
    0.002; 0.007 once the statistics caught up with the weights held still), and a rate that
    ends there gives way."""
    net = adapter.build_network(w.model, dtype, options)
    eval_before = cross_entropy(adapter.to_numpy(adapter.forward(net, xt)), y)
    budget = LR_CONFIRM_BUDGET_FACTOR * max(cfg.time_budget_s, cfg.min_time_s)
    losses: list[float] = []
    t0 = time.perf_counter()
    while len(losses) < LR_CONFIRM_MIN_STEPS or time.perf_counter() - t0 < budget:
        losses.append(float(adapter.to_numpy(adapter.train_step(net, xt, yt))))
        if not math.isfinite(losses[-1]):
            break
    bad = None if math.isfinite(losses[-1]) else len(losses) - 1  # the loop stops at the first
    seconds = round(time.perf_counter() - t0, 3)
    eval_after = (
        cross_entropy(adapter.to_numpy(adapter.forward(net, xt)), y) if bad is None else None
    )
    # the record's own bound: with dropout the loss-falls check (0.999), else the inference one
    dropout = _has_dropout(w.model)
    bound = 0.999 if dropout else INFERENCE_LOSS_TOLERANCE
    inference_holds = (
        eval_after is not None and math.isfinite(eval_after) and eval_after <= bound * eval_before
    )
    return {
        "steps": len(losses),
        "seconds": seconds,
        "non_finite_step": bad,
        "first_loss": losses[0],
        "last_loss": losses[-1] if bad is None else None,
        "inference_loss_before": eval_before,
        "inference_loss_after": _finite_or_none(eval_after) if eval_after is not None else None,
        "trains": bad is None and losses[-1] < losses[0] and inference_holds,
    }


def _agreement(
    adapter: Adapter, net: Any, w: B.Workload, x: np.ndarray, tol: M.Tolerance
) -> list[M.Check]:
    # a model exported with a fixed batch is checked at that batch (the whole batch it runs)
    xs = x if B.fixed_batch(w.model) is not None else x[:CHECK_BATCH]
    ref = ort_logits(w.model, xs, w.input)
    got = adapter.to_numpy(adapter.forward(net, _to_device(adapter, xs, w.input)))
    return M.compare("logits", got, ref, tol, against="onnxruntime")


def _mlp_gradcheck(adapter: Adapter, w: B.Workload, seed: int) -> list[M.Check]:
    """Gradients of the first SGD step (momentum buffer empty: delta = -lr * grad) against
    central finite differences of the float64 NumPy loss, in random directions per tensor."""
    lr = 1.0  # only the first update is read: a large step keeps (before - after) / lr precise in fp32
    net = adapter.build_network(
        w.model, "fp32", NetworkOptions(lr=lr, momentum=0.0, channels_last=False)
    )
    rng = np.random.default_rng(seed + 7)
    x, y = B.synthetic_batch(w.input, 8, w.classes, rng)
    before = adapter.network_parameters(net)
    adapter.train_step(net, _to_device(adapter, x, w.input), adapter.labels_from_numpy(y))
    after = adapter.network_parameters(net)
    graph = NumpyGraph(w.model)
    checks = []
    for name in sorted(before):
        grad = (before[name] - after[name]) / lr

        def loss(z: np.ndarray, name: str = name) -> np.ndarray:
            return np.asarray(cross_entropy(graph(x, params={**before, name: z}), y))

        err = M.directional_gradcheck(
            loss, before[name], np.ones(()), grad, n_directions=2, h=1e-5, seed=seed
        )
        checks.append(M.Check(f"grad[{name}].central_fd_directional_rel_error", err, 1e-3))
    return checks


# fp16 dynamic loss scaling: steps allowed to settle the scale before the warm-up, and the share
# of measured steps that may still be skipped. One skip is always allowed: it is the scaler
# doing its job (a short measurement, ten steps on a slow machine, would otherwise fail on one
# skip where a long one passes); more than a tenth of the steps is a network that does not train.
LOSS_SCALE_SETTLE_MAX_STEPS = 64
LOSS_SCALE_SKIPPED_TOLERANCE = 0.1


def _settle_loss_scale(
    adapter: Adapter, net: Any, train_step: Callable[[], Any]
) -> dict[str, Any] | None:
    """Train until fp16's dynamic loss scale has settled (two steps in a row keep it).

    The scale starts at 2**16 and halves on every step whose gradients overflow, and that
    step's update is skipped. How many steps that takes depends on the network's gradients:
    two when nothing overflows (the quick ResNets since issue 20's zoo fix; before it the quick
    ResNet-101 needed 11-14), more for a network whose gradients do (docs/studies/
    mixed-precision-stability.md has the maxima per network). Timing those steps would time
    updates that never happen and judge a network that never trained, so they run here,
    before the warm-up. None when the network has no loss scale."""
    scale = adapter.loss_scale(net)
    if scale is None:
        return None
    initial, kept, steps = scale, 0, 0
    while kept < 2 and steps < LOSS_SCALE_SETTLE_MAX_STEPS:
        adapter.to_numpy(train_step())  # waits for the step
        steps += 1
        new = adapter.loss_scale(net)
        assert new is not None
        kept = kept + 1 if new >= scale else 0
        scale = new
    return {"initial": initial, "settled": scale, "settle_steps": steps, "settled_ok": kept >= 2}


def finite_losses_check(losses: np.ndarray, settle_steps: int = 0) -> M.Check:
    """Every training step's loss is finite; the error is how many were not, and the detail
    says which step was the first (counted from the network's first training step, the
    loss-scale settling included), so a failed record explains itself."""
    bad = np.flatnonzero(~np.isfinite(losses))
    first = int(bad[0]) if bad.size else None
    detail: dict[str, Any] = {"steps": int(losses.size), "first_nonfinite_step": first}
    if settle_steps:
        detail["loss_scale_settle_steps"] = settle_steps
    if first is not None:
        detail["last_finite_loss"] = float(losses[first - 1]) if first > 0 else None
    return M.Check("loss_finite_every_step", float(bad.size), 0.0, detail=detail)


# The inference-mode loss on the training batch after training (batch norm with its running
# statistics, dropout off) over the same before training. The networks train on that one batch,
# so it falls; the running statistics lag behind the weights (momentum 0.9), which a network
# whose weights blow up shows here first (the quick ResNet-101 before the zoo's residual gain:
# 1.5e8 after one fp32 step, NaN in fp16, while its training-mode loss still fell).
INFERENCE_LOSS_TOLERANCE = 1.0


def _finite_or_none(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def _skipped_steps_check(
    adapter: Adapter, net: Any, scaling: dict[str, Any], steps: int
) -> M.Check:
    """The share of measured steps (warm-up and timed) whose update the loss scaler skipped,
    from how far the scale fell: each skip halves it (the scale can also double, after 2000
    good steps in a row, which a measurement this short does not reach)."""
    after = adapter.loss_scale(net)
    assert after is not None
    skipped = max(0, round(math.log2(scaling["settled"] / after))) if after > 0 else steps
    scaling.update(after_measurement=after, skipped_measured_steps=skipped)
    return M.Check(
        "fp16_loss_scale.skipped_share_of_measured_steps",
        skipped / max(steps, 1),
        max(LOSS_SCALE_SKIPPED_TOLERANCE, 1 / max(steps, 1)),
        detail={"skipped": skipped, "measured_steps": steps, "scale_settled": scaling["settled"],
                "scale_after": after},
    )  # fmt: skip


def run_timed(ctx: Context, w: B.Workload, training: bool) -> Result:
    """A ``train`` (``training``) or ``infer`` task: build, check, time, verify."""
    task, adapter, params, dtype, timed_region = (
        ctx.task,
        ctx.adapter,
        ctx.params,
        ctx.dtype,
        ctx.timed_region,
    )
    _check_ops(adapter, w.model, params["batch"])
    untrainable = B.untrainable_output(w.classes) if training else None
    if untrainable:
        raise UnsupportedError(untrainable)
    if training and not import_graph(w.model).params:
        raise UnsupportedError(
            "the model has no trainable weights (no float initializer of more than one "
            "element): it is inference-only; measure it with --benchmark infer"
        )
    softmax_left_out = None
    if training and w.network == B.USER_MODEL:
        w, softmax_left_out = B.without_final_softmax(w)
    options = NetworkOptions(
        lr=params["lr"] if params["lr"] is not None else 0.0,
        channels_last=params["channels_last"],
        compile=params["compile"],
        amp=dtype in ("bf16", "fp16"),
        seed=task["seed"],
    )
    rng = np.random.default_rng(task["seed"])
    x, y = B.synthetic_batch(w.input, params["batch"], w.classes, rng)
    tol = M.tolerance_for(dtype, NETWORK_TOLERANCE_SCALE)
    # Whole networks need a longer warm-up than single operators (allocator growth, autotuning,
    # lazy compilation); the task's own settings still win.
    cfg = MeasureConfig(**{"warmup_iters": 5, "warmup_s": 0.5, **task["measure"]})
    lr_check: dict[str, Any] | None = None
    if training and params["lr"] is None:  # a user's model without an lr: the range check picks one
        lr, tried = lr_range_check(adapter, w, dtype, options, x, y, cfg)
        options = replace(options, lr=lr)
        lr_check = {"chosen": lr, "tried": tried, "steps": LR_PROBE_STEPS}

    net = adapter.build_network(w.model, dtype, options)
    not_applied = adapter.network_options_not_applied(options)
    if len(w.input.shape) != 3 or w.input.kind != "float":  # a layout only an image has
        not_applied.pop("channels_last", None)
    checks = _agreement(adapter, net, w, x, tol)
    if w.network == "mlp":
        checks += _mlp_gradcheck(adapter, w, task["seed"])

    xt = _to_device(adapter, x, w.input)
    batch = params["batch"]

    def computed(out: Any) -> Any:  # the timer check's copies alone copy a computed tensor
        return adapter.from_numpy(adapter.to_numpy(out), "fp32")

    adapter.reset_peak_memory()
    entries: list[dict[str, Any]]
    if training:
        yt = adapter.labels_from_numpy(y)
        eval_before = cross_entropy(adapter.to_numpy(adapter.forward(net, xt)), y)
        losses: list[Any] = []  # every training step's, the loss-scale settling included

        def step() -> Any:  # returns the loss: a lazy framework's time() waits on it
            losses.append(adapter.train_step(net, xt, yt))
            return losses[-1]

        scaling = _settle_loss_scale(adapter, net, step)
        settle_steps = len(losses)
        m = measure(lambda n: adapter.time(step, n), cfg, region=timed_region)
        timer = timer_check(
            lambda n: adapter.time(step, n), step, adapter.to_numpy, m.inner, ready=computed
        )
        values = np.array([float(adapter.to_numpy(v)) for v in losses])
        checks.append(finite_losses_check(values, settle_steps))
        if scaling is not None:
            checks.append(_skipped_steps_check(adapter, net, scaling, len(values) - settle_steps))
        # The loss must fall: the same batch is seen every step, so SGD drives it down. With
        # dropout the per-step loss is noisy, so it is judged in inference mode on the training
        # batch; otherwise the first step's training loss is compared with the mean of the last
        # five (the inference-mode loss has its own check below).
        eval_after = cross_entropy(adapter.to_numpy(adapter.forward(net, xt)), y)
        if _has_dropout(w.model):
            name, before, after = "loss_falls.eval_loss_after_over_before", eval_before, eval_after
        else:
            name, before, after = "loss_falls.last5_over_first_step", values[0], values[-5:].mean()
            ok = eval_before > 0 and np.isfinite(eval_after)
            checks.append(
                M.Check(
                    "inference_loss.after_over_before_training",
                    float(eval_after / eval_before) if ok else float("inf"),
                    INFERENCE_LOSS_TOLERANCE,
                    detail={"before": eval_before, "after": _finite_or_none(eval_after)},
                )
            )
        ok = before > 0 and np.isfinite(after)
        checks.append(M.Check(name, float(after / before) if ok else float("inf"), 0.999))
        first, last = float(values[0]), float(values[-1])
        entries = [
            M.STEP_TIME.entry(m.samples),
            M.rate_entry(M.THROUGHPUT, m.samples, batch),
        ]
        extra = {
            "loss_first_step": first,
            "loss_last_step": last,
            "eval_loss_before": eval_before,
            "eval_loss_after": eval_after,
            "steps": len(values),
            "loss_scale_settle_steps": settle_steps,
            **({"trained_without_final_softmax": softmax_left_out} if softmax_left_out else {}),
            **({"loss_scaling": scaling} if scaling is not None else {}),
        }
    else:
        outs: list[Any] = []

        def infer() -> Any:  # returns the logits: a lazy framework's time() waits on them
            outs.append(adapter.forward(net, xt))
            if len(outs) > 2:
                outs.pop(0)
            return outs[-1]

        m = measure(lambda n: adapter.time(infer, n), cfg, region=timed_region)
        timer = timer_check(
            lambda n: adapter.time(infer, n), infer, adapter.to_numpy, m.inner, ready=computed
        )
        final = adapter.to_numpy(outs[-1])
        bad_logits = int(np.size(final) - np.isfinite(final).sum())
        checks.append(M.Check("logits_finite", 0.0 if bad_logits == 0 else float("inf"), 0.0))
        entries = [M.LATENCY.entry(m.samples), M.rate_entry(M.THROUGHPUT, m.samples, batch)]
        extra = {}
    if timer is not None:
        checks.append(timer)
    peak = adapter.peak_memory_bytes()
    if peak is not None:
        entries.append(M.PEAK_MEMORY.entry(value=peak / 1e6))
    return Result(
        metrics=entries,
        checks=checks,
        measurement=m.to_dict(cfg),
        work={
            "samples_per_step": batch,
            "network": w.network,
            "classes": w.classes,
            **extra,
            **({"lr_range_check": lr_check} if lr_check is not None else {}),
            **({"options_not_applied": not_applied} if not_applied else {}),
            **w.said(),
        },
    )


def run_agreement(ctx: Context, w: B.Workload) -> Result:
    """This framework's part of the cross-framework agreement: logits and one training step
    on the shared weights and batch, saved for the host's matrix (see agreement.py), and
    checked here against onnxruntime (logits) and float64 NumPy (the first update)."""
    task, adapter, params = ctx.task, ctx.adapter, ctx.params
    _check_ops(adapter, w.model, params["batch"])
    if task["dtype"] != "fp32":
        raise UnsupportedError("agreement compares fp32 results; run it with --dtype fp32")
    lr = params["lr"]
    if w.network == B.USER_MODEL:  # a user's model: trained as ``train`` trains it
        untrainable = B.untrainable_output(w.classes)
        if untrainable:
            raise UnsupportedError(untrainable)
        w, _ = B.without_final_softmax(w)
        # the first update is compared relative to its own size: any stable rate shows it
        lr = A.USER_MODEL_LR if lr is None else lr
    model = A.without_dropout(w.model)
    options = NetworkOptions(lr=lr, channels_last=False, seed=task["seed"])
    rng = np.random.default_rng(task["seed"])
    x, y = B.synthetic_batch(w.input, params["batch"], w.classes, rng)
    t0 = time.perf_counter()
    net = adapter.build_network(model, "fp32", options)
    xt = _to_device(adapter, x, w.input)
    logits = adapter.to_numpy(adapter.forward(net, xt))
    before = adapter.network_parameters(net)
    adapter.train_step(net, xt, adapter.labels_from_numpy(y))
    after = adapter.network_parameters(net)
    elapsed = time.perf_counter() - t0
    ort = ort_logits(model, x, w.input)
    ref_update = _reference_update(model, x, y, w.input, options)
    checks = M.compare("logits", logits, ort, M.tolerance_for("fp32", NETWORK_TOLERANCE_SCALE),
                       against="onnxruntime")  # fmt: skip
    if ref_update is not None:
        worst = A.update_error({n: (before[n], after[n], *ref_update[n]) for n in ref_update})
        checks.append(M.Check("update.max_rel_error_vs_numpy_fp64", worst, A.UPDATE_TOL))
    out_dir = A.artifact_dir(task["record_path"], params, task["seed"])
    out_dir.mkdir(parents=True, exist_ok=True)
    arrays = {"logits": logits, "ort_logits": ort}
    arrays.update({f"before/{k}": v for k, v in before.items()})
    arrays.update({f"after/{k}": v for k, v in after.items()})
    tmp = out_dir / f".{adapter.name}.tmp.npz"
    np.savez(tmp, **arrays)  # type: ignore[arg-type]  # (numpy stubs: allow_pickle)
    tmp.replace(out_dir / f"{adapter.name}.npz")
    bad = A.not_finite(checks)
    if bad:  # its metric cannot hold it; the arrays are written, so the matrix shows the pairs
        raise AdapterError(f"{adapter.name}: {bad}")
    return Result(
        metrics=[A.AGREEMENT_ERROR.entry(value=max(c.error for c in checks))],
        checks=checks,
        measurement={"warmup_iters": 0, "inner_repeats": 1, "samples": 1,
                     "stop_reason": "max_samples", "elapsed_s": elapsed},
        work={"network": w.network, "classes": w.classes, "artifact": str(out_dir / f"{adapter.name}.npz"),
              "point": A.point_key(params, task["seed"]), **w.said()},
    )  # fmt: skip


def _reference_update(
    model: Any, x: np.ndarray, y: np.ndarray, spec: Any, options: NetworkOptions
) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
    """The first SGD step (weights before, after) in float64 by the NumPy reference adapter, where it maps the graph."""
    from suite.adapters.numpy.adapter import NumPyAdapter

    ref = NumPyAdapter()
    ref.setup("cpu")
    if first_unmapped(model, ref.onnx_ops, len(x)) is not None:
        return None
    net = ref.build_network(model, "fp64", options)
    # the frameworks see the batch rounded to fp32; so does the reference
    x32 = x.astype(np.float32).astype(np.float64)
    xt = ref.labels_from_numpy(x) if spec.kind == "int64" else ref.from_numpy(x32, "fp64")
    before = ref.network_parameters(net)
    ref.train_step(net, xt, ref.labels_from_numpy(y))
    after = ref.network_parameters(net)
    return {k: (before[k], after[k]) for k in before}


def run_digits(ctx: Context) -> Result:
    """Train to a target test accuracy ``repeats`` times; MLPerf summary of the wall times."""
    task, adapter, p = ctx.task, ctx.adapter, ctx.params

    xtr, ytr, xte, yte = B.digits_data(task["seed"])
    net_def = zoo.get("mlp")
    arch = net_def.validate(
        {"features": 64, "hidden": p["hidden"], "layers": p["layers"], "classes": 10}
    )
    spec = net_def.input_spec(arch)
    dtype = task["dtype"]
    options = NetworkOptions(
        lr=p["lr"], momentum=0.9, channels_last=False, amp=dtype in ("bf16", "fp16")
    )
    times, epochs, accs = [], [], []
    checks: list[M.Check] = []
    xte_t = adapter.from_numpy(xte, "fp32")
    # Run -1 is an untimed warm-up (first-call costs: kernels, allocator, autocast caches);
    # runs 0..repeats-1 are the measured ones.
    for r in range(-1, p["repeats"]):
        seed = task["seed"] + max(r, 0)
        model = net_def.build(arch, seed=seed)
        _check_ops(adapter, model)
        net = adapter.build_network(model, dtype, options)
        if r == -1:
            w = B.Workload(model, spec, 10, "mlp")
            checks += _agreement(
                adapter, net, w, xte, M.tolerance_for(dtype, NETWORK_TOLERANCE_SCALE)
            )
        rng = np.random.default_rng(seed)
        batches = []  # host->device copies made before the clock starts
        for _ in range(p["max_epochs"]):
            order = rng.permutation(len(xtr))
            batches.append([
                (adapter.from_numpy(xtr[order[i : i + p["batch"]]], "fp32"),
                 adapter.labels_from_numpy(ytr[order[i : i + p["batch"]]]))
                for i in range(0, len(order), p["batch"])
            ])  # fmt: skip
        adapter.synchronize()
        t0 = time.perf_counter()
        acc, reached = 0.0, None
        for epoch in range(p["max_epochs"]):
            for xb, yb in batches[epoch]:
                adapter.train_step(net, xb, yb)
            logits = adapter.to_numpy(adapter.forward(net, xte_t))  # synchronises
            acc = float((logits.argmax(axis=1) == yte).mean())
            if acc >= p["target_accuracy"]:
                reached = epoch + 1
                break
        elapsed = time.perf_counter() - t0
        if r < 0:
            continue
        accs.append(acc)
        if reached is not None:
            times.append(elapsed)
            epochs.append(float(reached))
        checks.append(
            M.Check(
                f"run{r}.reached_target_accuracy.shortfall",
                max(0.0, p["target_accuracy"] - acc),
                0.0,
            )
        )
    if len(times) < 3:
        raise RuntimeError(
            f"digits: only {len(times)} of {p['repeats']} runs reached {p['target_accuracy']:.0%} in "
            f"{p['max_epochs']} epochs (test accuracies {[round(a, 3) for a in accs]})"
        )
    tta = M.TIME_TO_ACCURACY.entry(times)
    tta["value"] = M.mlperf_mean(times)
    return Result(
        metrics=[tta, M.EPOCHS_TO_TARGET.entry(epochs)],
        checks=checks,
        measurement={
            "warmup_iters": 0, "inner_repeats": 1, "samples": len(times), "stop_reason": "max_samples",
            "elapsed_s": float(sum(times)),
        },
        work={"test_accuracy": accs, "train_samples": len(xtr), "test_samples": len(xte),
              "summary_rule": "MLPerf: mean of the runs without the fastest and the slowest"},
    )  # fmt: skip
