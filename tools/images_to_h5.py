#!/usr/bin/env python3
"""images_to_h5.py: labelled images into pipetrain's image files
(data.type = "image_files", layout in docs/data.md, "Image files").

    tools/images_to_h5.py digits OUT_DIR [--eval 297] [--seed 0]
        scikit-learn's copy of the UCI handwritten digits (1797 images of
        1 x 8 x 8 pixels, values 0..16, 10 classes; pip install scikit-learn)
    tools/images_to_h5.py npz FILE.npz OUT_DIR [--eval N] [--seed 0]
        any arrays `images` (N, C, H, W) or (N, H, W), float or uint8, and
        `labels` (N) integer

Writes OUT_DIR/train.h5 and OUT_DIR/eval.h5: a seeded split, the last
--eval images of a seeded permutation held out. Each file holds `images`
(n, C, H, W) float32 in [0, 1] (uint8 input kept as uint8: pipetrain reads
it as value / 255) and `labels` (n) int32, with attributes format
("pipetrain-images"), format_version (1), classes, source and the split.
Files are written to a temporary name and renamed, so a failed run leaves
no half-written file.
"""
import argparse
import os
import sys

import h5py
import numpy as np

FORMAT = "pipetrain-images"
FORMAT_VERSION = 1


def load_digits():
    try:
        from sklearn.datasets import load_digits as sk_load_digits
    except ImportError:
        sys.exit("images_to_h5: the digits come with scikit-learn: "
                 "tools/.venv/bin/pip install -r tools/requirements-images.txt")
    d = sk_load_digits()
    images = (d.images.astype(np.float32) / 16.0)[:, None, :, :]  # (N, 1, 8, 8) in [0, 1]
    return images, d.target.astype(np.int32), "scikit-learn load_digits (UCI optical recognition of handwritten digits)"


def load_npz(path):
    with np.load(path) as z:
        if "images" not in z or "labels" not in z:
            sys.exit("images_to_h5: %s: needs arrays 'images' and 'labels' (has %s)" % (path, ", ".join(z.files)))
        images, labels = z["images"], z["labels"]
    if images.ndim == 3:
        images = images[:, None, :, :]
    if images.ndim != 4:
        sys.exit("images_to_h5: %s: 'images' is %s, expected (N, C, H, W) or (N, H, W)" % (path, images.shape))
    if labels.shape != (images.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        sys.exit("images_to_h5: %s: 'labels' is %s %s, expected (%d) integers" % (
            path, labels.shape, labels.dtype, images.shape[0]))
    if images.dtype != np.uint8:
        images = images.astype(np.float32)
    return images, labels.astype(np.int32), os.path.basename(path)


def write(path, images, labels, classes, source, split):
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        f.create_dataset("images", data=images)
        f.create_dataset("labels", data=labels)
        f.attrs["format"] = FORMAT
        f.attrs["format_version"] = FORMAT_VERSION
        f.attrs["classes"] = classes
        f.attrs["source"] = source
        f.attrs["split"] = split
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", choices=["digits", "npz"])
    ap.add_argument("args", nargs="+", help="digits: OUT_DIR; npz: FILE.npz OUT_DIR")
    ap.add_argument("--eval", type=int, default=None, help="images held out (default: 1/6 of them)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.source == "digits":
        if len(a.args) != 1:
            ap.error("digits OUT_DIR")
        images, labels, source = load_digits()
        out = a.args[0]
    else:
        if len(a.args) != 2:
            ap.error("npz FILE.npz OUT_DIR")
        images, labels, source = load_npz(a.args[0])
        out = a.args[1]
    n = images.shape[0]
    held = a.eval if a.eval is not None else n // 6
    if not 0 < held < n:
        sys.exit("images_to_h5: --eval %d: between 1 and %d images can be held out" % (held, n - 1))
    if labels.min() < 0:
        sys.exit("images_to_h5: labels must be class indices >= 0 (found %d)" % labels.min())
    classes = int(labels.max()) + 1
    order = np.random.default_rng(a.seed).permutation(n)
    train, held_out = order[: n - held], order[n - held:]
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "train.h5"), images[train], labels[train], classes, source, "train")
    write(os.path.join(out, "eval.h5"), images[held_out], labels[held_out], classes, source, "eval")
    c, h, w = images.shape[1:]
    print("images_to_h5: %s: %d train and %d eval images of (%d, %d, %d), %d classes -> %s/{train,eval}.h5"
          % (source, n - held, held, c, h, w, classes, out))


if __name__ == "__main__":
    main()
