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
