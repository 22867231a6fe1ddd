"""`dlsuite project` as a cluster user types it: link figures on the command line and in a site
profile (units, kinds, zero latencies), the snippet `--write-site` writes read back as a profile,
and `--published` beside a run's options. Each test is a defect a first-contact user met."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from suite.errors import ConfigError
from suite.projection import collectives as C
from suite.projection import hardware
from suite.projection.render import efficiency_text, projection_table
from suite.projection.units import parse_latency, parse_link_latency
from tests.helpers import cli
from tests.unit.test_projection import _collective, _data_parallel, _write

# a 2-rank gloo run of this file's own: a ring at 40 us and 1.5 GB/s, 30 us per sample at one
# rank, a per-rank batch of 32 (weak scaling) with nothing of the exchange hidden
ALPHA, BW = 40e-6, 1.5e9
SIZES = [16, 4096, 1 << 18, 4 << 20, 32 << 20]
PER_SAMPLE = 30e-6
GRAD = 26122 * 4  # the zoo MLP's gradient, as _data_parallel's records train it


def _run(tmp_path: Path) -> Path:
    topo = C.Topology(2, 2, C.Link(ALPHA, BW, "t"))
    recs = [_collective(2, m, C.allreduce_time(m, topo, "ring")) for m in SIZES]
    recs.append(_data_parallel(1, 32 * PER_SAMPLE, batch=32, scaling="weak"))
    step2 = 32 * PER_SAMPLE + C.allreduce_time(GRAD, topo, "ring")
    recs.append(_data_parallel(2, step2, batch=32, scaling="weak"))
    return _write(tmp_path, "w2", recs)


def _profile(tmp_path: Path, inter: dict[str, Any], name: str = "mine.toml") -> Path:
    lines = [
        'scheduler = "slurm"', 'partition = "gpu"', "[partitions.gpu]", "nodes = 64",
        "gpus_per_node = 8", "[network]", "gpus_per_node = 8",
        'source = "our nodes: 8 GPUs each"', "[network.intra_node]", 'link = "NVLink 4"',
        'bandwidth = "450 GB/s"', 'latency = "3 us"', 'source = "data sheet"',
        "[network.inter_node]", *(f"{k} = {json.dumps(v)}" for k, v in inter.items()),
    ]  # fmt: skip
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _row(out: Path, ranks: int) -> dict[str, Any]:
    doc = json.loads(out.read_text())
    return next(r for r in doc["projections"] if r["ranks"] == ranks and "step_s" in r)


def _one_line_error(proc: Any, *needles: str) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


FABRIC = {"link": "our fabric", "bandwidth": "400 Gbit/s", "latency": "2 us", "source": "spec"}


def test_a_link_kind_flag_applies_to_the_site_profiles_bandwidth(tmp_path: Path) -> None:
    """`--site mine --inter-link roce` (the profile names no kind) was dropped unseen: the row
    kept the 400 Gbit/s line rate at a share of 1. Now the flag's kind sets the share."""
    run, site, out = _run(tmp_path), _profile(tmp_path, FABRIC), tmp_path / "p.json"
    plain = cli("project", str(run), "--ranks", "64", "--site", str(site), "--out", str(out))
    assert plain.returncode == 0, plain.stderr
    assert _row(out, 64)["links"]["inter_node"]["kind"] is None
    roce = cli("project", str(run), "--ranks", "64", "--site", str(site), "--out", str(out),
               "--inter-link", "roce")  # fmt: skip
    assert roce.returncode == 0, roce.stderr
    inter = _row(out, 64)["links"]["inter_node"]
    assert inter["kind"] == "roce" and inter["line_rate_bytes_per_s"] == pytest.approx(50e9)
    assert inter["bandwidth_bytes_per_s"] == pytest.approx(50e9 * C.LINK_KINDS["roce"].share)
    assert inter["latency_s"] == pytest.approx(2e-6)  # the profile's, kept


def test_a_link_kind_without_any_bandwidth_exits_2(tmp_path: Path) -> None:
    """With no line rate anywhere the kind has nothing to apply to: one line naming the flag
    to add, where it used to be ignored."""
    run = _run(tmp_path)
    proc = cli("project", str(run), "--ranks", "16", "--gpus-per-node", "8",
               "--inter-link", "infiniband")  # fmt: skip
    _one_line_error(proc, "--inter-link infiniband", "--inter-bw")
    assert not (run / "projection.json").exists()


def test_a_latency_error_names_the_flag_typed(tmp_path: Path) -> None:
    """`--latency 3` answered `--intra-latency = '3'`, a flag the user never typed."""
    run = _run(tmp_path)
    line = _one_line_error(cli("project", str(run), "--latency", "3"), "--latency = '3'", "unit")
    assert "--intra-latency" not in line
    line = _one_line_error(
        cli("project", str(run), "--latency", "2 us", "--inter-latency", "4"),
        "--inter-latency = '4'",
    )


