"""Is a directory a gpucachefs mount? (MountClient and the connector ask before trusting it.)

A mountpoint whose daemon is stopped, or not started yet, is a plain directory: a commit there
would land on the local disk by rename, unchecked, and later loads would serve those files, or
files anyone planted there, with no checksum, no eviction, no quota and no tenancy. So the
client refuses a directory that is not a gpucachefs mount (OSError ENOTCONN), as
`gpucache-client` does, unless the caller opted in to a plain directory (tests, and the
benchmarks' `direct` side: `plain_directory=True`).

What counts: /proc/self/mountinfo lists `mountpoint` with file system type "fuse.gpucachefs"
(gpucachefs mounts with subtype=gpucachefs, fs/session.cc). Where mountinfo is unreadable, the
C++ client's test: a mountpoint with `.gpucache/ctl` (MountClient::HasDaemon).
"""

from __future__ import annotations

import errno
import os
import re
from typing import Optional

FSTYPE = "fuse.gpucachefs"
_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash in paths as \040, \011, \012, \134.
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def gpucachefs_device(mountpoint: str) -> Optional[int]:
    """st_dev of the gpucachefs mounted at `mountpoint` (its files have it), None if none is."""
    path = os.path.realpath(mountpoint)
    top = None
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 4 and _unescape(fields[4]) == path:
                    top = fields  # mounts stacked on one path are listed in order: keep the last
    except OSError:
        return _device_without_mountinfo(path)
    if top is None or "-" not in top[5:] or top[top.index("-", 5) + 1] != FSTYPE:
        return None
    major, minor = top[2].split(":")
    return os.makedev(int(major), int(minor))


def _device_without_mountinfo(path: str) -> Optional[int]:
    try:
        if os.path.ismount(path) and os.path.exists(os.path.join(path, ".gpucache", "ctl")):
            return os.stat(path).st_dev
    except OSError:
        pass
    return None


class MountGuard:
    """Remembers the device of a verified gpucachefs mount, so a file's st_dev (from a stat or
    fstat the caller makes anyway) says whether it is on that mount at no extra cost. Another
    device (the daemon restarted and mounted again, or it is gone and the path is a plain
    directory) re-reads mountinfo once. Thread-safe: the one cached int is replaced whole."""

    def __init__(self, mountpoint: str, plain_directory: bool = False):
        self.mountpoint = mountpoint
        self.plain_directory = plain_directory
        self._device: Optional[int] = None

    def holds(self, st_dev: int) -> bool:
        """Whether a file of device st_dev is on the gpucachefs mounted at the mountpoint now."""
        if self.plain_directory or st_dev == self._device:
            return True
        self._device = gpucachefs_device(self.mountpoint)
        return st_dev == self._device

    def require(self) -> None:
        """OSError(ENOTCONN) unless a gpucachefs is mounted at the mountpoint (or opted out)."""
        if self.plain_directory:
            return
        self._device = gpucachefs_device(self.mountpoint)
        if self._device is None:
            raise self.not_mounted()

    def not_mounted(self) -> OSError:
        return OSError(errno.ENOTCONN, "%s: not a gpucachefs mount (is gpucachefs mounted there? "
                       "A plain directory is used only with plain_directory=True)" % self.mountpoint)
