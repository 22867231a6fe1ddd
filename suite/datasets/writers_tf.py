"""TFRecord shards with TensorFlow's own writer; run in the TensorFlow environment:
``python -m suite.datasets.writers_tf write PLAN.json`` (:mod:`suite.datasets.writer_common`).

Each record is a ``tf.train.Example`` with the keys of TensorFlow's ImageNet conversion
(``build_imagenet_data.py``): ``image/encoded`` (the source JPEG's bytes, unchanged),
``image/format`` (``JPEG``), ``image/class/label`` (int64; 0-based here, the ImageFolder
label: the manifest says so), ``image/class/synset`` (the class folder), ``image/filename``
(the file's base name),
``image/height``, ``image/width``, ``image/colorspace``, ``image/channels``. Read back with
``tf.data.TFRecordDataset`` and ``tf.io.parse_single_example``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from suite.datasets import writer_common as W

FEATURES = ("image/encoded", "image/format", "image/class/label", "image/class/synset",
            "image/filename", "image/height", "image/width", "image/colorspace",
            "image/channels")  # fmt: skip


def _jpeg_size(data: bytes) -> tuple[int, int]:
    """(height, width) from the JPEG's start-of-frame marker (no decoding)."""
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            i += 1
            continue
        marker = data[i + 1]
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF):
            h = int.from_bytes(data[i + 5 : i + 7], "big")
            w = int.from_bytes(data[i + 7 : i + 9], "big")
            return h, w
        i += 2 + length
    return 0, 0


def write(plan: dict[str, Any]) -> tuple[dict[str, tuple[str, int]], dict[str, Any]]:
    import tensorflow as tf

    def b(v: bytes) -> Any:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))

    def i64(v: int) -> Any:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

    def write_shard(out: Path, shard: dict[str, Any], wrote: W.Wrote) -> list[str]:
        path = out / shard["name"]
        with tf.io.TFRecordWriter(str(path)) as writer:
            for relpath, label, key in shard["samples"]:
                data = W.read_source(plan, relpath)
                h, w = _jpeg_size(data)
                example = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "image/encoded": b(data),
                            "image/format": b(b"JPEG"),
                            "image/class/label": i64(int(label)),
                            "image/class/synset": b(relpath.split("/", 1)[0].encode()),
                            "image/filename": b(Path(relpath).name.encode()),
                            "image/height": i64(h),
                            "image/width": i64(w),
                            "image/colorspace": b(b"RGB"),
                            "image/channels": i64(3),
                        }
                    )
                )
                writer.write(example.SerializeToString())
                wrote(key, data, label)
        return [path.name]

    return W.write_shards(plan, "TFRecord", write_shard)


def verify(plan: dict[str, Any], expected: dict[str, tuple[str, int]]) -> dict[str, Any]:
    import tensorflow as tf

    t0 = time.perf_counter()
    spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/filename": tf.io.FixedLenFeature([], tf.string),
        "image/format": tf.io.FixedLenFeature([], tf.string),
    }
    out = Path(plan["out"])
    files = [str(out / s["name"]) for s in plan["shards"]]
    ds = tf.data.TFRecordDataset(files).map(lambda r: tf.io.parse_single_example(r, spec))
    check = W.Checker(expected)
    bar = W.Progress(len(expected), "reading TFRecord back")
    for ex in ds.as_numpy_iterator():
        if ex["image/format"] != b"JPEG":
            check.unknown.append(f"format {ex['image/format']!r}")
        key = ex["image/filename"].decode().rsplit(".", 1)[0]
        check.see(key, ex["image/encoded"], int(ex["image/class/label"]))
        bar.step()
    return check.result(
        "tf.data.TFRecordDataset + tf.io.parse_single_example", time.perf_counter() - t0
    )


def versions() -> dict[str, Any]:
    import tensorflow as tf

    return {"tensorflow": tf.__version__, "writer": "tf.io.TFRecordWriter"}


if __name__ == "__main__":
    raise SystemExit(W.main(sys.argv[1:], write, verify, versions))