@pytest.mark.parametrize("flag", ["--latency", "--intra-latency"])
def test_a_zero_link_latency_on_the_command_line_exits_2(tmp_path: Path, flag: str) -> None:
    """`--latency "0 us"` projected as though a message's latency steps cost nothing."""
    run = _run(tmp_path)
    _one_line_error(cli("project", str(run), flag, "0 us", "--intra-bw", "100 GB/s"),
                    f"{flag} = '0 us'", "above 0")  # fmt: skip


def test_a_zero_latency_in_a_site_profile_exits_2(tmp_path: Path) -> None:
    site = _profile(tmp_path, {**FABRIC, "latency": "0 ns"})
    _one_line_error(cli("project", str(_run(tmp_path)), "--site", str(site)),
                    "network.inter_node.latency", "above 0")  # fmt: skip


def test_link_latencies_in_every_unit_people_write() -> None:
    assert parse_latency("3 μs", "x") == pytest.approx(3e-6)  # the Greek mu
    assert parse_latency("3 µs", "x") == pytest.approx(3e-6)  # the micro sign
    assert parse_link_latency("0.5us", "x") == pytest.approx(5e-7)
    assert parse_latency("0 us", "launch") == 0.0  # a per-call cost may be nothing
    for bad in ("0 us", "0e3 ns", "0.0 ms"):
        with pytest.raises(ConfigError, match="above 0"):
            parse_link_latency(bad, "--latency")


def test_a_profile_takes_every_unit_the_flags_take(tmp_path: Path) -> None:
    """A profile's "46.6 GiB/s" failed the site schema while --inter-bw took it (and its own
    error message suggested "11.6 GiB/s"); so did a latency in "μs"."""
    site = _profile(tmp_path, {**FABRIC, "bandwidth": "46.6 GiB/s", "latency": "1.5 μs"})
    hw = hardware.from_site(str(site))
    assert hw.inter.bandwidth == pytest.approx(46.6 * 2**30)
    assert hw.inter.latency_s == pytest.approx(1.5e-6)
    flags = hardware.from_flags(8, None, "46.6 GiB/s", "1.5 μs", None, None)
    assert (
        flags.inter.bandwidth == hw.inter.bandwidth and flags.inter.latency_s == hw.inter.latency_s
    )


def test_the_write_site_snippet_reads_back_as_what_the_link_carried(tmp_path: Path) -> None:
    """`--write-site net.toml` wrote the fitted (carried) bandwidth as a line rate; read back
    with `--site`, its kind unknown, the link was taken at a share of 0.32-1 of it. Now the
    snippet says the share is 1 and the exchange projected from it is the fitted one's."""
    run, out, snippet = _run(tmp_path), tmp_path / "fit.json", tmp_path / "net.toml"
    fit = cli("project", str(run), "--ranks", "2", "--out", str(out), "--write-site", str(snippet))
    assert fit.returncode == 0, fit.stderr
    fitted = _row(out, 2)
    site = tmp_path / "site.toml"
    site.write_text('scheduler = "none"\n[partitions.p]\nnodes = 1\n' + snippet.read_text())
    back_out = tmp_path / "back.json"
    back = cli("project", str(run), "--ranks", "2", "--out", str(back_out), "--site", str(site))
    assert back.returncode == 0, back.stderr
    row = _row(back_out, 2)
    intra = row["links"]["intra_node"]
    assert intra["achieved_share"] == 1.0 and intra["achieved_share_range"] == [1.0, 1.0]
    assert intra["bandwidth_bytes_per_s"] == pytest.approx(BW, rel=1e-3)
    assert row["exchange_s"] == pytest.approx(fitted["exchange_s"], rel=1e-3)
    assert not any("share of line rate" in k for k in row["band_sources"])


def test_write_site_with_every_link_given_says_none_was_fitted(tmp_path: Path) -> None:
    run = _run(tmp_path)
    proc = cli("project", str(run), "--ranks", "2", "--intra-bw", "20 GB/s", "--intra-latency", "5 us",
               "--write-site", str(tmp_path / "net.toml"))  # fmt: skip
    _one_line_error(proc, "--write-site", "no row used a link fitted")
    assert (run / "projection.json").exists()  # the projection itself is kept


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["RUNDIR"], "RUN"),
        (["--ranks", "64,512"], "--ranks"),
        (["--site", "SITE", "--gpus-per-node", "8"], "--site, --gpus-per-node"),
        (["--details"], "--details"),
    ],
)
def test_published_beside_a_runs_options_exits_2(
    tmp_path: Path, extra: list[str], named: str
) -> None:
    """`dlsuite project runs/w2 --published mine.toml --site mine --ranks 64` printed the
    published table and dropped the run and both flags unseen."""
    run, site = _run(tmp_path), _profile(tmp_path, FABRIC)
    args = [str(run) if a == "RUNDIR" else str(site) if a == "SITE" else a for a in extra]
    proc = cli("project", *args, "--published")
    _one_line_error(proc, f"--published: {named} not used")
    assert "┏" not in proc.stdout


