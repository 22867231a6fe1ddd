"""MXNet RecordIO with MXNet's own writer; run in the MXNet environment:
``python -m suite.datasets.writers_mxnet write PLAN.json`` (:mod:`suite.datasets.writer_common`).

im2rec's layout: one ``train.rec`` of records ``mx.recordio.pack(IRHeader(flag=0,
label=<class>, id=<index>, id2=0), <JPEG bytes>)`` written through
``mx.recordio.MXIndexedRecordIO`` (which also writes ``train.idx``: ``<index>\\t<offset>``
per record), and ``train.lst`` (``<index>\\t<label>\\t<path>``, im2rec's list). The record
ids are positions in the written (shuffled) order; the JPEG bytes are the source files'
unchanged (im2rec with ``--pass-through``). ``ImageRecordIter`` shards it across ranks and
workers with ``part_index``/``num_parts``. Read back with ``MXIndexedRecordIO.read_idx`` and
``mx.recordio.unpack``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from suite.datasets import writer_common as W


def write(plan: dict[str, Any]) -> tuple[dict[str, tuple[str, int]], dict[str, Any]]:
    import mxnet as mx

    def write_shard(out: Path, shard: dict[str, Any], wrote: W.Wrote) -> list[str]:
        name = shard["name"]
        rec = mx.recordio.MXIndexedRecordIO(str(out / f"{name}.idx"), str(out / f"{name}.rec"), "w")
        with open(out / f"{name}.lst", "w") as lst:
            for idx, (relpath, label, _key) in enumerate(shard["samples"]):
                data = W.read_source(plan, relpath)
                header = mx.recordio.IRHeader(0, float(label), idx, 0)
                rec.write_idx(idx, mx.recordio.pack(header, data))
                lst.write(f"{idx}\t{float(label):f}\t{relpath}\n")
                wrote(f"{name}:{idx}", data, label)
        rec.close()
        return [f"{name}.rec", f"{name}.idx", f"{name}.lst"]

    return W.write_shards(plan, "RecordIO", write_shard)


def verify(plan: dict[str, Any], expected: dict[str, tuple[str, int]]) -> dict[str, Any]:
    import mxnet as mx

    t0 = time.perf_counter()
    out = Path(plan["out"])
    check = W.Checker(expected)
    bar = W.Progress(len(expected), "reading RecordIO back")
    for shard in plan["shards"]:
        name = shard["name"]
        rec = mx.recordio.MXIndexedRecordIO(str(out / f"{name}.idx"), str(out / f"{name}.rec"), "r")
        for idx in sorted(rec.keys):
            header, data = mx.recordio.unpack(rec.read_idx(idx))
            label = header.label if isinstance(header.label, float) else float(header.label[0])
            check.see(f"{name}:{header.id}", data, int(label))
            bar.step()
        rec.close()
    return check.result("mx.recordio.MXIndexedRecordIO.read_idx + unpack", time.perf_counter() - t0)


def versions() -> dict[str, Any]:
    import mxnet as mx

    return {"mxnet": mx.__version__, "writer": "mx.recordio.MXIndexedRecordIO + pack"}


if __name__ == "__main__":
    raise SystemExit(W.main(sys.argv[1:], write, verify, versions))
