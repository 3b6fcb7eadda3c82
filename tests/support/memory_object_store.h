// An in-memory ObjectStore for unit tests of the cold tier's logic (sink, refill, ops), with
// a request log and scripted faults. The integration tests use the real S3 client against a
// real gateway (tests/cold/harness); this fake only stands in where the logic is under test.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "cold/object_store.h"

namespace gpucache::cold::testing {

class MemoryObjectStore final : public ObjectStore {
 public:
  struct Request {
    std::string verb;  // PUT HEAD GET GETRANGE DELETE LIST
    std::string key;
  };
  // Decides a fault for a request, or nullopt to serve it. Called under the store's lock.
  using FaultFn = std::function<std::optional<ObjectError>(const Request&)>;

  void SetFault(FaultFn f) {
    std::lock_guard l(mu_);
    fault_ = std::move(f);
  }
  std::vector<Request> Log() const {
    std::lock_guard l(mu_);
    return log_;
  }
  void ClearLog() {
    std::lock_guard l(mu_);
    log_.clear();
  }
  size_t Count(const std::string& verb) const {
    std::lock_guard l(mu_);
    size_t n = 0;
    for (const Request& r : log_) n += r.verb == verb;
    return n;
  }
  std::map<std::string, std::vector<uint8_t>> Objects() const {
    std::lock_guard l(mu_);
    return objects_;
  }
  void Set(const std::string& key, std::vector<uint8_t> v) {
    std::lock_guard l(mu_);
    objects_[key] = std::move(v);
    modified_[key] = now_s_;
  }
  // The store's clock, which stamps each write (ObjectMeta::modified_unix_s): it starts at a
  // fixed day and moves only when a test moves it.
  void AdvanceClock(uint64_t seconds) {
    std::lock_guard l(mu_);
    now_s_ += seconds;
  }
  void SetClock(uint64_t unix_s) {
    std::lock_guard l(mu_);
    now_s_ = unix_s;
  }
  uint64_t Now() const {
    std::lock_guard l(mu_);
    return now_s_;
  }
  uint64_t ModifiedAt(const std::string& key) const {
    std::lock_guard l(mu_);
    auto it = modified_.find(key);
    return it == modified_.end() ? 0 : it->second;
  }

  ObjectResult<Done> Put(std::string_view key, std::span<const uint8_t> body) override {
    std::lock_guard l(mu_);
    if (auto e = Begin("PUT", key)) return *e;
    objects_[std::string(key)] = {body.begin(), body.end()};
    modified_[std::string(key)] = now_s_;
    return Done{};
  }
  ObjectResult<ObjectMeta> Head(std::string_view key) override {
    std::lock_guard l(mu_);
    if (auto e = Begin("HEAD", key)) return *e;
    auto it = objects_.find(std::string(key));
    if (it == objects_.end()) return NotFound();
    return ObjectMeta{it->first, it->second.size(), "", modified_[it->first]};
  }
  ObjectResult<std::vector<uint8_t>> GetRange(std::string_view key, uint64_t off,
                                              uint64_t len) override {
    std::lock_guard l(mu_);
    if (auto e = Begin("GETRANGE", key)) return *e;
    auto it = objects_.find(std::string(key));
    if (it == objects_.end()) return NotFound();
    if (off > it->second.size() || len > it->second.size() - off) {
      return ObjectError{ObjectErrorKind::kPermanent, 416, "InvalidRange", ""};
    }
    return std::vector<uint8_t>(it->second.begin() + off, it->second.begin() + off + len);
  }
  ObjectResult<std::vector<uint8_t>> Get(std::string_view key, uint64_t max) override {
    std::lock_guard l(mu_);
    if (auto e = Begin("GET", key)) return *e;
    auto it = objects_.find(std::string(key));
    if (it == objects_.end()) return NotFound();
    if (it->second.size() > max) return ObjectError{ObjectErrorKind::kPermanent, 0, "TooLarge", ""};
    return it->second;
  }
  ObjectResult<Done> Delete(std::string_view key) override {
    std::lock_guard l(mu_);
    if (auto e = Begin("DELETE", key)) return *e;
    objects_.erase(std::string(key));
    modified_.erase(std::string(key));
    return Done{};
  }
  ObjectResult<std::vector<ObjectMeta>> List(std::string_view prefix) override {
    std::lock_guard l(mu_);
    if (auto e = Begin("LIST", prefix)) return *e;
    std::vector<ObjectMeta> out;
    for (const auto& [k, v] : objects_) {
      if (k.compare(0, prefix.size(), prefix) == 0) out.push_back({k, v.size(), "", modified_[k]});
    }
    return out;
  }

 private:
  static ObjectError NotFound() { return {ObjectErrorKind::kNotFound, 404, "NoSuchKey", ""}; }
  std::optional<ObjectError> Begin(const char* verb, std::string_view key) {
    Request r{verb, std::string(key)};
    log_.push_back(r);
    return fault_ ? fault_(r) : std::nullopt;
  }

  mutable std::mutex mu_;
  std::map<std::string, std::vector<uint8_t>> objects_;
  std::map<std::string, uint64_t> modified_;
  uint64_t now_s_ = 1796601600;  // 2026-12-08 00:00:00 UTC
  std::vector<Request> log_;
  FaultFn fault_;
};

// Forwards every request to another store: a test's store derives from it and overrides only
// the calls it holds up or watches. PutHashed and GetRangeInto keep ObjectStore's defaults,
// which go through Put and GetRange, so an override of those sees them too.
class ForwardingObjectStore : public ObjectStore {
 public:
  explicit ForwardingObjectStore(ObjectStore& inner) : inner_(inner) {}
  ObjectResult<Done> Put(std::string_view k, std::span<const uint8_t> b) override { return inner_.Put(k, b); }
  ObjectResult<ObjectMeta> Head(std::string_view k) override { return inner_.Head(k); }
  ObjectResult<std::vector<uint8_t>> GetRange(std::string_view k, uint64_t o, uint64_t n) override {
    return inner_.GetRange(k, o, n);
  }
  ObjectResult<std::vector<uint8_t>> Get(std::string_view k, uint64_t m) override { return inner_.Get(k, m); }
  ObjectResult<Done> Delete(std::string_view k) override { return inner_.Delete(k); }
  ObjectResult<std::vector<ObjectMeta>> List(std::string_view p) override { return inner_.List(p); }

 protected:
  ObjectStore& inner_;
};

}  // namespace gpucache::cold::testing