# a published result of this file's own, in the documented format: Goyal et al. 2017
# (arXiv:1706.02677), ResNet-50 at 32 images a GPU on Big Basin servers (8 P100, NVLink) with
# 50 Gbit/s Ethernet, about 90% scaling efficiency from 8 to 256 GPUs; the compute, the
# algorithm and the latencies are this test's assumptions, not the paper's
GOYAL = """
[[setup]]
id = "bigbasin"
paper = "Goyal et al. 2017, arXiv:1706.02677"
gpus_per_node = 8
algorithm = "halving-doubling"
messages = "per-tensor"
overlap = "timeline"
baseline_ranks = 8
[setup.intra_node]
link = "NVLink (P100)"
bandwidth = "20 GB/s"
latency = "5 us"
source = "8 P100 with NVLink; the rate and latency assumed"
[setup.inter_node]
link = "50 Gbit Ethernet"
kind = "ethernet"
bandwidth = "50 Gb/s"
latency = "10 us"
source = "the paper's 50 Gbit Ethernet; latency assumed"
[[result]]
id = "rn50-256"
setup = "bigbasin"
network = "ResNet-50"
zoo = "resnet50"
batch_per_gpu = 32
compute_s = 0.12
ranks = 256
published_efficiency = 90
"""


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [
        ('latency = "10 us"', 'latency = "0 us"', "inter_node: latency = '0 us'"),
        ('latency = "5 us"', 'latency = "5 us"\nlatency_range = ["0 us", "8 us"]', "latency_range"),
        ('messages = "per-tensor"',
         'messages = "cycle"\nfusion_threshold = "64 MiB"\ncycle_time = "0 ms"', "cycle_time"),
    ],
)  # fmt: skip
def test_a_zero_time_in_a_published_file_exits_2(
    tmp_path: Path, old: str, new: str, named: str
) -> None:
    """A link latency of "0 us" in a file of one's own was projected (and moved the result
    from outside its band to inside it); a cycle_time of "0 ms" said the step spans 120,000
    cycles. Both now name the key: a time above 0."""
    mine = tmp_path / "mine.toml"
    mine.write_text(GOYAL, encoding="utf-8")
    ok = cli("project", "--published", str(mine))
    assert ok.returncode == 0 and "rn50-256" in ok.stdout, ok.stderr
    mine.write_text(GOYAL.replace(old, new, 1), encoding="utf-8")
    _one_line_error(cli("project", "--published", str(mine)), named, "above 0")


def test_a_bucket_without_its_unit_that_cuts_the_gradient_into_crumbs_exits_2(
    tmp_path: Path,
) -> None:
    """`--bucket 8` is 8 bytes: the MLP's 0.1 MB gradient in 13,061 messages a step, each
    paying its latency, where 8 MiB was meant; it was projected (rows that "cannot fit").
    Now the published file's rule holds for the flag too: one line, exit 2."""
    run = _run(tmp_path)
    _one_line_error(cli("project", str(run), "--ranks", "4", "--bucket", "8"),
                    "--bucket 8 bytes", "13,061 messages", "25MiB")  # fmt: skip
    out = tmp_path / "p.json"
    ok = cli("project", str(run), "--ranks", "4", "--bucket", "8KiB", "--out", str(out))
    assert ok.returncode == 0, ok.stderr
    row = _row(out, 4)
    # DDP's buckets hold whole tensors (and its first one is 1 MiB): never more than the cut
    assert row["bucket_bytes"] == 8192 and 1 <= row["messages_per_step"] <= math.ceil(GRAD / 8192)


def test_fit_ranks_the_runs_do_not_hold_exits_2(tmp_path: Path) -> None:
    """`--fit-ranks 3` on a 2-rank run (a typo for 2) fitted to the one-rank compute alone, and
    said nothing of it. Now one line names the rank counts the runs hold; 1 is always fine."""
    run, out = _run(tmp_path), tmp_path / "p.json"
    _one_line_error(cli("project", str(run), "--ranks", "4", "--fit-ranks", "2,3"),
                    "--fit-ranks 2,3", "at 3 ranks", "they have: 2")  # fmt: skip
    for fit in ("1", "2"):
        ok = cli("project", str(run), "--ranks", "4", "--fit-ranks", fit, "--out", str(out))
        assert ok.returncode == 0, ok.stderr
        assert json.loads(out.read_text())["settings"]["fit_ranks"] == [int(fit)]


