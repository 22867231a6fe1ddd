"""A 16-bit grayscale PNG decodes alike in every framework's loader: TensorFlow's
``decode_image`` and MXNet's ``imdecode`` (OpenCV) keep the high byte, and so do the Pillow
decoders of JAX's loader and of the pixel check's reference (PyTorch's is checked on the host,
tests/unit/test_user_data.py). Pillow's ``convert("RGB")`` had clipped it at 255, so the
frameworks read different pixels from the same file. Runs in each framework's environment."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from suite import envs
from tests.helpers import ROOT

SCRIPT = r"""
import io, json, sys
import numpy as np
from PIL import Image
from suite.levels.training.pipeline import reference_decode

ramp = np.linspace(0, 65535, 48 * 8).astype(np.uint16).reshape(8, 48)
buf = io.BytesIO()
Image.fromarray(ramp).save(buf, format="PNG")
data = buf.getvalue()
which = sys.argv[1]
if which == "tensorflow":
    from suite.adapters.tensorflow.data import TfDataLoader
    got = TfDataLoader.decode(None, data)  # the loader's decode reads nothing of its spec
elif which == "mxnet":
    from suite.adapters.mxnet.data import decode
    got = decode(data)
else:
    from suite.adapters.jax.data import decode
    got = decode(data)
ref = reference_decode(data)
print(json.dumps({"shape": list(got.shape), "max_abs": int(np.abs(got.astype(int) - ref).max()),
                  "white_share": float(np.mean(got == 255))}))
"""


@pytest.mark.parametrize(
    "framework",
    [
        pytest.param("tensorflow", marks=pytest.mark.tensorflow),
        pytest.param("mxnet", marks=pytest.mark.mxnet),
        pytest.param("jax", marks=pytest.mark.slow),
    ],
)
def test_a_16_bit_png_decodes_as_the_reference_in_each_framework(framework: str) -> None:
    python = str(envs.ensure(framework).python)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([python, "-c", SCRIPT, framework], capture_output=True, text=True,
                          env=env, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["shape"] == [8, 48, 3]
    assert out["max_abs"] == 0 and out["white_share"] < 0.01, out
