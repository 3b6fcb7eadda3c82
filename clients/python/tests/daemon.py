"""A gpucachefs daemon for Python tests: fresh data directory and mountpoint, always stopped."""

import os
import shutil
import signal
import subprocess
import tempfile
import time

BUILD_DIR = os.environ.get("GPUCACHE_BUILD_DIR")

CONFIG = """\
data_dir = "{data}"
[metrics]
listen = ""
[admins]
uids = [0]
[tenants.acme]
uids = [0, 1000]
"""


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1].replace("\\040", " ") == path for line in f)


class Daemon:
    def __init__(self, extra_config: str = ""):
        """extra_config: TOML appended to the configuration (a [cold] section, say)."""
        self.tmp = tempfile.mkdtemp(prefix="gpucache-py-")
        self.mnt = os.path.join(self.tmp, "mnt")
        self.data = os.path.join(self.tmp, "data")
        os.mkdir(self.mnt)
        self.config = os.path.join(self.tmp, "gpucache.toml")
        with open(self.config, "w") as f:
            f.write(CONFIG.format(data=self.data) + extra_config)
        self.proc = None
        self.log = open(os.path.join(self.tmp, "daemon.log"), "ab")
        self.start()

    def start(self):
        self.proc = subprocess.Popen([os.path.join(BUILD_DIR, "gpucachefs"), self.config, self.mnt, "-f"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with open(os.path.join(self.mnt, ".gpucache", "epoch")) as f:
                    if f.read().strip():
                        return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        self.log.flush()
        with open(os.path.join(self.tmp, "daemon.log"), errors="replace") as f:
            raise RuntimeError("gpucachefs did not mount; its log:\n" + f.read())

    def kill(self):
        """SIGKILL: the mount stays, answering ENOTCONN, as after a crash."""
        self.proc.kill()
        self.proc.wait()

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-u", "-z", self.mnt], check=False)
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
