"""TensorFlow's loader over a user's TFRecord shards whose images are not all JPEGs: PNG (and
WebP, BMP) records decode as the other frameworks' loaders decode them (Pillow, OpenCV), for
every transform, with the pixels of Pillow's decode; a record TensorFlow cannot decode is one
line naming the dataset and the scan that finds it, not TensorFlow's graph trace. Runs in
TensorFlow's environment (the venv backend builds it)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from suite import envs
from tests.helpers import ROOT

SCRIPT = r"""
import io, json, sys
from pathlib import Path
import numpy as np
import tensorflow as tf
from PIL import Image
from suite.adapters.data_words import LoaderSpec
from suite.adapters.tensorflow.data import TfDataLoader
from suite.errors import AdapterError

root = Path(sys.argv[1])
rng = np.random.default_rng(0)

def encoded(fmt, i):
    b = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (40 + i, 50, 3), np.uint8)).save(b, fmt)
    return b.getvalue()

def shard(path, images):
    with tf.io.TFRecordWriter(str(path)) as w:
        for label, data in images:
            ex = tf.train.Example(features=tf.train.Features(feature={
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
            }))
            w.write(ex.SerializeToString())

fmts = ["PNG", "PNG", "JPEG", "WEBP", "BMP", "PNG"]
imgs = [(i % 3, encoded(f, i)) for i, f in enumerate(fmts)]
shard(root / "train-00000-of-00002", imgs[:4])
shard(root / "train-00001-of-00002", imgs[4:])
files = [str(root / "train-00000-of-00002"), str(root / "train-00001-of-00002")]
out = {}
for transform in ("train", "eval", "decode"):
    spec = LoaderSpec("tfrecord", str(root), files, [l for l, _ in imgs],
                      [str(i) for i in range(6)], workers=1, batch=4, transform=transform,
                      seed=0, shard_bases=[0, 4], crop=32, resize=36)
    loader = TfDataLoader(spec)
    ids, shapes = [], []
    for b in loader.epoch(0):
        ids += b.ids.tolist()
        shapes.append(list(np.asarray(b.images).shape))
    out[transform] = {"ids": sorted(ids), "shapes": shapes}
same = [bool(np.array_equal(loader.decode(d), np.asarray(Image.open(io.BytesIO(d)).convert("RGB"))))
        for f, (_, d) in zip(fmts, imgs) if f != "JPEG"]
out["pixels_identical"] = same
shard(root / "train-00001-of-00002", [(0, b"not an image at all")])
try:
    list(TfDataLoader(LoaderSpec("tfrecord", str(root), files, [0] * 5, [str(i) for i in range(5)],
                                 workers=1, batch=4, transform="eval", seed=0,
                                 shard_bases=[0, 4])).epoch(0))
    out["corrupt"] = None
except AdapterError as exc:
    out["corrupt"] = str(exc)
print(json.dumps(out))
"""


@pytest.mark.tensorflow
def test_png_webp_bmp_records_decode_and_an_undecodable_one_is_one_line(tmp_path: Path) -> None:
    python = str(envs.ensure("tensorflow").python)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([python, "-c", SCRIPT, str(tmp_path)], capture_output=True,
                          text=True, timeout=600, cwd=ROOT, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for transform in ("train", "eval", "decode"):
        assert out[transform]["ids"] == list(range(6)), transform
    assert out["train"]["shapes"][0] == [4, 32, 32, 3]
    assert out["eval"]["shapes"][0] == [4, 32, 32, 3]
    assert out["pixels_identical"] == [True] * 5  # lossless formats: Pillow's pixels exactly
    said = out["corrupt"]
    assert said and "\n" not in said and str(tmp_path) in said and "--scan" in said, said
