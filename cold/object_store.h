// ObjectStore: the four S3 verbs the cold tier needs (plus listing for operations), as an
// interface so the sink, refill and ops logic can be unit-tested against an in-memory fake
// while the integration tests and the daemon use the libcurl S3 client (cold/s3_client.h).
//
// Every failure is classified once, here, so that retry decisions are made in one place:
//   kNotFound   the key does not exist (404 / NoSuchKey); a normal answer for Head and Get
//   kTemporary  5xx, 429/SlowDown, RequestTimeout, connect/transfer timeouts, resets
//   kPermanent  every other 4xx, malformed replies, bad configuration
// `ambiguous` is set on a failed Put/Delete whose request may have reached the server (the
// outcome is unknown): the caller must not assume the object is absent.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace gpucache::cold {

enum class ObjectErrorKind : uint8_t { kNotFound, kTemporary, kPermanent };
std::string_view ToString(ObjectErrorKind kind);

struct ObjectError {
  ObjectErrorKind kind = ObjectErrorKind::kPermanent;
  int http_status = 0;     // 0 when no HTTP reply arrived
  std::string code;        // S3 error code (e.g. "SlowDown") or curl's error name
  std::string message;     // for logs and reports; never contains credentials
  bool ambiguous = false;  // the request may have taken effect
};

// A value or an ObjectError.
template <typename T>
class ObjectResult {
 public:
  ObjectResult(T value) : v_(std::move(value)) {}           // NOLINT
  ObjectResult(ObjectError error) : v_(std::move(error)) {}  // NOLINT
  bool ok() const { return std::holds_alternative<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  const ObjectError& error() const { return std::get<ObjectError>(v_); }

 private:
  std::variant<T, ObjectError> v_;
};

struct Done {};

struct ObjectMeta {
  std::string key;
  uint64_t size = 0;
  std::string etag;
  // When the object was last written, in the store's clock (seconds since the epoch); 0 when
  // the reply did not say (or said it in a form not understood). Only the orphan sweep uses
  // it, and takes 0 for "just written": nothing is deleted on an unknown age.
  uint64_t modified_unix_s = 0;
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;
  // Uploads `body` as `key` with a SHA-256 payload hash (integrity checked by the server).
  virtual ObjectResult<Done> Put(std::string_view key, std::span<const uint8_t> body) = 0;
  // As Put, when the caller already knows the body's SHA-256 (lowercase hex), as for a pack
  // object, whose key is that digest: a store that sends it as the payload hash need not hash
  // the body again. REQUIRES: `sha256_hex` is the body's SHA-256 (else the server refuses it).
  virtual ObjectResult<Done> PutHashed(std::string_view key, std::span<const uint8_t> body,
                                       std::string_view sha256_hex) {
    (void)sha256_hex;
    return Put(key, body);
  }
  virtual ObjectResult<ObjectMeta> Head(std::string_view key) = 0;
  // Bytes [offset, offset + length) of `key`; a reply of any other length is kPermanent.
  virtual ObjectResult<std::vector<uint8_t>> GetRange(std::string_view key, uint64_t offset,
                                                      uint64_t length) = 0;
  // Where GetRangeInto hands the bytes as they arrive: `offset` is within the range (a resent
  // request starts again at 0); returning false aborts the transfer (kPermanent "Aborted").
  using RangeSink = std::function<bool(uint64_t offset, std::span<const uint8_t> bytes)>;
  // As GetRange, but the bytes go to `sink` as they arrive instead of into one buffer (a
  // refill streams them into the hot tier's reservation). An error may come after bytes were
  // handed over: the caller keeps nothing until the call succeeded and it verified them. The
  // default gets the whole range, then hands it over at once.
  virtual ObjectResult<Done> GetRangeInto(std::string_view key, uint64_t offset, uint64_t length,
                                          const RangeSink& sink) {
    auto bytes = GetRange(key, offset, length);
    if (!bytes.ok()) return bytes.error();
    if (!sink(0, bytes.value())) return ObjectError{ObjectErrorKind::kPermanent, 0, "Aborted", "the sink refused the bytes"};
    return Done{};
  }
  // Whole object (manifests), refused as kPermanent when larger than `max_bytes`.
  virtual ObjectResult<std::vector<uint8_t>> Get(std::string_view key, uint64_t max_bytes) = 0;
  // Deleting an absent key succeeds (S3 semantics).
  virtual ObjectResult<Done> Delete(std::string_view key) = 0;
  // Every key under `prefix`, following continuation tokens.
  virtual ObjectResult<std::vector<ObjectMeta>> List(std::string_view prefix) = 0;
};

}  // namespace gpucache::cold
