#!/usr/bin/env bash
# Bootstrap a minimal Debian root filesystem from Debian's archive, as a tarball that
# `docker import` (or `dlsuite images base`) turns into the suite's base image. For sites with
# no image registry (air-gapped clusters, this project's CI): only a Debian mirror is needed.
#
#   containers/base/bootstrap.sh OUT.tar [SUITE] [MIRROR]
#
# SUITE defaults to bookworm (Python 3.11); MIRROR to the first main-archive URI of this
# machine's apt sources, else http://deb.debian.org/debian. Needs root and debootstrap
# (apt-get install debootstrap). The image holds python3, venv, pip and ca-certificates: what
# the framework Dockerfiles need from a base (they add build tools themselves when a recipe
# needs them). Takes about a minute; the tarball (about 100 MB) is worth caching.
set -euo pipefail
out=${1:?usage: bootstrap.sh OUT.tar [SUITE] [MIRROR]}
suite=${2:-bookworm}
mirror=${3:-}
if [[ -z $mirror ]]; then
    mirror=$({ grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null || true
               grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null || true; } |
             awk '$2 !~ /-security/ {print $2; exit}')
    mirror=${mirror:-http://deb.debian.org/debian}
fi
[[ $EUID -eq 0 ]] || { echo "bootstrap.sh: debootstrap needs root" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "bootstrap.sh: install debootstrap first (apt-get install debootstrap)" >&2; exit 1; }

rootfs=$(mktemp -d "${TMPDIR:-/tmp}/dlsuite-rootfs.XXXXXX")
chmod 0755 "$rootfs"  # mktemp made it 0700: it becomes the image's /, which every user must enter
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase \
    --include=python3,python3-venv,python3-pip,ca-certificates \
    "$suite" "$rootfs" "$mirror"
# The archive the image's apt uses later (a framework recipe's build tools); no caches inside.
echo "deb $mirror $suite main" >"$rootfs/etc/apt/sources.list"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
mkdir -p "$(dirname "$out")"
tar --numeric-owner -C "$rootfs" -cf "$out.part" .
mv "$out.part" "$out"
echo "bootstrap.sh: $out ($(du -h "$out" | cut -f1)) from $mirror $suite"
