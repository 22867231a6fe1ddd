"""WebDataset tar shards with the ``webdataset`` package's writer:
``python -m suite.datasets.writers_wds write PLAN.json`` (:mod:`suite.datasets.writer_common`).

A separate process, not the host's: ``import webdataset`` imports torch wherever torch is
installed (``webdataset/pytorch.py`` takes ``DataLoader`` and ``IterableDataset`` from it at
import: measured, 5.8 s and ``torch`` in ``sys.modules`` beside torch 2.13), and the host side
imports no framework. Samples are ``<key>.jpg`` (the source JPEG's bytes, unchanged) and
``<key>.cls`` (the label as decimal text), the convention of the ImageNet WebDataset shards;
written with ``webdataset.TarWriter``, read back with ``webdataset.WebDataset`` (raw bytes,
no decoding, shards in order).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from suite.datasets import writer_common as W


def write(plan: dict[str, Any]) -> tuple[dict[str, tuple[str, int]], dict[str, Any]]:
    import webdataset as wds

    def write_shard(out: Path, shard: dict[str, Any], wrote: W.Wrote) -> list[str]:
        path = out / shard["name"]
        with wds.TarWriter(str(path)) as sink:
            for relpath, label, key in shard["samples"]:
                data = W.read_source(plan, relpath)
                sink.write({"__key__": key, "jpg": data, "cls": str(int(label)).encode()})
                wrote(key, data, label)
        return [path.name]

    return W.write_shards(plan, "WebDataset", write_shard)


def verify(plan: dict[str, Any], expected: dict[str, tuple[str, int]]) -> dict[str, Any]:
    import webdataset as wds

    t0 = time.perf_counter()
    out = Path(plan["out"])
    urls = [str(out / s["name"]) for s in plan["shards"]]
    check = W.Checker(expected)
    bar = W.Progress(len(expected), "reading WebDataset back")
    for sample in wds.WebDataset(urls, shardshuffle=False, empty_check=False):
        check.see(sample["__key__"], sample["jpg"], int(sample["cls"].decode()))
        bar.step()
    return check.result("webdataset.WebDataset (raw samples)", time.perf_counter() - t0)


def versions() -> dict[str, Any]:
    from importlib import metadata

    return {
        "webdataset": metadata.version("webdataset"),
        "writer": "webdataset.TarWriter",
        "torch_imported": "torch" in sys.modules,
    }


if __name__ == "__main__":
    raise SystemExit(W.main(sys.argv[1:], write, verify, versions))
