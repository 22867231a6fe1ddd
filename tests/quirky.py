"""A user's ImageFolder with ImageNet's known quirks, made from real photographs that ship
inside a package (scikit-learn's ``load_sample_images``: ``china.jpg`` and ``flower.jpg``,
640x427), cropped and re-encoded. The suite's own generator makes only clean RGB JPEGs; an
ImageNet copy as people keep it also holds:

* CMYK JPEGs (ILSVRC-2012 train has 22, e.g. ``n01739381_1309.JPEG``),
* grayscale JPEGs (about 1,000 single-channel ones),
* a PNG named ``.JPEG`` (``n02105855_2933.JPEG``),
* a truncated file and an empty file (a copy interrupted, a disk that filled),
* stray files that are not images (a ``.txt`` note, ``Thumbs.db``; the top level's
  ``LOC_synset_mapping.txt`` of the Kaggle copy),
* a file name that is not ASCII.

:func:`make_quirky_imagefolder` writes it and returns what it holds, so a test can say which
files are corrupt (the truncated and the empty one) and how many images there are. Runs on
the host with Pillow and NumPy (scikit-learn only reads its two files).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

#: a name that is not ASCII (Latin, Greek and CJK characters, as scraped file names have)
NON_ASCII_NAME = "n00000003_çafé_θ_写真.JPEG"


@dataclass
class Quirky:
    """What :func:`make_quirky_imagefolder` made."""

    root: Path
    classes: list[str]
    #: every image file a loader reads (corrupt ones included), relative to ``root``
    images: list[str] = field(default_factory=list)
    #: the files no decoder can read (truncated, empty), relative to ``root``
    corrupt: list[str] = field(default_factory=list)
    #: the quirks by kind -> relative paths
    quirks: dict[str, list[str]] = field(default_factory=dict)
    #: files that are not images (ignored by ImageFolder loaders)
    stray: list[str] = field(default_factory=list)


def photographs() -> list[np.ndarray]:
    """scikit-learn's two sample photographs (427 x 640 x 3 uint8)."""
    from sklearn.datasets import load_sample_images

    return [np.asarray(im) for im in load_sample_images().images]


def _crop(rng: np.random.Generator, photo: np.ndarray) -> Image.Image:
    """A random crop of 40-100% of each side, resized to an ImageNet-like size."""
    h, w = photo.shape[:2]
    ch, cw = int(h * rng.uniform(0.4, 1.0)), int(w * rng.uniform(0.4, 1.0))
    top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
    im = Image.fromarray(photo[top : top + ch, left : left + cw])
    size = [(500, 375), (500, 333), (375, 500), (333, 500), (500, 500), (320, 240)]
    return im.resize(size[int(rng.integers(0, len(size)))], Image.Resampling.BILINEAR)


def _jpeg(im: Image.Image, quality: int) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def make_quirky_imagefolder(
    root: Path, classes: int = 10, per_class: int = 32, seed: int = 0
) -> Quirky:
    """``classes`` folders (WordNet-like names) of ``per_class`` re-encoded crops each, then the
    quirks: 2 CMYK JPEGs, 2 grayscale JPEGs, a PNG named .JPEG, a truncated and an empty
    .JPEG, a non-ASCII name, two stray files in class folders and one at the top."""
    rng = np.random.default_rng(seed)
    photos = photographs()
    names = [f"n{c:08d}" for c in range(classes)]
    out = Quirky(root, names)
    root.mkdir(parents=True)
    for c, name in enumerate(names):
        (root / name).mkdir()
        for j in range(per_class):
            im = _crop(rng, photos[(c + j) % len(photos)])
            rel = f"{name}/{name}_{j}.JPEG"
            (root / rel).write_bytes(_jpeg(im, int(rng.integers(75, 96))))
            out.images.append(rel)

    def add(kind: str, rel: str, data: bytes, corrupt: bool = False) -> None:
        (root / rel).write_bytes(data)
        out.images.append(rel)
        out.quirks.setdefault(kind, []).append(rel)
        if corrupt:
            out.corrupt.append(rel)

    for k in range(2):
        cls = names[k % classes]
        add("cmyk", f"{cls}/{cls}_cmyk{k}.JPEG", _jpeg(_crop(rng, photos[k]).convert("CMYK"), 90))
        cls = names[(k + 2) % classes]
        add("grayscale", f"{cls}/{cls}_gray{k}.JPEG", _jpeg(_crop(rng, photos[k]).convert("L"), 90))
    png = io.BytesIO()
    _crop(rng, photos[1]).save(png, format="PNG")
    cls = names[4 % classes]
    add("png_named_jpeg", f"{cls}/{cls}_png.JPEG", png.getvalue())
    whole = _jpeg(_crop(rng, photos[0]), 90)
    cls = names[5 % classes]
    add("truncated", f"{cls}/{cls}_truncated.JPEG", whole[: len(whole) // 3], corrupt=True)
    cls = names[6 % classes]
    add("empty", f"{cls}/{cls}_empty.JPEG", b"", corrupt=True)
    add(
        "non_ascii_name", f"{names[3 % classes]}/{NON_ASCII_NAME}", _jpeg(_crop(rng, photos[1]), 85)
    )
    for rel, text in (
        (f"{names[0]}/notes.txt", b"downloaded 2012-10-14; 3 files re-fetched\n"),
        (f"{names[1]}/Thumbs.db", b"\xd0\xcf\x11\xe0 not an image"),
        (
            "LOC_synset_mapping.txt",
            "".join(f"{n} class {i}\n" for i, n in enumerate(names)).encode(),
        ),
    ):
        (root / rel).write_bytes(text)
        out.stray.append(rel)
    out.images.sort()
    return out
