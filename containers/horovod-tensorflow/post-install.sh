#!/usr/bin/env bash
# Build Horovod 0.28.1 against the TensorFlow already installed in the environment of PYTHON.
#
#   containers/horovod-tensorflow/post-install.sh PYTHON
#
# Run by the venv backend after `pip install -r requirements.txt` and by the horovod-tensorflow
# image's Dockerfile. 0.28.1 builds unmodified against TensorFlow 2.12 (its CMake files already
# switch to C++17 for TensorFlow >= 2.10), so no patch is applied; the TensorFlow pin in
# requirements.txt is what makes it build. Needs g++ and make (cmake comes from
# requirements.txt). CPU build: gloo, no MPI, no NCCL; set HOROVOD_GPU_OPERATIONS=NCCL (and have
# NCCL and a GPU TensorFlow) to build the GPU variant in a CUDA image.
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

export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
    HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1
export MAKEFLAGS="-j${HOROVOD_BUILD_JOBS:-$(nproc)}"
# cmake from the environment (requirements.txt), not whatever the host has
export PATH="$(dirname "$PYTHON"):$PATH"
"$PYTHON" -m pip install --no-build-isolation --no-cache-dir "$src"
"$PYTHON" -c 'import horovod.tensorflow as hvd; assert hvd.gloo_built(), "horovod built without gloo"; print("horovod", __import__("horovod").__version__, "over tensorflow", __import__("tensorflow").__version__, "gloo ok")'
