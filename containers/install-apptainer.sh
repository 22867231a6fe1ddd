#!/usr/bin/env bash
# Apptainer for dlsuite: the apptainer backend, `dlsuite images sif` and `make sif` need it.
# docs/guide/apptainer.md says when to use this script and what Apptainer can and cannot do here.
#
#   sudo bash containers/install-apptainer.sh             # install, or say how
#   sudo bash containers/install-apptainer.sh --package   # run the distribution's command
#
# What it does, first match wins:
#   1. apptainer already works ($PREFIX/bin/apptainer, else the one on PATH): nothing is
#      installed; only the root capability setting below is checked. FORCE=1 skips this.
#   2. the distribution packages Apptainer: it prints the one command to install it and
#      exits 1; with --package it runs that command.
#        Debian or Ubuntu whose apt knows `apptainer` (sid)  apt-get install -y apptainer
#        Ubuntu                                              Apptainer's PPA (ppa:apptainer/ppa)
#        Fedora                                              dnf install -y apptainer
#        RHEL, Rocky, AlmaLinux, CentOS Stream               EPEL, then dnf install -y apptainer
#   3. Debian 12 (bookworm, tested) or 13 (trixie, not tested), which have no apptainer
#      package (Debian has it in sid only): it builds Apptainer from sid's source package the
#      way Debian does, in Go's GOPATH mode against sid's golang-*-dev packages (plain Go
#      source), so neither GitHub nor the Go module proxy is needed. Sid's binary package
#      cannot be used on bookworm: it needs glibc >= 2.38. Nothing from sid is installed: its
#      source, its Go libraries and its Go toolchain are only downloaded and unpacked in
#      $WORKDIR. It took 20 minutes on a busy 2-core machine (load 10-17; 4.4 minutes of CPU)
#      and needs 4 GB of disk while building.
#
# What it changes on the system (it prints this before it starts building):
#   * apt-get installs the packages in DEPS below, from the system's own release;
#   * Apptainer goes to $PREFIX (default /opt/apptainer), linked from $LINK (default
#     /usr/local/bin/apptainer; LINK= for no link);
#   * only where the capability bounding set lacks capabilities (containers and sandboxes
#     without CAP_SYS_RESOURCE), in cases 1 to 3: `root default capabilities = file` in
#     apptainer.conf, and capability.json grants root the capabilities the set does have.
#     Without this, every `apptainer exec` by root fails with "Requesting capability set ...".
#   * logs go to $LOGDIR (default /var/log/install-apptainer). $WORKDIR (default
#     /var/cache/install-apptainer) is removed on success (KEEP_WORKDIR=1 keeps it) and kept on
#     failure: a rerun reuses its downloads and Go build cache.
#   It does not change the apt sources (sid is read through a private apt configuration in
#   $WORKDIR), /etc/subuid or /etc/subgid, and does not install squashfuse (with /dev/fuse
#   at 0600, as in these sandboxes, it would break non-root `apptainer exec x.sif`).
#
# Other settings (environment): DEBIAN_MIRROR (default: the system's Debian archive),
# SOURCE_SUITE (default sid), FORCE=1 (build even when apptainer works).
set -euo pipefail

PREFIX=${PREFIX:-/opt/apptainer}
LINK=${LINK-/usr/local/bin/apptainer}
WORKDIR=${WORKDIR:-/var/cache/install-apptainer}
LOGDIR=${LOGDIR:-/var/log/install-apptainer}
SOURCE_SUITE=${SOURCE_SUITE:-sid}
FORCE=${FORCE:-0}
KEEP_WORKDIR=${KEEP_WORKDIR:-0}
# Build tools, the C libraries Apptainer links against, and the tools it runs (mksquashfs,
# sqfstar, newuidmap, fuse2fs, fuse-overlayfs, fakeroot, cryptsetup). The runtime libraries
# are named so that `apt-get autoremove` of the -dev packages keeps them.
DEPS=(build-essential pkg-config git ca-certificates libseccomp-dev libfuse3-dev libsqlite3-dev
  libgpgme-dev libbtrfs-dev libdevmapper-dev libseccomp2 libsqlite3-0 libcap2-bin uidmap
  squashfs-tools squashfs-tools-ng fuse2fs fuse-overlayfs fakeroot cryptsetup-bin)
