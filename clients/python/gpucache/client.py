"""MountClient: commit, read, probe and look up blocks through a gpucachefs mount.

A port of clients/cpp/mount_client.cc. It speaks plain POSIX to the mount (plus the
`.gpucache/ctl` request file for lookup, and `.gpucache/commit` for commits); the daemon enforces tenancy, the commit checks and
checksums, so nothing here needs to be trusted by anyone else.

Errors are raised as OSError with the errno of the step that failed; see the package
docstring for what an engine should do with them (recompute).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import struct
from typing import TYPE_CHECKING, Any, Iterable, List, Optional, Union

from .identity import CacheIdentity
from .mount import MountGuard

if TYPE_CHECKING:
    from typing_extensions import Buffer

    # What commit() writes: one buffer, or a list of them in order.
    Payload = Union[Buffer, List[Buffer]]

IDENTITY_XATTR = "user.gpucache.identity"
PART_SUFFIX = ".part"
# The commit channel (docs/control-protocol.md, "commit"): a block committed in one write.
COMMIT_CHANNEL = os.path.join(".gpucache", "commit")
_FRAME_HEADER = struct.Struct("<4sHHIIQ")  # magic, version, flags, path, identity, payload lengths
_IOV_MAX = os.sysconf("SC_IOV_MAX")

_PathLike = Union[str, "os.PathLike[str]"]


# From this size on a commit declares its size first (one round trip): on a full device the
# daemon then decides whether the block can fit before it evicts anything for it.
_DECLARE_SIZE_FROM = 1 << 20


def _declare_size(fd: int, payload: Payload) -> None:
    """fallocate(2) the whole payload (one buffer or a list) before writing it."""
    size = _payload_bytes(payload)
    if size < _DECLARE_SIZE_FROM:
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.ENOSYS):
            raise


def _write_all(fd: int, data: Payload) -> None:
    """Writes one buffer, or a list of buffers in order (one writev per at most IOV_MAX)."""
    # cast("B"): slice by bytes even for a multi-dimensional buffer such as a numpy array.
    views = [memoryview(b).cast("B") for b in (data if isinstance(data, list) else [data])]
    views = [v for v in views if v.nbytes]
    while views:
        n = os.writev(fd, views[:_IOV_MAX])  # EINTR is retried by Python itself (PEP 475)
        if n <= 0:  # a zero-length write would loop forever; C++ reports it as EIO
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        while n and n >= views[0].nbytes:  # drop what was written, keep the rest
            n -= views[0].nbytes
            views.pop(0)
        if n:
            views[0] = views[0][n:]


def _frame_header(relative_path: str, gpck: bytes, payload_bytes: int) -> bytes:
    path = relative_path.encode()
    return _FRAME_HEADER.pack(b"GPCF", 1, 0, len(path), len(gpck), payload_bytes) + path + gpck


def _write_frame(fd: int, header: bytes, payload: Payload) -> None:
    """The whole frame from offset 0 (the header, then the payload's buffers)."""
    buffers = payload if isinstance(payload, list) else [payload]
    _pwrite_all(fd, [memoryview(header)] + [memoryview(b).cast("B") for b in buffers], 0)


def _pwrite_all(fd: int, views: List[memoryview], offset: int) -> None:
    """Writes `views` in order from `offset` of the file, one pwritev per at most IOV_MAX; a
    short write continues at its offset (a commit channel answers a failed frame's errno to the
    rest of it)."""
    views = [v for v in views if v.nbytes]
    while views:
        n = os.pwritev(fd, views[:_IOV_MAX], offset)
        if n <= 0:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        offset += n
        while n and n >= views[0].nbytes:
            n -= views[0].nbytes
            views.pop(0)
        if n:
            views[0] = views[0][n:]


def _payload_bytes(payload: Payload) -> int:
    return sum(memoryview(b).nbytes for b in (payload if isinstance(payload, list) else [payload]))


def _read_all(fd: int, size_hint: int = 0) -> bytes:
    chunks: List[bytes] = []
    chunk = max(size_hint, 1 << 16)
    while True:
        b = os.read(fd, chunk)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


class MountClient:
    """Engine-side helper for one mountpoint. Stateless apart from the path, whether the
    daemon has a commit channel and the mount's device: thread-safe.

    It serves only a gpucachefs mount (gpucache.mount): on a plain directory (no daemon
    mounted there) commit and read raise OSError(ENOTCONN) and probe_prefix finds nothing.
    plain_directory=True lifts that, for tests and benchmarks on plain files only: nothing
    is checksummed, evicted or access-checked there.
    """

    def __init__(self, mountpoint: _PathLike, plain_directory: bool = False):
        self.mountpoint = os.fspath(mountpoint)
        self._no_channel = False  # set once a daemon turned out to have no commit channel
        self._guard = MountGuard(self.mountpoint, plain_directory)

    def require_mount(self) -> None:
        """OSError(ENOTCONN) unless a gpucachefs is mounted at the mountpoint (or plain_directory)."""
        self._guard.require()

    def on_mount(self, st_dev: int) -> bool:
        """Whether a file of device st_dev (from a stat or fstat) is on the mounted gpucachefs."""
        return self._guard.holds(st_dev)

    def path_of(self, identity: CacheIdentity) -> str:
        """<mount>/<tenant>/<namespace>/<block>"""
        return os.path.join(self.mountpoint, identity.relative_path())

    def commit(self, identity: CacheIdentity, payload: Payload) -> None:
        """Publishes payload (any C-contiguous buffer, or a list of them written in order) as
        the block named by identity.

        One frame written to <mount>/.gpucache/commit (docs/control-protocol.md, "commit"):
        one FUSE request up to 1 MiB. The daemon runs the commit protocol itself, with the same
        checks and errnos as commit_by_rename; a missing namespace is made and the frame sent
        again. A daemon without the channel gets commit_by_rename. No daemon at all (a plain
        directory: stopped, or not started yet) is OSError(ENOTCONN), never a commit to the
        local disk (unless plain_directory). The channel is opened per frame and closed after
        it: a descriptor held on the mount would keep a stopping daemon mounted. OSError with
        the errno of the commit (EEXIST: another writer holds the block or it is already
        committed).
        """
        gpck = identity.encode_physical_key()  # validates before touching the mount
        if not self._no_channel:
            header = _frame_header(identity.relative_path(), gpck, _payload_bytes(payload))
            try:
                sent = self._send_frame(header, payload)
            except FileNotFoundError:
                directory = os.path.join(self.mountpoint, identity.tenant, identity.namespace_name())
                try:
                    os.mkdir(directory, 0o770)
                except FileExistsError:
                    pass
                sent = self._send_frame(header, payload)
            if sent:
                return
            if sent is None and not self._guard.plain_directory:
                raise self._guard.not_mounted()
            if sent is False:
                self._no_channel = True
        self.commit_by_rename(identity, payload)

    def _send_frame(self, header: bytes, payload: Payload) -> Optional[bool]:
        """Writes one frame. False: the daemon has no commit channel (an older gpucachefs: it
        has the control file). None: no daemon here right now (a plain directory, or a
        mountpoint while its daemon restarts): commit refuses it (ENOTCONN) and tries the
        channel again next time."""
        fd = self._open_channel()
        if fd is None:
            if os.path.exists(os.path.join(self.mountpoint, ".gpucache", "ctl")):
                return False
            return None
        try:
            _write_frame(fd, header, payload)
        finally:
            os.close(fd)  # no FLUSH (the daemon answers the open noflush)
        return True

    def _open_channel(self) -> Optional[int]:
        """The commit channel opened for writing, None if there is none (ENOENT).

        A stopped daemon's mountpoint is a plain directory that others may be able to write:
        a symlink planted as the channel would have the frame (tenant, identity, KV bytes)
        overwrite whatever it names, and a FIFO would block the open forever. So neither
        `.gpucache` nor the channel is followed if it is a symlink, the open does not wait
        (O_NONBLOCK), and only a regular file on the verified mount is written; anything else
        is OSError(ENOTCONN), as a plain directory without the channel is.
        """
        nofollow = os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            # O_PATH: a lookup only, no FUSE open; the channel is opened relative to it, so a
            # `.gpucache` swapped for a symlink after this cannot redirect the frame.
            dfd = os.open(os.path.join(self.mountpoint, ".gpucache"), os.O_PATH | os.O_DIRECTORY | nofollow)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):  # a symlink or a file planted there
                raise self._guard.not_mounted() from e
            raise
        try:
            try:
                fd = os.open("commit", os.O_WRONLY | os.O_NONBLOCK | nofollow, dir_fd=dfd)
            except FileNotFoundError:
                return None
            except OSError as e:
                # ELOOP (a symlink), ENXIO (a FIFO nobody reads), ...: something planted in a
                # plain directory; on the mount the daemon's own errno stands.
                if self._guard.holds(os.fstat(dfd).st_dev):
                    raise
                raise self._guard.not_mounted() from e
            try:
                st = os.fstat(fd)
                # A hard link to another file of the local disk is regular: st_dev tells.
                if not stat.S_ISREG(st.st_mode) or not self._guard.holds(st.st_dev):
                    raise self._guard.not_mounted()
                os.set_blocking(fd, True)  # the frame's writes as without O_NONBLOCK
            except BaseException:
                _close_quietly(fd)
                raise
            return fd
        finally:
            os.close(dfd)

    def commit_by_rename(self, identity: CacheIdentity, payload: Payload) -> None:
        """The commit protocol in plain POSIX.

        Create <block>.part with O_EXCL (making the namespace directory first if it is
        missing), set the
        identity xattr, write everything, close, rename to the final name. The daemon checks
        the identity against the path and publishes the block atomically at the rename.
        EEXIST from the create means another writer holds the block or it is already
        committed. On any failure after the create the .part is removed (which abandons the
        reservation) and the first OSError is re-raised with its errno. OSError(ENOTCONN) if
        no gpucachefs is mounted (unless plain_directory): the steps would succeed on any
        local file system.
        """
        gpck = identity.encode_physical_key()  # validates before touching the mount
        self._guard.require()  # an older daemon's path only: a mountinfo read is cheap beside it
        directory = os.path.join(self.mountpoint, identity.tenant, identity.namespace_name())
        final = os.path.join(directory, identity.block_name())
        part = final + PART_SUFFIX
        flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC
        try:
            fd = os.open(part, flags, 0o600)
        except FileNotFoundError:
            # The namespace usually exists; make it only when it does not (one round trip less).
            try:
                os.mkdir(directory, 0o770)
            except FileExistsError:
                pass
            fd = os.open(part, flags, 0o600)
        try:
            try:
                # The identity goes on before any payload: the daemon stores it with the
                # reservation and, at the rename, refuses it (EINVAL) unless it names this path.
                os.setxattr(fd, IDENTITY_XATTR, gpck)
                _declare_size(fd, payload)
                _write_all(fd, payload)
            except BaseException:
                _close_quietly(fd)  # keep the first error, as the C++ client does
                raise
            os.close(fd)  # close reports errors too (FUSE flush): part of the commit
            os.rename(part, final)
        except BaseException:
            _unlink_quietly(part)
            raise

    def read(self, identity: CacheIdentity) -> bytes:
        """The whole block. OSError: ENOENT on a miss, EIO on corruption, ENOTCONN when the file
        is not on a gpucachefs mount or no gpucachefs is mounted (a plain directory: present
        or missing, the block is not read), and so on.

        It does not compare the identity xattr: the daemon refuses a commit whose identity does
        not name its path, so on a mount the path is the identity. Engines that want the check
        anyway (the connector does) compare os.getxattr(path, IDENTITY_XATTR) with
        identity.encode_physical_key().
        """
        try:
            fd = os.open(self.path_of(identity), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            # A miss, or no gpucachefs here at all (a plain directory): ENOTCONN says the cache
            # is down, as commit does, rather than a miss. The mountpoint's stat is a cached
            # FUSE getattr on a mount.
            try:
                on_mount = self._guard.holds(os.stat(self.mountpoint).st_dev)
            except OSError:
                on_mount = False
            if not on_mount:
                raise self._guard.not_mounted() from None
            raise
        try:
            st = os.fstat(fd)
            if not self._guard.holds(st.st_dev):
                raise self._guard.not_mounted()
            return _read_all(fd, st.st_size)
        finally:
            os.close(fd)

    def probe_prefix(self, identities: Iterable[CacheIdentity]) -> int:
        """How many leading blocks are committed: stat() until the first failure.

        Any stat error counts as "not there", so this never raises for mount trouble; the
        engine just recomputes from that block on. So does a file that is not on a gpucachefs
        mount (a plain directory under a stopped daemon's mountpoint).
        """
        n = 0
        for identity in identities:
            try:
                st = os.stat(self.path_of(identity))
            except OSError:
                break
            if not self._guard.holds(st.st_dev):
                break
            n += 1
        return n

    def lookup(self, identity: CacheIdentity) -> dict[str, Any]:
        """Asks the daemon through .gpucache/ctl whether it has the block, or a prefix of it.

        Returns the parsed reply: {"ok": true, "result": "hit"|"prefix_hit"|"miss", ...} with
        "path" (relative to the mount) and "valid_length" for hits, "reason" for misses; or
        {"ok": false, "errno": "EACCES"|..., "error": "..."}. OSError if the mount fails.
        """
        return self.control({"op": "lookup", "identity": identity.encode_physical_key().hex()})

    def control(self, request: dict[str, Any]) -> dict[str, Any]:
        """One request on .gpucache/ctl (docs/control-protocol.md); returns the parsed reply."""
        data = json.dumps(request, separators=(",", ":")).encode()
        fd = os.open(os.path.join(self.mountpoint, ".gpucache", "ctl"), os.O_RDWR | os.O_CLOEXEC)
        try:
            if not self._guard.holds(os.fstat(fd).st_dev):  # a file planted in a plain directory
                raise self._guard.not_mounted()
            # One write() is one request: the daemon parses each write on its own, so a
            # split request would be two broken ones.
            if os.write(fd, data) != len(data):
                raise OSError(errno.EIO, "short write of the control request")
            # The reply is a stream (docs/control-protocol.md): read() and pread() both work.
            reply = b""
            while chunk := os.pread(fd, 1 << 16, len(reply)):
                reply += chunk
            parsed: dict[str, Any] = json.loads(reply)
            return parsed
        finally:
            os.close(fd)


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
