"""NVML (``pynvml`` from the ``nvidia-ml-py`` package): which GPUs a rank uses, and reading them.

The module object is passed in (``nvml``) rather than imported at the top, so the mapping and
reading logic is testable with a fake module and ``import suite.telemetry`` stays light.

Which GPUs: ``CUDA_VISIBLE_DEVICES`` is parsed the way CUDA parses it — a comma-separated list
of ordinals, ``GPU-<uuid>`` (a unique prefix is enough), ``MIG-<uuid>`` or the legacy
``MIG-GPU-<uuid>/<gpu instance>/<compute instance>``; parsing stops at the first entry that
names no device (CUDA ignores the rest) — and each entry is resolved to an NVML handle by UUID.
Unset means every GPU, in NVML (PCI bus) order, a MIG-enabled GPU contributing its MIG
devices. A rank uses one GPU: ``visible[LOCAL_RANK % len(visible)]`` (what every adapter does:
``cuda:LOCAL_RANK``, and TensorFlow and MXNet take it modulo the count).

Ordinals: NVML numbers GPUs in PCI bus order; CUDA does too when ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
and, with its default FASTEST_FIRST order, whenever the GPUs are all of one model (ties are
broken by PCI bus id). On a machine with mixed GPU models and no ``PCI_BUS_ID`` order an ordinal
may name a different GPU for CUDA than for NVML; the mapping then carries a note saying so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: NVML clock-event ("throttle") reason bits -> names (nvml.h, nvmlClocksEventReason*).
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}
#: reasons that are no sign of a problem: an idle GPU, clocks an administrator set, sync
#: boost across GPUs, the display clock. The others slow the GPU down (power, heat, hardware).
BENIGN_THROTTLE = frozenset(
    {"gpu_idle", "applications_clocks_setting", "sync_boost", "display_clock_setting"}
)

NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0
#: nvmlSamplingType_t: the driver's own buffered samples (nvmlDeviceGetSamples)
NVML_GPU_UTILIZATION_SAMPLES, NVML_MEMORY_UTILIZATION_SAMPLES = 1, 2
NVML_ERROR_NOT_FOUND = 6
#: nvmlValueType_t -> the field of the nvmlValue_t union that holds the sample
_VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
                 6: "usVal"}  # fmt: skip
NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NO_PERMISSION, NVML_ERROR_FUNCTION_NOT_FOUND = 3, 4, 13
#: errors that will not go away: the field is dropped for the rest of the task
PERMANENT_ERRORS = (
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_FUNCTION_NOT_FOUND,
)


class NvmlUnavailable(Exception):
    """No GPU can be sampled; the message is the record's ``gpu_unavailable_reason``."""