export DEBIAN_FRONTEND=noninteractive LC_ALL=C

say() { printf '[install-apptainer %4ss] %s\n' "$SECONDS" "$*"; }
die() { printf 'install-apptainer.sh: %s\n' "$*" >&2; exit 1; }

# step NAME CMD...: one external command, its output appended to $LOGDIR/NAME.log; on failure
# the log's tail and stop. (One command, or a function that runs one: `set -e` does not apply
# inside a function called from an && list.)
step() {
  local name=$1; shift
  "$@" >>"$LOGDIR/$name.log" 2>&1 && return 0
  tail -n 30 "$LOGDIR/$name.log" >&2
  die "step '$name' failed; its log: $LOGDIR/$name.log (the work dir $WORKDIR is kept)"
}

# Capability names of a mask, as apptainer spells them (CAP_CHOWN,CAP_KILL,...).
cap_names() { capsh --decode="$(printf '0x%x' "$1")" | sed 's/^[^=]*=//' | tr '[:lower:]' '[:upper:]'; }

# By default (`root default capabilities = full`) root's apptainer asks for every capability
# it knows (bits 0..40). Where the bounding set lacks one, root's exec, run and shell stop at
#   ERROR: Requesting capability set 0x000001ffffffffff while permitted capability set is ...
# `file` mode gives root the capabilities listed in capability.json instead: all it has.
root_capabilities() {
  local app=$1 bnd last all lack have conf
  bnd=$((16#$(awk '/^CapBnd:/ {print $2}' /proc/self/status)))
  last=$(cat /proc/sys/kernel/cap_last_cap 2>/dev/null || echo 40)
  ((last <= 40)) || last=40
  all=$(((1 << (last + 1)) - 1))
  lack=$((all & ~bnd)) have=$((all & bnd))
  ((lack != 0)) || return 0
  conf=$("$app" buildcfg SYSCONFDIR)/apptainer/apptainer.conf
  grep -q '^root default capabilities = file$' "$conf" && return 0
  command -v capsh >/dev/null || die "capsh is missing (Debian, Ubuntu: libcap2-bin; Fedora, EPEL: libcap)"
  say "the capability bounding set lacks $(cap_names "$lack"): root's apptainer would fail"
  say "changing $conf: root default capabilities = file"
  step configure "$app" config global --set "root default capabilities" file
  say "changing $(dirname "$conf")/capability.json: root gets the $(cap_names "$have" | tr ',' '\n' | wc -l) capabilities it has"
  step configure "$app" capability add --user root "$(cap_names "$have")"
}

link_into_path() {
  [[ -n $LINK && $(readlink "$LINK" || true) != "$PREFIX/bin/apptainer" ]] || return 0
  [[ ! -e $LINK || -L $LINK ]] || die "$LINK exists and is not a link; move it away or set LINK="
  say "linking $LINK -> $PREFIX/bin/apptainer"
  mkdir -p "$(dirname "$LINK")" && ln -sfn "$PREFIX/bin/apptainer" "$LINK"
}

# The one command that installs the distribution's package; empty where there is none.
package_command() {
  local id=${ID:-} like=" ${ID:-} ${ID_LIKE:-} "
  if [[ $like == *" debian "* || $like == *" ubuntu "* ]] &&
    [[ $(apt-cache policy apptainer 2>/dev/null | awk '/Candidate:/ {print $2}') =~ ^[0-9] ]]; then
    echo "apt-get install -y apptainer"
  elif [[ $like == *" ubuntu "* ]]; then
    echo "apt-get install -y software-properties-common && add-apt-repository -y ppa:apptainer/ppa && apt-get install -y apptainer"
  elif [[ $id == fedora ]]; then
    echo "dnf install -y apptainer"
  elif [[ $like == *" rhel "* || $like == *" centos "* ]]; then
    echo "dnf install -y epel-release && dnf install -y apptainer"
  fi
}

# ---------------------------------------------------------------------------------- checks
case ${1:-} in
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  --package | '') ;;
  *) die "unknown option '$1' (--package or --help)" ;;
