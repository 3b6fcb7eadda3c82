#!/usr/bin/env python3
"""How much of a file's page cache sits in large folios (run as root: /proc/kpageflags).

Usage: tests/bench/folio_sizes.py FILE...

Reads each file whole (so its pages are cached), maps it, and looks up every page's flags:
pages that are the head or a tail of a compound page belong to a large folio. Used to show
that the kernel caches a block read through the mount in 4 KiB folios, and the same bytes
read from the backing file on ext4 in large ones (docs/performance.md, "Data path").
"""
import mmap
import os
import struct
import sys

KPF_COMPOUND_HEAD = 15
KPF_COMPOUND_TAIL = 16
PAGE = os.sysconf("SC_PAGE_SIZE")


def mapped_base(path):
    real = os.path.realpath(path)
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip().endswith(real):
                return int(line.split("-", 1)[0], 16)
    raise SystemExit(f"{path}: mapping not found")


def folio_report(path):
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    pages = size // PAGE
    m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    for off in range(0, pages * PAGE, PAGE):
        m[off]  # fault each page in
    base = mapped_base(path)
    in_large = 0
    with open("/proc/self/pagemap", "rb") as pm, open("/proc/kpageflags", "rb") as kf:
        for i in range(pages):
            pm.seek(((base // PAGE) + i) * 8)
            entry = struct.unpack("Q", pm.read(8))[0]
            if not entry >> 63 & 1:
                continue
            kf.seek((entry & ((1 << 55) - 1)) * 8)
            flags = struct.unpack("Q", kf.read(8))[0]
            if flags >> KPF_COMPOUND_HEAD & 1 or flags >> KPF_COMPOUND_TAIL & 1:
                in_large += 1
    m.close()
    os.close(fd)
    print(f"file={path} pages={pages} pages_in_large_folios={in_large}")


for p in sys.argv[1:]:
    folio_report(p)
