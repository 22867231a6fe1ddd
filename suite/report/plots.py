"""The report's plots, rendered to PNG bytes with matplotlib's Agg backend.

matplotlib is imported inside each function (the host side stays light: ``import suite`` and
the CLI must not pay for it), and figures are built with ``matplotlib.figure.Figure`` on an Agg
canvas rather than through pyplot, so no global backend or figure state is touched.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# One value with its 95% CI: (median, ci_low, ci_high); ci may equal the median when unknown.
Estimate = tuple[float, float, float]

DPI = 100


def _figure(width: float, height: float, nrows: int = 1) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, 1, sharex=True, squeeze=False)[:, 0]
    return fig, axes


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.canvas.print_png(buf)
    return buf.getvalue()


def _yerr(values: Sequence[Estimate]) -> list[list[float]]:
    return [
        [max(v[0] - v[1], 0.0) for v in values],
        [max(v[2] - v[0], 0.0) for v in values],
    ]


def _log_y(ax: Any) -> None:
    """Log y axis with plain tick labels at 1, 2, 5 × 10^k (0.2, 5, 300), not 2×10⁻¹."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


SEP = " · "


def split_common(labels: Sequence[str]) -> tuple[str, list[str]]:
    """Factor out the `` · ``-separated parts every label shares: (common, short labels)."""
    parts = [lab.split(SEP) for lab in labels]
    if len(parts) < 2 or len({len(p) for p in parts}) != 1:
        return "", list(labels)
    same = [all(p[i] == parts[0][i] for p in parts) for i in range(len(parts[0]))]
    if all(same):
        return "", list(labels)
    common = SEP.join(x for x, s in zip(parts[0], same, strict=True) if s)
    short = [SEP.join(x for x, s in zip(p, same, strict=True) if not s) for p in parts]
    return common, short


def _legend(
    fig: Any, labels: Sequence[str], fontsize: int = 8, handles: Sequence[Any] | None = None
) -> None:
    """The figure's legend below the plot: the drawn series, or ``handles`` (labelled)."""
    if handles is not None:
        labels = [h.get_label() for h in handles]
    if not labels:
        return
    longest = max(len(lab) for lab in labels)
    ncols = 1 if longest > 45 else 2 if longest > 25 else 3
    kw: dict[str, Any] = {} if handles is None else {"handles": list(handles)}
    fig.legend(fontsize=fontsize, loc="outside lower center", ncols=min(ncols, len(labels)), **kw)


def _legend_height(n: int) -> float:
    return 0.2 * min(n, 8)


def _wrap(label: str, width: int = 26, lines: int = 3) -> str:
    """A tick label short enough that a dozen of them fit under one plot."""
    parts = textwrap.wrap(label, width) or [""]
    if len(parts) > lines:
        parts = parts[:lines]
        parts[-1] = parts[-1][: width - 1] + "…"
    return "\n".join(parts)


#: characters of a 12 pt title per inch of figure width (DejaVu Sans averages about 9 at
#: 100 dpi; a little less leaves a margin)
TITLE_CHARS_PER_INCH = 8.5


def set_title(ax: Any, title: str, fontsize: float = 12.0) -> None:
    """``ax.set_title`` with each line wrapped to the figure's width, so a long subtitle (the
    parameters every series shares) is shown whole instead of cut off at both edges."""
    chars = max(20, int(ax.figure.get_figwidth() * TITLE_CHARS_PER_INCH * 12.0 / fontsize))
    lines = [w for line in title.split("\n") for w in (textwrap.wrap(line, chars) or [""])]
    ax.set_title("\n".join(lines), fontsize=fontsize)