esac
[[ $EUID -eq 0 ]] || die "run it as root (sudo bash $0); it installs system packages"
[[ $PREFIX == /?* && $WORKDIR == /?*/?* ]] || die "PREFIX and WORKDIR must be absolute (WORKDIR not directly under /)"
# ID, ID_LIKE, VERSION_CODENAME, PRETTY_NAME (OS_RELEASE: another file, for the tests)
# shellcheck source=/dev/null
[[ ! -r ${OS_RELEASE:=/etc/os-release} ]] || . "$OS_RELEASE"
mkdir -p "$LOGDIR"
# One run at a time (cases 1 and 3): a second one waits, then usually finds apptainer working.
lock() {
  [[ ${locked:-0} == 1 ]] && return 0
  mkdir -p /run/lock && exec 9>/run/lock/install-apptainer.lock && locked=1
  flock -n 9 || { say "another install-apptainer.sh is running; waiting for it"; flock 9; }
}

# 1. Already there.
if [[ $FORCE != 1 ]]; then
  lock
  app=$PREFIX/bin/apptainer
  [[ -x $app ]] || app=$(command -v apptainer || true)
  if [[ -n $app ]] && version=$("$app" version 2>/dev/null); then
    [[ $app != "$PREFIX/bin/apptainer" ]] || link_into_path
    root_capabilities "$app"
    say "apptainer $version is installed ($app); nothing to do"
    exit 0
  fi
fi

# 2. The distribution's package.
pkg=$(package_command)
if [[ -n $pkg ]]; then
  [[ ${1:-} == --package ]] || die "Apptainer has a package here; install it with: $pkg   (or rerun with --package)"
  say "running: $pkg"
  bash -c "$pkg"
  root_capabilities "$(command -v apptainer)"
  say "done: apptainer $(apptainer version)"
  exit 0
fi

# 3. Debian 12 or 13: build it.
codename=${VERSION_CODENAME:-}
[[ ${ID:-} == debian && ($codename == bookworm || $codename == trixie) ]] ||
  die "no recipe for ${PRETTY_NAME:-this system} (it covers Debian 12 and 13, Ubuntu, Fedora, RHEL and its rebuilds); docs/guide/apptainer.md says more"
lock
DEBIAN_MIRROR=${DEBIAN_MIRROR:-$({ grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null || true
  grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null || true; } | awk '$2 !~ /-security/ {print $2; exit}')}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
ARCH=$(dpkg --print-architecture)
# WORKDIR is removed with rm -rf at the end: never one this script did not make.
if [[ -d $WORKDIR && ! -e $WORKDIR/.install-apptainer && -n $(ls -A "$WORKDIR") ]]; then
  die "$WORKDIR is not empty and was not made by this script; set WORKDIR"
