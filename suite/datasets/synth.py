"""Synthetic photographs: seeded images that compress like ImageNet's JPEGs.

Noise does not compress (a JPEG of white noise at quality 90 is several times ImageNet's size)
and flat colour compresses to nothing; photographs sit between, because their spectrum falls
as about 1/f (most energy in large, smooth structures, some in edges and fine texture), their
colour channels are correlated (chroma smoother than luminance) and their content is uneven
(a textured subject in front of a smooth background). This generator builds each image from
the same ingredients:

* **1/f fields.** A bank of a few large noise fields per process, each with an amplitude
  spectrum ``f^-alpha`` (alpha from 0.6, rough texture, to 1.7, smooth shading), made once by
  inverse FFT from the dataset's seed. An image takes random, randomly flipped windows of
  them: cheap (views and a few array operations), yet every image differs.
* **Luminance and chroma.** Luminance mixes a smooth and a medium field; two smooth fields
  carry the chroma; a colour base per class (a hue) and per image. A smooth mask decides where
  fine texture is (a sharp subject, a blurred background), and how much is the image's
  *detail*, drawn per image from a log-normal: that spread gives the spread of file sizes.
* **Objects.** One to five polygons and ellipses with hard edges, each with its own colour
  and texture, drawn only inside their bounding boxes; a lighting gradient over the whole.

The pixel sizes follow ImageNet train's: mostly 500 px on the long side (500x375, 500x333,
375x500, 500x500 ...), some smaller, a few larger (:func:`image_size`). ``DETAIL_SCALE`` was
tuned so JPEGs at quality 90 average about 110 KB over that mix (docs/reference/training-level.md has
what was measured). Everything is a pure function of ``(seed, index)``: the same bytes
however many processes make them, in whatever order.

NumPy and Pillow only: no deep-learning framework.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

#: spectral slopes of the bank's fields (amplitude ~ f^-alpha)
ALPHAS = (0.6, 0.8, 1.0, 1.3, 1.7)
#: scales every image's fine texture; tuned for a mean of ~110 KB per JPEG at quality 90
DETAIL_SCALE = 1.0
#: the per-image detail is DETAIL_SCALE * lognormal(DETAIL_MU, DETAIL_SIGMA)
DETAIL_MU, DETAIL_SIGMA = 0.0, 0.55
JPEG_QUALITY = 90

#: ImageNet train's common shapes (width, height) and their shares; the rest is drawn
#: from SMALL_SHARE (long side 150-499 px) and LARGE_SHARE (long side 501-1400 px)
COMMON_SIZES: tuple[tuple[tuple[int, int], float], ...] = (
    ((500, 375), 0.40),
    ((500, 333), 0.17),
    ((375, 500), 0.10),
    ((333, 500), 0.04),
    ((500, 500), 0.04),
    ((500, 400), 0.03),
    ((500, 334), 0.03),
    ((500, 281), 0.02),
)
SMALL_SHARE, LARGE_SHARE = 0.09, 0.08
ASPECTS = (4 / 3, 3 / 2, 1.0, 5 / 4, 16 / 9)


def image_size(rng: np.random.Generator) -> tuple[int, int]:
    """(width, height) of one image, drawn from the ImageNet-like mix."""
    u = rng.random()
    acc = 0.0
    for size, share in COMMON_SIZES:
        acc += share
        if u < acc:
            return size
    if u < acc + SMALL_SHARE:
        long_side = int(rng.integers(150, 500))
    else:
        long_side = int(math.exp(rng.uniform(math.log(501), math.log(1400))))
    short = max(32, int(round(long_side / ASPECTS[int(rng.integers(len(ASPECTS)))])))
    return (long_side, short) if rng.random() < 0.7 else (short, long_side)


def field(rng: np.random.Generator, size: int, alpha: float) -> np.ndarray:
    """A ``size x size`` float32 field with amplitude spectrum ``f^-alpha``, unit variance
    (single precision throughout: a 2048 x 2048 field takes about 0.2 s)."""
    fy = np.fft.fftfreq(size).astype(np.float32)[:, None]
    fx = np.fft.rfftfreq(size).astype(np.float32)[None, :]
    f = np.sqrt(fy**2 + fx**2)
    f[0, 0] = 1.0
    amp = f ** np.float32(-alpha)
    amp[0, 0] = 0.0
    phase = rng.uniform(0.0, 2 * np.pi, amp.shape).astype(np.float32)
    spectrum = (amp * np.cos(phase) + 1j * (amp * np.sin(phase))).astype(np.complex64)
    x = np.fft.irfft2(spectrum, s=(size, size)).astype(np.float32, copy=False)
    x /= x.std()
    return x


class NoiseBank:
    """The fields every image of a dataset draws its windows from (one per slope), made
    from the dataset's seed alone; ``size`` must be at least every image's longest side."""

    def __init__(self, seed: int, size: int) -> None:
        rng = np.random.default_rng([seed, 0x6E6F697365])  # "noise"
        self.size = size
        self.fields = {a: field(rng, size, a) for a in ALPHAS}

    def window(self, rng: np.random.Generator, alpha: float, h: int, w: int) -> np.ndarray:
        f = self.fields[alpha]
        y = int(rng.integers(0, self.size - h + 1))
        x = int(rng.integers(0, self.size - w + 1))
        out = f[y : y + h, x : x + w]
        if rng.random() < 0.5:
            out = out[::-1]
        return out


def bank_size(sizes: list[tuple[int, int]]) -> int:
    """The bank's side for images of these sizes: a power of two, at least 512."""
    longest = max((max(s) for s in sizes), default=512)
    return 1 << max(9, math.ceil(math.log2(longest)))


