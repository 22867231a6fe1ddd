"""Hardware what-ifs: GPUs per node and the links inside and between nodes, each with its source.

They come from a site profile's ``[network]`` table (``sites/*.toml``, checked by
``schemas/site.schema.json``), from command-line flags (which win), or from the run's own fitted
collectives (``dlsuite project --write-site FILE`` writes those as a profile snippet)::

    [network]
    gpus_per_node = 8
    source = "where the GPU count comes from"
    [network.intra_node]
    link = "NVLink"
    bandwidth = "20 GB/s"          # or "200 Gbit/s": the unit says bits or bytes
    latency = "5 us"
    source = "where both figures come from"
    [network.inter_node]
    link = "InfiniBand HDR"
    bandwidth = "200 Gbit/s"
    latency = "2 us"
    kind = "infiniband"            # ethernet | roce | infiniband | nvlink | pcie-host: share of line
    source = "..."                 # rate it achieves (collectives.LINK_KINDS, each cited)

A bandwidth given here (or by a flag) is the link's *line rate*; what it carries is a share of
it: ``achieved_share`` where the site measured it (with ``achieved_share_source``), else the
share measured on the user's own multi-node sweep, else the published one for its ``kind`` (or
the kind its ``link`` name says), whose range widens the band.
"""

from __future__ import annotations

import datetime as _dt
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from suite.errors import ConfigError
from suite.projection.collectives import LINK_KINDS, Link, given_link, kind_of
from suite.projection.units import fmt_bandwidth, fmt_latency, parse_bandwidth, parse_link_latency

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SCOPES = ("intra_node", "inter_node")


@dataclass(frozen=True)
class PartialLink:
    """A link's figures where given (either may be missing until merged with the fit)."""

    latency_s: float | None = None
    bandwidth: float | None = None
    source: str = ""
    name: str = ""
    kind: str | None = None
    share: float | None = None  # the site's own measured share of the line rate
    share_source: str = ""
    #: the latency came from --latency (both links), not from this link's own flag or table:
    #: with no bandwidth known for the link it leaves the link unknown rather than half-given
    latency_from_both: bool = False


@dataclass(frozen=True)
class Hardware:
    gpus_per_node: int | None = None
    gpus_source: str = ""
    intra: PartialLink = PartialLink()
    inter: PartialLink = PartialLink()
    origin: str = ""  # "site <path>", "flags", ...

    def given(self) -> bool:
        return any(
            v is not None
            for v in (self.gpus_per_node, self.intra.latency_s, self.intra.bandwidth,
                      self.intra.kind, self.inter.latency_s, self.inter.bandwidth, self.inter.kind)
        )  # fmt: skip


def from_site(name_or_path: str) -> Hardware:
    """The ``[network]`` table of a site profile; a ConfigError naming what is missing."""
    from suite import sites

    site = sites.load(name_or_path)  # validates the whole profile, [network] included
    doc = tomllib.loads(site.path.read_text(encoding="utf-8"))
    net = doc.get("network")
    where = f"site {site.path}"
    if not isinstance(net, dict):
        raise ConfigError(
            f"{where}: no [network] table; add gpus_per_node and [network.intra_node] / "
            "[network.inter_node] with bandwidth, latency and source (docs/guide/projection.md), or "
            "give --gpus-per-node/--intra-bw/--inter-bw/--latency"
        )
    links = {}
    for scope in SCOPES:
        t = net.get(scope)
        if t is None:
            links[scope] = PartialLink()
            continue
        for key in ("bandwidth", "latency"):
            if key not in t:
                example = '"25 Gbit/s"' if key == "bandwidth" else '"5 us"'
                raise ConfigError(
                    f"{where}: network.{scope}.{key}: missing; add {key} = {example} and say "
                    f"where it comes from in network.{scope}.source"
                )
        share = t.get("achieved_share")
        if share is not None and not t.get("achieved_share_source"):
            raise ConfigError(
                f"{where}: network.{scope}.achieved_share: say where it was measured in "
                f"network.{scope}.achieved_share_source"
            )
        links[scope] = PartialLink(
            parse_link_latency(t["latency"], f"{where}: network.{scope}.latency"),
            parse_bandwidth(t["bandwidth"], f"{where}: network.{scope}.bandwidth"),
            str(t.get("source", "")),
            str(t.get("link", "")),
            check_kind(t.get("kind"), f"{where}: network.{scope}.kind"),
            float(share) if share is not None else None,
            str(t.get("achieved_share_source", "")),
        )
    gpus, gpus_source = net.get("gpus_per_node"), str(net.get("source", ""))
    part = site.default_partition
    if gpus is None and part.gpus_per_node:
        # the profile already says how many GPUs a node of its partition holds
        gpus = part.gpus_per_node
        gpus_source = f"the site's partition {part.name}: gpus_per_node = {gpus}"
    return Hardware(gpus, gpus_source, links["intra_node"], links["inter_node"], where)


