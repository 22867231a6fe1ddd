"""The data vocabulary of the adapter contract: each framework's own input pipeline (its
loader) over a dataset on storage, for the training level's input-pipeline benchmarks.

An adapter declares, per dataset format, the loader it maps it to (``loaders``: format -> the
mechanism in one line, recorded with every result) or why it cannot read it
(``unsupported_loaders``: format -> the reason; the task becomes a skipped record with it,
decided on the host from the class alone, as strategies are). ``data_loader`` builds the loader
from a :class:`LoaderSpec` (framework-neutral: file lists, ids, labels, the transform) and
returns a :class:`Loader` whose epochs yield :class:`Batch` es.

The formats are the suite's (suite/datasets/formats.py): ``folder`` (ImageFolder JPEGs),
``webdataset``, ``tfrecord``, ``recordio``. The transforms are the standard ImageNet ones,
written with each framework's own ops (:data:`TRANSFORMS`). Imports no framework.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from suite.adapters.missing import missing_because

#: the dataset formats a loader may read (suite/datasets/formats.py: FORMATS)
DATA_FORMATS = ("folder", "webdataset", "tfrecord", "recordio")
#: the transforms: ImageNet's standard train and eval pipelines (before the network)
TRANSFORMS = {
    "train": "random resized crop to 224 (area 0.08-1, aspect 3/4-4/3) + horizontal flip "
    "(p 0.5) + normalise (ImageNet mean/std), CHW float32",
    "eval": "resize the shorter side to 256 + centre crop 224 + normalise, CHW float32",
    "decode": "the JPEG decoded into an array and dropped (a peer's workload: DLIO's JPEG reader "
    "decodes and returns a fixed tensor); the batch carries a one-element placeholder",
}
#: where a loader decodes the JPEGs: "host" (the loader's workers, on the CPU cores) or
#: "device" (the accelerator's own decoder, e.g. nvJPEG through torchvision.io.decode_jpeg;
#: the workers only read the bytes)
DECODE_PLACES = ("host", "device")
#: ImageNet's channel statistics (0-255 scale), the normalisation every framework's recipe uses
MEAN_RGB = (123.675, 116.28, 103.53)
STD_RGB = (58.395, 57.12, 57.375)
CROP, RESIZE = 224, 256


@dataclass
class LoaderSpec:
    """What a loader reads and how (framework-neutral).

    ``files`` are the format's data files (the folder's images in id order; the shards of a
    packed format, sorted); ``labels[i]`` and ``keys[i]`` belong to sample id ``i`` (a key is
    the image's file stem, what packed formats store), so a loader reports ids, never
    positions. ``workers`` is the framework's parallelism knob (DataLoader's ``num_workers``,
    tf.data's ``num_parallel_calls`` and private thread pool, ImageRecordIter's
    ``preprocess_threads``, Grain's ``worker_count``); ``rank``/``world`` the shard this
    process reads with the framework's own sharding."""

    format: str
    root: str
    files: list[str]
    labels: list[int]
    keys: list[str]
    workers: int
    batch: int
    transform: str
    seed: int
    rank: int = 0
    world: int = 1
    #: RecordIO: the .idx beside the .rec; the record ids of its IRHeaders (im2rec's .lst
    #: index) -> sample ids; a loader labels records through ``labels[sample id]``
    index_file: str | None = None
    record_ids: dict[int, int] = field(default_factory=dict)
    #: a user's TFRecord or WebDataset shards (the format's own keys): the sample id of each
    #: file's first record, so a record's id is ``shard_bases[file] + its ordinal in the file``
    #: (None: a suite dataset's, identified by ``keys``)
    shard_bases: list[int] | None = None
    #: RecordIO, a subset: part p of m of the .rec; each rank reads part p * world + rank of
    #: m * world (ImageRecordIter's part_index/num_parts); and this rank's part's records
    rec_part: tuple[int, int] | None = None
    part_records: int | None = None
    #: WebDataset labels that are class names: the sorted names (label = position)
    label_names: list[str] | None = None
    crop: int = CROP
    resize: int = RESIZE
    #: "host" or "device" (:data:`DECODE_PLACES`)
    decode: str = "host"

    @property
    def samples(self) -> int:
        return len(self.labels)


@dataclass
class Batch:
    """One batch as a loader delivers it: sample ids and labels (host int64 arrays), the
    images (the framework's tensor, already computed: N x 3 x crop x crop or NHWC, float32),
    the samples that are padding (a sampler's or iterator's repeats, declared: ``pad``), and
    the ids of samples whose JPEG did not decode (counted, never a crash)."""

    ids: np.ndarray
    labels: np.ndarray
    images: Any
    pad: int = 0
    corrupt: list[int] = field(default_factory=list)


class Loader:
    """A framework's loader over one dataset. ``epoch(e)`` iterates epoch ``e`` (each epoch
    once, in order: 0, 1, ...); ``decode(data)`` is the framework's own JPEG decoder on one
    file's bytes (H x W x 3 uint8, before any augmentation: the pixel check compares it with
    a reference decode); ``describe()`` what was built (class, settings) for the record."""

    def epoch(self, epoch: int) -> Iterator[Batch]:
        raise NotImplementedError

    def decode(self, data: bytes) -> np.ndarray:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        return None


class DataWords:
    """The data vocabulary (mixed into Adapter)."""

    #: format -> the framework's own loader for it, in one line (recorded with every result)
    loaders: ClassVar[dict[str, str]] = {}
    #: format -> why this framework has no loader for it (a skipped record with the reason).
    #: The conformance kit requires every format in one of the two.
    unsupported_loaders: ClassVar[dict[str, str]] = {}
    #: the accelerator's own JPEG decoder a loader can use instead of the host's ("" when it
    #: has none): ``decode = "device"`` tasks are skipped with the reason otherwise
    device_decoder: ClassVar[str] = ""
    #: transform (``train``, ``eval``, ``decode``) -> why this framework's loaders do not run
    #: it (a skipped record with the reason)
    unsupported_transforms: ClassVar[dict[str, str]] = {}

    @classmethod
    def loader_declined(cls, fmt: str, decode: str = "host") -> str:
        """Why ``fmt`` is not read here ("" when the adapter maps it). Host side: reads only
        the class's declarations."""
        who = getattr(cls, "name", "?")
        if decode == "device" and not cls.device_decoder:
            return f"{who} declares no decoder on the device (decode = device); use decode = host"
        if fmt in cls.loaders:
            return ""
        if not cls.loaders and not cls.unsupported_loaders:  # no data words at all
            return f"{who} does not implement the data words (it declares no loaders)" + (
                missing_because(cls, ["data"])
            )
        return (
            cls.unsupported_loaders.get(fmt) or f"{who} declares no loader for the {fmt!r} format"
        )

    def data_loader(self, spec: LoaderSpec) -> Loader:
        """The framework's own loader for ``spec`` (after ``setup``)."""
        raise NotImplementedError(f"{getattr(self, 'name', '?')} has no data loaders")

    def batch_to_network(self, images: Any) -> Any:
        """A loader's batch of images as the network's input: the framework's float32 tensor,
        N x 3 x H x W, on the device. The default goes through NumPy (a host copy, then
        ``from_numpy``); an adapter whose loader hands over its own tensors (pinned host
        memory, or already on the device after a device decode) moves them itself."""
        return self.from_numpy(images_nchw(images), "fp32")  # type: ignore[attr-defined]


def images_nchw(images: Any) -> np.ndarray:
    """A loader's batch as N x 3 x H x W float32 NumPy (the ONNX networks' layout)."""
    if hasattr(images, "asnumpy"):  # MXNet NDArray
        images = images.asnumpy()
    a = np.asarray(images, dtype=np.float32)
    if a.ndim == 4 and a.shape[-1] == 3 and a.shape[1] != 3:
        a = a.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(a)


def rgb8(im: Any) -> Any:
    """A Pillow image as 8-bit RGB, as TensorFlow's ``decode_image`` and OpenCV's ``imdecode``
    (MXNet's) make one: a 16-bit grayscale image (a PNG Pillow opens as ``I;16`` or ``I``)
    keeps its high byte. Pillow's own ``convert("RGB")`` clips such a one at 255 (a 16-bit
    photograph's pixels nearly all white), so the loaders that decode with Pillow (PyTorch's,
    JAX's) and the pixel check's reference take its pixels through here."""
    if im.mode.startswith("I;16") or im.mode == "I":
        from PIL import Image

        wide = np.clip(np.asarray(im).astype(np.int64), 0, 65535)
        return Image.fromarray((wide >> 8).astype(np.uint8), "L").convert("RGB")
    return im.convert("RGB")


def random_resized_crop(
    h: int,
    w: int,
    uniform: Callable[[float, float], float],
    integer: Callable[[int, int], int],
) -> tuple[int, int, int, int]:
    """torchvision's ``RandomResizedCrop.get_params`` (area 0.08-1, aspect 3/4-4/3) for an
    ``h`` x ``w`` image: the crop's (top, left, height, width), drawn with the framework's own
    generator in torchvision's order (area, aspect, top, left): ``uniform(low, high)`` a float,
    ``integer(low, high)`` an int in ``[low, high)``. After ten draws that do not fit, the
    centre crop at the nearest aspect ratio in range."""
    area = h * w
    log_ratio = (math.log(3 / 4), math.log(4 / 3))
    for _ in range(10):
        target = area * uniform(0.08, 1.0)
        aspect = math.exp(uniform(*log_ratio))
        cw = int(round(math.sqrt(target * aspect)))
        ch = int(round(math.sqrt(target / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            i = integer(0, h - ch + 1)
            j = integer(0, w - cw + 1)
            return i, j, ch, cw
    ratio = w / h
    if ratio < 3 / 4:
        cw, ch = w, int(round(w / (3 / 4)))
    elif ratio > 4 / 3:
        ch, cw = h, int(round(h * (4 / 3)))
    else:
        cw, ch = w, h
    return (h - ch) // 2, (w - cw) // 2, ch, cw
