"""The suite's input-pipeline record next to a bare loader loop written by hand: same files,
same workers, same batch, same transform, warm page cache, in one process, interleaved
(suite, bare, bare, suite, ...) so drift hits both alike. Target: 0.95 <= suite/bare <= 1.05
(two-sided: a suite faster than the bare loop measures something else).

    .venv/bin/python -m benchmarks.validation.data_vs_bare --framework pytorch [--workers 2] [--rounds 4]
    <tensorflow env>/bin/python -m benchmarks.validation.data_vs_bare --framework tensorflow

The suite's side is the ``loader`` benchmark run as the worker runs it
(``suite.levels.execute``); its headline samples/s (the median of its windows over the measured
epoch) is printed beside, but the verdict compares its steady rate, the statistic the bare
side can compute too. The bare side is a plain loop over the framework's own loader, written here without the
suite (PyTorch: a ``Dataset`` reading each file, Pillow's decode, the train transform with
torch ops, a ``DataLoader`` with the same workers, persistent; TensorFlow: the same tf.data
chain over the TFRecord shards), a warm-up epoch and then one epoch timed from its first batch
to its last. The rate of each side is its epoch's samples after the same fill (2 x workers + 1
batches) over the time they took; the ratio per round is suite/bare, the verdict on the median
over rounds, with at least half the rounds within the target (``judge``: rounds that scatter to
both sides of it are inconclusive, whatever their median).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.validation import SMOKE_HELP, judge
from suite.datasets.location import resolve_data_dir
from suite.levels.training import dataset as D

LOW, HIGH = 0.95, 1.05


def steady(arrivals: list[float], sizes: list[int], workers: int) -> float:
    """Samples after the fill (2 x workers + 1 batches, at most a quarter) over their time."""
    warm = max(1, min(2 * max(1, workers) + 1, len(arrivals) // 4))
    return sum(sizes[warm:]) / (arrivals[-1] - arrivals[warm - 1])


# -- bare loops ------------------------------------------------------------------------------


def bare_pytorch(files: list[str], labels: list[int], workers: int, batch: int, seed: int) -> float:
    import math as m

    import numpy as np
    import torch
    import torch.nn.functional as F
    from PIL import Image
    from torch.utils.data import DataLoader, Dataset

    mean = torch.tensor([123.675, 116.28, 103.53]).view(3, 1, 1)
    std = torch.tensor([58.395, 57.12, 57.375]).view(3, 1, 1)

    class Files(Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return len(files)

        def __getitem__(self, i: int) -> Any:
            with open(files[i], "rb") as fh, Image.open(io.BytesIO(fh.read())) as im:
                x = torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1)
            h, w = x.shape[1:]
            for _ in range(10):
                area = h * w * torch.empty(1).uniform_(0.08, 1.0).item()
                r = m.exp(torch.empty(1).uniform_(m.log(3 / 4), m.log(4 / 3)).item())
                cw, ch = round(m.sqrt(area * r)), round(m.sqrt(area / r))
                if 0 < cw <= w and 0 < ch <= h:
                    t = int(torch.randint(0, h - ch + 1, (1,)))
                    left = int(torch.randint(0, w - cw + 1, (1,)))
                    break
            else:
                t, left, ch, cw = 0, 0, h, w
            y = F.interpolate(x[:, t : t + ch, left : left + cw].float()[None], size=(224, 224),
                              mode="bilinear", antialias=True, align_corners=False)[0]  # fmt: skip
            if torch.rand(1).item() < 0.5:
                y = y.flip(-1)
            return (y - mean) / std, labels[i]

    g = torch.Generator().manual_seed(seed)
    dl = DataLoader(Files(), batch_size=batch, shuffle=True, num_workers=workers,
                    persistent_workers=workers > 0, generator=g)  # fmt: skip
    for _ in dl:  # warm-up epoch (workers started, page cache warm)
        pass
    arrivals, sizes = [], []
    for x, _y in dl:
        arrivals.append(time.perf_counter())
        sizes.append(int(x.shape[0]))
    return steady(arrivals, sizes, workers)


def bare_tensorflow(files: list[str], workers: int, batch: int, seed: int) -> float:
    import tensorflow as tf

    w = max(1, workers)
    feats = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
             "image/class/label": tf.io.FixedLenFeature([], tf.int64)}  # fmt: skip
    mean = tf.constant([123.675, 116.28, 103.53])
    std = tf.constant([58.395, 57.12, 57.375])

    def parse(rec: Any) -> Any:
        ex = tf.io.parse_single_example(rec, feats)
        shape = tf.image.extract_jpeg_shape(ex["image/encoded"])
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            shape, tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]), min_object_covered=0.0,
            aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0), max_attempts=10,
            use_image_if_no_bounding_boxes=True, seed=seed)  # fmt: skip
        oy, ox, _ = tf.unstack(begin)
        h, ww, _ = tf.unstack(size)
        img = tf.image.decode_and_crop_jpeg(
            ex["image/encoded"], tf.stack([oy, ox, h, ww]), channels=3
        )
        img = tf.image.random_flip_left_right(tf.image.resize(img, [224, 224]), seed=seed)
        return (img - mean) / std, ex["image/class/label"]

    ds = tf.data.Dataset.from_tensor_slices(sorted(files)).shuffle(len(files), seed=seed)
    ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=w, num_parallel_calls=w)
    ds = ds.shuffle(256, seed=seed).map(parse, num_parallel_calls=w).batch(batch).prefetch(2)
    opts = tf.data.Options()
    opts.threading.private_threadpool_size = w
    opts.threading.max_intra_op_parallelism = 1
    ds = ds.with_options(opts)
    for _ in ds:
        pass
    arrivals, sizes = [], []
    for x, _y in ds:
        arrivals.append(time.perf_counter())
        sizes.append(int(x.shape[0]))
    return steady(arrivals, sizes, workers)


# -- the suite's record ----------------------------------------------------------------------


def suite_record(
    framework: str, fmt: str, workers: int, batch: int, data_dir: str
) -> dict[str, Any]:
    from suite.adapters import ADAPTERS
    from suite.levels import execute

    adapter = ADAPTERS.load(framework)()
    device = adapter.setup("cpu")
    task = {"benchmark": "loader", "level": "training", "dtype": "fp32", "seed": 0,
            "world_size": 1, "data": {"dir": data_dir},
            "params": {"format": fmt, "workers": workers, "batch": batch, "cache": "warm",
                       "transform": "train", "dataset": "quick"}}  # fmt: skip
    out = execute(task, adapter, device)
    assert isinstance(out, dict)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--framework", choices=("pytorch", "tensorflow"), default="pytorch")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--json", help="write the rounds here")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args()
    if args.smoke:  # one round (the quick dataset's 2,000 images, twice a side): it runs
        args.rounds = 1
    fmt = "folder" if args.framework == "pytorch" else "tfrecord"
    data_dir = args.data_dir or str(resolve_data_dir().path)
    data = D.ensure({"dataset": "quick"}, fmt, data_dir, 0)
    rows = []
    for r in range(args.rounds):
        order = ("suite", "bare") if r % 2 == 0 else ("bare", "suite")
        got: dict[str, Any] = {}
        for side in order:
            if side == "suite":
                rec = suite_record(args.framework, fmt, args.workers, args.batch, data_dir)
                tp = next(m for m in rec["metrics"] if m["name"] == "throughput")
                got["suite"] = rec["pipeline"]["epoch"]["steady_rate"]
                got["suite_headline"] = tp["value"]
                got["suite_checks_passed"] = rec["correctness"]["passed"]
            elif args.framework == "pytorch":
                got["bare"] = bare_pytorch(data.files, data.catalogue.labels, args.workers,
                                           args.batch, 0)  # fmt: skip
            else:
                got["bare"] = bare_tensorflow(data.files, args.workers, args.batch, 0)
        got["ratio"] = got["suite"] / got["bare"]
        got["headline_ratio"] = got["suite_headline"] / got["bare"]
        rows.append(got)
        print(json.dumps({"round": r, **{k: round(v, 4) if isinstance(v, float) else v
                                         for k, v in got.items()}}), flush=True)  # fmt: skip
    ratio = statistics.median(r["ratio"] for r in rows)
    head = statistics.median(r["headline_ratio"] for r in rows)
    met, verdict = judge([r["ratio"] for r in rows], LOW, HIGH)
    ok = met and all(r["suite_checks_passed"] for r in rows)
    load = os.getloadavg()
    summary = {
        "framework": args.framework, "format": fmt, "workers": args.workers, "batch": args.batch,
        "rounds": len(rows), "median_ratio_steady": ratio, "median_ratio_headline": head,
        "target": [LOW, HIGH], "within": ok, "verdict": verdict, "load_average": load,
        "machine": platform.processor() or platform.machine(), "cores": os.cpu_count(),
        "dataset": str(data.path),
    }  # fmt: skip
    print(json.dumps(summary))
    print()
    print(
        "| round | suite (samples/s, steady) | suite (headline) | bare (samples/s) | suite/bare |"
    )
    print("| --- | ---: | ---: | ---: | ---: |")
    for i, r in enumerate(rows):
        print(f"| {i} | {r['suite']:.1f} | {r['suite_headline']:.1f} | {r['bare']:.1f} | "
              f"{r['ratio']:.3f} |")  # fmt: skip
    print(f"\nratio suite/bare = {ratio:.3f} (median over {len(rows)} rounds; target {LOW}-{HIGH}: "
          f"{verdict}); suite checks "
          f"{'pass' if all(r['suite_checks_passed'] for r in rows) else 'FAIL'}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "rounds": rows}, indent=2))
    if args.smoke:
        print("smoke run (1 round): it ran end to end; the verdict means nothing")
        return 0 if all(r["suite_checks_passed"] for r in rows) and math.isfinite(ratio) else 1
    return 0 if ok and math.isfinite(ratio) else 1


if __name__ == "__main__":
    raise SystemExit(main())
