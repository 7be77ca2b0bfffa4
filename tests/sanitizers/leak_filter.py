#!/usr/bin/env python3
"""leak_filter.py: keeps the project's leaks in the LeakSanitizer reports of
the sanitizer pass's fast mode (options.sh) and sets the others aside.

    tests/sanitizers/leak_filter.py LOG_DIR BUILD_DIR ASIDE_DIR

With the frame-pointer unwinder, the stack of an allocation made inside Open
MPI, hwloc or PMIx (built without frame pointers) stops after a frame or two,
often in a component already unloaded, and lsan.supp cannot match it. Each
leak's frame #1 is the code that called the allocator (frame #0 is the
allocator itself); its address is exact, whatever the unwinder. A leak belongs
to the project when that address lies in the code of an executable inside
BUILD_DIR (every project function is linked statically into the executables
there): its module is one of them and its offset lies in one of the module's
executable segments (read from the ELF program headers). The module alone is
not enough: when the leak check runs, Open MPI has unloaded its components,
and an address of one is then named as the executable at an offset beyond
its end. A leak with no frame #1, or with frame #1 elsewhere (a library, an
unloaded component), is external.

For each report file in LOG_DIR that holds a LeakSanitizer report and no
other error: a file whose leaks are all external moves to ASIDE_DIR; a file
with project leaks keeps them and its other lines, its external leaks moving
to ASIDE_DIR. Other files (ASan errors, UBSan) are left as they are.
Prints one line of counts. Exit status 0; 1 when a frame #1 line lacks the
{module offset} that options.sh's stack_trace_format adds (nothing could be
classified); 2 on a bad argument.
"""
import functools
import os
import re
import struct
import sys

LEAK_START = re.compile(r"^(Direct|Indirect) leak of ")
FRAME_1 = re.compile(r"^\s+#1 .*\{(.*) (0x[0-9a-f]+)\}\s*$")


@functools.lru_cache(maxsize=None)
def code_ranges(path):
    """[(start, end)] of the executable PT_LOAD segments of an ELF64 file
    (addresses relative to its load base), [] when it is not one."""
    try:
        with open(path, "rb") as f:
            header = f.read(64)
            if header[:5] != b"\x7fELF\x02":
                return []
            phoff, = struct.unpack_from("<Q", header, 0x20)
            phentsize, phnum = struct.unpack_from("<HH", header, 0x36)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return []
    ranges = []
    for i in range(phnum):
        p_type, p_flags, _, p_vaddr, _, _, p_memsz = struct.unpack_from("<IIQQQQQ", table, i * phentsize)
        if p_type == 1 and p_flags & 1:  # PT_LOAD, PF_X
            ranges.append((p_vaddr, p_vaddr + p_memsz))
    return ranges


def split_records(lines):
    """(head, records, tail): the lines before the first leak, one list of
    lines per leak, and the lines from the SUMMARY on."""
    head, records, tail = [], [], []
    for line in lines:
        if line.startswith("SUMMARY:") or tail:
            tail.append(line)
        elif LEAK_START.match(line):
            records.append([line])
        elif records:
            records[-1].append(line)
        else:
            head.append(line)
    return head, records, tail


class FormatError(Exception):
    pass


def is_project_leak(record, build_dir):
    for line in record:
        match = FRAME_1.match(line)
        if not match and re.match(r"^\s+#1 ", line):
            raise FormatError(f"frame #1 without {{module offset}} (options.sh's stack_trace_format): {line.strip()}")
        if match:
            if not match.group(1).startswith("/"):
                return False
            module, offset = os.path.realpath(match.group(1)), int(match.group(2), 16)
            return module.startswith(build_dir + os.sep) and any(
                start <= offset < end for start, end in code_ranges(module))
    return False


def is_leak_report_only(lines):
    errors = [line for line in lines if "ERROR:" in line]
    return bool(errors) and all("ERROR: LeakSanitizer" in line for line in errors)


def filter_file(path, build_dir, aside_dir):
    """Returns (project leaks kept, external leaks set aside)."""
    with open(path, errors="replace") as f:
        lines = f.read().splitlines(keepends=True)
    if not is_leak_report_only(lines):
        return 0, 0
    head, records, tail = split_records(lines)
    kept, aside = [], []
    for record in records:
        (kept if is_project_leak(record, build_dir) else aside).append(record)
    name = os.path.basename(path)
    if aside:
        with open(os.path.join(aside_dir, name), "w") as f:
            f.writelines(head + [line for r in aside for line in r] + tail)
    if kept:
        note = f"({len(aside)} leak(s) allocated outside the project's code: {aside_dir}/{name})\n"
        with open(path, "w") as f:
            f.writelines(head + [line for r in kept for line in r] + [note] + tail)
    else:
        os.remove(path)
    return len(kept), len(aside)


def main(argv):
    if len(argv) != 4 or not os.path.isdir(argv[1]) or not os.path.isdir(argv[2]):
        print(f"usage: {argv[0]} LOG_DIR BUILD_DIR ASIDE_DIR (existing LOG_DIR and BUILD_DIR)", file=sys.stderr)
        return 2
    log_dir, build_dir, aside_dir = argv[1], os.path.realpath(argv[2]), argv[3]
    os.makedirs(aside_dir, exist_ok=True)
    kept = aside = files = 0
    for name in sorted(os.listdir(log_dir)):
        path = os.path.join(log_dir, name)
        if name.startswith("asan.") and os.path.isfile(path):
            try:
                k, a = filter_file(path, build_dir, aside_dir)
            except FormatError as e:
                print(f"leak_filter: {path}: {e}", file=sys.stderr)
                return 1
            kept, aside, files = kept + k, aside + a, files + (1 if k or a else 0)
    print(f"leak_filter: {files} leak report file(s): {kept} project leak(s) kept, "
          f"{aside} allocated outside the project's code set aside in {aside_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
