"""The PyTorch loader's device-decode path (``decode = "device"``: the workers read bytes, the
main process decodes them with torchvision's ``decode_jpeg``) run end to end on the CPU: the
batches' hand-over from the workers, and the decode, transform and corrupt-file accounting
after it. torchvision does not import beside this machine's CPU torch (suite/adapters/pytorch/
data.py says why), so a stand-in module decodes with Pillow and, like ``decode_jpeg`` on a
list, raises RuntimeError when one file of the batch is not a JPEG; nvJPEG itself runs only on
a GPU (`make gpu-check`'s feed step)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the pytorch extra: .venv has it (make venv)


def _jpegs(root: Path, n: int) -> tuple[list[str], list[int]]:
    from PIL import Image

    rng = np.random.default_rng(0)
    files, labels = [], []
    for i in range(n):
        p = root / f"{i:05d}.jpg"
        Image.fromarray(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)).save(p, quality=90)
        files.append(str(p))
        labels.append(i % 7)
    return files, labels


def test_device_decode_hands_each_batch_over_as_one_tensor(tmp_path: Path) -> None:
    """Under a soft limit of 128 open files, 2 workers with batches of 100: a list of one
    shared tensor per file (one descriptor each, 400 in flight) failed with "received 0
    items of ancdata"; the packed batch needs a few. Every file decodes and is counted once."""
    files, labels = _jpegs(tmp_path, 600)
    (tmp_path / "00003.jpg").write_bytes(b"not a jpeg")  # counted corrupt, never a crash
    script = textwrap.dedent(f"""
        import io, resource, sys, types, numpy as np, torch
        from PIL import Image
        def decode_jpeg(data, mode=None, device=None):
            if isinstance(data, list):
                return [decode_jpeg(d, mode, device) for d in data]
            try:
                img = Image.open(io.BytesIO(bytes(data.numpy()))).convert("RGB")
            except Exception as exc:
                raise RuntimeError(f"not a JPEG: {{exc}}")
            return torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1).to(device)
        tv = types.ModuleType("torchvision"); tv.__version__ = "stand-in"
        tv.io = types.ModuleType("torchvision.io"); tv.io.decode_jpeg = decode_jpeg
        tv.io.ImageReadMode = types.SimpleNamespace(RGB="RGB")
        sys.modules.update({{"torchvision": tv, "torchvision.io": tv.io}})
        from suite.adapters.data_words import LoaderSpec
        from suite.adapters.pytorch.data import TorchLoader
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        spec = LoaderSpec(format="folder", root={str(tmp_path)!r}, files={files!r},
                          labels={labels!r}, keys=[str(i) for i in range({len(files)})],
                          workers=2, batch=100, transform="eval", seed=0, crop=16, resize=20,
                          decode="device")
        loader = TorchLoader(spec, torch.device("cpu"))
        ids, corrupt = [], []
        for b in loader.epoch(0):
            assert tuple(b.images.shape[1:]) == (3, 16, 16), b.images.shape
            assert b.images.dtype == torch.float32
            ids.extend(b.ids.tolist()); corrupt.extend(b.corrupt)
        assert sorted(ids) == list(range({len(files)})), len(ids)
        assert corrupt == [3], corrupt
        print("decoded", len(ids), "corrupt", corrupt, "host fallbacks", loader.gpu.host_fallbacks)
    """)
    try:  # a worker that cannot hand a batch over leaves the loader waiting: a hang, not an error
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parents[2], timeout=120)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the loader hung for 120 s: {(exc.stderr or b'')[-2000:]!r}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "decoded 600 corrupt [3]" in done.stdout


def test_packed_bytes_come_back_as_each_files_bytes() -> None:
    from suite.adapters.pytorch.data import _collate_bytes, _unpack_bytes

    blobs = [b"\xff\xd8abc", b"", b"x" * 1000]
    items = [(i, i + 10, torch.frombuffer(bytearray(b), dtype=torch.uint8) if b else
              torch.empty(0, dtype=torch.uint8), 0 if b else 1) for i, b in enumerate(blobs)]  # fmt: skip
    ids, labels, packed, bad = _collate_bytes(items)
    assert (
        ids.tolist() == [0, 1, 2] and labels.tolist() == [10, 11, 12] and bad.tolist() == [0, 1, 0]
    )
    assert [bytes(t.numpy()) for t in _unpack_bytes(packed)] == blobs