def decode_throttle(mask: int) -> list[str]:
    """Names of the set bits of an NVML clock-event reason mask (unknown bits as hex)."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    bit = 1
    while unknown >= bit:
        if unknown & bit:
            names.append(f"unknown_0x{bit:x}")
        bit <<= 1
    return names


def harmful_throttle(reasons: list[str]) -> list[str]:
    return [r for r in reasons if r not in BENIGN_THROTTLE]


def open_nvml() -> Any:
    """``pynvml``, initialised; :class:`NvmlUnavailable` saying why when it cannot be."""
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable(
            "no NVML library: the pynvml module (package nvidia-ml-py) is not installed"
        ) from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"no NVML library: nvmlInit failed ({exc})") from None
    return pynvml


def close_nvml(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except nvml.NVMLError:
        pass


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def driver_version() -> str | None:
    """The NVIDIA driver's version as NVML reports it (a GPU's ``DeviceInfo.driver``); None
    without NVML, which is optional."""
    try:
        import pynvml  # optional: nvidia-ml-py

        pynvml.nvmlInit()
        return _text(pynvml.nvmlSystemGetDriverVersion())
    except Exception:  # noqa: BLE001 - NVML is optional; no driver version then
        return None


@dataclass
class GpuRef:
    """One GPU (or MIG device) a rank uses, resolved to NVML handles."""

    entry: str  #: the CUDA_VISIBLE_DEVICES entry (or the ordinal when unset)
    uuid: str
    handle: Any  #: the device, or the MIG device
    index: int  #: NVML index of the physical GPU
    name: str
    parent: Any = None  #: the physical GPU of a MIG device (power, clocks, energy live there)

    @property
    def mig(self) -> bool:
        return self.parent is not None

    def describe(self) -> dict[str, Any]:
        return {"index": self.index, "uuid": self.uuid, "name": self.name, "mig": self.mig,
                "cuda_visible_entry": self.entry}  # fmt: skip


def _mig_devices(nvml: Any, dev: Any, index: int, name: str) -> list[GpuRef]:
    """The MIG devices of a physical GPU in MIG mode (empty when MIG is off or unsupported)."""
    try:
        current = nvml.nvmlDeviceGetMigMode(dev)[0]
    except nvml.NVMLError:
        return []
    if not current:
        return []
    out = []
    try:
        count = nvml.nvmlDeviceGetMaxMigDeviceCount(dev)
    except nvml.NVMLError:
        return []
    for i in range(count):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(dev, i)
        except nvml.NVMLError:
            continue  # an empty slot: NVML_ERROR_NOT_FOUND
        uuid = _text(nvml.nvmlDeviceGetUUID(mig))
        out.append(GpuRef(entry="", uuid=uuid, handle=mig, index=index, name=name, parent=dev))
    return out


def enumerate_devices(nvml: Any) -> list[GpuRef]:
    """What CUDA enumerates with CUDA_VISIBLE_DEVICES unset, in NVML order: each GPU, or the
    MIG devices of a GPU in MIG mode."""
    out: list[GpuRef] = []
    for index in range(nvml.nvmlDeviceGetCount()):
        dev = nvml.nvmlDeviceGetHandleByIndex(index)
        name = _text(nvml.nvmlDeviceGetName(dev))
        migs = _mig_devices(nvml, dev, index, name)
        if migs:
            out.extend(migs)
        else:
            uuid = _text(nvml.nvmlDeviceGetUUID(dev))
            out.append(GpuRef(entry="", uuid=uuid, handle=dev, index=index, name=name))
    return out


def _all_uuids(nvml: Any, devices: list[GpuRef]) -> list[GpuRef]:
    """Every GPU and every MIG device (for UUID look-up), physical GPUs first."""
    phys: list[GpuRef] = []
    for index in range(nvml.nvmlDeviceGetCount()):
        dev = nvml.nvmlDeviceGetHandleByIndex(index)
        name = _text(nvml.nvmlDeviceGetName(dev))
        phys.append(GpuRef("", _text(nvml.nvmlDeviceGetUUID(dev)), dev, index, name))
    return phys + [d for d in devices if d.mig]


def _resolve(nvml: Any, entry: str, devices: list[GpuRef]) -> GpuRef | None:
    """One CUDA_VISIBLE_DEVICES entry -> the device it names, or None (CUDA stops there)."""
    e = entry.strip()
    if e.lstrip("+").isdigit():
        i = int(e)
        return devices[i] if i < len(devices) else None
    if e.startswith("MIG-GPU-") and e.count("/") == 2:  # legacy MIG-GPU-<uuid>/<gi>/<ci>
        gpu_uuid, gi, ci = e[len("MIG-") :].split("/")
        for d in devices:
            if not d.mig or _text(nvml.nvmlDeviceGetUUID(d.parent)) != gpu_uuid:
                continue
            try:
                ids = (nvml.nvmlDeviceGetGpuInstanceId(d.handle),
                       nvml.nvmlDeviceGetComputeInstanceId(d.handle))  # fmt: skip
            except nvml.NVMLError:
                continue
            if (str(ids[0]), str(ids[1])) == (gi, ci):
                return d
        return None
    if e.startswith(("GPU-", "MIG-")):
        matches = [d for d in _all_uuids(nvml, devices) if d.uuid.startswith(e)]
        # A unique prefix names one device; an ambiguous or unknown one names none.
        return matches[0] if len(matches) == 1 else None
    return None


@dataclass
class Visible:
    visible: list[GpuRef]
    notes: list[str] = field(default_factory=list)


def visible_gpus(nvml: Any, env: Mapping[str, str] | None = None) -> Visible:
    """The GPUs this process's CUDA sees, in CUDA's order, resolved to NVML handles."""
    env = os.environ if env is None else env
    devices = enumerate_devices(nvml)
    notes: list[str] = []
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        visible = [GpuRef(str(i), d.uuid, d.handle, d.index, d.name, d.parent)
                   for i, d in enumerate(devices)]  # fmt: skip
        ordinals = True
    else:
        visible, ordinals = [], False
        for entry in cvd.split(","):
            ref = _resolve(nvml, entry, devices)
            if ref is None:
                if entry.strip():
                    notes.append(
                        f"CUDA_VISIBLE_DEVICES entry {entry.strip()!r} names no device: it and "
                        "the entries after it are ignored (as CUDA does)"
                    )
                break
            ordinals = ordinals or entry.strip().lstrip("+").isdigit()
            visible.append(GpuRef(entry.strip(), ref.uuid, ref.handle, ref.index, ref.name,
                                  ref.parent))  # fmt: skip
    if (
        ordinals
        and len({d.name for d in devices}) > 1
        and env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID"
    ):
        notes.append(
            "GPUs of different models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA's ordinals "
            "(fastest first) may not match NVML's (PCI bus order); set CUDA_DEVICE_ORDER=PCI_BUS_ID"
        )
    return Visible(visible, notes)


def rank_gpus(visible: list[GpuRef], local_rank: int) -> list[GpuRef]:
    """The GPU a rank uses: one per rank, ``visible[local_rank % len(visible)]``."""
    if not visible:
        return []
    return [visible[local_rank % len(visible)]]


def compute_processes(nvml: Any, handle: Any) -> list[Any]:
    """Compute processes on a device (objects with ``pid``, ``usedGpuMemory``), v3 then v2."""
    try:
        return list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
    except nvml.NVMLError:
        fallback = getattr(nvml, "nvmlDeviceGetComputeRunningProcesses_v2", None)
        if fallback is None:
            raise
        return list(fallback(handle))


class GpuReader:
    """Reads one GPU's fields; a field NVML does not support is dropped after its first
    NOT_SUPPORTED (and listed in ``unsupported``), so later samples do not pay for it.

    On a MIG device, utilisation is not available from NVML (NVML returns NOT_SUPPORTED:
    DCGM profiling metrics are needed), memory is the MIG device's own, and power, energy,
    clocks, temperature and throttle reasons are those of the whole physical GPU.
    """

    FIELDS = ("gpu_util_pct", "mem_util_pct", "mem_used_mb", "power_w", "energy_mj",
              "sm_clock_mhz", "mem_clock_mhz", "temp_c", "throttle_mask")  # fmt: skip

    def __init__(self, nvml: Any, ref: GpuRef) -> None:
        self.nvml = nvml
        self.ref = ref
        self.unsupported: dict[str, str] = {}
        self.whole = ref.parent if ref.mig else ref.handle

    def _call(self, name: str, fn: Any, *args: Any) -> Any:
        if name in self.unsupported:
            return None
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            # NOT_SUPPORTED, NO_PERMISSION and FUNCTION_NOT_FOUND (an older driver) do not
            # change; anything else (a transient error) is dropped for this sample only.
            if getattr(exc, "value", None) in PERMANENT_ERRORS:
                self.unsupported[name] = str(exc)
            return None

    def read(self) -> dict[str, Any]:
        n, h, w = self.nvml, self.ref.handle, self.whole
        out: dict[str, Any] = {}
        util = self._call("gpu_util_pct", n.nvmlDeviceGetUtilizationRates, h)
        if util is not None:
            out["gpu_util_pct"] = float(util.gpu)
            out["mem_util_pct"] = float(util.memory)
        mem = self._call("mem_used_mb", n.nvmlDeviceGetMemoryInfo, h)
        if mem is not None:
            out["mem_used_mb"] = mem.used / 2**20
        power = self._call("power_w", n.nvmlDeviceGetPowerUsage, w)
        if power is not None:
            out["power_w"] = power / 1000.0  # NVML reports milliwatts
        energy = self._call("energy_mj", n.nvmlDeviceGetTotalEnergyConsumption, w)
        if energy is not None:
            out["energy_mj"] = int(energy)  # mJ since the driver was loaded
        sm = self._call("sm_clock_mhz", n.nvmlDeviceGetClockInfo, w, NVML_CLOCK_SM)
        if sm is not None:
            out["sm_clock_mhz"] = float(sm)
        memclk = self._call("mem_clock_mhz", n.nvmlDeviceGetClockInfo, w, NVML_CLOCK_MEM)
        if memclk is not None:
            out["mem_clock_mhz"] = float(memclk)
        temp = self._call("temp_c", n.nvmlDeviceGetTemperature, w, NVML_TEMPERATURE_GPU)
        if temp is not None:
            out["temp_c"] = float(temp)
        # nvmlDeviceGetCurrentClocksEventReasons is the newer name (drivers >= 535) of
        # nvmlDeviceGetCurrentClocksThrottleReasons; the same bits.
        mask = None
        if "throttle_mask" not in self.unsupported:
            event_fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None)
            mask = self._call("event_reasons", event_fn, w) if event_fn else None
            if mask is None and (event_fn is None or "event_reasons" in self.unsupported):
                mask = self._call("throttle_mask", n.nvmlDeviceGetCurrentClocksThrottleReasons, w)
        if mask is not None:
            out["throttle_mask"] = int(mask)
        return out

    def driver_samples(self, kind: int, since_us: int) -> list[tuple[int, float]] | None:
        """The driver's own samples of ``kind`` (``NVML_GPU_UTILIZATION_SAMPLES`` or
        ``NVML_MEMORY_UTILIZATION_SAMPLES``) taken after ``since_us`` (wall clock, µs), as
        ``(timestamp µs, value)``: each averages the driver's sampling period that ends at its
        timestamp. ``[]`` when there is none yet; None when NVML cannot give them (an older
        pynvml, a MIG device, an error): the polled readings then stand.

        The polled ``nvmlDeviceGetUtilizationRates`` answers with the driver's latest sample,
        whose period (1/6 s to 1 s by NVML's documentation) may have begun before the timed
        region: on an H100 the first polled reading of a GEMM loop was 0% (stop 13). These
        samples carry their own time, so the summary can keep those whose period lies inside
        the region."""
        name = f"driver_samples_{kind}"
        fn = getattr(self.nvml, "nvmlDeviceGetSamples", None)
        if fn is None or self.ref.mig or name in self.unsupported:
            return None
        try:
            vtype, samples = fn(self.ref.handle, kind, int(since_us))
        except self.nvml.NVMLError as exc:
            if getattr(exc, "value", None) == NVML_ERROR_NOT_FOUND:
                return []  # NVML's answer for "no sample since that time"
            if getattr(exc, "value", None) in PERMANENT_ERRORS:
                self.unsupported[name] = str(exc)
            return None
        attr = _VALUE_FIELDS.get(int(vtype), "uiVal")
        out = [(int(x.timeStamp), float(getattr(x.sampleValue, attr))) for x in samples]
        return sorted(p for p in out if p[0] > 0)  # unused slots of the buffer are zeros

    def energy_mj(self) -> int | None:
        value = self._call("energy_mj", self.nvml.nvmlDeviceGetTotalEnergyConsumption, self.whole)
        return None if value is None else int(value)

    def processes(self) -> list[Any]:
        """Compute processes on the device (the MIG device's own where NVML allows it)."""
        try:
            return compute_processes(self.nvml, self.ref.handle)
        except self.nvml.NVMLError:
            if self.ref.mig:
                try:
                    return compute_processes(self.nvml, self.ref.parent)
                except self.nvml.NVMLError:
                    return []
            return []
