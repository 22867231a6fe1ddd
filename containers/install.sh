#!/usr/bin/env bash
# Install one framework's environment and the suite inside an image; the one RUN step of every
# containers/<framework>/Dockerfile (and the %post of the generated Apptainer.def).
#
#   bash /opt/dlsuite/src/containers/install.sh FRAMEWORK
#
# Expects the build context at /opt/dlsuite/src (the suite's source and containers/FRAMEWORK/).
# Does what suite/envs.py does for the venv backend, in the same order, so an image and a venv
# of one framework hold the same versions:
#   pip install -r requirements.txt; post-install.sh PYTHON (if the recipe has one);
#   pip install -c requirements.txt <the suite>
# (requirements-cuda.txt instead with DLSUITE_VARIANT=cuda: the recipe's GPU build).
# pip takes its index, wheelhouse and certificates from the environment (the Dockerfile's build
# arguments PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_TRUSTED_HOST, PIP_NO_INDEX, PIP_FIND_LINKS).
set -euo pipefail
framework=${1:?usage: install.sh FRAMEWORK}
src=/opt/dlsuite/src
recipe=$src/containers/$framework
venv=/opt/dlsuite/venv
uid=${DLSUITE_UID:-1000}
# DLSUITE_VARIANT=cuda: the recipe's requirements-cuda.txt (its GPU build), else requirements.txt
reqs=$recipe/requirements${DLSUITE_VARIANT:+-$DLSUITE_VARIANT}.txt
say() { echo "[dlsuite install.sh] $*"; }
[[ -f $reqs ]] || { echo "install.sh: no $reqs (variant '${DLSUITE_VARIANT:-}')" >&2; exit 1; }

# 0. The non-root user the image runs as (a run as another uid, the caller's, works as well),
#    first: a uid that cannot be had fails the build now, not after minutes of pip. A base's own
#    login user at that uid (Ubuntu 24.04 images, NVIDIA's CUDA ones among them, have `ubuntu`
#    at 1000) gives way to it; a system account (outside the login range of login.defs, 1000 to
#    60000 by default: root, daemon, nobody at 65534) is never removed.
if [[ ! $uid =~ ^[0-9]+$ ]] || (( uid == 0 )); then
    echo "install.sh: DLSUITE_UID '$uid': the image's user must be an unprivileged uid (--uid N, N > 0)" >&2
    exit 1
fi
if ! getent passwd dlsuite >/dev/null; then
    holder=$(getent passwd "$uid" | cut -d: -f1 || true)
    if [[ -n $holder ]]; then
        uid_min=$(awk '$1 == "UID_MIN" {print $2}' /etc/login.defs 2>/dev/null || true)
        uid_max=$(awk '$1 == "UID_MAX" {print $2}' /etc/login.defs 2>/dev/null || true)
        [[ $uid_min =~ ^[0-9]+$ ]] || uid_min=1000
        [[ $uid_max =~ ^[0-9]+$ ]] || uid_max=60000
        if (( uid < uid_min || uid > uid_max )); then
            echo "install.sh: uid $uid is the base image's system account '$holder'; choose another --uid ($uid_min to $uid_max)" >&2
            exit 1
        fi
        say "the base's user $holder has uid $uid: removing it for dlsuite"
        userdel --remove "$holder" 2>/dev/null || userdel "$holder"
    fi
    useradd --uid "$uid" --user-group --create-home --shell /bin/bash dlsuite
elif [[ $(id -u dlsuite) != "$uid" ]]; then
    echo "install.sh: the base image has a user dlsuite with uid $(id -u dlsuite), not $uid" >&2
    exit 1
fi

# 1. A site's extra CA certificates (TLS-inspecting proxy) join the system store before
#    anything reaches the network; PIP_CERT/REQUESTS_CA_BUNDLE point at that store.
shopt -s nullglob
extra_ca=("$src"/containers/ca/*.crt)
shopt -u nullglob

# 2. System packages: python3 with venv (CUDA bases have none), ca-certificates, and what the
#    recipe needs to build (APT_PACKAGES, e.g. g++ and make for Horovod).
need=()
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
[[ -f /etc/ssl/certs/ca-certificates.crt ]] || need+=(ca-certificates)
for p in ${APT_PACKAGES:-}; do
    dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || need+=("$p")
done
if (( ${#need[@]} )); then
    say "apt-get install ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    rm -rf /var/lib/apt/lists/*
fi
if (( ${#extra_ca[@]} )); then
    say "adding ${#extra_ca[@]} CA bundle(s) to the system store"
    mkdir -p /usr/local/share/ca-certificates/dlsuite
    for f in "${extra_ca[@]}"; do cp "$f" /usr/local/share/ca-certificates/dlsuite/; done
    update-ca-certificates >/dev/null
fi

# 3. The framework's environment, then the suite with the framework's pins as constraints.
python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --no-cache-dir)
say "pip install -r $reqs${PIP_NO_INDEX:+ (no index: ${PIP_FIND_LINKS:-none})}"
"${pip[@]}" install --quiet -r "$reqs"
if [[ -f $recipe/post-install.sh ]]; then
    say "bash $recipe/post-install.sh $venv/bin/python"
    bash "$recipe/post-install.sh" "$venv/bin/python"
fi
say "pip install -c $(basename "$reqs") the suite"
# pip takes no extras in a constraints file (jax[cuda12]==0.10.2): the same pins without them
constraints=$(mktemp)
sed -E 's/^([A-Za-z0-9_.-]+)\[[^]]*\]/\1/' "$reqs" >"$constraints"
"${pip[@]}" install --quiet -c "$constraints" "$src"
rm -f "$constraints"

# 4. What is installed, for provenance (the image's labels name the pins; this is the truth).
mkdir -p /opt/dlsuite/recipe
cp -r "$recipe"/. /opt/dlsuite/recipe/
"${pip[@]}" freeze >/opt/dlsuite/pip-freeze.txt
rm -rf "$src" /root/.cache/pip

# 5. Fail the build, not the first run: the suite and the framework's adapter must load, and
#    the framework must import (a wheel's missing system library shows here, not in a task).
"$venv/bin/python" - "$framework" <<'PY'
import importlib
import sys

from suite.adapters import ADAPTERS

framework = sys.argv[1]
cls = ADAPTERS.load(framework)
ok, why = cls.available()
if not ok:
    sys.exit(f"install.sh: the {framework} adapter is not available in the image: {why}")
try:
    importlib.import_module(cls.module)
except Exception as exc:  # noqa: BLE001 - any import failure fails the build, with its words
    sys.exit(f"install.sh: {cls.module} does not import in the image: {exc!r}")
print(f"[dlsuite install.sh] {framework} {cls.installed_version()} ready")
PY