def bar_chart(
    groups: Sequence[str],
    series: Sequence[str],
    values: dict[tuple[int, int], Estimate],
    *,
    title: str,
    ylabel: str,
    log: bool = True,
    flagged: frozenset[tuple[int, int]] = frozenset(),
) -> bytes:
    """Grouped bars: one group per configuration, one bar per series, 95% CI error bars.

    ``values[(series_index, group_index)]``; a missing pair leaves a gap. ``flagged`` bars
    (a wrong result) are cross-hatched with a red edge and say so in the legend.
    """
    common, names = split_common(series)
    if common:
        title = f"{title}\n{common}"
    width = min(max(6.0, 0.9 + 0.5 * len(groups) * max(1, len(series)) ** 0.6), 16.0)
    fig, (ax,) = _figure(width, 4.8 + _legend_height(len(series)))
    n = max(1, len(series))
    bar_w = 0.8 / n
    handles: list[Any] = []
    for si, name in enumerate(names):
        xs, est, marked = [], [], []
        for gi in range(len(groups)):
            if (si, gi) in values:
                xs.append(gi - 0.4 + bar_w * (si + 0.5))
                est.append(values[(si, gi)])
                marked.append((si, gi) in flagged)
        if not xs:
            continue
        bars = ax.bar(
            xs,
            [e[0] for e in est],
            bar_w,
            yerr=_yerr(est),
            capsize=3,
            label=name,
            error_kw={"elinewidth": 1},
        )
        from matplotlib.patches import Patch

        # the series' colour in the legend, plain even where its first bar is hatched
        handles.append(Patch(facecolor=bars.patches[0].get_facecolor(), label=name))
        for bar, bad in zip(bars, marked, strict=True):
            if bad:
                bar.set_hatch("xx")
                bar.set_edgecolor("red")
    if flagged & values.keys():
        from matplotlib.patches import Patch

        handles.append(Patch(facecolor="white", edgecolor="red", hatch="xx", label="wrong result"))
    ax.set_xticks(
        range(len(groups)), [_wrap(g) for g in groups], rotation=30, ha="right", fontsize=7
    )
    if log:
        _log_y(ax)
    ax.set_ylabel(ylabel)
    set_title(ax, title)
    ax.grid(axis="y", which="both", alpha=0.3)
    _legend(fig, names, handles=handles)
    return _png(fig)


@dataclass(frozen=True)
class RoofPoint:
    label: str  # legend group (benchmark)
    marker_key: str  # dtype
    intensity: float  # FLOP/byte
    flops_per_s: float


_MARKERS = "os^Dv<>pPX*h"


