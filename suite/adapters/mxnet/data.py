"""MXNet's loaders: ``mx.io.ImageRecordIter`` over RecordIO (im2rec's ``.rec`` + ``.idx``),
and Gluon's ``DataLoader`` over the ImageFolder files.

* **ImageRecordIter** (C++: decode with OpenCV, augment, batch, in ``preprocess_threads``
  threads): ``random_resized_crop`` (area 0.08-1, aspect 3/4-4/3), ``rand_mirror``, the mean
  and std, ``shuffle`` with ``seed``; eval: ``resize=256`` and the centre crop of
  ``data_shape``; a rank reads its part with ``part_index``/``num_parts``. Two facts of
  MXNet 1.9.1 measured here, both in the record: it decodes with at most
  ``max(1, cores - 1)`` threads whatever ``preprocess_threads`` asks (one on a 2-core
  machine: "use 1 threads for decoding" in its log), and it fills its last batch with samples
  from the start of the epoch while ``batch.pad`` reads 0, also with ``round_batch=False``:
  the suite declares that padding itself (the samples past the part's count).
  ImageRecordIter reports no sample ids (``batch.index`` is all zeros), so the suite gives
  it a list (``path_imglist``, im2rec's ``.lst`` format, ``label_width=2``) whose second
  label is the sample id: labels from a list override the record's, a documented option.
* **Gluon DataLoader** (Python worker processes): a ``gluon.data.Dataset`` of the files,
  decoded with ``mx.image.imdecode``, transformed with ``gluon.data.vision.transforms``
  (``RandomResizedCrop``, ``RandomFlipLeftRight``, ``ToTensor``, ``Normalize``; eval:
  ``Resize(256, keep_ratio)``, ``CenterCrop``), a seeded random sampler.

Imported by the worker only.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import Any

import mxnet as mx
import numpy as np

from suite.adapters.data_words import MEAN_RGB, STD_RGB, Batch, Loader, LoaderSpec


def decode(data: bytes) -> np.ndarray:
    """MXNet's own JPEG decoder (OpenCV's libjpeg): H x W x 3 uint8 RGB."""
    return np.asarray(mx.image.imdecode(data, to_rgb=1).asnumpy())


#: OpenCV reads what Pillow refuses: the corrupt counts of the frameworks can differ by these
OPENCV = (
    "OpenCV (mx.image.imdecode): a truncated JPEG decodes without an error, the rows it "
    "lacks grey, so it is a sample here where Pillow's loaders count it corrupt"
)


class RecordIterLoader(Loader):
    def __init__(self, spec: LoaderSpec) -> None:
        self.spec = spec
        self.tmp = tempfile.TemporaryDirectory(prefix="dlsuite-mxnet-")
        self.lst = os.path.join(self.tmp.name, "ids.lst")
        rec = spec.files[0]
        # the list ImageRecordIter looks each record's labels up in, by its IRHeader id:
        # the label, then the sample id (label_width=2)
        with open(self.lst, "w") as dst:
            for rid, sid in sorted(spec.record_ids.items()):
                dst.write(f"{rid}\t{float(spec.labels[sid]):f}\t{sid}\t-\n")
        self.records = len(spec.record_ids)
        # the part this rank reads (ImageRecordIter splits the .rec into num_parts byte runs):
        # counted from a user's index, else the even split of the suite's records
        part_index, num_parts = spec.rank, spec.world
        if spec.rec_part is not None:  # a subset: part p of m, each rank its share of it
            p, m = spec.rec_part
            part_index, num_parts = p * spec.world + spec.rank, m * spec.world
        # with its .idx, ImageRecordIter splits by records (dmlc's IndexedRecordIOSplitter:
        # ceil(records / num_parts) a part, the last one short)
        step = -(-self.records // num_parts)
        self.part = (spec.part_records if spec.part_records is not None else
                     max(0, min(self.records, step * (part_index + 1)) - step * part_index))  # fmt: skip
        train = spec.transform == "train"
        kw: dict[str, Any] = dict(
            path_imgrec=rec, path_imgidx=spec.index_file, path_imglist=self.lst, label_width=2,
            data_shape=(3, spec.crop, spec.crop), batch_size=spec.batch,
            shuffle=True, seed=spec.seed, preprocess_threads=max(1, spec.workers),
            mean_r=MEAN_RGB[0], mean_g=MEAN_RGB[1], mean_b=MEAN_RGB[2],
            std_r=STD_RGB[0], std_g=STD_RGB[1], std_b=STD_RGB[2],
            part_index=part_index, num_parts=num_parts, round_batch=False,
            prefetch_buffer=4,
        )  # fmt: skip
        if train:
            kw.update(random_resized_crop=True, min_random_area=0.08, max_random_area=1.0,
                      min_aspect_ratio=3 / 4, max_aspect_ratio=4 / 3, rand_mirror=True)  # fmt: skip
        else:
            kw.update(resize=spec.resize, rand_crop=False, rand_mirror=False)
        self.kw = kw
        self.it = mx.io.ImageRecordIter(**kw)
        self.started = False

    def epoch(self, epoch: int) -> Iterator[Batch]:
        if self.started:
            self.it.reset()
        self.started = True
        seen = 0
        for b in self.it:
            data = b.data[0]
            data.wait_to_read()
            lab = b.label[0].asnumpy()
            n = lab.shape[0] - int(b.pad)
            ids = lab[:n, 1].astype(np.int64)
            labels = lab[:n, 0].astype(np.int64)
            # past the part's count: samples from the epoch's start filling the last batch
            pad = max(0, seen + n - self.part)
            seen += n
            yield Batch(ids, labels, data, pad)

    def decode(self, data: bytes) -> np.ndarray:
        return decode(data)

    def describe(self) -> dict[str, Any]:
        cores = os.cpu_count() or 1
        return {
            "loader": "mx.io.ImageRecordIter (C++ decode + augment threads)",
            "settings": {k: v for k, v in self.kw.items() if k not in ("path_imglist",)},
            "preprocess_threads": max(1, self.spec.workers),
            "decode_threads_used": min(max(1, self.spec.workers), max(cores - 1, 1)),
            "decode_threads_note": "ImageRecordIter caps its decode threads at max(1, cores - 1)",
            "decoder": OPENCV,
            "ids": "from a .lst (path_imglist, label_width=2) whose second label is the sample id",
            "padding": "the last batch filled from the epoch's start (batch.pad reads 0): declared",
            "sharding": f"part_index={self.kw['part_index']}, num_parts={self.kw['num_parts']}",
            "deterministic": True,
        }

    def close(self) -> None:
        self.it = None
        self.tmp.cleanup()


class _FolderDataset(mx.gluon.data.Dataset):
    def __init__(self, spec: LoaderSpec, transform: Any) -> None:
        self.spec, self.transform = spec, transform

    def __len__(self) -> int:
        return len(self.spec.files)

    def __getitem__(self, i: int) -> tuple[Any, ...]:
        try:
            with open(self.spec.files[i], "rb") as fh:
                img = mx.image.imdecode(fh.read(), to_rgb=1)
            x = self.transform(img)
            bad = 0
        except Exception:  # noqa: BLE001 - a corrupt JPEG is counted, never a crash
            x = mx.nd.zeros((3, self.spec.crop, self.spec.crop))
            bad = 1
        return np.int64(i), np.int64(self.spec.labels[i]), x, np.int8(bad)


class GluonLoader(Loader):
    def __init__(self, spec: LoaderSpec) -> None:
        from mxnet.gluon.data import DataLoader
        from mxnet.gluon.data.vision import transforms as T

        self.spec = spec
        mx.random.seed(spec.seed)
        norm = T.Normalize(mean=[m / 255 for m in MEAN_RGB], std=[s / 255 for s in STD_RGB])
        if spec.transform == "train":
            tf = T.Compose([T.RandomResizedCrop(spec.crop, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)),
                            T.RandomFlipLeftRight(), T.ToTensor(), norm])  # fmt: skip
        else:
            tf = T.Compose([T.Resize(spec.resize, keep_ratio=True), T.CenterCrop(spec.crop),
                            T.ToTensor(), norm])  # fmt: skip
        self.ds = _FolderDataset(spec, tf)
        self.rng = np.random.default_rng(spec.seed)
        self.workers = spec.workers
        self.DataLoader = DataLoader

    def epoch(self, epoch: int) -> Iterator[Batch]:
        s = self.spec
        order = self.rng.permutation(len(self.ds))
        n, per = len(order), -(-len(order) // s.world)
        padded = np.concatenate([order, order[: per * s.world - n]])
        mine = padded[s.rank :: s.world]
        pad = int(np.sum(np.arange(s.rank, per * s.world, s.world) >= n))
        dl = self.DataLoader(self.ds, batch_size=s.batch, sampler=list(mine.tolist()),
                             num_workers=self.workers, thread_pool=False)  # fmt: skip
        batches = -(-len(mine) // s.batch)
        for k, (ids, labels, x, bad) in enumerate(dl):
            x.wait_to_read()
            ids_np = ids.asnumpy().astype(np.int64)
            bad_np = bad.asnumpy().astype(bool)
            yield Batch(ids_np, labels.asnumpy().astype(np.int64), x,
                        pad if k == batches - 1 else 0, ids_np[bad_np].tolist())  # fmt: skip

    def decode(self, data: bytes) -> np.ndarray:
        return decode(data)

    def describe(self) -> dict[str, Any]:
        return {
            "loader": "gluon.data.DataLoader (worker processes) over a Dataset of the files",
            "num_workers": self.workers,
            "decoder": OPENCV,
            "transforms": "gluon.data.vision.transforms",
            "sampler": "a seeded permutation per epoch, split over ranks as DistributedSampler "
            "does (padded)",
            "deterministic": True,
        }
