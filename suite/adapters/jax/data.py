"""JAX's loader: Grain (``grain.python``: ``DataLoader``, ``IndexSampler``, ``Batch``) over the
ImageFolder files.

Why Grain and not tf.data-as-NumPy: JAX has no loader of its own; its documentation and the
JAX AI stack (MaxText, the Flax examples since 2024) point to Grain, which is a pure-Python
dependency of a few MB with multi-process workers, a per-process ``ShardOptions`` and a
deterministic, per-epoch-seeded shuffle. tf.data would put TensorFlow (~600 MB, its own
thread pools) into the JAX environment for a pipeline that is then TensorFlow's, measured
already by the tensorflow adapter.

The transforms: JAX's image ops (``jax.image.resize``) run on the device and would import
JAX in every worker process; Grain's transforms are Python, so a Grain pipeline augments with
NumPy and Pillow, as Grain's own examples do: decode with Pillow (libjpeg-turbo), the
RandomResizedCrop parameters as torchvision draws them (from Grain's per-record generator),
the crop and resize in one ``Image.resize(box=..., BILINEAR)`` (Pillow reduces with
antialiasing), flip, normalise; eval: resize the shorter side to 256, centre crop 224.
Batches are NumPy arrays (N x 224 x 224 x 3 float32, NHWC: JAX's layout), what
``jax.device_put`` takes. Epochs: one ``DataLoader`` per epoch, its ``IndexSampler``
seeded with (seed, epoch), so each epoch is a new permutation and the same seed repeats it.
Imported by the worker only.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import grain.python as grain
import numpy as np

from suite.adapters.data_words import (
    MEAN_RGB,
    STD_RGB,
    Batch,
    Loader,
    LoaderSpec,
    random_resized_crop,
    rgb8,
)

_MEAN = np.asarray(MEAN_RGB, dtype=np.float32)
_STD = np.asarray(STD_RGB, dtype=np.float32)


def decode(data: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(rgb8(im))


class FolderSource(grain.RandomAccessDataSource):
    """The files as Grain's random-access source: record ``i`` is sample id ``i``."""

    def __init__(self, files: list[str], labels: list[int]) -> None:
        self.files, self.labels = files, labels

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> dict[str, Any]:
        try:
            with open(self.files[i], "rb") as fh:
                data = fh.read()
        except OSError:
            data = b""
        return {"id": i, "label": self.labels[i], "jpeg": data}


def _crop_box(h: int, w: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
    return random_resized_crop(
        h,
        w,
        lambda low, high: rng.uniform(low, high),
        lambda low, high: int(rng.integers(low, high)),
    )


class Augment(grain.RandomMapTransform):
    def __init__(self, kind: str, crop: int, resize: int) -> None:
        self.kind, self.crop, self.resize = kind, crop, resize

    def random_map(self, element: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        from PIL import Image

        try:
            with Image.open(io.BytesIO(element["jpeg"])) as src:
                im = rgb8(src)
                w, h = im.size
                if self.kind == "decode":
                    x = np.asarray(im, dtype=np.float32).mean().reshape(1)
                    return {"id": np.int64(element["id"]), "label": np.int64(element["label"]),
                            "image": x, "bad": np.int8(0)}  # fmt: skip
                if self.kind == "train":
                    i, j, ch, cw = _crop_box(h, w, rng)
                    out = im.resize((self.crop, self.crop), Image.Resampling.BILINEAR,
                                    box=(j, i, j + cw, i + ch))  # fmt: skip
                    if rng.random() < 0.5:
                        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
                else:
                    s = self.resize / min(h, w)
                    nw, nh = max(self.crop, round(w * s)), max(self.crop, round(h * s))
                    out = im.resize((nw, nh), Image.Resampling.BILINEAR)
                    left, top = (nw - self.crop) // 2, (nh - self.crop) // 2
                    out = out.crop((left, top, left + self.crop, top + self.crop))
            x = (np.asarray(out, dtype=np.float32) - _MEAN) / _STD
            bad = 0
        except Exception:  # noqa: BLE001 - a corrupt JPEG is counted, never a crash
            x = np.zeros((self.crop, self.crop, 3), np.float32)
            bad = 1
        return {"id": np.int64(element["id"]), "label": np.int64(element["label"]),
                "image": x, "bad": np.int8(bad)}  # fmt: skip


class GrainLoader(Loader):
    def __init__(self, spec: LoaderSpec) -> None:
        from absl import flags

        # Grain reads absl flags in its worker pool; a program that is not an absl app
        # (the suite's worker) marks them parsed, with their defaults
        if not flags.FLAGS.is_parsed():
            flags.FLAGS.mark_as_parsed()
        self.spec = spec
        self.source = FolderSource(spec.files, spec.labels)
        self.ops = [Augment(spec.transform, spec.crop, spec.resize),
                    grain.Batch(spec.batch, drop_remainder=False)]  # fmt: skip

    def _seed(self, epoch: int) -> int:
        return int(np.random.default_rng([self.spec.seed, epoch]).integers(0, 2**31 - 1))

    def epoch(self, epoch: int) -> Iterator[Batch]:
        s = self.spec
        sampler = grain.IndexSampler(
            num_records=len(self.source),
            shard_options=grain.ShardOptions(shard_index=s.rank, shard_count=s.world,
                                             drop_remainder=False),
            shuffle=True, num_epochs=1, seed=self._seed(epoch),
        )  # fmt: skip
        dl = grain.DataLoader(data_source=self.source, sampler=sampler, operations=self.ops,
                              worker_count=s.workers)  # fmt: skip
        for b in dl:
            bad = b["bad"].astype(bool)
            yield Batch(b["id"], b["label"], b["image"], 0, b["id"][bad].tolist())

    def decode(self, data: bytes) -> np.ndarray:
        return decode(data)

    def describe(self) -> dict[str, Any]:
        return {
            "loader": "grain.python.DataLoader(RandomAccessDataSource of the files, "
            "IndexSampler(shuffle, per-epoch seed, ShardOptions), [RandomMapTransform, Batch])",
            "worker_count": self.spec.workers,
            "decoder": "Pillow (libjpeg-turbo)",
            "transforms": "NumPy and Pillow in Grain's workers (JAX's image ops run on the device)",
            "sharding": f"ShardOptions(shard_index={self.spec.rank}, shard_count={self.spec.world})",
            "layout": "NHWC float32 NumPy (jax.device_put takes it)",
            "deterministic": True,
        }
