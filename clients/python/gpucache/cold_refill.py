"""Bringing a missed prefix back from the cold tier, never waiting past a deadline.

`cold.refill` on `.gpucache/ctl` (docs/cold-tier.md) commits one block from S3 into the hot
tier and answers when it is done; the request blocks in the daemon for as long as the object
store takes (its own timeouts bound it, at tens of seconds). A RefillRun asks for a request's
missing blocks in order on a thread of its own, stopping at the first block that does not come
back or would exceed the byte budget; `wait(deadline)` returns how many leading blocks are hot
by then. What arrives later is not used for this request (a later one finds it hot).
"""

from __future__ import annotations

import threading
import time
from typing import List, Sequence

from .client import MountClient
from .identity import CacheIdentity

_HOT = ("hit", "already-hot")


class RefillRun:
    def __init__(self, client: MountClient, identities: Sequence[CacheIdentity], block_bytes: int,
                 budget_bytes: int):
        self._client = client
        self._identities = list(identities)
        self._block_bytes = block_bytes
        self._budget = budget_bytes
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._hot = 0
        self.answers: List[str] = []  # one per block asked: the result or "error: ..."
        # A daemon thread: a refill stuck in the object store must not keep the engine alive.
        threading.Thread(target=self._run, name="gpucache-refill", daemon=True).start()

    def _run(self) -> None:
        try:
            spent = 0
            for identity in self._identities:
                if spent + self._block_bytes > self._budget:
                    self.answers.append("over-budget")
                    return
                result = self._refill_one(identity, self._budget - spent)
                self.answers.append(result)
                if result not in _HOT:
                    return
                spent += self._block_bytes
                with self._lock:
                    self._hot += 1
        finally:
            self._done.set()

    def _refill_one(self, identity: CacheIdentity, budget: int) -> str:
        try:
            reply = self._client.control({"op": "cold.refill",
                                          "identity": identity.encode_physical_key().hex(),
                                          "budget": budget})
        except (OSError, ValueError) as e:  # ENOTCONN, a reply that is not JSON, ...
            return "error: %s" % e
        if not reply.get("ok"):
            return "error: %s" % reply.get("errno", "?")
        return str(reply.get("result"))

    def wait(self, deadline: float) -> int:
        """Leading blocks hot when the run ends or at `deadline` (time.monotonic()), if sooner."""
        self._done.wait(max(0.0, deadline - time.monotonic()))
        with self._lock:
            return self._hot
