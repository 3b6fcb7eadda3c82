// An ObjectStore that counts the requests it forwards: the cold tier puts one in front of the
// S3 client so that `requests` (cold.report, gpucache_cold_requests_total) counts every
// request the tier makes (uploads, refills, backfill listings, reclaims), not only uploads.
//
// Thread safety: as the wrapped store; the counter is atomic.
#pragma once

#include <atomic>

#include "cold/object_store.h"

namespace gpucache::cold {

class CountingObjectStore final : public ObjectStore {
 public:
  explicit CountingObjectStore(ObjectStore& inner) : inner_(inner) {}

  uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }

  ObjectResult<Done> Put(std::string_view key, std::span<const uint8_t> body) override {
    Count();
    return inner_.Put(key, body);
  }
  ObjectResult<Done> PutHashed(std::string_view key, std::span<const uint8_t> body,
                               std::string_view sha256_hex) override {
    Count();
    return inner_.PutHashed(key, body, sha256_hex);
  }
  ObjectResult<ObjectMeta> Head(std::string_view key) override {
    Count();
    return inner_.Head(key);
  }
  ObjectResult<std::vector<uint8_t>> GetRange(std::string_view key, uint64_t offset,
                                              uint64_t length) override {
    Count();
    return inner_.GetRange(key, offset, length);
  }
  ObjectResult<Done> GetRangeInto(std::string_view key, uint64_t offset, uint64_t length,
                                  const RangeSink& sink) override {
    Count();
    return inner_.GetRangeInto(key, offset, length, sink);
  }
  ObjectResult<std::vector<uint8_t>> Get(std::string_view key, uint64_t max_bytes) override {
    Count();
    return inner_.Get(key, max_bytes);
  }
  ObjectResult<Done> Delete(std::string_view key) override {
    Count();
    return inner_.Delete(key);
  }
  // One per call, although the client may page (ListObjectsV2 continuation) underneath.
  ObjectResult<std::vector<ObjectMeta>> List(std::string_view prefix) override {
    Count();
    return inner_.List(prefix);
  }

 private:
  void Count() { requests_.fetch_add(1, std::memory_order_relaxed); }
  ObjectStore& inner_;
  std::atomic<uint64_t> requests_{0};
};

}  // namespace gpucache::cold
