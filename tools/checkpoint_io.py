#!/usr/bin/env python3
"""checkpoint_io.py: pipetrain checkpoints read and written from Python
(docs/checkpoint-format.md), as the C++ reads and writes them: the
manifest's own CRC-32 (manifest_crc32: the canonical text of
src/io/checkpoint_digest.cpp), every stage file bound to the manifest by
step and checkpoint_id, every dataset's CRC-32. Used by tools/hf_gpt2.py.

    read_checkpoint(spec) -> (directory, {name: float32 value}, deck text)
    write_checkpoint(path, {name: float32 value}, deck text)  # weights only
"""
import datetime
import os
import uuid
import zlib

import h5py
import numpy as np

FORMAT_VERSION = 3  # the checkpoint format this writes
READABLE_VERSIONS = (2, 3)


class CheckpointError(Exception):
    """A checkpoint that cannot be read: the message names the file."""


def _numbers_text(values):
    """As checkpoint_digest.cpp: "i:n:v," for integers, "f:n:v," (%.17g) for floats."""
    a = np.asarray(values)
    flat = a.reshape(-1)
    if a.dtype.kind in "iu":
        return f"i:{flat.size}:" + "".join(f"{int(x)}," for x in flat)
    if a.dtype.kind == "f":
        return f"f:{flat.size}:" + "".join("%.17g," % float(x) for x in flat)
    return "?"


def _attribute_text(obj, name):
    value = obj.attrs[name]
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, str):
        return f"s:{len(value.encode('utf-8'))}:{value}"
    return _numbers_text(value)


def _dataset_text(dset):
    if h5py.check_string_dtype(dset.dtype) is not None:
        values = list(dset.asstr()[...].reshape(-1))
        return f"s:{len(values)}:" + "".join(f"{len(v.encode('utf-8'))}:{v}," for v in values)
    return _numbers_text(dset[...])


def _contents_text(group, path, out):
    """The canonical text of checkpoint_digest.cpp: attributes, then members,
    each in name order, groups recursively."""
    for name in sorted(group.attrs.keys(), key=lambda s: s.encode()):
        if path == "" and name == "manifest_crc32":
            continue
        out.append(f"{path}@{name}={_attribute_text(group, name)}\n")
    for name in sorted(group.keys(), key=lambda s: s.encode()):
        member = f"{path}/{name}"
        obj = group[name]
        if isinstance(obj, h5py.Group):
            out.append(member + "/\n")
            _contents_text(obj, member, out)
        else:
            out.append(f"{member}={_dataset_text(obj)}\n")


def manifest_crc32(manifest):
    out = []
    _contents_text(manifest, "", out)
    return zlib.crc32("".join(out).encode("utf-8"))


def checkpoint_directory(spec):
    """The checkpoint directory `spec` names: itself, its manifest.h5's
    directory, or the one a checkpoint root's `latest` names."""
    if os.path.basename(spec) == "manifest.h5":
        spec = os.path.dirname(spec) or "."
    if not os.path.exists(spec):
        raise CheckpointError(f"checkpoint {spec}: no such file or directory")
    if os.path.exists(os.path.join(spec, "manifest.h5")):
        return spec
    latest = os.path.join(spec, "latest")
    if os.path.exists(latest):
        with open(latest) as f:
            name = f.read().strip()
        if os.path.exists(os.path.join(spec, name, "manifest.h5")):
            return os.path.join(spec, name)
    raise CheckpointError(f"checkpoint {spec}: no manifest.h5 (not a checkpoint, or its write "
                       "never finished)")


