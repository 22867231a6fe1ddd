#!/usr/bin/env bash
# The system packages the tests use for real, from Debian's archive (root, apt):
#   openmpi-bin              the mpirun launcher (tests/integration/test_distributed.py)
#   slurm-wlm munge          the local Slurm cluster the slurm tests start (cluster/local-cluster.sh)
#   docker.io debootstrap    the Docker daemon the container tests start, and the Debian base
#                            image built from Debian's archive (no registry is needed)
#   python3-venv             a venv of the system's python3 for the apptainer tests' user
#   containers/*/system-packages.txt
#                            what each framework's recipe declares (its environment here uses
#                            the host's libraries and tools; the kit runs in every environment)
# `make test` runs this as root; .ci/run runs it on CI's fresh machine. Without root, `make
# test` deselects the tests that need these, one line each, naming this script.
# --dry-run: print what is missing (one line) and install nothing.
set -euo pipefail
dry_run=0
[ "${1:-}" = --dry-run ] && dry_run=1
want=()
command -v mpirun >/dev/null 2>&1 || want+=(openmpi-bin)
{ command -v slurmctld >/dev/null 2>&1 && command -v slurmd >/dev/null 2>&1; } || want+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || want+=(munge)
command -v dockerd >/dev/null 2>&1 || want+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || want+=(debootstrap)
# the system python3's venv: the interpreter the apptainer tests' unprivileged user runs the
# suite with, where root's own is out of its reach (suite/images.py, check_interpreter)
{ [ ! -x /usr/bin/python3 ] || /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null; } || want+=(python3-venv)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'; }
for recipe in "$(dirname "$0")"/../containers/*/system-packages.txt; do
    [ -f "$recipe" ] || continue
    while read -r pkg; do
        pkg=${pkg%%#*}; pkg=${pkg//[[:space:]]/}
        [ -n "$pkg" ] || continue
        installed "$pkg" || [[ " ${want[*]} " == *" $pkg "* ]] || want+=("$pkg")
    done <"$recipe"
done
if [ "$dry_run" = 1 ]; then
    echo "missing: ${want[*]}"
    exit 0
fi
if [ ${#want[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "tests/system-deps.sh: needs root and apt-get to install: ${want[*]}" >&2
    exit 1
fi
echo "== installing ${want[*]} (Debian packages the tests use; about a minute)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