def test_a_check_run_with_nothing_to_compare_exits_2(tmp_path: Path) -> None:
    """`--check runs/ops` (an operator-level run) projected as though nothing had been asked:
    no row held out, no word. Now one line names the run; a distributed one still compares."""
    from tests import synthetic

    run = _run(tmp_path)
    ops = _write(tmp_path, "ops", [synthetic.operator_record()])
    proc = cli("project", str(run), "--ranks", "4", "--check", str(ops))
    _one_line_error(proc, "--check ops", "no distributed records")
    topo = C.Topology(4, 4, C.Link(ALPHA, BW, "t"))
    w4 = _write(tmp_path, "w4", [_data_parallel(4, 32 * PER_SAMPLE + C.allreduce_time(
        GRAD, topo, "ring"), batch=32, scaling="weak")])  # fmt: skip
    out = tmp_path / "p.json"
    ok = cli("project", str(run), "--ranks", "4", "--check", str(w4), "--out", str(out))
    assert ok.returncode == 0, ok.stderr
    measured = _row(out, 4)["measured"]  # held out, and the model's own arithmetic: exact
    assert measured["in_fit"] is False and measured["throughput_error"] == pytest.approx(
        0, abs=1e-9
    )


def test_ranks_that_do_not_fill_their_nodes_are_said(tmp_path: Path) -> None:
    """`--ranks 64 --gpus-per-node 3` printed 22 nodes and nothing else: that the last node
    holds one rank, which the model does not price apart, was not said anywhere."""
    run = _run(tmp_path)
    args = ["project", str(run), "--gpus-per-node", "3", "--inter-bw", "100 Gbit/s",
            "--inter-latency", "2 us", "--inter-link", "infiniband", "--out", str(tmp_path / "p.json")]  # fmt: skip
    proc = cli(*args, "--ranks", "64")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert (
        "not a multiple of the 3 a node holds, e.g. 64 ranks: 21 full node(s) and one of 1" in text
    )
    assert _row(tmp_path / "p.json", 64)["nodes"] == 22
    full = cli(*args, "--ranks", "3,63")
    assert full.returncode == 0 and "not a multiple" not in full.stdout, full.stdout


def test_a_row_on_given_links_is_not_compared_as_the_models_error(tmp_path: Path) -> None:
    """`--site mine` (NVLink at 450 GB/s) on a 2-rank gloo run printed the 2-rank row as
    "fitted" with a +40% error in --details, and "measured 22% against the measured one rank:
    the model's one rank is -2% from the measured one", as though the model missed: the row was
    on the given link, the record on the run's own. Both now say so."""
    run, out = _run(tmp_path), tmp_path / "p.json"
    own = cli("project", str(run), "--ranks", "2", "--out", str(out), "--details")
    assert own.returncode == 0, own.stderr
    assert "links_given" not in _row(out, 2)["measured"] and "own links" not in own.stdout
    what_if = cli("project", str(run), "--ranks", "2", "--out", str(out), "--details",
                  "--intra-bw", "50 GB/s", "--intra-latency", "1 us")  # fmt: skip
    assert what_if.returncode == 0, what_if.stderr
    row = _row(out, 2)
    assert row["measured"]["links_given"] == ["intra_node"]
    # the faster link: a what-if, not an error; the JSON names it a difference too
    assert "throughput_error" not in row["measured"]
    assert row["measured"]["throughput_difference"] > 0.1
    assert "not an error of the model" in row["measured"]["difference_is"]
    measured = 100 * row["scaling_efficiency"] / (1 + row["measured"]["throughput_difference"])
    said = f"measured {measured:.0f}% on the run's own links, this row on the given intra-node link"
    assert said in efficiency_text(row)  # the table's cell
    assert "own links" in what_if.stdout and "against the measured one rank" not in what_if.stdout


