"""A real operator run's CPU records carry the host's measured memory bandwidth (the roofline's
memory roof), read from the cache the first measurement wrote."""

from __future__ import annotations

from pathlib import Path

from suite import cpuinfo, membw
from tests.helpers import FAST_MEASURE, cli, records


def test_operator_records_carry_the_cached_bandwidth(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    seeded = membw.Bandwidth(
        12.5, 12.0, cpuinfo.usable_cores(), 1 << 30, 10, None, "measured: seeded for this test"
    )
    path = cache / "dlsuite" / "membw.json"
    membw._store(path, membw.cache_key(cpuinfo.usable_cores()), seeded)
    out = tmp_path / "run"
    proc = cli(
        "run", "--level", "operator", "--framework", "numpy", "--benchmark", "gemm", "--quick",
        "--dtype", "fp32", "--config", str(FAST_MEASURE), "--out", str(out),
        env={"XDG_CACHE_HOME": str(cache)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (rec,) = records(out)
    assert rec["status"] == "ok" and rec["device"]["kind"] == "cpu"
    assert rec["device"]["peak_bandwidth_gbps"] == 12.5
    assert rec["device"]["peak_bandwidth_source"] == "measured: seeded for this test"
