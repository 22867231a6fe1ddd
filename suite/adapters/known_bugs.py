"""Framework bugs that give wrong values, declared by the adapters they affect
(``Adapter.known_bugs``): the text a failed check names, one place for adapters that share a
library."""

from __future__ import annotations

#: gloo's reduce-scatter, the one XLA:CPU (jax) and Horovod's gloo ops call
GLOO_REDUCE_SCATTER = (
    "gloo's ReduceScatterHalvingDoubling (gloo/reduce_scatter.h) sends part of a rank's buffer "
    "and then, without waiting for the send to finish, copies that rank's result over it: rank "
    "0's chunk is now and then wrong at its end, for chunks of about a MiB and more "
    "(https://github.com/jax-ml/jax/issues/40830)"
)

#: oneDNN's Swish fusion in TensorFlow's Grappler remapper before 2.14
TF_SPLIT_SWISH_FUSION = (
    "TensorFlow before 2.14 with oneDNN (on by default on x86) fuses Mul(a, Sigmoid(b)) into "
    "Swish(b) when a and b are two outputs of one Split, so a GLU computes b * sigmoid(b) in "
    "graph mode (https://github.com/tensorflow/tensorflow/issues/60941, fixed by "
    "https://github.com/tensorflow/tensorflow/pull/61334)"
)


def major_minor(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of a release string ("2.13.0+cpu" -> (2, 13)); None where unread."""
    parts = (version or "").split("+")[0].split(".")[:2]
    if len(parts) < 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def tf_split_swish_fusion(versions: dict[str, str | None]) -> bool:
    """Whether a TensorFlow of ``versions`` (an adapter's) has :data:`TF_SPLIT_SWISH_FUSION`."""
    release = major_minor(versions.get("tensorflow"))
    return (
        release is not None
        and release < (2, 14)
        and str(versions.get("onednn", "")).startswith("on")
    )


#: PyTorch's CPU fused SGD kernel with fp16/bf16 parameters: the benchmark's key for it
#: (``optimizer <family> <implementation> <dtype>``: suite/levels/training/optimizer.py)
TORCH_CPU_FUSED_SGD_LOWP = (
    "PyTorch's fused SGD on the CPU leaves fp16 and bf16 parameters unchanged in every full "
    "SIMD block (tensors of at least the vector width: only the scalar remainder is updated); "
    "reported for torch 2.12.1 and 2.13.0 (https://github.com/pytorch/pytorch/issues/191763; "
    "fix: https://github.com/pytorch/pytorch/pull/192545)"
)


def optimizer_key(family: str, implementation: str, dtype: str) -> str:
    """The name an optimizer case has in ``Adapter.known_bug``: the family (``sgd`` for SGD,
    momentum and Nesterov), the implementation and the parameters' dtype."""
    return f"optimizer {family} {implementation} {dtype}"
