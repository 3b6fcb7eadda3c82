// The commit protocol through the store's API, for tests that need a committed block and check
// nothing on the way (REQUIREs every step).
#pragma once

#include <doctest/doctest.h>

#include "store/block_store.h"
#include "store/identity.h"
#include "store/layout.h"

namespace gpucache::test {

inline void CommitBlock(BlockStore& s, const CacheIdentity& id, const Bytes& payload, Owner owner) {
  BlockAddress a = AddressOf(id);
  StatusCode ns = s.CreateNamespace(a.tenant, a.ns, owner);
  REQUIRE((ns == StatusCode::kOk || ns == StatusCode::kExists));
  auto r = s.Reserve(a, owner);
  REQUIRE(r.ok());
  REQUIRE(s.SetIdentity(r.value(), EncodePhysicalKey(id)) == StatusCode::kOk);
  REQUIRE(s.Write(r.value(), 0, payload).ok());
  REQUIRE(s.Commit(r.value()) == StatusCode::kOk);
}

// The same, answering the first step's refusal instead of requiring success (and aborting the
// reservation it made), for tests of what the store refuses.
inline StatusCode TryCommit(BlockStore& s, const CacheIdentity& id, const Bytes& payload, Owner owner) {
  BlockAddress a = AddressOf(id);
  s.CreateNamespace(a.tenant, a.ns, owner);
  auto r = s.Reserve(a, owner);
  if (!r.ok()) return r.status();
  s.SetIdentity(r.value(), EncodePhysicalKey(id));
  auto w = s.Write(r.value(), 0, payload);
  StatusCode c = w.ok() ? s.Commit(r.value()) : w.status();
  if (c != StatusCode::kOk) s.Abort(r.value());
  return c;
}

}  // namespace gpucache::test