def read_checkpoint(spec):
    """(directory, {name: float32 value}, deck text) of a checkpoint, verified."""
    ckpt = checkpoint_directory(spec)
    mpath = os.path.join(ckpt, "manifest.h5")
    try:
        m = h5py.File(mpath, "r")
    except OSError:
        raise CheckpointError(f"checkpoint {mpath}: cannot be opened as an HDF5 file")
    with m:
        if m.attrs.get("format") != "pipetrain-checkpoint":
            raise CheckpointError(f"checkpoint {mpath}: attribute format is not "
                               "\"pipetrain-checkpoint\"")
        version = int(m.attrs.get("format_version", -1))
        if version not in READABLE_VERSIONS:
            raise CheckpointError(f"checkpoint {mpath}: format_version {version}; this tool reads "
                               f"{READABLE_VERSIONS[0]} to {READABLE_VERSIONS[-1]}")
        if version >= 3:
            stored, actual = int(m.attrs.get("manifest_crc32", -1)), manifest_crc32(m)
            if stored != actual:
                raise CheckpointError(f"checkpoint {mpath}: its contents have crc32 0x{actual:08x}, "
                                   f"but it records manifest_crc32 0x{stored & 0xffffffff:08x}: "
                                   "the manifest was damaged or edited after the save")
        step, save = int(m.attrs["step"]), m.attrs["checkpoint_id"]
        deck_text = m.attrs.get("deck", "")
        listed = {name: dict(zip(g["datasets"].asstr()[...], (int(c) for c in g["crc32"][...])))
                  for name, g in m["files"].items()}
    weights = {}
    for name, crcs in listed.items():
        path = os.path.join(ckpt, name)
        if not os.path.exists(path):
            raise CheckpointError(f"checkpoint {path}: missing (listed in manifest.h5)")
        with h5py.File(path, "r") as f:
            if int(f.attrs.get("step", -1)) != step or f.attrs.get("checkpoint_id") != save:
                raise CheckpointError(f"checkpoint {path}: not saved together with manifest.h5 "
                                   "(another step or checkpoint_id)")
            for dpath, crc in crcs.items():
                if not dpath.endswith("/value"):
                    continue
                v = f[dpath][...].astype("<f4")
                if zlib.crc32(v.tobytes()) != crc:
                    raise CheckpointError(f"checkpoint {path}: {dpath} checksum mismatch")
                weights[dpath[len("params/"):-len("/value")]] = v
    return ckpt, weights, deck_text


def write_checkpoint(path, weights, deck_text, step=0):
    """A format-3 checkpoint of `weights` ({name: float32}, in pipetrain's
    global order) in one stage file, as save_checkpoint writes it."""
    os.makedirs(path)
    save = uuid.uuid4().hex
    stage_name = "stage_000.h5"
    paths, crcs = [], []
    with h5py.File(os.path.join(path, stage_name), "w") as f:
        f.attrs["format"] = "pipetrain-checkpoint-stage"
        f.attrs["format_version"] = FORMAT_VERSION
        f.attrs["step"] = step
        f.attrs["stage"] = 0
        f.attrs["checkpoint_id"] = save
        for name, v in weights.items():
            d = f.create_dataset(f"params/{name}/value", data=np.ascontiguousarray(v, "<f4"))
            crc = zlib.crc32(d[...].tobytes())
            d.attrs["crc32"] = crc
            paths.append(f"params/{name}/value")
            crcs.append(crc)
    with h5py.File(os.path.join(path, "manifest.h5"), "w") as m:
        m.attrs["format"] = "pipetrain-checkpoint"
        m.attrs["format_version"] = FORMAT_VERSION
        m.attrs["step"] = step
        m.attrs["checkpoint_id"] = save
        m.attrs["next_sample"] = 0
        m.attrs["optimizer_updates"] = step  # with the loss scaler's counters, as pipetrain
        m.attrs["loss_scale"] = 0.0           # writes them (0: no fp16 loss scaler state)
        m.attrs["loss_scale_run"] = 0
        m.attrs["skipped_steps"] = 0
        m.attrs["stages"] = 1
        m.attrs["created_utc"] = datetime.datetime.now(datetime.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
        m.attrs["deck"] = deck_text
        g = m.create_group(f"files/{stage_name}")
        g.attrs["bytes"] = os.path.getsize(os.path.join(path, stage_name))
        g.attrs["stage"] = 0
        g["datasets"] = np.array(paths, dtype=h5py.string_dtype())
        g["crc32"] = np.array(crcs, dtype="<i8")
        m.attrs["manifest_crc32"] = manifest_crc32(m)  # last: it covers everything else