fi
mkdir -p "$WORKDIR" && touch "$WORKDIR/.install-apptainer"
free_gb=$(($(df -Pk "$WORKDIR" | awk 'NR == 2 {print $4}') / 1024 / 1024))
((free_gb >= 5)) || die "needs 5 GB free under $WORKDIR, has $free_gb GB"
rm -f "$LOGDIR"/*.log

cat <<EOF
[install-apptainer] building Apptainer from Debian $SOURCE_SUITE's source package ($DEBIAN_MIRROR). This:
  * apt-get installs from $codename: ${DEPS[*]}
  * installs Apptainer in $PREFIX${LINK:+ and links $LINK to it}
  * where the capability bounding set lacks capabilities: root default capabilities = file
  * builds in $WORKDIR (about 4 GB; removed on success), logs in $LOGDIR
EOF

say "apt-get install of the build and runtime packages"
# An unrelated third-party source may fail `update`; the install says if something is missing.
apt-get update >>"$LOGDIR/apt.log" 2>&1 || say "apt-get update reported errors ($LOGDIR/apt.log); going on"
step apt apt-get install -y --no-install-recommends -o DPkg::Lock::Timeout=600 "${DEPS[@]}"

# A private apt configuration for sid: its own sources, lists, cache, and an empty dpkg status,
# so that the simulated install below resolves the whole closure from sid alone.
APTDIR=$WORKDIR/apt
mkdir -p "$APTDIR"/{sources.list.d,preferences.d,lists/partial,archives/partial}
: >"$APTDIR/status"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
printf 'deb [arch=%s signed-by=%s] %s %s main\ndeb-src [signed-by=%s] %s %s main\n' \
  "$ARCH" "$keyring" "$DEBIAN_MIRROR" "$SOURCE_SUITE" "$keyring" "$DEBIAN_MIRROR" "$SOURCE_SUITE" \
  >"$APTDIR/sources.list"
sid_apt() {
  "$@" -o Dir::Etc::SourceList="$APTDIR/sources.list" -o Dir::Etc::SourceParts="$APTDIR/sources.list.d" \
    -o Dir::Etc::PreferencesParts="$APTDIR/preferences.d" -o Dir::State::Lists="$APTDIR/lists" \
    -o Dir::State::status="$APTDIR/status" -o Dir::Cache="$APTDIR" -o Dir::Cache::Archives="$APTDIR/archives" \
    -o APT::Architectures="$ARCH" -o Acquire::Languages=none -o APT::Sandbox::User=root
}
say "apt-get update for $SOURCE_SUITE (private lists in $APTDIR)"
step apt-sid sid_apt apt-get update

# The source package, unpacked (with Debian's patches) at its import path in a GOPATH tree.
src_pkg=$WORKDIR/source
rm -rf "$src_pkg" "$WORKDIR/gopath" && mkdir -p "$src_pkg"
say "downloading the apptainer source package"
(cd "$src_pkg" && step source sid_apt apt-get source --download-only apptainer)
dsc=$(cd "$src_pkg" && ls apptainer_*.dsc)
deb_version=${dsc#apptainer_} deb_version=${deb_version%.dsc} # e.g. 1.4.5-2
step source dpkg-source -x "$src_pkg/$dsc" "$WORKDIR/unpacked"
module=$(awk '$1 == "module" {print $2; exit}' "$WORKDIR/unpacked/go.mod" || true)
module=${module:-github.com/apptainer/apptainer}
SRC=$WORKDIR/gopath/src/$module
mkdir -p "$(dirname "$SRC")" && mv "$WORKDIR/unpacked" "$SRC"
[[ -e $SRC/VERSION ]] || echo "${deb_version%-*}" >"$SRC/VERSION" # as debian/rules does

# Its golang-* Build-Depends (names only), plus golang-go for sid's default toolchain; the
# simulated install with an empty status lists their whole closure.
mapfile -t build_deps < <(awk '/^Build-Depends/ {on = 1; sub(/^[^:]*:/, ""); print; next} /^[^ ]/ {on = 0} on' \
  "$src_pkg/$dsc" | tr ',' '\n' | sed -E 's/\|.*//; s/[[(<:].*//; s/[[:space:]]//g' | grep '^golang-' | sort -u)
say "resolving the closure of ${#build_deps[@]} golang-* build dependencies"
step simulate sid_apt apt-get install -s --no-install-recommends "${build_deps[@]}" golang-go
toolchain=$(awk '$1 == "Inst" && $2 ~ /^golang-1\.[0-9]+-go$/ {print $2}' "$LOGDIR/simulate.log" | sort -V | tail -n 1)
[[ -n $toolchain ]] || die "no golang-1.NN-go in the closure ($LOGDIR/simulate.log)"
go_minor=${toolchain#golang-} go_minor=${go_minor%-go} # e.g. 1.24
# The Go libraries (source under /usr/share/gocode) and the toolchain with its standard library;
# not the metapackages and tool binaries.
mapfile -t go_pkgs < <({ awk '$1 == "Inst" && $2 ~ /^golang-/ {print $2}' "$LOGDIR/simulate.log" |
  grep -vE '^golang-(go|any|src|doc|golang-x-tools|1\.[0-9]+-(go|src|doc))$' || true
  echo "$toolchain"; echo "golang-$go_minor-src"; } | sort -u)
debs=$WORKDIR/debs
mkdir -p "$debs"
# The file names of this closure, so that files an earlier run left with other versions are
# not unpacked; apt-get download skips the files already there.
mapfile -t deb_files < <(cd "$debs" && sid_apt apt-get download --print-uris "${go_pkgs[@]}" | awk '{print $2}')
say "downloading ${#go_pkgs[@]} golang packages ($toolchain)"
(cd "$debs" && step download sid_apt apt-get download "${go_pkgs[@]}")
sidroot=$WORKDIR/sidroot
say "unpacking them in $sidroot (about 3 GB; nothing is installed)"
rm -rf "$sidroot" && mkdir -p "$sidroot"
for f in "${deb_files[@]}"; do dpkg-deb -x "$debs/$f" "$sidroot" || die "dpkg-deb -x $f failed"; done

export GOROOT=$sidroot/usr/lib/go-$go_minor GOPATH=$WORKDIR/gopath:$sidroot/usr/share/gocode
export PATH=$GOROOT/bin:$PATH GO111MODULE=off GOPROXY=off GOTOOLCHAIN=local GOFLAGS='' GOENV=off CGO_ENABLED=1
# One Go cache per source version: the cache does not follow the starter's C files (included
# from a cgo preamble), so another version's cache could link a stale starter.
export GOCACHE=$WORKDIR/gocache-$deb_version
find "$WORKDIR" -maxdepth 1 -name 'gocache-*' ! -path "$GOCACHE" -exec rm -rf {} +
say "toolchain: $(go version)"
cd "$SRC"
say "configuring apptainer $deb_version for $PREFIX (--without-suid --without-network, as Debian)"
step build ./mconfig -v -b builddir --prefix="$PREFIX" --without-suid --without-network
# The Makefile cleans the whole Go cache before building the starter when builddir/.clean-starter
# is older than the starter's sources: on a fresh cache that only recompiles every dependency.
touch builddir/.clean-starter
# On the command line, so that the Makefile's own settings do not win. -mod=readonly as Debian;
# -buildmode=pie for the helper `go run` steps too (the binaries are PIE anyway): otherwise
# those compile the whole dependency tree a second time, non-PIE.
say "compiling (the slow part: about 4 minutes of CPU)"
step build make -C builddir GOFLAGS="-mod=readonly -buildmode=pie" GO111MODULE=off
say "installing in $PREFIX"
step install make -C builddir install GOFLAGS="-mod=readonly -buildmode=pie" GO111MODULE=off
cd /
version=$("$PREFIX/bin/apptainer" version) || die "$PREFIX/bin/apptainer does not run"

link_into_path
root_capabilities "$PREFIX/bin/apptainer"
if [[ $KEEP_WORKDIR == 1 ]]; then
  say "keeping $WORKDIR (KEEP_WORKDIR=1)"
else
  say "removing $WORKDIR (many small files: minutes on a busy disk)"
  rm -rf "$WORKDIR"
fi
say "done: apptainer $version in $PREFIX ($(du -sh "$PREFIX" | cut -f1))${LINK:+, linked from $LINK}"
