"""What every framework's kernel table shares, framework-independent: the kernel signature, the
table itself (:class:`KernelTable`: a kernel written as a function enters it where it is
defined) and the makers of the kernels whose ONNX semantics are a framework function applied to
the inputs (unary, binary, a left fold over any number of inputs, a reduction over the node's
``axes``). A framework's table (suite/adapters/<framework>/kernels.py) uses these with its own
functions and writes the kernels whose mapping is its own."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from suite.errors import UnsupportedError
from suite.onnx.importer import Step

#: ``kernel(ctx, step, values)``: ``ctx`` is the builder's (framework-specific), ``step`` the
#: importer's normalised node, ``values`` its inputs as framework tensors (or NumPy constants)
Kernel = Callable[[Any, Step, list[Any]], Any]
K = TypeVar("K", bound=Callable[..., Any])
D = TypeVar("D")


class KernelTable:
    """A framework's kernel table, filled where its kernels are written: ``@kernels.op("Split")``
    above a kernel's ``def`` enters it under that ONNX op (several names for a kernel that serves
    several ops). The kernels that are one expression (``unary(torch.tanh)``, a lambda) stay in
    the dict given to :meth:`with_shared`, which returns the whole table. An op entered twice is
    an error naming both kernels, at import, before any model is built."""

    def __init__(self) -> None:
        self._ops: dict[str, Kernel] = {}

    def op(self, *names: str) -> Callable[[K], K]:
        """The decorator that enters its function under each ONNX op of ``names``."""

        def enter(kernel: K) -> K:
            for name in names:
                if name in self._ops:
                    raise ValueError(
                        f"two kernels for the ONNX op {name!r}: "
                        f"{self._ops[name].__name__} and {kernel.__name__}"
                    )
                self._ops[name] = kernel
            return kernel

        return enter

    def with_shared(self, table: Mapping[str, Kernel]) -> dict[str, Kernel]:
        """The whole table: the kernels entered with :meth:`op`, those of ``table``, and the
        ops of :data:`SHARED` (:func:`with_shared`)."""
        twice = sorted(set(self._ops) & set(table))
        if twice:
            raise ValueError(f"ops both decorated and in the table: {', '.join(twice)}")
        return with_shared({**self._ops, **table})


def optional(v: list[Any], i: int) -> Any:
    """The node's ``i``-th input, ``None`` where the node leaves it out (an ONNX optional input:
    a Conv's, Gemm's or LayerNormalization's bias)."""
    return v[i] if len(v) > i else None


def unary(fn: Callable[[Any], Any]) -> Kernel:
    """``fn(x)`` of the node's one input."""
    return lambda ctx, step, v: fn(v[0])


def binary(fn: Callable[[Any, Any], Any]) -> Kernel:
    """``fn(a, b)`` of the node's two inputs (broadcasting is the framework's)."""
    return lambda ctx, step, v: fn(v[0], v[1])


def variadic(fn: Callable[[Any, Any], Any]) -> Kernel:
    """``fn`` folded left over any number of inputs (Max, Min, Sum)."""

    def kernel(ctx: Any, step: Step, v: list[Any]) -> Any:
        y = v[0]
        for other in v[1:]:
            y = fn(y, other)
        return y

    return kernel


def reduce(fn: Callable[..., Any], axis: str = "axis", keepdims: str = "keepdims") -> Kernel:
    """``fn`` over the node's normalised ``axes`` (the identity when there are none), keeping
    the reduced dimensions as its ``keepdims`` says; ``axis``/``keepdims`` name the
    framework's keyword arguments (PyTorch's are ``dim`` and ``keepdim``)."""

    def kernel(ctx: Any, step: Step, v: list[Any]) -> Any:
        axes = step.attrs["axes"]
        if not axes:
            return v[0]
        return fn(v[0], **{axis: tuple(axes), keepdims: step.attrs["keepdims"]})

    return kernel


def cast_target(dtypes: Mapping[str, D], step: Step, framework: str) -> D:
    """A Cast node's target type in the framework's terms: ``dtypes`` maps the NumPy name the
    importer gives ``attrs["dtype"]`` to the framework's dtype; a type it lacks is refused
    naming the node and the type."""
    to = dtypes.get(step.attrs["dtype"])
    if to is None:
        raise UnsupportedError(
            f"{framework}: {step.where()}: Cast to {step.attrs['dtype']} is not mapped"
        )
    return to


def index_slice(ctx: Any, step: Step, v: list[Any]) -> Any:
    """Slice as Python indexing with the importer's static per-axis ``(start, stop, step)``
    triples (``attrs["slices"]``), for a framework whose tensors take basic slices with any
    step, negative ones included, as NumPy's do (JAX, TensorFlow; PyTorch's refuse a negative
    step, MXNet's symbols take their own slice operator)."""
    return v[0][tuple(slice(*s) for s in step.attrs["slices"])]


#: the ops every framework maps the same way, as another op of its table or a composition of
#: its ops: a table leaves them out and :func:`with_shared` writes them once. Flatten, Squeeze
#: and Unsqueeze are a reshape to the static output shape the importer put in
#: ``attrs["shape"]``; Upsample is a Resize (the importer made the per-axis tables of both);
#: ReduceSumSquare and ReduceL2 are a ReduceSum of the squares (the node's normalised ``axes``
#: and ``keepdims``) and its square root.
SHARED: dict[str, str] = {
    "Flatten": "Reshape",
    "Squeeze": "Reshape",
    "Unsqueeze": "Reshape",
    "Upsample": "Resize",
    "ReduceSumSquare": "ReduceSum(Mul(x, x))",
    "ReduceL2": "Sqrt(ReduceSum(Mul(x, x)))",
}


def with_shared(table: Mapping[str, Kernel]) -> dict[str, Kernel]:
    """``table`` completed with the ops of :data:`SHARED`, made of its own kernels (Reshape,
    Resize, Mul, ReduceSum, Sqrt). A table that maps one of them its own way keeps its kernel
    (the NumPy reference's reductions carry their own backward)."""
    out = dict(table)
    for op in ("Flatten", "Squeeze", "Unsqueeze"):
        out.setdefault(op, table["Reshape"])
    out.setdefault("Upsample", table["Resize"])
    mul, total, sqrt = table["Mul"], table["ReduceSum"], table["Sqrt"]

    def sum_square(ctx: Any, step: Step, v: list[Any]) -> Any:
        return total(ctx, step, [mul(ctx, step, [v[0], v[0]])])

    def l2(ctx: Any, step: Step, v: list[Any]) -> Any:
        return sqrt(ctx, step, [sum_square(ctx, step, v)])

    out.setdefault("ReduceSumSquare", sum_square)
    out.setdefault("ReduceL2", l2)
    return out
