"""PyTorch's loaders: ``torch.utils.data.DataLoader`` over the ImageFolder files (a map-style
dataset, a ``RandomSampler`` or ``DistributedSampler``) and over WebDataset shards (the
``webdataset`` package's ``WebDataset`` pipeline: shards split by node and by worker,
a seeded shard shuffle and a sample shuffle buffer), with worker processes, persistent
workers and pinned memory (on a GPU).

Decoding and transforms: torchvision would be the usual choice (``torchvision.io.decode_jpeg``
and ``transforms.v2``), but torchvision 0.28.0 does not import beside the CPU torch 2.13
wheel ("operator torchvision::nms does not exist", raised at ``import torchvision``, so
neither its ``io`` nor its transforms can be reached). So the JPEG is decoded with Pillow
(libjpeg-turbo: torchvision's PIL path decodes the same way) and the transforms are written
with torch ops, as torchvision's tensor transforms compute them: RandomResizedCrop's
parameters (``RandomResizedCrop.get_params``: 10 tries of area 0.08-1 and log-uniform aspect
3/4-4/3, then the centre crop), the crop by slicing, ``F.interpolate(bilinear,
antialias=True)``, ``flip(-1)``, normalisation by ImageNet's mean and std.

With ``decode = "device"`` (on a GPU) the workers only read each file's bytes; the main
process decodes the batch with ``torchvision.io.decode_jpeg(..., device="cuda")`` (nvJPEG,
batched) and runs the same transforms with the same torch ops on the GPU; a file nvJPEG refuses
(a PNG named .JPEG, a CMYK JPEG) is decoded on the host with Pillow instead and counted
(``host_fallbacks``); one Pillow cannot decode either is corrupt, as on the host path.

Imported by the worker only (torch at module import is fine here: the adapter imports this
module inside ``data_loader``).
"""

from __future__ import annotations

import io
import math
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler, RandomSampler

from suite.adapters.data_words import (
    MEAN_RGB,
    STD_RGB,
    Batch,
    Loader,
    LoaderSpec,
    random_resized_crop,
    rgb8,
)

_MEAN = torch.tensor(MEAN_RGB, dtype=torch.float32).view(3, 1, 1)
_STD = torch.tensor(STD_RGB, dtype=torch.float32).view(3, 1, 1)
SHUFFLE_BUFFER = 256


def decode(data: bytes) -> np.ndarray:
    """JPEG bytes -> H x W x 3 uint8 RGB (Pillow, libjpeg-turbo)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        return np.array(rgb8(im))  # writable: torch.from_numpy wants one


def crop_params(h: int, w: int) -> tuple[int, int, int, int]:
    """torchvision's ``RandomResizedCrop.get_params`` (scale 0.08-1, ratio 3/4-4/3), drawn
    from torch's generator (seeded per DataLoader worker)."""
    return random_resized_crop(
        h,
        w,
        lambda low, high: torch.empty(1).uniform_(low, high).item(),
        lambda low, high: int(torch.randint(low, high, (1,)).item()),
    )


