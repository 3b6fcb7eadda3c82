// What a tenant writes and has not committed counts against max_retained_bytes (its quota) and
// the global limit, refused at the write before anything is evicted for it (review, 2026-12-07:
// .part files held open were bounded by nothing, and a block declared larger than the quota
// evicted other tenants' blocks on a full device for a commit that was then refused). One
// fill past a limit can never commit: EDQUOT or ENOSPC, as its commit would answer. Fills that
// pass it together wait for each other's commits: EAGAIN, as for the limits on bytes in flight.
#include <doctest/doctest.h>

#include "store/memory_store.h"
#include "tests/support/sample_identity.h"

namespace gpucache {
namespace {

const Owner kOwner{1000, 1000};

// A fill of `tenant`'s block `n`, reserved with its identity and left open.
ReservationId Open(MemoryStore& s, const std::string& tenant, uint8_t n) {
  CacheIdentity id = test::SampleIdentity(tenant, 16);
  id.chain[0] = test::Hash(n);
  BlockAddress a = AddressOf(id);
  s.CreateNamespace(a.tenant, a.ns, kOwner);
  auto r = s.Reserve(a, kOwner);
  REQUIRE(r.ok());
  s.SetIdentity(r.value(), EncodePhysicalKey(id));
  return r.value();
}

TEST_CASE("Quota in flight: a tenant's uncommitted bytes pass neither its quota nor the global limit") {
  StoreOptions o;
  o.limits.tenants["acme"].max_retained_bytes = 2000;
  o.limits.global.max_retained_bytes = 5000;
  MemoryStore s(o);
  // One fill past the quota: refused, its size unchanged.
  ReservationId big = Open(s, "acme", 1);
  CHECK(s.Write(big, 0, test::Payload(2001)).status() == StatusCode::kTenantQuota);
  CHECK(s.Truncate(big, 2001) == StatusCode::kTenantQuota);  // a declared size, as fallocate is
  CHECK(s.StatReservation(big)->size == 0);
  // Several fills together past it: the one that would pass it waits (EAGAIN).
  ReservationId a = Open(s, "acme", 2), b = Open(s, "acme", 3);
  CHECK(s.Write(a, 0, test::Payload(1500)).ok());
  CHECK(s.Write(b, 0, test::Payload(501)).status() == StatusCode::kExhausted);
  CHECK(s.Write(b, 0, test::Payload(500)).ok());
  CHECK(s.Stats().tenants["acme"].usage.inflight_bytes == 2000);
  // The global limit: one fill past it is ENOSPC; every tenant's fills together, EAGAIN.
  ReservationId g1 = Open(s, "globex", 4), g2 = Open(s, "globex", 5);
  CHECK(s.Write(g1, 0, test::Payload(5001)).status() == StatusCode::kNoSpace);
  CHECK(s.Write(g1, 0, test::Payload(3000)).ok());
  CHECK(s.Write(g2, 0, test::Payload(1)).status() == StatusCode::kExhausted);
  // Committed, the bytes leave the count in flight: the next fill has room again.
  CHECK(s.Commit(a) == StatusCode::kOk);
  CHECK(s.Write(b, 500, test::Payload(1000)).ok());
  for (ReservationId r : {big, b, g1, g2}) s.Abort(r);
  CHECK(s.Stats().tenants["acme"].usage.inflight_bytes == 0);
}

}  // namespace
}  // namespace gpucache