def check_nodes(hw: Hardware) -> None:
    """An inter-node link given without the GPUs (ranks) a node holds would go unused: every
    rank on one node. A ConfigError naming both ways to say it."""
    if hw.gpus_per_node is None and hw.inter.bandwidth is not None:
        where = hw.origin if hw.origin.startswith("site") else "the flags"
        raise ConfigError(
            f"{where}: an inter-node link is given but not how many ranks a node holds, so "
            "every rank would be placed on one node; add gpus_per_node = N (and its source) to "
            "[network] or gpus_per_node = N to the profile's partition, or give --gpus-per-node N"
        )


def check_kinds(hw: Hardware) -> None:
    """A kind of link says what share of a *given* line rate the link carries; given without a
    bandwidth it would be dropped unseen (the run's fitted link carries what it was measured to
    carry). A ConfigError naming the flag and the bandwidth to give."""
    for scope, flag, link in (("intra_node", "intra", hw.intra), ("inter_node", "inter", hw.inter)):
        if link.kind is not None and link.bandwidth is None:
            raise ConfigError(
                f"--{flag}-link {link.kind}: the kind of link sets the share of a given line rate "
                f"the link carries, and no {scope.replace('_', '-')} bandwidth is given; give its "
                f"line rate with --{flag}-bw (or network.{scope}.bandwidth in the site profile), "
                f"or leave --{flag}-link out to use the link fitted from the run's sweeps"
            )


def kinds_not_used(hw: Hardware, flags: Hardware) -> list[str]:
    """A kind flag where the profile's link carries a measured ``achieved_share``: the share
    wins (the site's measurement comes first), so the kind's published share is not used; one
    note for each, naming what to change to take it."""
    notes = []
    for scope, flag, link, given in (("intra_node", "intra", hw.intra, flags.intra),
                                     ("inter_node", "inter", hw.inter, flags.inter)):  # fmt: skip
        if given.kind is not None and link.share is not None:
            notes.append(
                f"--{flag}-link {given.kind}: the site profile's measured share of the line rate "
                f"({link.share:g}, network.{scope}.achieved_share) is used, not the published "
                f"share of {given.kind} links; give --{flag}-bw (a line rate of yours drops the "
                "profile's share) or remove achieved_share from the profile to use the kind's"
            )
    return notes


def check_kind(kind: object, what: str) -> str | None:
    """A kind of link named in a profile or a flag, checked against :data:`LINK_KINDS`."""
    if kind is None:
        return None
    if str(kind) not in LINK_KINDS:
        raise ConfigError(f"{what} = {kind!r}: choose one of {', '.join(LINK_KINDS)}")
    return str(kind)


def from_flags(
    gpus_per_node: int | None,
    intra_bw: str | None,
    inter_bw: str | None,
    latency: str | None,
    intra_latency: str | None,
    inter_latency: str | None,
    intra_kind: str | None = None,
    inter_kind: str | None = None,
) -> Hardware:
    if gpus_per_node is not None and gpus_per_node <= 0:
        raise ConfigError(f"--gpus-per-node {gpus_per_node}: must be a positive integer")
    lat_i = intra_latency if intra_latency is not None else latency
    lat_e = inter_latency if inter_latency is not None else latency
    # an error names the flag the user typed: --latency sets both links
    flag_i = "--intra-latency" if intra_latency is not None else "--latency"
    flag_e = "--inter-latency" if inter_latency is not None else "--latency"
    return Hardware(
        gpus_per_node, "--gpus-per-node" if gpus_per_node else "",
        PartialLink(
            parse_link_latency(lat_i, flag_i) if lat_i is not None else None,
            parse_bandwidth(intra_bw, "--intra-bw") if intra_bw is not None else None,
            "command line", "", check_kind(intra_kind, "--intra-link"),
        ),
        PartialLink(
            parse_link_latency(lat_e, flag_e) if lat_e is not None else None,
            parse_bandwidth(inter_bw, "--inter-bw") if inter_bw is not None else None,
            "command line", "", check_kind(inter_kind, "--inter-link"),
            latency_from_both=inter_latency is None and latency is not None,
        ),
        "flags",
    )  # fmt: skip


def overlay(base: Hardware, top: Hardware) -> Hardware:
    """``top``'s figures where given, ``base``'s elsewhere (flags over a site profile)."""

    def link(a: PartialLink, b: PartialLink) -> PartialLink:
        src = []
        if b.latency_s is not None or b.bandwidth is not None:
            src.append(b.source)
        if (b.latency_s is None or b.bandwidth is None) and a.source:
            src.append(a.source)
        return PartialLink(
            b.latency_s if b.latency_s is not None else a.latency_s,
            b.bandwidth if b.bandwidth is not None else a.bandwidth,
            "; ".join(s for s in src if s), b.name or a.name, b.kind or a.kind,
            a.share if b.bandwidth is None else None,
            a.share_source if b.bandwidth is None else "",
            b.latency_from_both if b.latency_s is not None else a.latency_from_both,
        )  # fmt: skip

    return replace(
        base,
        gpus_per_node=top.gpus_per_node or base.gpus_per_node,
        gpus_source=top.gpus_source if top.gpus_per_node else base.gpus_source,
        intra=link(base.intra, top.intra),
        inter=link(base.inter, top.inter),
        origin=" + ".join(o for o in (base.origin, top.origin if top.given() else "") if o),
    )


