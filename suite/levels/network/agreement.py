"""Cross-framework agreement: the same ONNX weights and inputs through every framework.

Frameworks live in environments of their own, so agreement is two steps:

1. **In each framework's worker** (the ``agreement`` benchmark of the network level): build the
   zoo network from its ONNX weights (dropout removed, so a training step is deterministic),
   compute the logits of a fixed batch, take one SGD-with-momentum step on it, and save the
   logits, the weights before and after the step, and onnxruntime's logits for the same batch
   to ``RUN_DIR/agreement/<point>/<framework>.npz``. The framework's own record checks its
   logits against onnxruntime and its first update against the float64 NumPy reference.
2. **On the host, after the run** (:func:`matrix_records`): for every point, every pair of
   frameworks (and onnxruntime, for the logits) gets the max relative error of the logits, of
   the updated weights, and of the update itself (the gradient step, which exposes a
   disagreement the large weights would hide), each against a tolerance. One record per point
   holds the matrix; the report draws it.

Host side: NumPy only (the arrays were written by the workers).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from suite import metrics as M
from suite.adapters.base import AGREEMENT_REFERENCE
from suite.results import finite_or_null

LOGITS_TOL = 1e-3  # fp32 logits after a whole network: the network level's max-relative tolerance
WEIGHTS_TOL = 1e-4  # updated weights, relative to their largest: the network-level fp32 tolerance
UPDATE_TOL = 1e-3  # the step itself, lr * grad: fp32 gradients through a whole network
REFERENCE = AGREEMENT_REFERENCE  # no adapter may take its name (suite/adapters/base.py)


#: the learning rate of a user's model's first SGD step (its ``lr`` unset): the zoo's own
#: base rate; the step is compared between frameworks relative to its size
USER_MODEL_LR = 0.01


def point_key(params: dict[str, Any], seed: int) -> str:
    blob = json.dumps({"params": params, "seed": seed}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def artifact_dir(record_path: str, params: dict[str, Any], seed: int) -> Path:
    """``RUN_DIR/agreement/<point>``; the worker's record path is RUN_DIR/tasks/<file>."""
    return Path(record_path).resolve().parent.parent / "agreement" / point_key(params, seed)


def without_dropout(model: Any) -> Any:
    """A copy of the ONNX model with every Dropout node removed (its consumers read its
    input), so a training step is deterministic in every framework."""
    out = type(model)()
    out.CopyFrom(model)
    graph = out.graph
    alias: dict[str, str] = {}
    keep = []
    for node in graph.node:
        if node.op_type == "Dropout":
            alias[node.output[0]] = alias.get(node.input[0], node.input[0])
            continue
        keep.append(node)
    for node in keep:
        for i, name in enumerate(node.input):
            if name in alias:
                node.input[i] = alias[name]
    for o in graph.output:
        if o.name in alias:
            raise ValueError(f"graph output {o.name} comes straight from a Dropout")
    del graph.node[:]
    graph.node.extend(keep)
    return out