def roofline(
    points: Sequence[RoofPoint],
    compute_roofs: dict[str, float],
    bandwidth_bytes_per_s: float | None,
    *,
    title: str,
) -> bytes:
    """Achieved FLOP/s against arithmetic intensity, log-log, under the device's roofs.

    ``compute_roofs`` maps a label (the dtype) to a peak in FLOP/s; with a bandwidth the roof
    is ``min(peak, bandwidth * intensity)``, without one only the flat compute roofs are drawn.
    """
    fig, (ax,) = _figure(8.0, 5.5)
    xs = [p.intensity for p in points]
    ys = [p.flops_per_s for p in points]
    lo_x = min(xs) / 3 if xs else 0.1
    hi_x = max(xs) * 3 if xs else 100.0
    if bandwidth_bytes_per_s and compute_roofs:
        ridge = max(compute_roofs.values()) / bandwidth_bytes_per_s
        lo_x, hi_x = min(lo_x, ridge / 10), max(hi_x, ridge * 10)
    labels = sorted({p.label for p in points})
    markers = {
        k: _MARKERS[i % len(_MARKERS)] for i, k in enumerate(sorted({p.marker_key for p in points}))
    }
    import matplotlib

    prop_cycle = [c["color"] for c in matplotlib.rcParams["axes.prop_cycle"]]
    colours = {lab: prop_cycle[i % len(prop_cycle)] for i, lab in enumerate(labels)}
    for p in points:
        ax.scatter(
            p.intensity,
            p.flops_per_s,
            marker=markers[p.marker_key],
            color=colours[p.label],
            s=36,
            zorder=3,
        )
    # Legend: one entry per benchmark (colour) and one per dtype (marker).
    for lab in labels:
        ax.scatter([], [], color=colours[lab], marker="o", label=lab)
    for key, mk in markers.items():
        ax.scatter([], [], color="grey", marker=mk, label=key)
    grid = [lo_x * (hi_x / lo_x) ** (i / 200) for i in range(201)]
    merged: dict[float, list[str]] = {}  # dtypes with the same peak share one line
    for name, peak in compute_roofs.items():
        merged.setdefault(peak, []).append(name)
    roofs = [("/".join(sorted(names)), peak) for peak, names in merged.items()]
    for i, (name, peak) in enumerate(sorted(roofs, key=lambda kv: -kv[1])):
        style = ["-", "--", ":", "-."][i % 4]
        if bandwidth_bytes_per_s:
            roof = [min(peak, bandwidth_bytes_per_s * x) for x in grid]
            ax.plot(grid, roof, style, color="black", lw=1.2, label=f"roof {name}")
        else:
            ax.axhline(peak, ls=style, color="black", lw=1.2, label=f"peak {name}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo_x, hi_x)
    top = max([*ys, *compute_roofs.values()]) if ys or compute_roofs else 1.0
    bottom = min(ys) / 5 if ys else top / 1e3
    ax.set_ylim(bottom, top * 2)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved FLOP/s")
    set_title(ax, title)
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    return _png(fig)


def xy_lines(
    series: dict[str, list[tuple[float, Estimate]]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    xlog2: bool = True,
    ideal: float | None = None,
) -> bytes:
    """Lines with 95% CI error bars: ``series[name] = [(x, (median, lo, hi)), ...]``."""
    common, names = split_common(list(series))
    if common:
        title = f"{title}\n{common}"
    fig, (ax,) = _figure(8.0, 4.8 + _legend_height(len(series) + (ideal is not None)))
    for name, pts in zip(names, series.values(), strict=True):
        pts = sorted(pts)
        ax.errorbar(
            [p[0] for p in pts],
            [p[1][0] for p in pts],
            yerr=_yerr([p[1] for p in pts]),
            marker="o",
            ms=4,
            capsize=3,
            label=name,
        )
    if xlog2:
        ax.set_xscale("log", base=2)
    if ideal is not None:
        ax.axhline(ideal, ls="--", color="black", lw=1, label="ideal")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    set_title(ax, title)
    ax.grid(which="both", alpha=0.3)
    _legend(fig, [*names, *(["ideal"] if ideal is not None else [])], fontsize=7)
    return _png(fig)


@dataclass(frozen=True)
class ScatterPoint:
    label: str  # legend entry (one colour per label)
    marker_key: str  # one marker per key (e.g. the framework)
    x: float
    y: float


def scatter(
    points: Sequence[ScatterPoint],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    hline: float | None = None,
    xlog: bool = True,
) -> bytes:
    """One marker per point, colour by ``label``, marker shape by ``marker_key``; a dashed
    reference line at ``hline`` (the baseline's value)."""
    labels = list(dict.fromkeys(p.label for p in points))
    keys = list(dict.fromkeys(p.marker_key for p in points))
    fig, (ax,) = _figure(8.0, 4.8 + _legend_height(len(labels) + len(keys)))
    cmap = [f"C{i % 10}" for i in range(len(labels))]
    for i, label in enumerate(labels):
        for j, key in enumerate(keys):
            pts = [p for p in points if p.label == label and p.marker_key == key]
            if pts:
                ax.scatter(
                    [p.x for p in pts], [p.y for p in pts], s=50, color=cmap[i],
                    marker=_MARKERS[j % len(_MARKERS)], edgecolors="black", linewidths=0.5,
                )  # fmt: skip
    if hline is not None:
        ax.axhline(hline, ls="--", color="black", lw=1)
    if xlog:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    set_title(ax, title)
    ax.grid(which="both", alpha=0.3)
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], ls="", marker="s", color=cmap[i], label=lab) for i, lab in enumerate(labels)
    ]
    handles += [
        Line2D([], [], ls="", marker=_MARKERS[j % len(_MARKERS)], color="grey", label=k)
        for j, k in enumerate(keys)
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=7)
    return _png(fig)


def power_points(samples: Sequence[dict[str, Any]]) -> tuple[list[tuple[float, float]], str]:
    """A GPU's power over time, (t, W), and where it comes from: the energy counter's
    readings (``energy_mj``) over 0.5 s windows within a segment
    (``suite.telemetry.counter_power``), else NVML's power reading (``power_w``), which on
    Hopper is a 1 s trailing average."""
    from suite.telemetry import counter_power

    # Recomputed from the counter readings rather than read from ``energy_power_w``: the
    # same windows for every series, also those written before the windows were (stop 13).
    pts: list[tuple[float, float]] = []
    by_segment: dict[Any, list[dict[str, Any]]] = {}
    for s in samples:
        if is_finite_number(s.get("energy_mj")):
            by_segment.setdefault(s.get("segment"), []).append(s)
    for rows in by_segment.values():
        watts = counter_power([(r["t"], float(r["energy_mj"])) for r in rows])
        pts += [(r["t"], w) for r, w in zip(rows, watts, strict=True) if w is not None]
    if pts:
        return sorted(pts), "energy counter, 0.5 s windows"
    return [(s["t"], s["power_w"]) for s in samples if is_finite_number(s.get("power_w"))], (
        "NVML power reading"
    )


