"""check_profile_h5.py: checks a profile.h5 against its documented layout
(docs/profile.md) with h5py.
  tools/.venv/bin/python tests/cli/check_profile_h5.py FILE UNITS LINK
UNITS: the expected unit names, comma-separated; LINK: "yes" when the link
must be measured (>= 2 ranks), "no" when it must be 0. Exits non-zero with
a message on the first difference."""
import math
import sys

import h5py
import numpy as np

COLUMNS = ["forward_s", "backward_s", "recompute_s", "recompute_end_s", "recompute_selective_s", "optimizer_s",
           "forward_flops", "input_bytes", "output_bytes", "stash_none_bytes",
           "stash_selective_bytes", "stash_always_bytes", "workspace_bytes", "backward_workspace_bytes", "forward_workspace_bytes", "param_bytes", "grad_bytes",
           "optimizer_bytes", "data_bytes"]


def fail(message):
    sys.exit("check_profile_h5: " + message)


def main():
    path, names, link = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
    with h5py.File(path, "r") as f:
        a = f.attrs
        if a["format"] != "pipetrain-profile" or int(a["format_version"]) != 3:
            fail(f"format {a['format']!r} version {a['format_version']}")
        for key in ["model", "backend", "kernels", "source", "deck", "cache", "calibration"]:
            if not isinstance(a[key], str) or not a[key]:
                fail(f"attribute {key} is not a non-empty string")
        if int(a["micro_batch_rows"]) < 1:
            fail("micro_batch_rows")
        for key in ["link_latency_s", "link_bandwidth_bytes_per_s", "step_overhead_s",
                    "stage_data_bytes"]:
            if not (math.isfinite(float(a[key])) and float(a[key]) >= 0):
                fail(f"attribute {key} = {a[key]}")
        latency = float(a["link_latency_s"])
        if (link == "yes") != (latency > 0):
            fail(f"link_latency_s = {latency} with link {link}")
        units = f["units"]
        got = list(units["name"].asstr()[:])
        if got != names:
            fail(f"units/name = {got}, expected {names}")
        if units["partitionable"].shape != (len(names),):
            fail("units/partitionable shape")
        for column in COLUMNS:
            values = units[column][:]
            if values.dtype != np.float64 or values.shape != (len(names),):
                fail(f"units/{column}: {values.dtype} {values.shape}")
            if not np.all(np.isfinite(values)) or np.any(values < 0):
                fail(f"units/{column} = {values}")
        for column in ["forward_s", "backward_s", "param_bytes", "stash_none_bytes"]:
            if not np.all(units[column][:] > 0):
                fail(f"units/{column} has a zero: {units[column][:]}")
        # workspace_bytes is the larger of the F and B peaks
        if not np.array_equal(units["workspace_bytes"][:], np.maximum(units["forward_workspace_bytes"][:],
                                                                       units["backward_workspace_bytes"][:])):
            fail("workspace_bytes is not the larger of forward_workspace_bytes and backward_workspace_bytes")
        if not np.array_equal(units["grad_bytes"][:], units["param_bytes"][:]):
            fail("grad_bytes differ from param_bytes")
    print(f"{path}: layout ok, {len(names)} units")


main()
