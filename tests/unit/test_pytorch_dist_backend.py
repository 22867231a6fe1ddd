"""`--dist-backend` PyTorch cannot run here is a skipped record, not a failed one.

`dlsuite run --level distributed --framework pytorch --dist-backend nccl` on this machine's CPU
wheel: the worker's init_process_group raised "Distributed package doesn't have NCCL built in",
a failed record and exit 1 (TensorFlow's adapter already skips a backend it lacks)."""

from __future__ import annotations

import pytest

from suite.errors import UnsupportedError

torch = pytest.importorskip("torch")  # the pytorch extra: .venv has it (make venv)


@pytest.mark.pytorch
@pytest.mark.parametrize("backend", ["nccl", "mpi"])
def test_a_backend_this_build_lacks_is_unsupported(backend: str) -> None:
    from suite.adapters.pytorch.adapter import PyTorchAdapter

    built = getattr(torch.distributed, f"is_{backend}_available")()
    if built:
        pytest.skip(f"this PyTorch build has {backend}")  # a CUDA or source build
    adapter = PyTorchAdapter()
    adapter.setup("cpu")
    with pytest.raises(UnsupportedError, match=rf"has no {backend} backend.*--dist-backend gloo"):
        adapter.dist_init(backend)
    assert not torch.distributed.is_initialized()