def _resize(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    return F.interpolate(x.unsqueeze(0), size=size, mode="bilinear", antialias=True,
                         align_corners=False).squeeze(0)  # fmt: skip


def transform(img: np.ndarray, kind: str, crop: int, resize: int) -> torch.Tensor:
    """The train or eval transform on an H x W x 3 uint8 image: 3 x crop x crop float32."""
    x = torch.from_numpy(img).permute(2, 0, 1)  # CHW uint8, a view
    h, w = int(x.shape[1]), int(x.shape[2])
    if kind == "train":
        i, j, ch, cw = crop_params(h, w)
        out = _resize(x[:, i : i + ch, j : j + cw].float(), (crop, crop))
        if torch.rand(1).item() < 0.5:
            out = out.flip(-1)
    else:
        scale = resize / min(h, w)
        nh, nw = max(crop, int(round(h * scale))), max(crop, int(round(w * scale)))
        out = _resize(x.float(), (nh, nw))
        top, left = (nh - crop) // 2, (nw - crop) // 2
        out = out[:, top : top + crop, left : left + crop]
    return (out - _MEAN) / _STD


def decode_only(data: bytes) -> None:
    """The JPEG decoded into an array and dropped, as DLIO's JPEG reader does
    (``np.asarray(Image.open(f))``: no conversion, no copy beyond the array)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        np.asarray(im if im.mode == "RGB" else rgb8(im))


def _sample(sid: int, label: int, data: bytes | None, spec: LoaderSpec) -> tuple[Any, ...]:
    if spec.decode == "device":  # the bytes only: the main process decodes on the GPU
        if not data:
            return sid, label, torch.empty(0, dtype=torch.uint8), 1
        return sid, label, torch.frombuffer(bytearray(data), dtype=torch.uint8), 0
    try:
        if data is None:
            raise OSError("unreadable")
        if spec.transform == "decode":
            decode_only(data)
            return sid, label, torch.zeros(1), 0
        x = transform(decode(data), spec.transform, spec.crop, spec.resize)
        bad = 0
    except Exception:  # noqa: BLE001 - a corrupt JPEG is counted, never a crash
        x = torch.zeros(1) if spec.transform == "decode" else torch.zeros(3, spec.crop, spec.crop)
        bad = 1
    return sid, label, x, bad


class FolderDataset(Dataset):
    """The ImageFolder files as a map-style dataset: item ``i`` is sample id ``i``."""

    def __init__(self, spec: LoaderSpec) -> None:
        self.spec = spec

    def __len__(self) -> int:
        return len(self.spec.files)

    def __getitem__(self, i: int) -> tuple[Any, ...]:
        try:
            with open(self.spec.files[i], "rb") as fh:
                data: bytes | None = fh.read()
        except OSError:
            data = None
        return _sample(i, self.spec.labels[i], data, self.spec)


def _collate_bytes(items: list[tuple[Any, ...]]) -> Any:
    """A device-decode batch: ids, labels and flags stacked, the files' bytes packed into one
    flat uint8 tensor with their lengths (they differ). One tensor, not a list of one per
    file: a worker hands each tensor over through shared memory with a file descriptor of
    its own, and a list of 256 per batch, times workers and prefetch, ran past a soft limit
    of 1,024 open files ("received 0 items of ancdata")."""
    ids = torch.tensor([i[0] for i in items], dtype=torch.int64)
    labels = torch.tensor([i[1] for i in items], dtype=torch.int64)
    bad = torch.tensor([i[3] for i in items], dtype=torch.int64)
    lengths = torch.tensor([i[2].numel() for i in items], dtype=torch.int64)
    flat = torch.cat([i[2] for i in items]) if items else torch.empty(0, dtype=torch.uint8)
    return ids, labels, (flat, lengths), bad


def _unpack_bytes(packed: tuple[torch.Tensor, torch.Tensor]) -> list[torch.Tensor]:
    """The files' bytes of :func:`_collate_bytes`' batch, one view each."""
    flat, lengths = packed
    return list(torch.split(flat, lengths.tolist()))


class DeviceDecoder:
    """nvJPEG through torchvision on the loader's GPU, and the train/eval transforms there."""

    def __init__(self, device: Any) -> None:
        import torchvision
        from torchvision.io import ImageReadMode, decode_jpeg

        self.device = device
        self.decode_jpeg, self.rgb = decode_jpeg, ImageReadMode.RGB
        self.version = torchvision.__version__
        self.mean = _MEAN.to(device)
        self.std = _STD.to(device)
        self.host_fallbacks = 0

    def one(self, raw: torch.Tensor) -> torch.Tensor:
        """One file's bytes -> 3 x H x W uint8 on the GPU (nvJPEG, else Pillow on the host)."""
        try:
            return self.decode_jpeg(raw, mode=self.rgb, device=self.device)
        except RuntimeError:
            img = decode(raw.numpy().tobytes())  # OSError etc.: the caller counts it corrupt
            self.host_fallbacks += 1
            return torch.from_numpy(img).permute(2, 0, 1).to(self.device)

    def batch(self, raws: list[torch.Tensor]) -> list[torch.Tensor | None]:
        """A batch decoded together where nvJPEG takes every file, else one by one; None for
        a file neither decoder reads."""
        try:
            return list(self.decode_jpeg(raws, mode=self.rgb, device=self.device))
        except RuntimeError:
            out: list[torch.Tensor | None] = []
            for raw in raws:
                try:
                    out.append(self.one(raw) if raw.numel() else None)
                except Exception:  # noqa: BLE001 - corrupt: counted, never a crash
                    out.append(None)
            return out

    def transform(self, img: torch.Tensor, spec: LoaderSpec) -> torch.Tensor:
        h, w = int(img.shape[1]), int(img.shape[2])
        if spec.transform == "train":
            i, j, ch, cw = crop_params(h, w)
            out = _resize(img[:, i : i + ch, j : j + cw].float(), (spec.crop, spec.crop))
            if torch.rand(1).item() < 0.5:
                out = out.flip(-1)
        else:
            scale = spec.resize / min(h, w)
            nh, nw = max(spec.crop, int(round(h * scale))), max(spec.crop, int(round(w * scale)))
            out = _resize(img.float(), (nh, nw))
            top, left = (nh - spec.crop) // 2, (nw - spec.crop) // 2
            out = out[:, top : top + spec.crop, left : left + spec.crop]
        return (out - self.mean) / self.std


def _collate(items: list[tuple[Any, ...]]) -> Any:
    """PyTorch's default collate: in a worker process it stacks the images straight into
    shared memory, so the batch reaches the main process without another copy (a collate of
    one's own that calls ``torch.stack`` pays that copy: 0.64 of a bare loop's rate here)."""
    from torch.utils.data import default_collate

    return default_collate(items)


class TorchLoader(Loader):
    """A DataLoader and how to iterate its epochs."""

    def __init__(self, spec: LoaderSpec, device: Any) -> None:
        self.spec = spec
        self.pin = device is not None and getattr(device, "type", "cpu") == "cuda"
        torch.manual_seed(spec.seed)  # workers=0: the transforms draw from this process's generator
        self.generator = torch.Generator().manual_seed(spec.seed)
        w = spec.workers
        self.gpu: DeviceDecoder | None = None
        if spec.decode == "device":
            self.gpu = DeviceDecoder(device)
            self.pin = False  # the bytes travel to the GPU, not images
        common: dict[str, Any] = {
            "num_workers": w,
            "pin_memory": self.pin,
            "persistent_workers": w > 0,
            "collate_fn": _collate_bytes if self.gpu is not None else _collate,
            "generator": self.generator,
        }
        if w > 0:
            common["prefetch_factor"] = 2
        self.padding = 0
        if spec.format == "folder":
            ds = FolderDataset(spec)
            if spec.world > 1:
                self.sampler: Any = DistributedSampler(ds, num_replicas=spec.world, rank=spec.rank,
                                                       shuffle=True, seed=spec.seed, drop_last=False)  # fmt: skip
                n = len(ds)
                per = self.sampler.num_samples
                self.padding = sum(1 for k in range(per) if spec.rank + k * spec.world >= n)
            else:
                self.sampler = RandomSampler(ds, generator=self.generator)
            # Any: close() drops it (None), and mypy without PyTorch would see no DataLoader
            self.dl: Any = DataLoader(ds, batch_size=spec.batch, sampler=self.sampler, **common)
            self.kind = "DataLoader(map-style folder dataset, " + type(self.sampler).__name__ + ")"
        else:
            self.sampler = None
            ds = _webdataset(spec)
            self.dl = DataLoader(ds, batch_size=spec.batch, **common)
            self.kind = "DataLoader(webdataset.WebDataset: split_by_node, split_by_worker, " \
                f"seeded shard shuffle, shuffle buffer {SHUFFLE_BUFFER})"  # fmt: skip

    def epoch(self, epoch: int) -> Iterator[Batch]:
        if isinstance(self.sampler, DistributedSampler):
            self.sampler.set_epoch(epoch)
        # the sampler's padding is the end of this rank's list: in the last batch
        last = math.ceil(self.sampler.num_samples / self.spec.batch) - 1 if self.padding else -1
        for k, (ids, labels, images, bad) in enumerate(self.dl):
            if self.gpu is not None:
                images, bad = self._on_device(images, bad)
            corrupt = ids[bad.bool()].tolist() if bool(bad.any()) else []
            yield Batch(ids.numpy(), labels.numpy(), images, self.padding if k == last else 0,
                        corrupt)  # fmt: skip

    def _on_device(
        self, packed: tuple[torch.Tensor, torch.Tensor], bad: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch of files' bytes decoded and transformed on the GPU, the device synchronised
        before it is handed over (its decode is the loader's time, not the next step's)."""
        assert self.gpu is not None
        decoded = self.gpu.batch(_unpack_bytes(packed))
        spec, out, flags = self.spec, [], bad.clone()
        for i, img in enumerate(decoded):
            if img is None or int(flags[i]):
                flags[i] = 1
                shape = (3, spec.crop, spec.crop) if spec.transform != "decode" else (1,)
                out.append(torch.zeros(shape, device=self.gpu.device))
            elif spec.transform == "decode":
                out.append(torch.zeros(1, device=self.gpu.device))
            else:
                out.append(self.gpu.transform(img, spec))
        images = torch.stack(out)
        if self.gpu.device.type == "cuda":
            torch.cuda.synchronize(self.gpu.device)
        return images, flags

    def decode(self, data: bytes) -> np.ndarray:
        if self.gpu is not None:
            raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            return self.gpu.one(raw).permute(1, 2, 0).cpu().numpy()
        return decode(data)

    def describe(self) -> dict[str, Any]:
        return {
            "loader": self.kind,
            "num_workers": self.spec.workers,
            "persistent_workers": self.spec.workers > 0,
            "pin_memory": self.pin,
            "pin_memory_note": None if self.pin else "pinned memory is for copies to a GPU; off on the CPU",
            "prefetch_factor": 2 if self.spec.workers > 0 else None,
            "decoder": (f"nvJPEG on {self.gpu.device} through torchvision {self.gpu.version}'s "
                        "io.decode_jpeg (batched; the workers read bytes); files it refuses "
                        f"decoded with Pillow on the host: {self.gpu.host_fallbacks} so far")
                       if self.gpu is not None else
                       "Pillow (libjpeg-turbo) in the workers (torchvision's own decoder is the "
                       "GPU variant, decode = device)",
            "decode": self.spec.decode,
            "transforms": "torch ops (RandomResizedCrop's parameters, F.interpolate bilinear antialias, "
                          "flip, normalise)" + (" on the GPU" if self.gpu is not None else ""),
            "sharding": (f"DistributedSampler(rank {self.spec.rank} of {self.spec.world}, padding {self.padding})"
                         if isinstance(self.sampler, DistributedSampler) else
                         "webdataset.split_by_node + split_by_worker (whole shards)" if self.sampler is None
                         else "none (one rank)"),
            "torch_threads": torch.get_num_threads(),
            "deterministic": True,
        }  # fmt: skip

    def close(self) -> None:
        it = getattr(self.dl, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()
        self.dl = None


def _shards(spec: LoaderSpec) -> Any:
    """``webdataset.WebDataset`` over the spec's shards: the rank's (every world-th, from its
    rank: webdataset's split_by_node reads torch.distributed, which a loader benchmark does not
    start), split by worker, in a seeded shuffle."""
    import itertools

    import webdataset as wds

    def node_split(src: Any) -> Any:
        yield from itertools.islice(src, spec.rank, None, spec.world)

    return wds.WebDataset(
        spec.files,
        shardshuffle=len(spec.files),
        detshuffle=True,
        seed=spec.seed,
        nodesplitter=node_split,
        workersplitter=wds.split_by_worker,
        empty_check=False,
    )


def _webdataset(spec: LoaderSpec) -> Any:
    if spec.shard_bases is not None:
        return _user_webdataset(spec)

    key_to_id = {k: i for i, k in enumerate(spec.keys)}
    labels = spec.labels

    def to_sample(s: dict[str, Any]) -> tuple[Any, ...]:
        key = s["__key__"].rsplit("/", 1)[-1]
        sid = key_to_id.get(key, -1)
        label = int(s["cls"]) if "cls" in s else (labels[sid] if sid >= 0 else -1)
        return _sample(sid, label, s.get("jpg"), spec)

    return _shards(spec).shuffle(SHUFFLE_BUFFER, rng=random.Random(spec.seed)).map(to_sample)


def _user_webdataset(spec: LoaderSpec) -> Any:
    """A user's WebDataset shards, each sample identified by its tar member: its shard and
    its ordinal there (counted as the shard is read, before the shuffle buffer), checked
    against the member's key (``<shard>/<key>``: a sample whose key is not the index's at that
    place is delivered with id -1, which the exactly-once check counts). Labels from the
    sample's ``cls``/``txt``/``json`` member."""
    import os

    from suite.datasets.packed import IMAGE_EXTS, LABEL_EXTS, parse_label

    position = {f: i for i, f in enumerate(spec.files)}
    bases = list(spec.shard_bases or [])
    names = {c: i for i, c in enumerate(spec.label_names or [])}
    keys = spec.keys
    state: dict[str, Any] = {"url": None, "n": -1}

    def ordinal(s: dict[str, Any]) -> dict[str, Any]:
        # the next record of the shard being read; a shard's first key starts it again (a
        # worker may read the same shard last in one epoch and first in the next)
        url = s.get("__url__")
        f = position.get(str(url), -1)
        n = state["n"] + 1 if url == state["url"] else 0
        first = bases[f] if f >= 0 and bases[f] < len(keys) else -1
        if n and first >= 0 and keys[first] == f"{os.path.basename(str(url))}/{s['__key__']}":
            n = 0
        state["url"], state["n"] = url, n
        s["__ordinal__"] = n
        return s

    def to_sample(s: dict[str, Any]) -> tuple[Any, ...]:
        url = s.get("__url__")
        f = position.get(str(url), -1)
        sid = bases[f] + s["__ordinal__"] if f >= 0 else -1
        key = f"{os.path.basename(str(url))}/{s['__key__']}"
        if not 0 <= sid < len(keys) or keys[sid] != key:
            sid = -1
        ext = next((e for e in LABEL_EXTS if e in s), None)
        try:
            value = parse_label(ext, s[ext]) if ext else -1
            label = names[value] if isinstance(value, str) else int(value)
        except (ValueError, KeyError):
            label = -1
        image = next((s[e] for e in IMAGE_EXTS if e in s), None)
        return _sample(sid, label, image, spec)

    return (
        _shards(spec)
        .map(ordinal)
        .shuffle(SHUFFLE_BUFFER, rng=random.Random(spec.seed))
        .map(to_sample)
    )
