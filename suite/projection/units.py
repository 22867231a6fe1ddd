"""Bandwidths and latencies as people write them: ``"50 Gbit/s"``, ``"12.5 GB/s"``, ``"5 us"``.

A bandwidth in a site profile or on the command line carries its unit, because both bytes and
bits per second are in common use (NVLink is quoted in GB/s, Ethernet and InfiniBand in Gbit/s)
and a bare number would be read wrong half the time. Internally everything is bytes per second
and seconds.
"""

from __future__ import annotations

import math
import re

from suite.errors import ConfigError

_NUMBER = r"([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)"
_PREFIX = {
    "": 1.0,
    "k": 1e3,
    "K": 1e3,
    "M": 1e6,
    "m": 1e6,
    "G": 1e9,
    "g": 1e9,
    "T": 1e12,
    "t": 1e12,
    # binary prefixes (GiB/s, MiB/s), as memory and some tools quote them
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
}
#: an upper-case B is bytes (GB/s, MBps), anything spelled with a lower-case b or "bit" is bits
_BANDWIDTH = re.compile(r"((?:[KMGT]i)?|[kKmMgGtT]?)(B/s|Bps|b/s|bps|[bB]it/s)")
#: "µs" is the micro sign (U+00B5), "μs" the Greek mu (U+03BC) keyboards and tools also type
LATENCY_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9}


def parse_bandwidth(text: str, what: str) -> float:
    """Bytes per second from ``"<number> <unit>"``: GB/s or GBps (bytes), Gbit/s, Gb/s or Gbps
    (bits), with a k/M/G/T prefix or a binary Ki/Mi/Gi/Ti one (GiB/s). A ConfigError naming
    ``what`` otherwise."""
    m = re.fullmatch(rf"\s*{_NUMBER}\s*(\S+)\s*", str(text))
    unit = _BANDWIDTH.fullmatch(m.group(2)) if m else None
    if m and unit:
        value = float(m.group(1)) * _PREFIX[unit.group(1)]
        if unit.group(2) not in ("B/s", "Bps"):
            value /= 8.0
        if value > 0 and math.isfinite(value):
            return value
    raise ConfigError(
        f'{what} = {text!r}: give a positive bandwidth with its unit, e.g. "25 Gbit/s" '
        '(bits), "12.5 GB/s" or "11.6 GiB/s" (bytes)'
    )


def parse_latency(text: str, what: str) -> float:
    """Seconds from ``"<number> <unit>"`` (s, ms, us, ns); a ConfigError naming ``what``."""
    m = re.fullmatch(rf"\s*{_NUMBER}\s*([a-zµμ]+)\s*", str(text))
    if m and m.group(2) in LATENCY_UNITS:
        value = float(m.group(1)) * LATENCY_UNITS[m.group(2)]
        if value >= 0 and math.isfinite(value):
            return value
    raise ConfigError(f'{what} = {text!r}: give a latency with its unit, e.g. "5 us" or "0.02 ms"')


def parse_link_latency(text: str, what: str) -> float:
    """A link's latency (:func:`parse_latency`), which no link has at zero: a given "0 us"
    would price every message's latency steps at nothing. A ConfigError naming ``what``."""
    value = parse_latency(text, what)
    if value > 0:
        return value
    raise ConfigError(
        f"{what} = {text!r}: a link's latency is above 0; give what one small message takes, "
        'e.g. "2 us" (InfiniBand) or "5 us"'
    )


def fmt_bandwidth(bytes_per_s: float) -> str:
    """``"3.12 GB/s (25.0 Gbit/s)"``: both conventions, so nobody converts by hand."""
    return f"{bytes_per_s / 1e9:.3g} GB/s ({bytes_per_s * 8 / 1e9:.3g} Gbit/s)"


def fmt_latency(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"
