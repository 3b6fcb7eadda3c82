// Helpers for the unit tests of the store's parts (admission, reservations, quarantine).
#pragma once

#include <cstdio>
#include <string>

#include "store/block_index.h"
#include "store/block_store.h"

namespace gpucache::test {

// The address of block number `n` of `tenant` in namespace "ns" (a valid 32-hex-digit name).
inline BlockAddress BlockNo(const std::string& tenant, unsigned n) {
  char name[33];
  std::snprintf(name, sizeof name, "%032x", n);
  return BlockAddress{tenant, "ns", name};
}

// A committed block of `size` payload bytes, at `region_id`.
inline IndexedBlock RecordOf(uint64_t size, uint64_t region_id = 0) {
  IndexedBlock r;
  r.size = size;
  r.region_id = region_id;
  return r;
}

// The keys of a full block (prefix-lru evicts partial blocks first).
inline IndexKeys FullKeys() {
  IndexKeys k;
  k.valid_length = 256;
  k.block_capacity = 256;
  return k;
}

// `record` at `address` with `keys`, committed by `owner`: what BlockIndex::Insert takes.
inline IndexedBlock Block(const BlockAddress& address, IndexedBlock record, const IndexKeys& keys, Owner owner) {
  record.address = address;
  record.keys = keys;
  record.owner = owner;
  return record;
}

}  // namespace gpucache::test
