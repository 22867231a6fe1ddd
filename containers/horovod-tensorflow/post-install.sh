#!/usr/bin/env bash
# Build Horovod 0.28.1 against the TensorFlow already installed in the environment of PYTHON.
#
#   containers/horovod-tensorflow/post-install.sh PYTHON
#
# Run by the venv backend after `pip install -r requirements.txt` and by the horovod-tensorflow
# image's Dockerfile. 0.28.1 builds against TensorFlow 2.12 with no patch to its CMake files
# (they already switch to C++17 for TensorFlow >= 2.10); the TensorFlow pin in requirements.txt
# is what makes it build. Only setup.py's build type is changed (below). Needs g++ and make
# (cmake comes from requirements.txt). CPU build: gloo, no MPI, no NCCL; set
# HOROVOD_GPU_OPERATIONS=NCCL (and have NCCL and a GPU TensorFlow) to build the GPU variant in a
# CUDA image. The build-type block is the same as containers/horovod/post-install.sh's: each
# environment's hash covers only its own script, so a shared file would not rebuild it.
set -euo pipefail
PYTHON=${1:?usage: post-install.sh PYTHON}
VERSION=0.28.1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$PYTHON" -c 'import tensorflow as tf, sys; v = tuple(map(int, tf.__version__.split(".")[:2])); sys.exit(0 if v <= (2, 12) else "post-install.sh: Horovod 0.28.1 builds against TensorFlow <= 2.12, the environment has " + tf.__version__)'
"$PYTHON" -m pip download --quiet --no-deps --no-binary :all: --no-build-isolation \
    "horovod==$VERSION" -d "$work"
tar -xzf "$work/horovod-$VERSION.tar.gz" -C "$work"
src="$work/horovod-$VERSION"

# Release, not setup.py's RelWithDebInfo: the same -O3 without debug info, measured on a 2-core
# VM (PyTorch's build, one each, quiet machine) 195 s against 244 and a 2 MB library against 62
# (every image and environment carries it). HOROVOD_BUILD_TYPE=RelWithDebInfo keeps the symbols.
build_type=${HOROVOD_BUILD_TYPE:-Release}
case "$build_type" in
    Release | RelWithDebInfo | Debug | MinSizeRel) ;;
    *) echo "post-install.sh: HOROVOD_BUILD_TYPE=$build_type: use Release, RelWithDebInfo, Debug or MinSizeRel" >&2
       exit 2 ;;
esac
grep -q "else 'RelWithDebInfo'" "$src/setup.py" || {
    echo "post-install.sh: setup.py has no \"else 'RelWithDebInfo'\"; the build-type patch is stale" >&2
    exit 1
}
sed -i "s/else 'RelWithDebInfo'/else '$build_type'/" "$src/setup.py"

export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
    HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1
export MAKEFLAGS="-j${HOROVOD_BUILD_JOBS:-$(nproc)}"
# cmake from the environment (requirements.txt), not whatever the host has
export PATH="$(dirname "$PYTHON"):$PATH"
"$PYTHON" -m pip install --no-build-isolation --no-cache-dir "$src"
"$PYTHON" -c 'import horovod.tensorflow as hvd; assert hvd.gloo_built(), "horovod built without gloo"; print("horovod", __import__("horovod").__version__, "over tensorflow", __import__("tensorflow").__version__, "gloo ok")'