def test_latency_for_both_links_on_one_node_needs_no_inter_node_link(tmp_path: Path) -> None:
    """`--gpus-per-node 8 --intra-bw "300 GB/s" --latency "3 us" --ranks 8` (one node, as the
    help says: both links' latency) failed with "inter_node link: bandwidth missing"; a link
    between nodes is needed only where the ranks span nodes. An explicit --inter-latency
    without its bandwidth is still that error."""
    run, out = _run(tmp_path), tmp_path / "p.json"
    one = ["--gpus-per-node", "8", "--intra-bw", "300 GB/s", "--latency", "3 us"]
    ok = cli("project", str(run), "--ranks", "8", *one, "--out", str(out))
    assert ok.returncode == 0, ok.stderr
    intra = _row(out, 8)["links"]["intra_node"]
    assert intra["latency_s"] == pytest.approx(3e-6) and intra["line_rate_bytes_per_s"] == 300e9
    _one_line_error(cli("project", str(run), "--ranks", "16", *one),
                    "span 2 nodes", "no inter-node link is known")  # fmt: skip
    _one_line_error(cli("project", str(run), "--ranks", "8", "--gpus-per-node", "8",
                        "--inter-latency", "3 us"), "inter_node link: bandwidth missing")  # fmt: skip
    both = cli("project", str(run), "--ranks", "16", *one, "--inter-bw", "200 Gbit/s",
               "--out", str(out))  # fmt: skip
    assert both.returncode == 0, both.stderr
    assert _row(out, 16)["links"]["inter_node"]["latency_s"] == pytest.approx(3e-6)


