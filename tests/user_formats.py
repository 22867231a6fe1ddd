"""Users' packed datasets as their frameworks' own tools write them, for the tests: not the
suite's writers (suite/datasets/writers_*.py), which write the suite's own layout.

    python -m tests.user_formats tfrecord SRC OUT [--shards N]   # in TensorFlow's environment
    python -m tests.user_formats im2rec SRC OUT                  # in MXNet's environment
    python -m tests.user_formats webdataset SRC OUT [--shards N] # where webdataset is installed

``SRC`` is an ImageFolder (class folders of JPEGs). Each prints one JSON line: what it wrote.

* **tfrecord**: TensorFlow's ImageNet conversion (``build_imagenet_data.py`` of
  tensorflow/models' inception): the files shuffled with its fixed seed (12345), labels counted
  from 1 in the synsets' sorted order (0 is "background"), PNGs re-encoded to JPEG with
  TensorFlow's own ops as that script does, and the ``tf.train.Example`` keys it writes:
  ``image/height``, ``image/width``, ``image/colorspace``, ``image/channels``,
  ``image/class/label``, ``image/class/synset``, ``image/class/text``,
  ``image/object/bbox/*`` (empty), ``image/format``, ``image/filename``, ``image/encoded``;
  shards ``train-00000-of-0000N`` through ``tf.io.TFRecordWriter``.
* **im2rec**: MXNet's own tool, ``mxnet/tools/im2rec.py`` as shipped in the wheel: ``--list
  --recursive`` (the ``.lst``: index, label, path; shuffled; labels the folders' positions,
  from 0), then ``--pass-through`` (the JPEG bytes packed unchanged into ``.rec`` and
  ``.idx``, the label in each record's ``IRHeader``). im2rec.py imports OpenCV at its top but
  its pass-through mode never calls it, and MXNet's environment has no OpenCV: the tool runs
  with a placeholder ``cv2`` module that fails on any use.
* **webdataset**: ``webdataset.TarWriter``, ``<key>.jpg`` and ``<key>.cls`` (from 0) per
  sample, the files shuffled (seeded), ``train-00000N.tar``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import runpy
import subprocess
import sys
import types
from pathlib import Path
from typing import Any


def _images(src: Path) -> list[tuple[str, str]]:
    """(synset, path) of every image, sorted."""
    return sorted(
        (d.name, str(f))
        for d in src.iterdir()
        if d.is_dir()
        for f in d.iterdir()
        if f.suffix.lower() in (".jpg", ".jpeg", ".png")
    )


def _is_cmyk(data: bytes) -> bool:
    """A JPEG whose frame has four components (the script keeps a list of ImageNet's 22)."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        return im.mode == "CMYK"


def tfrecord(src: Path, out: Path, shards: int) -> dict[str, Any]:
    import tensorflow as tf

    files = _images(src)
    synsets = sorted({s for s, _ in files})
    label_of = {s: i + 1 for i, s in enumerate(synsets)}  # 1-based: 0 is background
    order = list(range(len(files)))
    random.seed(12345)  # build_imagenet_data.py's shuffle
    random.shuffle(order)
    files = [files[i] for i in order]

    def b(v: bytes) -> Any:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))

    def i64(v: list[int]) -> Any:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=v))

    def f32(v: list[float]) -> Any:
        return tf.train.Feature(float_list=tf.train.FloatList(value=v))

    out.mkdir(parents=True)
    bounds = [round(i * len(files) / shards) for i in range(shards + 1)]
    pngs = cmyk = 0
    for s in range(shards):
        path = out / f"train-{s:05d}-of-{shards:05d}"
        with tf.io.TFRecordWriter(str(path)) as writer:
            for synset, f in files[bounds[s] : bounds[s + 1]]:
                data = Path(f).read_bytes()
                if data[:4] == b"\x89PNG":  # the script re-encodes PNGs with TensorFlow's ops
                    data = tf.io.encode_jpeg(tf.io.decode_png(data, channels=3), quality=100)
                    data = data.numpy()
                    pngs += 1
                elif _is_cmyk(data):  # and CMYK JPEGs to RGB ones
                    data = tf.io.encode_jpeg(tf.io.decode_jpeg(data, channels=3), format="rgb",
                                             quality=100).numpy()  # fmt: skip
                    cmyk += 1
                img = tf.io.decode_jpeg(data, channels=3)
                h, w = int(img.shape[0]), int(img.shape[1])
                ex = tf.train.Example(features=tf.train.Features(feature={
                    "image/height": i64([h]), "image/width": i64([w]),
                    "image/colorspace": b(b"RGB"), "image/channels": i64([3]),
                    "image/class/label": i64([label_of[synset]]),
                    "image/class/synset": b(synset.encode()),
                    "image/class/text": b(f"class {synset}".encode()),
                    "image/object/bbox/xmin": f32([]), "image/object/bbox/xmax": f32([]),
                    "image/object/bbox/ymin": f32([]), "image/object/bbox/ymax": f32([]),
                    "image/object/bbox/label": i64([]),
                    "image/format": b(b"JPEG"), "image/filename": b(Path(f).name.encode()),
                    "image/encoded": b(data),
                }))  # fmt: skip
                writer.write(ex.SerializeToString())
    return {"records": len(files), "shards": shards, "labels": [1, len(synsets)],
            "pngs_reencoded": pngs, "cmyk_reencoded": cmyk, "writer": f"tf.io.TFRecordWriter (TensorFlow {tf.__version__})"}  # fmt: skip


