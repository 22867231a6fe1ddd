"""TensorFlow's loader: ``tf.data`` over TFRecord shards, written the way TensorFlow's own
ImageNet input pipelines (the Model Garden's ``imagenet_preprocessing``) write it:

* the shard list, sharded per rank (``Dataset.shard``: whole files, the tf.data guide's
  advice for several workers) and shuffled each epoch (seeded);
* ``interleave(TFRecordDataset, cycle_length, num_parallel_calls)`` reading several shards at
  once;
* a shuffle buffer (seeded, reshuffled each iteration);
* ``map(parse + decode + augment, num_parallel_calls)``: ``tf.io.parse_single_example``, the
  train transform's fused ``tf.image.decode_and_crop_jpeg`` on a box drawn by
  ``tf.image.sample_distorted_bounding_box`` (area 0.08-1, aspect 3/4-4/3, 10 attempts, the
  whole image otherwise; a record that is not a JPEG, ``tf.io.is_jpeg``, is decoded whole by
  ``tf.io.decode_image`` and cropped to the same kind of box), ``tf.image.resize`` to 224
  (bilinear), ``random_flip_left_right``; the eval transform's ``decode_image``,
  aspect-preserving resize of the shorter side to 256 and a central 224 crop; then
  normalisation by ImageNet's mean and std. ``decode_image`` reads JPEG (the same
  libjpeg-turbo decode as ``decode_jpeg``), PNG, WebP, BMP and GIF, as the other frameworks'
  loaders (Pillow, OpenCV) read a user's PNGs;
* ``batch`` (the last one partial), ``prefetch``; a private thread pool of ``workers`` threads.

``workers`` is tf.data's parallelism: ``num_parallel_calls`` of the map and interleave and the
private thread pool's size. Sample ids come from the record's ``image/filename`` through a
``tf.lookup.StaticHashTable`` inside the pipeline. No ``ignore_errors`` (see ``_build``).
Imported by the worker only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import tensorflow as tf

from suite.adapters.data_words import MEAN_RGB, STD_RGB, Batch, Loader, LoaderSpec
from suite.errors import AdapterError

SHUFFLE_BUFFER = 256


class TfDataLoader(Loader):
    def __init__(self, spec: LoaderSpec) -> None:
        self.spec = spec
        tf.random.set_seed(spec.seed)
        self.table: Any = None
        if spec.shard_bases is None:  # a suite dataset's records: ids by image/filename
            keys = tf.constant([k for k in spec.keys])
            self.table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(keys, tf.range(len(spec.keys), dtype=tf.int64)),
                default_value=-1,
            )
        self.ds = self._build()

    def _build(self) -> Any:
        s = self.spec
        w = max(1, s.workers)
        features = {
            "image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64),
            "image/filename": tf.io.FixedLenFeature([], tf.string),
        }
        mean = tf.constant(MEAN_RGB, dtype=tf.float32)
        std = tf.constant(STD_RGB, dtype=tf.float32)
        crop, resize, train = s.crop, s.resize, s.transform == "train"
        table = self.table

        user = s.shard_bases is not None
        if user:  # a user's shards: ids from (shard, ordinal); no image/filename needed
            del features["image/filename"]

        def decode_any(data: Any) -> Any:  # JPEG through libjpeg-turbo as decode_jpeg does
            return tf.io.decode_image(data, channels=3, expand_animations=False)

        def image(ex: Any) -> Any:
            data = ex["image/encoded"]
            if s.transform == "decode":  # decoded and dropped: a peer's workload
                return tf.reshape(tf.reduce_mean(tf.cast(decode_any(data), tf.float32)), [1])
            if train:

                def box(shape: Any) -> Any:
                    begin, size, _ = tf.image.sample_distorted_bounding_box(
                        shape, bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]),
                        min_object_covered=0.0, aspect_ratio_range=(3 / 4, 4 / 3),
                        area_range=(0.08, 1.0), max_attempts=10,
                        use_image_if_no_bounding_boxes=True, seed=s.seed,
                    )  # fmt: skip
                    oy, ox, _ = tf.unstack(begin)
                    h, w_, _ = tf.unstack(size)
                    return tf.stack([oy, ox, h, w_])

                def jpeg_crop() -> Any:  # the fused decode: only the box's blocks decoded
                    window = box(tf.image.extract_jpeg_shape(data))
                    return tf.image.decode_and_crop_jpeg(data, window, channels=3)

                def other_crop() -> Any:  # PNG, WebP, BMP, GIF: decoded whole, then cropped
                    full = decode_any(data)
                    oy, ox, h, w_ = tf.unstack(box(tf.shape(full)))
                    return full[oy : oy + h, ox : ox + w_, :]

                img = tf.cond(tf.io.is_jpeg(data), jpeg_crop, other_crop)
                img = tf.image.resize(img, [crop, crop], method="bilinear")
                img = tf.image.random_flip_left_right(img, seed=s.seed)
            else:
                img = decode_any(data)
                shape = tf.cast(tf.shape(img)[:2], tf.float32)
                scale = resize / tf.reduce_min(shape)
                new = tf.cast(tf.round(shape * scale), tf.int32)
                img = tf.image.resize(img, new, method="bilinear")
                top = (new[0] - crop) // 2
                left = (new[1] - crop) // 2
                img = img[top : top + crop, left : left + crop, :]
            return (tf.cast(img, tf.float32) - mean) / std

        def parse(record: Any) -> Any:
            ex = tf.io.parse_single_example(record, features)
            stem = tf.strings.regex_replace(ex["image/filename"], r"\.[^.]*$", "")
            return table.lookup(stem), ex["image/class/label"], image(ex)

        def parse_keyed(sid: Any, record: Any) -> Any:
            ex = tf.io.parse_single_example(record, features)
            return sid, ex["image/class/label"], image(ex)

        if user:
            bases = tf.constant(s.shard_bases, dtype=tf.int64)
            files = tf.data.Dataset.from_tensor_slices(
                (list(s.files), tf.range(len(s.files), dtype=tf.int64)))  # fmt: skip
        else:
            files = tf.data.Dataset.from_tensor_slices(sorted(s.files))
        if s.world > 1:
            files = files.shard(s.world, s.rank)
        files = files.shuffle(len(s.files), seed=s.seed, reshuffle_each_iteration=True)
        if user:  # each record's ordinal in its shard: TFRecordDataset.enumerate()

            def records(f: Any, i: Any) -> Any:
                return tf.data.TFRecordDataset(f).enumerate().map(
                    lambda n, r: (bases[i] + n, r))  # fmt: skip

            ds = files.interleave(records, cycle_length=w, num_parallel_calls=w,
                                  deterministic=True)  # fmt: skip
        else:
            ds = files.interleave(
                tf.data.TFRecordDataset, cycle_length=w, num_parallel_calls=w, deterministic=True
            )
        ds = ds.shuffle(SHUFFLE_BUFFER, seed=s.seed, reshuffle_each_iteration=True)
        # no ignore_errors: it cost 5.5% of the rate (743 -> 704 samples/s, measured here), and
        # it would drop a record that does not decode, which the exactly-once check would then
        # count as missing: such a record fails the task with TensorFlow's error instead (the
        # suite's shards are checked when written; `dlsuite data info --scan` finds a user's)
        ds = ds.map(parse_keyed if user else parse, num_parallel_calls=w, deterministic=True)
        ds = ds.batch(s.batch, drop_remainder=False).prefetch(2)
        opts = tf.data.Options()
        opts.threading.private_threadpool_size = w
        opts.threading.max_intra_op_parallelism = 1
        opts.deterministic = True
        return ds.with_options(opts)

    def epoch(self, epoch: int) -> Iterator[Batch]:
        try:
            for ids, labels, images in self.ds:  # each iteration reshuffles (seeded)
                yield Batch(ids.numpy(), labels.numpy(), images)
        except tf.errors.InvalidArgumentError as exc:
            # tf.data has no per-record recovery (see _build): one line naming the dataset and
            # how to find the record, not TensorFlow's graph trace
            said = (exc.message or str(exc)).strip().splitlines()[0][:200]
            raise AdapterError(
                f"a record of the TFRecord shards at {self.spec.root} does not decode with "
                f"TensorFlow ({said}); `dlsuite data info {self.spec.root} --scan` names it: "
                "rewrite or drop it"
            ) from None

    def decode(self, data: bytes) -> np.ndarray:
        return np.asarray(tf.io.decode_image(data, channels=3, expand_animations=False))

    def describe(self) -> dict[str, Any]:
        w = max(1, self.spec.workers)
        return {
            "loader": "tf.data: shard list (shard per rank, shuffled) -> interleave("
            f"TFRecordDataset, cycle_length={w}) -> shuffle({SHUFFLE_BUFFER}) -> map(parse, "
            f"decode_and_crop_jpeg / decode_image, resize, flip, normalise; num_parallel_calls="
            f"{w}) -> batch -> prefetch(2)",
            "num_parallel_calls": w,
            "private_threadpool_size": w,
            "decoder": "tf.io.decode_image (JPEG through libjpeg-turbo with TensorFlow's default "
            "dct_method; PNG, WebP, BMP, GIF too); the train crop of a JPEG through "
            "decode_and_crop_jpeg",
            "ids": "the record's shard and ordinal (TFRecordDataset.enumerate() per shard): the "
            "format's own key"
            if self.spec.shard_bases is not None
            else "image/filename through a tf.lookup.StaticHashTable",
            "sharding": f"Dataset.shard({self.spec.world}, {self.spec.rank}) on the shard files"
            if self.spec.world > 1
            else "none (one rank)",
            "deterministic": True,
            "workers_note": "workers=0 runs as 1 (tf.data has no in-line mode)"
            if self.spec.workers == 0
            else None,
        }
