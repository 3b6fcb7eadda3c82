"""Reading and committing layer-wise blocks with no copy besides the kernel's.

A BlockSource opens a block once, checks the stored identity (the xattr) and the payload size
once, then serves `preadv` of one layer region straight into caller-given buffers (views of a
staging tensor). Any failure is a LoadFailure naming why; the caller truncates the hit there.
A block that is not on a gpucachefs mount fails ("mount"): the MountClient given says which
mount, or that a plain directory is wanted (plain_directory=True: tests and the benchmark's
`direct` side only).
"""

from __future__ import annotations

import errno
import os
import threading
from typing import TYPE_CHECKING, List, Optional

from .client import IDENTITY_XATTR, MountClient
from .identity import CacheIdentity
from .kv_layout import KVGeometry

if TYPE_CHECKING:
    from typing_extensions import Buffer


class LoadFailure(Exception):
    """Why a block cannot be used: missing, io, mount, identity, size, short, timeout, refill."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__("%s%s" % (reason, ": " + detail if detail else ""))
        self.reason = reason


def _reason_of(e: OSError) -> str:
    return "missing" if e.errno == errno.ENOENT else "io"


class BlockSource:
    """One block to read, opened lazily by the first reader (thread-safe), closed by close()."""

    def __init__(self, client: MountClient, identity: CacheIdentity, geometry: KVGeometry):
        self.client = client
        self.path = client.path_of(identity)
        self.identity = identity
        self.geometry = geometry
        self._lock = threading.Lock()
        self._fd: Optional[int] = None
        self._failure: Optional[LoadFailure] = None

    def _open(self) -> int:
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            # The path is a digest of the identity, so a different stored identity means a
            # collision or a planted file: never use it.
            if os.getxattr(fd, IDENTITY_XATTR) != self.identity.encode_physical_key():
                raise LoadFailure("identity", self.path)
            st = os.fstat(fd)
            # Not on the mount: no daemon checked these bytes (a plain directory under a
            # stopped daemon's mountpoint, where anyone who can write it can plant KV).
            if not self.client.on_mount(st.st_dev):
                raise LoadFailure("mount", "%s is not on a gpucachefs mount" % self.path)
            size = st.st_size
            if size != self.geometry.payload_bytes:
                raise LoadFailure("size", "%d bytes, expected %d" % (size, self.geometry.payload_bytes))
            # Every layer of the block will be read: let the kernel read ahead the whole file
            # (through FUSE, asynchronous READs the daemon serves in parallel) while the
            # threads wait on the first layers. Costs nothing when the pages are cached.
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            return fd
        except BaseException:
            os.close(fd)
            raise

    def fd(self) -> int:
        with self._lock:
            if self._failure is not None:
                raise self._failure
            if self._fd is None:
                try:
                    self._fd = self._open()
                except OSError as e:
                    self._failure = LoadFailure(_reason_of(e), os.strerror(e.errno or errno.EIO))
                    raise self._failure from None
                except LoadFailure as e:
                    self._failure = e
                    raise
            return self._fd

    def read_layer(self, layer: int, buffers: List[memoryview]) -> None:
        """Fills buffers (K then V) with layer `layer`: one preadv at a page-aligned offset."""
        want = sum(b.nbytes for b in buffers)
        offset = layer * self.geometry.layer_stride
        fd = self.fd()
        try:
            got = os.preadv(fd, buffers, offset)  # releases the GIL
            while got < want:  # a short read is legal; a zero one is the end of the file
                rest = _advance(buffers, got)
                n = os.preadv(fd, rest, offset + got)
                if n <= 0:
                    raise LoadFailure("short", "%d of %d bytes" % (got, want))
                got += n
        except OSError as e:
            raise LoadFailure(_reason_of(e), os.strerror(e.errno or errno.EIO)) from None

    def close(self) -> None:
        """Closes the file, quietly: its bytes were read (or failed) by now, and an error here
        (EINTR, EIO from a flush) must not reach the engine's forward or keep the load from
        closing its other files and giving back its staging. The descriptor is gone either way."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


def _advance(buffers: List[memoryview], n: int) -> List[memoryview]:
    out = []
    for b in buffers:
        if n >= b.nbytes:
            n -= b.nbytes
            continue
        out.append(b[n:])
        n = 0
    return out


def payload_buffers(geometry: KVGeometry, layer_halves: List[List[memoryview]]) -> List[Buffer]:
    """The block's payload as a list of buffers in file order: each layer's K, V, padding."""
    pad = geometry.layer_stride - 2 * geometry.half_bytes
    zeros = memoryview(bytes(pad)) if pad else None
    out: List[Buffer] = []
    for halves in layer_halves:
        out.extend(halves)
        if zeros is not None:
            out.append(zeros)
    return out


def commit_block(client: MountClient, identity: CacheIdentity, buffers: List[Buffer]) -> None:
    """The commit (one frame to .gpucache/commit, or the commit protocol by rename) from buffers.

    OSError on failure; EEXIST means the block is stored or being stored by someone else,
    ENOTCONN that no gpucachefs is mounted.
    """
    client.commit(identity, buffers)
