"""The packed formats of a suite dataset, each written by its own framework's writer.

==============  ===========================================  ==============================
format          writer (module, run as a subprocess)          environment
==============  ===========================================  ==============================
``webdataset``  ``webdataset.TarWriter`` (writers_wds)        this interpreter when it has
                                                              ``webdataset``, else PyTorch's
``tfrecord``    ``tf.io.TFRecordWriter`` (writers_tf)         ``dlsuite envs`` tensorflow
``recordio``    ``mx.recordio.MXIndexedRecordIO`` (writers_   ``dlsuite envs`` mxnet
                mxnet)
==============  ===========================================  ==============================

The host never imports a framework (nor ``webdataset``, which imports torch where torch is
installed): it writes a plan (:func:`shard_plan`: every image of the folder in one seeded
order, the same for every format, cut into shards of about ``SHARD_BYTES``), runs the
writer in the framework's environment with the checkout on ``PYTHONPATH``, shows its progress,
and takes its JSON result: what was written, and the read-back check (every record once,
bytes identical to the source JPEG, label the same). Only a format whose check passed is
moved into place (``<dataset>/<format>/``) and entered in the manifest with its bytes on disk
and file-list digest; a second call reuses it after comparing that digest.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from suite.datasets import make as M
from suite.errors import ConfigError, SuiteError

FORMATS = ("folder", "webdataset", "tfrecord", "recordio")
#: format -> (writer module, framework whose environment runs it)
WRITERS = {
    "webdataset": ("suite.datasets.writers_wds", "pytorch"),
    "tfrecord": ("suite.datasets.writers_tf", "tensorflow"),
    "recordio": ("suite.datasets.writers_mxnet", "mxnet"),
}
#: a shard's target size (ImageNet's TFRecord and WebDataset shards are ~100-150 MB) and the
#: fewest shards (so 2 ranks x 4 loader workers each have one to read)
SHARD_BYTES = 128 << 20
MIN_SHARDS = 8


class FormatError(SuiteError):
    """A writer failed or its read-back check did not pass (exit 1: not the user's input)."""

    exit_code = 1


def check_formats(names: list[str]) -> list[str]:
    """The formats named, in a stable order; ConfigError for an unknown one."""
    for n in names:
        if n not in FORMATS:
            raise ConfigError(f"--format {n!r}: use one or more of: {', '.join(FORMATS)}")
    return [f for f in FORMATS if f in names]


def shard_plan(ds: M.Dataset, fmt: str, out: Path) -> dict[str, Any]:
    """The writer's plan: the source folder, the output directory, and the shards."""
    files = M.file_list(ds)
    order = np.random.default_rng([ds.manifest["params"]["seed"], 0x6F72646572]).permutation(
        len(files)
    )  # "order": one seeded shuffle, shared by every format
    sizes = dict(M.scan_sizes(ds.folder))
    total = sum(sizes.values())
    samples = [[files[i][0], files[i][1], Path(files[i][0]).stem] for i in order]
    if fmt == "recordio":  # im2rec makes one .rec per split; readers shard it with part_index
        shards = [{"name": "train", "samples": samples}]
    else:
        n = max(MIN_SHARDS, math.ceil(total / SHARD_BYTES))
        n = min(n, len(samples))
        bounds = [round(i * len(samples) / n) for i in range(n + 1)]
        if fmt == "tfrecord":
            names = [f"train-{i:05d}-of-{n:05d}" for i in range(n)]
        else:
            names = [f"train-{i:06d}.tar" for i in range(n)]
        shards = [
            {"name": names[i], "samples": samples[bounds[i] : bounds[i + 1]]} for i in range(n)
        ]
    return {
        "format": fmt,
        "source": str(ds.folder),
        "out": str(out),
        "order": "seeded permutation of the folder's images (seed, 'order'); same for every format",
        "shards": shards,
    }


def writer_python(fmt: str, python: str | None = None) -> tuple[str, str]:
    """(the interpreter that runs ``fmt``'s writer, where it came from)."""
    if python:
        return python, "given"
    module, framework = WRITERS[fmt]
    if fmt == "webdataset" and importlib.util.find_spec("webdataset") is not None:
        return sys.executable, "this interpreter (webdataset is installed here)"
    from suite import envs

    env = envs.ensure(framework)
    return str(env.python), f"the {framework} environment {env.path}"


def _subprocess_env() -> dict[str, str]:
    from suite.provenance import SOURCE_ROOT

    path = os.pathsep.join(p for p in (str(SOURCE_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "TF_CPP_MIN_LOG_LEVEL": "2"}


def run_writer(
    fmt: str,
    plan_path: Path,
    python: str,
    progress: M.Progress | None = None,
) -> dict[str, Any]:
    """Run ``fmt``'s writer on a plan; its JSON result (FormatError when it failed)."""
    module, _ = WRITERS[fmt]
    proc = subprocess.Popen(
        [python, "-m", module, "write", str(plan_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=_subprocess_env(),
    )
    log: list[str] = []

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            parts = line.split(" ", 3)
            if parts[0] == "progress" and len(parts) == 4:
                if progress:
                    progress(parts[3].strip(), int(parts[1]), int(parts[2]))
            else:
                log.append(line.rstrip())
                del log[:-60]

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    assert proc.stdout is not None
    stdout = proc.stdout.read()
    code = proc.wait()
    thread.join(timeout=10)
    result: dict[str, Any] | None = None
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                result = json.loads(line)
                break
            except ValueError:
                pass
    text = "\n".join(log)
    if "No space left on device" in text or "Disk quota exceeded" in text:
        raise OSError(errno.ENOSPC, "No space left on device", str(plan_path.parent))
    if result is None:
        tail = [ln for ln in log if ln.strip()][-3:]
        raise FormatError(
            f"the {fmt} writer ({module}, {python}) exited {code} without a result: "
            + (" | ".join(t.strip()[:300] for t in tail) or "no output")
        )
    if code != 0 or not result["verify"]["passed"]:
        v = result["verify"]
        raise FormatError(
            f"the {fmt} read-back check failed ({v['reader']}): {v['records']} records of "
            f"{v['expected']}, {v['missing']} missing, {v['duplicated']} duplicated, "
            f"{v['bytes_mismatch']} with other bytes, {v['label_mismatch']} with another "
            f"label (e.g. {', '.join(v['examples'][:3])})"
        )
    return result


def add_format(
    ds: M.Dataset,
    fmt: str,
    *,
    python: str | None = None,
    progress: M.Progress | None = None,
    force: bool = False,
) -> M.Dataset:
    """``ds`` with ``fmt`` written, checked and entered in its manifest (reused when there)."""
    if fmt == "folder":
        return ds
    root = ds.path.parent
    with M.dataset_lock(root, ds.path.name):
        manifest = M.read_manifest(ds.path)
        entry = manifest["formats"].get(fmt)
        final = ds.path / fmt
        if entry is not None and not force:
            found = M.scan_sizes(final) if final.is_dir() else []
            if M.list_digest(found) == entry["digest"]:
                return M.Dataset(ds.path, manifest, reused=True)
            raise M.DatasetError(
                f"{final}: its files differ from the manifest's ({len(found)} found, "
                f"{entry['files']} listed); run `dlsuite data make --force --format {fmt}` "
                "to write it again"
            )
        folder_bytes = manifest["formats"]["folder"]["bytes"]
        M.check_space(ds.path, int(folder_bytes * 1.05) + M.SPACE_MARGIN_BYTES, f"the {fmt} copy")
        exe, where = writer_python(fmt, python)
        tmp = ds.path / f".{fmt}.tmp-{os.getpid()}"
        plan_path = ds.path / f".{fmt}.plan-{os.getpid()}.json"
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            plan = shard_plan(M.Dataset(ds.path, manifest), fmt, tmp)
            plan_path.write_text(json.dumps(plan))
            result = run_writer(fmt, plan_path, exe, progress)
            os.sync()
            found = M.scan_sizes(tmp)
            manifest["formats"][fmt] = {
                "path": fmt,
                "layout": fmt,
                "files": len(found),
                "bytes": sum(n for _, n in found),
                "digest": M.list_digest(found),
                "shards": len(plan["shards"]),
                "records": result["written"]["records"],
                "label_base": result["written"]["label_base"],
                "order": plan["order"],
                "writer": {**result["versions"], "python": exe, "environment": where},
                "write_seconds": result["write_seconds"],
                "read_back": result["verify"],
                "overhead_vs_folder": sum(n for _, n in found) / folder_bytes - 1.0,
            }
            if final.exists():
                shutil.rmtree(final)
            tmp.rename(final)
            M.write_manifest(ds.path, manifest)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise M.DatasetError(
                    f"data dir {root}: the file system filled while writing the {fmt} copy of "
                    f"{ds.path.name}; nothing of it was kept; free about "
                    f"{M.human_bytes(folder_bytes)} or choose another --data-dir"
                ) from None
            raise
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            plan_path.unlink(missing_ok=True)
    return M.Dataset(ds.path, manifest)


def make_dataset(
    root: Path,
    size: str = "quick",
    formats: list[str] | None = None,
    *,
    seed: int = 0,
    classes: int | None = None,
    images: int | None = None,
    progress: M.Progress | None = None,
    force: bool = False,
    pythons: dict[str, str] | None = None,
    say: Callable[[str], None] | None = None,
) -> M.Dataset:
    """The dataset with every format in ``formats`` (default: the folder), made or reused.
    The space check covers the folder and every packed copy asked for."""
    wanted = check_formats(formats or ["folder"])
    packed = [f for f in wanted if f != "folder"]
    p = M.params_for(size, seed=seed, classes=classes, images=images)
    extra = (M.estimate_bytes(p) - M.SPACE_MARGIN_BYTES) * len(packed)
    ds = M.make_imagefolder(
        root, size, seed, classes, images, progress=progress, force=force, extra_space=extra
    )
    if say and ds.reused:
        say(f"reusing {ds.path} (its files match the manifest)")
    for fmt in packed:
        ds = add_format(ds, fmt, python=(pythons or {}).get(fmt), progress=progress, force=force)
    return ds