def test_notes_and_cells_keep_their_brackets(tmp_path: Path) -> None:
    """A note naming "[network.inter_node]" printed "(or  in the site profile)": rich read the
    brackets as markup. Notes and table cells are plain text now."""
    topo = C.Topology(2, 2, C.Link(ALPHA, BW, "t"))
    recs = [_collective(2, m, C.allreduce_time(m, topo, "ring")) for m in SIZES]
    recs += [_data_parallel(1, 32 * PER_SAMPLE, batch=32, scaling="weak"),
             _data_parallel(2, 32 * PER_SAMPLE + C.allreduce_time(GRAD, topo, "ring"),
                            batch=32, scaling="weak"),
             _data_parallel(1, 8 * PER_SAMPLE, batch=8),  # strong: no 16-rank layout
             _data_parallel(2, 4 * PER_SAMPLE + C.allreduce_time(GRAD, topo, "ring"), batch=8)]  # fmt: skip
    run = _write(tmp_path, "two", recs)
    proc = cli("project", str(run), "--ranks", "16", "--gpus-per-node", "8",
               "--out", str(tmp_path / "p.json"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "no inter-node link is known" in text and "(or [network.inter_node] in the site" in text
    doc = json.loads((tmp_path / "p.json").read_text())
    row = next(r for r in doc["projections"] if "step_s" in r and r["ranks"] == 2)
    row["case"] = "model[v2].onnx · data_parallel"
    console = Console(width=200, record=True)
    console.print(projection_table({**doc, "projections": [row]}))
    assert "model[v2].onnx" in console.export_text()


def test_a_kind_flag_beside_a_measured_share_says_the_share_wins(tmp_path: Path) -> None:
    """`--site mine --inter-link ethernet` where the profile holds its own measured
    achieved_share kept that share (the site's measurement comes first) and said nothing: the
    row looked like an Ethernet what-if and was not one. A note now says so and what to give."""
    run, out = _run(tmp_path), tmp_path / "p.json"
    site = _profile(tmp_path, {**FABRIC, "achieved_share": 0.94,
                               "achieved_share_source": "our nccl-tests, 2 nodes"})  # fmt: skip
    base = ["project", str(run), "--ranks", "64", "--site", str(site), "--out", str(out),
            "--inter-link", "ethernet"]  # fmt: skip
    proc = cli(*base)
    assert proc.returncode == 0, proc.stderr
    assert "--inter-link ethernet: the site profile's measured share" in " ".join(
        proc.stdout.split()
    )
    inter = _row(out, 64)["links"]["inter_node"]
    assert inter["achieved_share"] == pytest.approx(0.94) and inter["kind"] == "ethernet"
    proc = cli(*base, "--inter-bw", "400 Gbit/s")  # a line rate of the user's: the kind's share
    assert proc.returncode == 0 and "measured share" not in proc.stdout, proc.stdout
    share = C.LINK_KINDS["ethernet"].share
    assert _row(out, 64)["links"]["inter_node"]["achieved_share"] == pytest.approx(share)


@pytest.mark.parametrize("kind", ["setup", "result"])
def test_two_tables_of_one_id_in_a_published_file_exit_2(tmp_path: Path, kind: str) -> None:
    """A second [[setup]] of the same id (4 GPUs a node) silently replaced the first: the result
    was projected on it (80.5% where its own setup gives 77.9%). Two results of one id printed
    two rows no one could tell apart. Both are one line now."""
    table = GOYAL.split("[[result]]")[0 if kind == "setup" else 1]
    second = table.replace("gpus_per_node = 8", "gpus_per_node = 4").replace(
        "ranks = 256", "ranks = 128"
    )
    text = GOYAL + (f"\n[[{kind}]]" if kind == "result" else "") + second
    if kind == "setup":  # a setup table goes before the results in the reading, either way
        text = second + GOYAL
    mine = tmp_path / "mine.toml"
    mine.write_text(text, encoding="utf-8")
    _one_line_error(cli("project", "--published", str(mine)),
                    f"[[{kind}]] number 2", "is taken by an earlier", "its own id")  # fmt: skip


# -- a deep MLP of this file's own: 8 weights of exactly 1 MiB (512 x 512 fp32), run with 1 MiB
# buckets, so a 25 MiB bucket sends its 8.4 MB gradient as one message instead of about nine
DEEP = {"network": "mlp", "features": 512, "hidden": 512, "layers": 8, "classes": 10}


def _deep_run(tmp_path: Path, bucket: int | None) -> Path:
    topo = C.Topology(2, 2, C.Link(ALPHA, BW, "t"))
    recs = [_collective(2, m, C.allreduce_time(m, topo, "ring")) for m in SIZES]
    grad = 4 * (8 * 512 * 512 + 9 * 512 + 10 * 512 + 10)
    for p, step in (
        (1, 16 * 400e-6),
        (2, 16 * 400e-6 + 1.3 * C.allreduce_time(grad, topo, "ring")),
    ):
        rec = _data_parallel(p, step, batch=16, scaling="weak")
        rec["benchmark"]["params"].update(DEEP)
        if bucket is not None:
            rec["benchmark"]["params"]["bucket"] = bucket
        recs.append(rec)
    return _write(tmp_path, f"deep-{bucket}", recs)


def test_bucket_replaces_the_records_bucket_in_the_projected_rows(tmp_path: Path) -> None:
    """`--bucket 25MiB` on a run whose records set a 1 MiB bucket was dropped unseen (the rows
    kept 1 MiB, the same step times), though --help says the flag replaces the default. Now
    the rows are at 25 MiB, and the measured 2-rank record beside them is a what-if."""
    run, out = _deep_run(tmp_path, 1 << 20), tmp_path / "p.json"
    own = cli("project", str(run), "--ranks", "2,16", "--out", str(out))
    assert own.returncode == 0, own.stderr
    own16 = _row(out, 16)
    assert own16["bucket_bytes"] == 1 << 20 and "1 MiB" in own16["fusion"]
    assert "throughput_error" in _row(out, 2)["measured"]
    big = cli("project", str(run), "--ranks", "2,16", "--out", str(out), "--bucket", "25MiB",
              "--details")  # fmt: skip
    assert big.returncode == 0, big.stderr
    row16, row2 = _row(out, 16), _row(out, 2)
    assert row16["bucket_bytes"] == 25 << 20 and "25 MiB" in row16["fusion"]
    assert row16["step_s"] < own16["step_s"]  # one message, not nine, each paying its latencies
    m = row2["measured"]
    assert m["bucket_given"] == 25 << 20 and m["records_bucket"] == 1 << 20
    assert "throughput_error" not in m and m["throughput_difference"] != 0.0
    assert "not an error of the model" in m["difference_is"]
    said = "at the records' 1 MiB bucket, this row at --bucket's 25 MiB"
    assert said in efficiency_text(row2)  # the table's cell
    assert "none: a what-if" in big.stdout  # --details: no error of the model in its column


def test_bucket_leaves_the_fit_at_the_bucket_the_records_ran_with(tmp_path: Path) -> None:
    """Records without a bucket ran at DDP's 25 MiB; `--bucket 1MiB` fitted them as though
    they had run at 1 MiB: the fitted overhead shrank by what the extra messages cost, and the
    2-rank row matched its record exactly at a bucket it never ran. The fit is now the same
    with or without the flag; only the projected rows move."""
    run, out = _deep_run(tmp_path, None), tmp_path / "p.json"
    assert cli("project", str(run), "--ranks", "2,16", "--out", str(out)).returncode == 0
    plain, plain2 = _row(out, 16), _row(out, 2)
    assert plain2["measured"]["throughput_error"] == pytest.approx(0.0, abs=1e-6)
    small = cli("project", str(run), "--ranks", "2,16", "--out", str(out), "--bucket", "1MiB")
    assert small.returncode == 0, small.stderr
    row, row2 = _row(out, 16), _row(out, 2)
    assert row["overhead_s"] == pytest.approx(plain["overhead_s"], rel=1e-9)
    assert row["hidden_share"] == pytest.approx(plain["hidden_share"], abs=1e-9)
    assert row["step_s"] > plain["step_s"]  # nine messages at 16 ranks, not one
    # the 2-rank row at 1 MiB is slower than its record at 25 MiB: a what-if, said as such
    assert row2["step_s"] > plain2["step_s"]
    assert row2["measured"]["throughput_difference"] < 0
    assert row2["measured"]["records_bucket"] == 25 << 20


def _partition_profile(tmp_path: Path, network: str) -> Path:
    path = tmp_path / "part.toml"
    path.write_text(
        'scheduler = "slurm"\npartition = "a100"\n[partitions.a100]\nnodes = 16\n'
        f"gpus_per_node = 4\n{network}",
        encoding="utf-8",
    )
    return path


def test_a_profiles_network_takes_its_partitions_gpus_per_node(tmp_path: Path) -> None:
    """A profile whose partition says 4 GPUs a node and whose [network] gives only the links
    was refused ("not how many ranks a node holds"); the partition's count is now used."""
    net = "[network.inter_node]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in FABRIC.items())
    site, out, run = _partition_profile(tmp_path, net), tmp_path / "p.json", _run(tmp_path)
    proc = cli("project", str(run), "--ranks", "16", "--site", str(site), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    row = _row(out, 16)
    assert row["ranks_per_node"] == 4 and row["nodes"] == 4
    # [network]'s own count wins over the partition's
    site.write_text(site.read_text().replace("[network.inter_node]",
                    '[network]\ngpus_per_node = 8\nsource = "ours"\n[network.inter_node]'))  # fmt: skip
    proc = cli("project", str(run), "--ranks", "16", "--site", str(site), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert _row(out, 16)["nodes"] == 2


def test_a_directory_given_as_the_site_exits_2(tmp_path: Path) -> None:
    """`--site sites/` said "no such file" of a directory that exists."""
    d = tmp_path / "profiles"
    d.mkdir()
    (d / "ours.toml").write_text('scheduler = "none"\n[partitions.p]\nnodes = 1\n')
    line = _one_line_error(cli("project", str(_run(tmp_path)), "--site", str(d)),
                           "a directory", "ours.toml")  # fmt: skip
    assert "no such file" not in line


def test_the_write_site_snippet_pastes_below_a_profiles_network_table(tmp_path: Path) -> None:
    """The snippet began with a bare [network]: pasted into a profile that has one (with its
    gpus_per_node), TOML refused the second. It now holds only the link tables."""
    run, snippet = _run(tmp_path), tmp_path / "net.toml"
    fit = cli("project", str(run), "--ranks", "2", "--out", str(tmp_path / "f.json"),
              "--write-site", str(snippet))  # fmt: skip
    assert fit.returncode == 0, fit.stderr
    text = snippet.read_text()
    assert "[network]\n" not in text and "[network.intra_node]" in text
    site = _partition_profile(tmp_path, '[network]\ngpus_per_node = 2\nsource = "ours"\n' + text)
    out = tmp_path / "back.json"
    back = cli("project", str(run), "--ranks", "2", "--site", str(site), "--out", str(out))
    assert back.returncode == 0, back.stderr
    assert _row(out, 2)["links"]["intra_node"]["achieved_share"] == 1.0


def _published_file(tmp_path: Path, ranks: int) -> Path:
    path = tmp_path / f"pub{ranks}.toml"
    path.write_text(
        '[[setup]]\nid = "six"\ngpus_per_node = 6\nalgorithm = "ring"\nmessages = "25 MiB"\n'
        'overlap = "timeline"\nbaseline_ranks = 6\n'
        '[setup.intra_node]\nbandwidth = "50 GB/s"\nlatency = "4 us"\nsource = "ours"\n'
        '[setup.inter_node]\nbandwidth = "100 Gbit/s"\nlatency = "3 us"\nkind = "infiniband"\n'
        'source = "ours"\n'
        f'[[result]]\nid = "r{ranks}"\nsetup = "six"\nnetwork = "MLP"\nparameters = 5000000\n'
        f"batch_per_gpu = 32\ncompute_s = 0.05\nranks = {ranks}\npublished_efficiency = 90.0\n",
        encoding="utf-8",
    )
    return path


def test_published_gpus_that_do_not_fill_their_nodes_are_said(tmp_path: Path) -> None:
    """A published result of 20 GPUs at 6 a node printed 4 nodes' worth with nothing said (a
    run's projection says it). Now a note names the result and its last node's GPUs."""
    proc = cli("project", "--published", str(_published_file(tmp_path, 20)))
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "r20: 20 GPUs, 3 full node(s) and one of 2" in text
    full = cli("project", "--published", str(_published_file(tmp_path, 24)))
    assert full.returncode == 0 and "not a multiple" not in full.stdout, full.stdout


def _goyal_file(tmp_path: Path, compute_s: float, ranges: bool) -> Path:
    """Goyal et al. 2017 as a user writes it from the paper and the guide's format alone
    (docs/guide/projection.md, "Writing your own file")."""
    lat_i = '\nlatency_range = ["2.5 us", "10 us"]' if ranges else ""
    lat_e = '\nlatency_range = ["5 us", "20 us"]' if ranges else ""
    path = tmp_path / f"goyal-{compute_s}-{ranges}.toml"
    path.write_text(
        '[[setup]]\nid = "goyal"\ngpus_per_node = 8\nalgorithm = "halving-doubling"\n'
        'messages = "per-tensor"\noverlap = "timeline"\nbaseline_ranks = 8\n'
        f'[setup.intra_node]\nlink = "NVLink"\nbandwidth = "20 GB/s"\nlatency = "5 us"{lat_i}\n'
        'source = "P100 NVLink"\n'
        '[setup.inter_node]\nlink = "50 Gbit Ethernet"\nbandwidth = "50 Gbit/s"\n'
        f'latency = "10 us"{lat_e}\nkind = "ethernet"\nsource = "paper, sec. 5"\n'
        '[[result]]\nid = "rn50-256"\nsetup = "goyal"\nnetwork = "ResNet-50"\nzoo = "resnet50"\n'
        f"batch_per_gpu = 32\ncompute_s = {compute_s}\nranks = 256\npublished_efficiency = 90.0\n",
        encoding="utf-8",
    )
    return path


def test_a_users_goyal_file_differs_from_the_suites_entry_by_its_compute_only(
    tmp_path: Path,
) -> None:
    """The guide says a Goyal file of one's own gave 77.9% against the entry's 90.6% because
    it took the paper's 120 ms backward pass as the step, and that with 180 ms and the entry's
    latency ranges it projects what the entry does; this holds the guide to it."""
    from suite.projection import published

    (entry,) = [p for p in published.check() if p.id == "goyal2017-resnet50-256"]
    (same,) = published.check(_goyal_file(tmp_path, 0.180, ranges=True))
    assert same.projected == pytest.approx(entry.projected, abs=0.05)
    assert same.band == pytest.approx(entry.band, abs=0.05)
    (backward,) = published.check(_goyal_file(tmp_path, 0.120, ranges=False))
    assert backward.projected == pytest.approx(77.9, abs=0.05)
    assert backward.band == pytest.approx((65.5, 83.3), abs=0.05)
    assert entry.projected == pytest.approx(90.6, abs=0.05)


def _my_run(tmp_path: Path) -> Path:
    """A 2-rank run of these tests' own: a ring at 25 us and 3 GB/s, 12 us per sample."""
    topo = C.Topology(2, 2, C.Link(25e-6, 3e9, "mine"))
    recs = [_collective(2, m, C.allreduce_time(m, topo, "ring")) for m in (64, 1 << 16, 8 << 20)]
    recs.append(_data_parallel(1, 16 * 12e-6, batch=16, scaling="weak"))
    recs.append(_data_parallel(2, 16 * 12e-6 + C.allreduce_time(GRAD, topo, "ring"), batch=16))
    return _write(tmp_path, "mine", recs)


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--ranks", "2,0"], "--ranks 2,0: 0 is not a positive rank count"),
        (["--ranks", "4", "--fit-ranks", "-2"], "--fit-ranks -2: -2 is not a positive rank count"),
    ],
)
def test_a_bad_rank_count_names_the_flag_it_came_from(
    tmp_path: Path, flags: list[str], named: str
) -> None:
    """``--ranks`` and ``--fit-ranks`` were both "--ranks/--fit-ranks" in the error."""
    _one_line_error(cli("project", str(_my_run(tmp_path)), *flags), named, "e.g. 2,8,64")


def test_site_given_as_a_directory_without_a_slash_says_so(tmp_path: Path) -> None:
    """``--site sites`` (the folder, as ``ls`` shows it) read as a site named "sites": "no
    profile sites.toml in .../sites". It is said to be a directory, with its profiles."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    _profile(folder, FABRIC, "cluster-a.toml")
    proc = cli("project", str(_my_run(tmp_path)), "--site", "profiles", cwd=tmp_path)
    _one_line_error(proc, "--site profiles: a directory", "cluster-a.toml: --site cluster-a")


@pytest.mark.parametrize("where", ["missing-folder/p.json", "a-file/p.json", "."])
def test_an_out_that_cannot_be_written_is_refused_before_projecting(
    tmp_path: Path, where: str
) -> None:
    """``--out`` into a folder that does not exist was found only after the projection had
    been computed and printed; it is refused first, with nothing printed or left behind."""
    run = _my_run(tmp_path)
    (tmp_path / "a-file").write_text("not a folder\n")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    proc = cli("project", str(run), "--ranks", "8", "--out", where, cwd=tmp_path)
    _one_line_error(proc, f"--out {where}:")
    assert proc.stdout == ""
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    ok = cli("project", str(run), "--ranks", "8", "--out", "p.json", cwd=tmp_path)
    assert ok.returncode == 0 and _row(tmp_path / "p.json", 8)["step_s"] > 0, ok.stderr
