"""Markdown tables for docs/guide/projection.md from `dlsuite project`'s JSON and the published check.

python -m benchmarks.studies.projection_tables measured A.json [B.json ...]   # predicted vs measured
python -m benchmarks.studies.projection_tables collectives A.json             # gloo's allreduce held out
python -m benchmarks.studies.projection_tables links A.json                   # the fitted links
python -m benchmarks.studies.projection_tables checks "2 from 1=A.json" ...    # held-out checks (docs)
python -m benchmarks.studies.projection_tables published                      # published results
python -m benchmarks.studies.projection_tables effects                        # what each effect costs
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _ms(s: float) -> str:
    return f"{s * 1e3:.3g}"


def measured(paths: list[str]) -> str:
    lines = [
        "| projection | network · what | ranks | nodes | predicted step ms (band) | exposed exch. ms | "
        "overhead ms | predicted samples/s | measured samples/s | error | fitted or held out |",
        "|" + "---|" * 11,
    ]
    for path in paths:
        doc = json.loads(Path(path).read_text())
        tag = Path(path).stem
        for r in doc["projections"]:
            m = r.get("measured")
            if "not_possible" in r or not m or r["ranks"] == 1:
                continue
            lo, hi = r["step_s_band"]
            held = "fitted" if m["in_fit"] else "held out"
            if r.get("oversubscribed"):
                held += ", oversubscribed"
            lines.append(
                f"| {tag} | {r['case']} | {r['ranks']} | {r['nodes']} | {_ms(r['step_s'])} "
                f"({_ms(lo)}–{_ms(hi)}) | {_ms(r['exposed_s'])} | {_ms(r['overhead_s'])} | "
                f"{r['throughput']:.4g} | {m['throughput']:.4g} | "
                f"{100 * m['throughput_error']:+.1f}% | {held} |"
            )
    return "\n".join(lines)


def checks(pairs: list[str]) -> str:
    """The held-out records only (a fitted record's error is 0 by construction), as
    docs/guide/projection.md shows them: ``"label=projection.json"`` pairs."""
    lines = [
        "| check | network · what | ranks × nodes | predicted samples/s (band) | measured | "
        "error | slowest rank's wait ms |",
        "|---|---|---|---|---|---|---|",
    ]
    seen: set[tuple[Any, ...]] = set()
    for pair in pairs:
        label, _, path = pair.rpartition("=")
        doc = json.loads(Path(path).read_text())
        for r in doc["projections"]:
            m = r.get("measured")
            if "step_s" not in r or not m or m["in_fit"] or r["ranks"] == 1:
                continue
            key = (r["case"], r["ranks"], r["nodes"], m["record"])
            if key in seen:  # the same held-out record in an earlier check
                continue
            seen.add(key)
            lo, hi = r["throughput_band"]
            over = " (oversubscribed)" if r.get("oversubscribed") else ""
            lines.append(
                f"| {label} | {r['case']} | {r['ranks']} × {r['nodes']}{over} | "
                f"{r['throughput']:.4g} ({lo:.4g}–{hi:.4g}) | {m['throughput']:.4g} | "
                f"{100 * m['throughput_error']:+.1f}% | {_ms(r['straggler_s'])} |"
            )
    return "\n".join(lines)


def collectives(path: str) -> str:
    doc = json.loads(Path(path).read_text())
    lines = [
        "| ranks | message | measured ms | ring | halving-doubling | tree | closest |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in doc.get("collective_checks") or []:
        p = c["predicted"]
        lines.append(
            f"| {c['ranks']} | {int(c['message_bytes'])} B | {_ms(c['measured_s'])} | "
            + " | ".join(
                f"{100 * p[a]['error']:+.0f}%" for a in ("ring", "halving-doubling", "tree")
            )
            + f" | {c['closest']} |"
        )
    return "\n".join(lines)


def links(path: str) -> str:
    doc = json.loads(Path(path).read_text())
    lines = [
        "| backend | where | collective | world sizes | ring: latency us, GB/s, rms | "
        "halving-doubling | tree | best fit |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for lf in doc["links"]:
        cells = []
        for alg in ("ring", "halving-doubling", "tree"):
            a = lf["algorithms"][alg]
            cells.append(
                f"{a['latency_s'] * 1e6:.3g}, {a['bandwidth_bytes_per_s'] / 1e9:.3g}, "
                f"{100 * a['rms_rel_residual']:.0f}%"
            )
        lines.append(
            f"| {lf['framework']} {lf['backend']} | {lf['scope']} | {lf['op']} | "
            f"{','.join(map(str, lf['world_sizes']))} | "
            + " | ".join(cells)
            + f" | {lf['best_algorithm'] or 'one world size'} |"
        )
    return "\n".join(lines)


def published() -> str:
    from suite.projection.published import check

    lines = [
        "| result | network | GPUs (baseline) | published % | projected % (band) | error (points) | "
        "inside the band | no overlap | full overlap | ring / halving-doubling / tree / nccl | "
        "latency x0.1 / x5 | every link at its line rate |",
        "|" + "---|" * 12,
    ]
    for p in check():
        v: dict[str, Any] = p.variants
        lo, hi = p.band
        lines.append(
            f"| {p.id} | {p.network} | {p.ranks} ({p.baseline_ranks}) | {p.published:.1f} | "
            f"{p.projected:.1f} ({lo:.1f}–{hi:.1f}) | {p.error_points:+.1f} | "
            f"{'yes' if p.inside else 'no'} | {v['overlap none']:.1f} | {v['overlap full']:.1f} | "
            f"{v['ring']:.1f} / {v['halving-doubling']:.1f} / {v['tree']:.1f} / {v['nccl']:.1f} | "
            f"{v['latency x0.1']:.1f} / {v['latency x5']:.1f} | {v['line rate']:.1f} |"
        )
    return "\n".join(lines)


def effects() -> str:
    """Points of efficiency each effect beyond the exchange costs each published result: the
    projection with it turned off minus the projection."""
    from suite.projection.published import check

    lines = [
        "| result | projected % | step-to-step spread | spread between GPUs | compute beside the exchange | "
        "coordination | what moves the band most |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in check():
        v = p.variants
        top = max(p.band_sources, key=lambda k: p.band_sources[k]) if p.band_sources else "-"
        lines.append(
            f"| {p.id} | {p.projected:.1f} | {v['no stragglers'] - p.projected:.1f} | "
            f"{v['no spread between GPUs'] - p.projected:.1f} | "
            f"{v['no interference'] - p.projected:.1f} | "
            f"{v['no coordination cost'] - p.projected:.1f} | {top} "
            f"({p.band_sources.get(top, 0):.1f}) |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    kind, rest = argv[0], argv[1:]
    if kind == "measured":
        print(measured(rest))
    elif kind == "collectives":
        print(collectives(rest[0]))
    elif kind == "links":
        print(links(rest[0]))
    elif kind == "checks":
        print(checks(rest))
    elif kind == "published":
        print(published())
    elif kind == "effects":
        print(effects())
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