def resolve(
    given: PartialLink,
    fitted: Link | None,
    scope: str,
    flag: str,
    measured_share: tuple[float, str] | None = None,
) -> Link | None:
    """The link a projection uses: the given figures, the fitted ones for what is not given.
    A given bandwidth is a line rate: the link carries the site's measured share of it, else
    ``measured_share`` (the user's multi-node sweep over the given rate), else its kind's
    published share. None when neither knows the link (the caller raises where it is needed)."""
    lat = given.latency_s if given.latency_s is not None else (fitted.latency_s if fitted else None)
    bw = given.bandwidth if given.bandwidth is not None else (fitted.bandwidth if fitted else None)
    if lat is None and bw is None:
        return None
    if bw is None and given.latency_from_both:
        # `--latency 3us` for a node's links says nothing of a link between nodes: unknown,
        # an error only where the ranks span nodes (the caller's placement says so)
        return None
    if lat is None or bw is None:
        missing = "latency" if lat is None else "bandwidth"
        flag_name = f"--{flag}-{'latency' if lat is None else 'bw'}"
        raise ConfigError(
            f"{scope} link: {missing} missing (its {'bandwidth' if lat is None else 'latency'} "
            f"was given); give {flag_name} or network.{scope}.{missing} in the site profile"
        )
    parts = []
    if given.latency_s is not None or given.bandwidth is not None:
        parts.append(given.source or "given")
    if fitted is not None and (given.latency_s is None or given.bandwidth is None):
        parts.append(fitted.source)
    name = given.name or (fitted.name if fitted else "")
    if given.bandwidth is None:
        return Link(lat, bw, "; ".join(parts), name)
    share, share_src = given.share, given.share_source
    if share is None and measured_share is not None:
        share, share_src = measured_share
    return given_link(lat, bw, "; ".join(parts), name, given.kind or kind_of(name), share,
                      share_src)  # fmt: skip


def site_snippet(
    intra: Link | None, inter: Link | None, gpus_per_node: int | None, gpus_source: str
) -> str:
    """A site profile's ``[network.intra_node]`` / ``[network.inter_node]`` tables holding the
    fitted figures and their sources; each link's ``achieved_share`` is 1, so a projection reads
    its bandwidth back as carried."""
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    # no bare [network] header: pasted into a profile that has one, a second would be a TOML
    # error; these subtables go below it, or into a profile without one as they are
    lines = [
        f"# written by `dlsuite project` on {now}: paste into sites/<name>.toml, below its",
        "# [network] table where it has one. The GPUs a node holds come from [network]'s",
        "# gpus_per_node (with its source), else from the partition's gpus_per_node.",
    ]
    if gpus_per_node:
        lines.append(f"# the run's ranks per node: {gpus_per_node} ({gpus_source})")
    for scope, link in (("intra_node", intra), ("inter_node", inter)):
        if link is None:
            continue
        lines += [
            "",
            f"[network.{scope}]",
            f"link = {_q(link.name or 'fitted')}",
            f"bandwidth = {_q(f'{link.bandwidth / 1e9:.4g} GB/s')}  # {fmt_bandwidth(link.bandwidth)}",
            f"latency = {_q(f'{link.latency_s * 1e6:.4g} us')}  # {fmt_latency(link.latency_s)}",
            f"source = {_q(link.source)}",
            # read back, a bandwidth is a line rate of which a link carries a share; a fitted one
            # is what the link carried, so all of it (else its kind unknown: a 0.32-1 band)
            "achieved_share = 1.0",
            'achieved_share_source = "the bandwidth above is what the sweep measured the link '
            'to carry, not its line rate"',
        ]
    return "\n".join(lines) + "\n"


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_snippet(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--write-site {path}: cannot write it ({exc.strerror})") from None


def link_doc(link: Link | None) -> dict[str, Any] | None:
    if link is None:
        return None
    return {
        "latency_s": link.latency_s,
        "bandwidth_bytes_per_s": link.bandwidth,
        "bandwidth": fmt_bandwidth(link.bandwidth),
        "latency": fmt_latency(link.latency_s),
        "source": link.source,
        "link": link.name,
        "kind": link.kind,
        "line_rate_bytes_per_s": link.line_rate,
        "achieved_share": link.share,
        "achieved_share_range": list(link.share_range) if link.share_range else None,
        "achieved_share_source": link.share_source or None,
    }