def timeline(
    per_gpu: dict[int, list[dict[str, float]]],
    *,
    title: str,
) -> bytes:
    """Utilisation (%) and power (W) over time, one line per GPU index, two stacked panels."""
    fig, (ax_util, ax_pow) = _figure(8.0, 4.8, nrows=2)
    sources = set()
    for gpu, samples in sorted(per_gpu.items()):
        util = [(s["t"], s["util"]) for s in samples if is_finite_number(s.get("util"))]
        power, source = power_points(samples)
        if power:
            sources.add(source)
        if util:
            ax_util.plot([u[0] for u in util], [u[1] for u in util], lw=1, label=f"GPU {gpu}")
        if power:
            ax_pow.plot([p[0] for p in power], [p[1] for p in power], lw=1, label=f"GPU {gpu}")
    ax_util.set_ylabel("utilisation (%)")
    ax_util.set_ylim(0, 105)
    ax_pow.set_ylabel(f"power (W, {' / '.join(sorted(sources))})" if sources else "power (W)")
    _time_panels(ax_util, ax_pow, title)
    return _png(fig)


def host_timeline(samples: list[dict[str, Any]], *, title: str) -> bytes:
    """Host CPU utilisation over time: the whole machine (% of all CPUs) and the worker
    process (% of one core), and the process's resident memory."""
    fig, (ax_cpu, ax_mem) = _figure(8.0, 4.2, nrows=2)
    for key, label in (("cpu_util_pct", "machine (% of all CPUs)"),
                       ("proc_cpu_pct", "worker process (% of one core)")):  # fmt: skip
        pts = [(d["t"], d[key]) for d in samples if is_finite_number(d.get(key))]
        if pts:
            ax_cpu.plot([p[0] for p in pts], [p[1] for p in pts], lw=1, label=label)
    rss = [(d["t"], d["rss_mb"]) for d in samples if is_finite_number(d.get("rss_mb"))]
    if rss:
        ax_mem.plot([p[0] for p in rss], [p[1] for p in rss], lw=1, color="tab:green")
    ax_cpu.set_ylabel("CPU (%)")
    ax_cpu.set_ylim(bottom=0)
    ax_mem.set_ylabel("worker RSS (MB)")
    _time_panels(ax_cpu, ax_mem, title)
    return _png(fig)


def _time_panels(top: Any, bottom: Any, title: str) -> None:
    """Two stacked panels over the same time axis: the title on top, the time axis below,
    a grid in both, and a legend in each panel whose lines are labelled."""
    bottom.set_xlabel("time (s)")
    set_title(top, title)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper right")


def is_finite_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def heatmaps(
    panels: Sequence[tuple[str, Sequence[str], Sequence[Sequence[float]]]], label: str
) -> bytes:
    """One matrix per panel (title, axis names, values; NaN = no value), log colour scale,
    each cell annotated; values above 1 are drawn in red."""
    return _png(heatmap_figure(panels, label))


def heatmap_figure(
    panels: Sequence[tuple[str, Sequence[str], Sequence[Sequence[float]]]], label: str
) -> Any:
    """The matplotlib figure of :func:`heatmaps`."""
    from matplotlib.colors import LogNorm

    n = len(panels)
    cols = min(n, 2)
    rows = math.ceil(n / cols)
    size = max(len(names) for _, names, _ in panels)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.2 * cols + 1, 0.55 * size * rows + 1.2 * rows), dpi=DPI,
                 layout="constrained")  # fmt: skip
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    finite = [v for _, _, g in panels for row in g for v in row if is_finite_number(v) and v > 0]
    lo = min(finite, default=1e-4)
    norm = LogNorm(vmin=min(lo, 1e-3), vmax=max(max(finite, default=1.0), 10.0))
    image = None
    for ax, (title, names, grid) in zip(axes, panels, strict=False):
        values = [
            [v if is_finite_number(v) and v > 0 else float("nan") for v in row] for row in grid
        ]
        image = ax.imshow(values, cmap="viridis", norm=norm)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_yticks(range(len(names)), names, fontsize=8)
        ax.set_title(_wrap(title, 40, 2), fontsize=9)
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                if is_finite_number(v):
                    ax.text(j, i, f"{v:.1g}", ha="center", va="center", fontsize=7,
                            color="red" if v > 1 else "white")  # fmt: skip
    for ax in axes[n:]:
        ax.set_visible(False)
    if image is not None:
        # the bar is 0.8 of the figure's height: a longer label would run off its ends
        chars = max(12, int(fig.get_figheight() * 0.8 * 11))
        fig.colorbar(image, ax=axes[:n].tolist(), label=_wrap(label, chars, 4), shrink=0.8)
    return fig
