// Helpers shared by the cold-tier unit tests.
#pragma once

#include <memory>

#include "cold/keyring.h"
#include "common/cold_options.h"
#include "cold/pack.h"
#include "store/block_store.h"
#include "store/layout.h"
#include "tests/support/sample_identity.h"

namespace gpucache::cold::testing {

inline constexpr char kPrefix[] = "gpucache/";

// A fixed 32-byte cluster secret per seed (tests only).
inline std::vector<uint8_t> SecretOf(uint8_t seed) {
  std::vector<uint8_t> s(32);
  for (size_t i = 0; i < s.size(); i++) s[i] = static_cast<uint8_t>(seed * 31 + i);
  return s;
}

// The test keyring: key "k1" (secret seed 1), current. Fixed, so the vectors are.
inline std::shared_ptr<const Keyring> TestKeyring() { return Keyring::Of({{"k1", SecretOf(1)}}, "k1"); }
inline std::shared_ptr<SealKeys> TestKeys() { return std::make_shared<SealKeys>(TestKeyring()); }

// The i-th sample identity of `tenant` (distinct chains, so distinct addresses).
inline CacheIdentity NthIdentity(int i, std::string tenant = "acme") {
  CacheIdentity id = test::SampleIdentity(std::move(tenant));
  id.chain[1] = test::Hash(static_cast<uint8_t>(100 + i % 100), 16 + i / 100);
  return id;
}

// Distinct for every i (Payload's seed is one byte): the index is stamped in front.
inline Bytes PayloadOf(int i, size_t size) {
  Bytes b = test::Payload(size, static_cast<uint8_t>(i));
  for (size_t k = 0; k < 4 && k < b.size(); k++) b[k] = static_cast<uint8_t>(i >> (8 * k));
  return b;
}

// A pack of `n` blocks of `size` bytes each.
inline PackedPair MakePack(int first, int n, size_t size = 4096, std::string tenant = "acme",
                           std::shared_ptr<const Keyring> keyring = TestKeyring()) {
  PackBuilder b(kPrefix, std::move(keyring));
  for (int i = first; i < first + n; i++) {
    CacheIdentity id = NthIdentity(i, tenant);
    b.Add(AddressOf(id), EncodePhysicalKey(id), PayloadOf(i, size));
  }
  return b.Build(1'700'000'000'000'000'000ull);
}

// Commits `payload` under `id` into `store` through the commit protocol.
inline StatusCode CommitBlock(BlockStore& store, const CacheIdentity& id, const Bytes& payload) {
  BlockAddress a = AddressOf(id);
  store.CreateNamespace(a.tenant, a.ns, {1000, 1000});
  auto r = store.Reserve(a, {1000, 1000});
  if (!r.ok()) return r.status();
  Bytes gpck = EncodePhysicalKey(id);
  store.SetIdentity(r.value(), gpck);
  store.Write(r.value(), 0, payload);
  return store.Commit(r.value());
}

// A manually written-back tier that packs one block per pack and uploads one at a time, with
// short backoffs and no re-drive: each job is one block, in order.
inline ColdTierOptions OneBlockPacks() {
  ColdTierOptions o;
  o.prefix = kPrefix;
  o.write_back = WriteBack::kManual;
  o.pack.max_blocks = 1;
  o.sink.concurrency = 1;
  o.sink.backoff_base_ms = 1;
  o.sink.backoff_max_ms = 2;
  o.sink.redrive_interval_ms = 0;
  return o;
}

}  // namespace gpucache::cold::testing
