"""The CPU facts the suite reads (suite/cpuinfo.py): this machine's, or a file's injected with
``DLSUITE_CPUINFO``, so that every branch that depends on the CPU runs on any machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite import cpuinfo
from tests.helpers import ROOT, cli, records

CPUS = ROOT / "tests" / "cpus"
AMD = CPUS / "amd-epyc-avx2.cpuinfo"
XEON = CPUS / "intel-xeon-avx512-bf16.cpuinfo"
AMX = CPUS / "intel-xeon-amx.cpuinfo"


def test_this_machine_is_read_when_nothing_is_injected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cpuinfo.CPUINFO_VAR, raising=False)
    assert not cpuinfo.injected()
    real = Path("/proc/cpuinfo").read_text().split("\n\n", 1)[0]
    model = next(line for line in real.splitlines() if line.startswith("model name"))
    assert cpuinfo.model_name() == model.partition(":")[2].strip()
    assert cpuinfo.flags() == set(
        next(line for line in real.splitlines() if line.startswith("flags"))
        .partition(":")[2]
        .split()
    )


@pytest.mark.parametrize(
    ("path", "model", "vendor", "per_cycle", "bf16_over_fp32"),
    [
        (AMD, "AMD EPYC 7B13", "AuthenticAMD", 32, 1.0),  # AVX2 + FMA; bf16 computed in fp32
        (XEON, "Intel(R) Xeon(R) Processor", "GenuineIntel", 64, 2.0),  # AVX512_BF16 dot products
        (AMX, "Intel(R) Xeon(R) Platinum 8480+", "GenuineIntel", 64, 1024 / 64),  # AMX tiles
    ],
)
def test_injected_cpu_decides_every_cpu_fact(
    monkeypatch: pytest.MonkeyPatch,
    path: Path,
    model: str,
    vendor: str,
    per_cycle: int,
    bf16_over_fp32: float,
) -> None:
    monkeypatch.setenv(cpuinfo.CPUINFO_VAR, str(path))
    assert cpuinfo.injected() and cpuinfo.cpuinfo_source() == str(path)
    assert cpuinfo.model_name() == model
    assert cpuinfo.vendor() == vendor
    assert cpuinfo.fp32_flops_per_cycle(cpuinfo.flags(), cpuinfo.vendor()) == per_cycle
    est = cpuinfo.estimate_peak()
    # the injected CPU's own clock (its cpu MHz line), not this machine's cpufreq
    mhz = float(cpuinfo.cpu_facts()["cpu MHz"])
    assert f"{mhz / 1e3:.2f} GHz (/proc/cpuinfo cpu MHz)" in est.source
    assert est.tflops["fp32"] == pytest.approx(cpuinfo.usable_cores() * mhz / 1e3 * per_cycle / 1e3)
    assert est.tflops["bf16"] / est.tflops["fp32"] == pytest.approx(bf16_over_fp32)


def test_an_unreadable_injected_file_is_an_error_not_this_machine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(cpuinfo.CPUINFO_VAR, str(tmp_path / "missing.cpuinfo"))
    with pytest.raises(RuntimeError, match="DLSUITE_CPUINFO=.*missing.cpuinfo: cannot read"):
        cpuinfo.model_name()


@pytest.mark.numpy
def test_a_run_on_an_injected_cpu_records_it(tmp_path: Path) -> None:
    """The workers inherit the injection: the record names the injected CPU and says where
    its facts came from (a record never passes an injected CPU off as measured hardware)."""
    out = tmp_path / "run"
    env = {cpuinfo.CPUINFO_VAR: str(AMD), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = cli(
        "run", "--framework", "numpy", "--quick", "--benchmark", "softmax", "--dtype", "fp32",
        "--config", str(ROOT / "tests" / "fast-measure.toml"), "--out", str(out), env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    recs = records(out)
    assert recs and all(r["status"] == "ok" for r in recs)
    for rec in recs:
        assert rec["device"]["name"] == "AMD EPYC 7B13"
        assert rec["device"]["cpu_facts_from"] == str(AMD)
        assert "32 fp32 FLOP/cycle" in rec["device"]["peak_source"]
    cached = json.loads((tmp_path / "cache" / "dlsuite" / "cpu-peak.json").read_text())
    assert "AMD EPYC 7B13" in cached["key"]  # the measured rate is keyed by the injected CPU