def class_hue(cls: int) -> float:
    """A class's hue in [0, 1): golden-ratio steps, so neighbouring classes differ."""
    return (cls * 0.6180339887498949) % 1.0


def _hue_rgb(hue: float, sat: float, val: float) -> np.ndarray:
    import colorsys

    return np.asarray(colorsys.hsv_to_rgb(hue, sat, val), dtype=np.float32) * 255.0


def render(bank: NoiseBank, seed: int, index: int, cls: int, width: int, height: int) -> np.ndarray:
    """Image ``index`` of class ``cls``: a ``(height, width, 3)`` uint8 array."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng([seed, index, 0x696D67])  # "img"
    h, w = height, width
    detail = DETAIL_SCALE * float(rng.lognormal(DETAIL_MU, DETAIL_SIGMA))
    lum = 38.0 * bank.window(rng, 1.3, h, w) + 22.0 * bank.window(rng, 1.0, h, w)
    mask_in = 2.5 * bank.window(rng, 1.7, h, w) + float(rng.normal(0.5, 1.0))
    sharp = 1.0 / (1.0 + np.exp(-mask_in))
    lum += (22.0 * detail) * bank.window(rng, 0.6, h, w) * sharp
    c1 = bank.window(rng, 1.7, h, w)
    c2 = bank.window(rng, 1.7, h, w)
    base = _hue_rgb(
        (class_hue(cls) + rng.normal(0, 0.04)) % 1.0, rng.uniform(0.15, 0.6), rng.uniform(0.35, 0.7)
    ) + rng.normal(0, 12, 3).astype(np.float32)
    img = np.empty((h, w, 3), np.float32)
    img[..., 0] = lum + 20.0 * c1 + base[0]
    img[..., 1] = lum - 8.0 * c1 + 10.0 * c2 + base[1]
    img[..., 2] = lum - 22.0 * c2 + base[2]

    # objects, each drawn inside its bounding box only
    mask = Image.new("L", (w, h), 0)
    draw = ImageDraw.Draw(mask)
    n = int(rng.integers(1, 6))
    boxes = []
    for k in range(1, n + 1):
        cx, cy = rng.uniform(0.1, 0.9) * w, rng.uniform(0.1, 0.9) * h
        r = rng.uniform(0.08, 0.35) * min(h, w)
        if rng.random() < 0.5:
            ry = r * rng.uniform(0.5, 1.3)
            draw.ellipse([cx - r, cy - ry, cx + r, cy + ry], fill=k)
            box = (cx - r, cy - ry, cx + r, cy + ry)
        else:
            m = int(rng.integers(3, 9))
            ang = np.sort(rng.uniform(0, 2 * np.pi, m))
            rad = r * rng.uniform(0.6, 1.3, m)
            xs, ys = cx + rad * np.cos(ang), cy + rad * np.sin(ang)
            draw.polygon(list(zip(xs.tolist(), ys.tolist(), strict=True)), fill=k)
            box = (xs.min(), ys.min(), xs.max(), ys.max())
        boxes.append(box)
    labels = np.asarray(mask)
    for k, (x0, y0, x1, y1) in enumerate(boxes, start=1):
        xa, ya = max(0, int(x0)), max(0, int(y0))
        xb, yb = min(w, int(math.ceil(x1)) + 1), min(h, int(math.ceil(y1)) + 1)
        if xb <= xa or yb <= ya:
            continue
        sel = labels[ya:yb, xa:xb] == k
        if not sel.any():
            continue
        bh, bw = yb - ya, xb - xa
        hue = (class_hue(cls) + rng.choice([0.0, 0.5]) + rng.normal(0, 0.05)) % 1.0
        colour = _hue_rgb(hue, rng.uniform(0.2, 0.9), rng.uniform(0.2, 0.95))
        amount = detail * rng.uniform(10, 35)
        tex = amount * bank.window(rng, 0.8, bh, bw) + 0.6 * lum[ya:yb, xa:xb]
        obj = colour[None, None, :] + tex[..., None]
        np.copyto(img[ya:yb, xa:xb], obj, where=sel[..., None])

    gy = np.linspace(-1, 1, h, dtype=np.float32)[:, None]
    gx = np.linspace(-1, 1, w, dtype=np.float32)[None, :]
    light = 1.0 + 0.15 * (float(rng.normal()) * gy + float(rng.normal()) * gx)
    img *= light[..., None]
    np.clip(img, 0, 255, out=img)
    return img.astype(np.uint8)


def encode_jpeg(pixels: np.ndarray, quality: int = JPEG_QUALITY) -> bytes:
    """Baseline JPEG (libjpeg-turbo through Pillow), 4:2:0 chroma, as most of ImageNet's."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=quality, subsampling="4:2:0")
    return buf.getvalue()


@dataclass(frozen=True)
class ImageSpec:
    """One image of a dataset: where it goes and what it shows."""

    index: int
    cls: int
    width: int
    height: int
    relpath: str

    def to_list(self) -> list[Any]:
        return [self.index, self.cls, self.width, self.height, self.relpath]