def im2rec(src: Path, out: Path) -> dict[str, Any]:
    import mxnet as mx

    tool = Path(mx.__file__).parent / "tools" / "im2rec.py"
    out.mkdir(parents=True)
    prefix = str(out / "train")
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    for mode in (["--list", "--recursive"], ["--pass-through", "--num-thread", "1"]):
        subprocess.run([sys.executable, "-m", "tests.user_formats", "_run_im2rec", str(tool),
                        *mode, prefix, str(src)], check=True, env=env)  # fmt: skip
    lst = (out / "train.lst").read_text().splitlines()
    return {"records": len(lst), "tool": str(tool), "mxnet": mx.__version__,
            "files": sorted(p.name for p in out.iterdir())}  # fmt: skip


def _run_im2rec(argv: list[str]) -> None:
    """im2rec.py under a placeholder ``cv2`` (its pass-through and list modes never use it)."""

    class _NoOpenCV(types.ModuleType):
        def __getattr__(self, name: str) -> Any:
            raise RuntimeError(f"cv2.{name}: OpenCV is not installed; pass-through only")

    sys.modules["cv2"] = _NoOpenCV("cv2")
    tool, rest = argv[0], argv[1:]
    sys.argv = [tool, *rest]
    random.seed(0)
    runpy.run_path(tool, run_name="__main__")


def webdataset(src: Path, out: Path, shards: int) -> dict[str, Any]:
    import webdataset as wds

    files = _images(src)
    synsets = sorted({s for s, _ in files})
    random.Random(7).shuffle(files)
    out.mkdir(parents=True)
    bounds = [round(i * len(files) / shards) for i in range(shards + 1)]
    for s in range(shards):
        with wds.TarWriter(str(out / f"train-{s:06d}.tar")) as sink:
            for synset, f in files[bounds[s] : bounds[s + 1]]:
                key = f"{synset}/{Path(f).stem}"
                sink.write({"__key__": key, "jpg": Path(f).read_bytes(),
                            "cls": str(synsets.index(synset)).encode()})  # fmt: skip
    return {"records": len(files), "shards": shards, "writer": "webdataset.TarWriter"}


def main() -> None:
    if sys.argv[1:2] == ["_run_im2rec"]:
        _run_im2rec(sys.argv[2:])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=("tfrecord", "im2rec", "webdataset"))
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--shards", type=int, default=2)
    a = ap.parse_args()
    if a.kind == "tfrecord":
        done = tfrecord(a.src, a.out, a.shards)
    elif a.kind == "im2rec":
        done = im2rec(a.src, a.out)
    else:
        done = webdataset(a.src, a.out, a.shards)
    print(json.dumps(done))


if __name__ == "__main__":
    main()