def max_rel(a: np.ndarray, b: np.ndarray) -> float:
    """Symmetric max relative error: max |a - b| over the larger of max |a|, max |b|."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a64.shape != b64.shape:
        return float("inf")
    if not (np.all(np.isfinite(a64)) and np.all(np.isfinite(b64))):
        return float("inf")
    scale = max(float(np.max(np.abs(a64), initial=0.0)), float(np.max(np.abs(b64), initial=0.0)))
    diff = float(np.max(np.abs(a64 - b64), initial=0.0))
    return diff / scale if scale > 0 else diff


def load_point(directory: Path) -> dict[str, dict[str, np.ndarray]]:
    """framework -> arrays (``logits``, ``ort_logits``, ``before/<name>``, ``after/<name>``)."""
    out = {}
    for path in sorted(directory.glob("*.npz")):
        with np.load(path) as z:
            out[path.stem] = {k: z[k] for k in z.files}
    return out


def pair_errors(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, float]:
    """Logits, updated-weights and update errors between two frameworks' arrays. A parameter
    that only one of them trained (a weight the other held constant, or named otherwise) makes
    the weights and update errors infinite: both frameworks must train the same network."""
    trained_a = {k[len("after/") :] for k in a if k.startswith("after/")}
    trained_b = {k[len("after/") :] for k in b if k.startswith("after/")}
    names = sorted(trained_a & trained_b)
    unmatched = len(trained_a ^ trained_b)
    weights = [max_rel(a[f"after/{n}"], b[f"after/{n}"]) for n in names]
    updates = {
        n: (a[f"before/{n}"], a[f"after/{n}"], b[f"before/{n}"], b[f"after/{n}"]) for n in names
    }
    return {
        "logits": max_rel(a["logits"], b["logits"]),
        "weights": float("inf") if unmatched else max(weights, default=float("inf")),
        "update": float("inf") if unmatched else update_error(updates),
        "parameters_compared": float(len(names)),
        "parameters_in_one_only": float(unmatched),
    }


UPDATE_FLOOR = 1e-3
#: weights are stored in fp32: an update read back as after - before is only known to about
#: one ulp of the weight (2**-24 relative, twice: both values are rounded)
FP32_RESOLUTION = 2.0**-23


def update_error(steps: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]) -> float:
    """Max over parameters of the max relative difference of two first updates
    (after - before, per framework), with two allowances, both below what fp32 can resolve:

    * differences under one fp32 ulp of the weight itself are not counted: the updates are
      read back from fp32 weights, so a LayerNorm gain near 1.0 moved by 1e-4 carries a 1e-3
      relative error in any fp32 framework (seen: PyTorch and NumPy-fp32 agreeing to every
      digit, both 1e-3 off float64);
    * each parameter is judged against its own update size, but never less than 1e-3 of the
      network's largest: a gradient that is zero in exact arithmetic (an attention key's bias;
      softmax ignores a constant shift) is exactly 0 in one framework and 1e-12 in another."""
    if not steps:
        return float("inf")
    diffs = {}
    for name, (b0, b1, c0, c1) in steps.items():
        arrays = [np.asarray(t, np.float64) for t in (b0, b1, c0, c1)]
        if len({t.shape for t in arrays}) != 1 or not all(np.all(np.isfinite(t)) for t in arrays):
            return float("inf")
        u, v = arrays[1] - arrays[0], arrays[3] - arrays[2]
        resolution = FP32_RESOLUTION * np.maximum(np.abs(arrays[1]), np.abs(arrays[3]))
        diffs[name] = (u, v, np.maximum(np.abs(u - v) - resolution, 0.0))
    scale = max(max(np.max(np.abs(u), initial=0.0), np.max(np.abs(v), initial=0.0))
                for u, v, _ in diffs.values())  # fmt: skip
    worst = 0.0
    for u, v, d in diffs.values():
        local = max(float(np.max(np.abs(u), initial=0.0)), float(np.max(np.abs(v), initial=0.0)))
        denom = max(local, UPDATE_FLOOR * float(scale))
        diff = float(np.max(d, initial=0.0))
        worst = max(worst, diff / denom if denom > 0 else diff)
    return worst


def matrix(arrays: dict[str, dict[str, np.ndarray]]) -> dict[str, Any]:
    """The agreement matrix of one point: every framework pair, and each one vs onnxruntime."""
    frameworks = sorted(arrays)
    pairs: dict[str, dict[str, float]] = {}
    for fa, fb in itertools.combinations(frameworks, 2):
        pairs[f"{fa}|{fb}"] = pair_errors(arrays[fa], arrays[fb])
    for fw in frameworks:
        pairs[f"{fw}|{REFERENCE}"] = {
            "logits": max_rel(arrays[fw]["logits"], arrays[fw]["ort_logits"])
        }
    return {
        "frameworks": [*frameworks, REFERENCE],
        "pairs": pairs,
        "tolerance": {"logits": LOGITS_TOL, "weights": WEIGHTS_TOL, "update": UPDATE_TOL},
    }


def checks_of(m: dict[str, Any]) -> list[M.Check]:
    tol = m["tolerance"]
    out = []
    for pair, errs in m["pairs"].items():
        a, b = pair.split("|")
        for what in ("logits", "weights", "update"):
            if what in errs:
                out.append(M.Check(f"{what}.max_rel_error.{a}_vs_{b}", errs[what], tol[what]))
    return out


AGREEMENT_ERROR = M.REGISTRY["agreement_error"]


def not_finite(checks: list[M.Check]) -> str | None:
    """What an ``agreement_error`` metric cannot hold: the checks whose error is not finite
    (a NaN, a shape mismatch, a parameter one framework did not train), named; None when every
    error is finite."""
    bad = [c.name for c in checks if not math.isfinite(c.error)]
    if not bad:
        return None
    return f"{len(bad)} agreement error(s) not finite: {', '.join(bad)}"


def matrix_records(
    run_dir: Path, points: dict[str, dict[str, Any]], run_id: str, provenance: dict[str, Any]
) -> list[dict[str, Any]]:
    """One record per agreement point with arrays from at least two frameworks.

    ``points`` maps a point key to the task fields it came from (params, seed, size_set,
    source, frameworks planned)."""
    from suite.provenance import hostname, now_iso
    from suite.results import record_skeleton

    out = []
    for key, info in sorted(points.items()):
        directory = run_dir / "agreement" / key
        arrays = load_point(directory) if directory.is_dir() else {}
        t0 = time.perf_counter()
        doc = {
            "run_id": run_id,
            "task_id": f"network-agreement-matrix-{key}",
            "level": "network",
            "benchmark": "agreement_matrix",
            "params": info["params"],
            "size_set": info["size_set"],
            "source": info["source"],
            "framework": "+".join(sorted(info["frameworks"])),
            "backend": "local",
            "dtype": "fp32",
            "world_size": 1,
            "provenance": provenance,
        }
        rec = record_skeleton(doc, host=hostname(), started_at=now_iso())
        missing = sorted(set(info["frameworks"]) - set(arrays))
        if len(arrays) < 2:
            rec.update(
                status="skipped",
                reason=(
                    f"agreement needs two frameworks with results; "
                    f"{len(arrays)} wrote arrays ({', '.join(arrays) or 'none'}); "
                    f"missing: {', '.join(missing) or 'none'} (their records say why)"
                ),
            )
            out.append(rec)
            continue
        m = matrix(arrays)
        m["missing"] = missing
        checks = checks_of(m)
        worst = max(
            (e[w] for e in m["pairs"].values() for w in ("logits", "update") if w in e),
            default=float("inf"),
        )
        bad = not_finite(checks)  # worst is one of the checks' errors
        if bad:  # a metric holds finite numbers only: the record fails, its checks kept
            rec.update(status="failed", error={"type": "AgreementNotFinite", "message": bad})
        else:
            rec.update(status="ok", metrics=[AGREEMENT_ERROR.entry(value=worst)])
        rec.update(
            device={"kind": "cpu", "name": "host (comparison of saved arrays)", "count": 1},
            correctness={
                "passed": all(c.passed for c in checks),
                "checks": [c.to_dict() for c in checks],
            },
            measurement={
                "warmup_iters": 0,
                "inner_repeats": 1,
                "samples": 1,
                "stop_reason": "max_samples",
            },
            work={"agreement": m},
            duration_s=time.perf_counter() - t0,
        )
        rec["framework"]["adapter_version"] = "n/a"
        out.append(finite_or_null(rec))  # JSON has no infinity: null, as a worker writes
    return out
