// S3Client: the ObjectStore over S3's REST API with libcurl (SigV4 via CURLOPT_AWS_SIGV4,
// path-style URLs ENDPOINT/BUCKET/KEY). Used by the daemon and the integration tests; the
// unit tests of sink and refill use an in-memory fake instead.
//
// Requests: Put sends the payload's SHA-256 as x-amz-content-sha256 (the server verifies
// the body against it); bodiless requests send the SHA-256 of the empty string. GetRange
// sends "Range: bytes=a-b" and accepts only a 206 of exactly `length` bytes (or a 200 of
// exactly `length` bytes when offset is 0); a zero-length range returns no bytes without a
// request. Get refuses (kPermanent, code "TooLarge") an object larger than max_bytes without
// reading it all. List pages through ListObjectsV2 with continuation tokens. ETags are
// returned without their quotes. Keys must be 1..1024 bytes (else kPermanent, no request).
// PUTs keep libcurl's "Expect: 100-continue" but wait only 1 ms for the 100: libcurl 7.88
// signs every header we set, so removing it with "Expect:" breaks SigV4 (rgw: 403).
//
// Errors: classified once by ClassifyFailure (cold/s3_request.h). The client does not retry:
// retry policy (backoff, budgets) belongs to the caller, which sees kTemporary.
// `ambiguous` (failed Put/Delete only) follows IsAmbiguous: true when the connection had been
// established and no 4xx status arrived — a timeout or reset after connecting, a 5xx, a
// truncated reply — because the server may have applied the request. Refused connections,
// DNS failures, connect timeouts and 4xx replies are never ambiguous.
// Messages name the method, bucket and key, the HTTP status, S3 code and message, or curl's
// error; they never contain the secret key (scrubbed even if a server echoed it).
//
// Threads: every method may be called from any thread concurrently. Credentials sit behind
// a mutex and are copied per request; UpdateCredentials affects requests that start after it
// returns. curl easy handles live in a mutex-protected free list (at most
// options.max_idle_handles idle); each request takes one (or makes one), so connections are
// reused across requests and never shared by two transfers at once; the handle of a failed
// PUT is closed rather than reused (its body may be half-read by the server). Never throws.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cold/object_store.h"
#include "cold/s3_options.h"
#include "store/mutex.h"

namespace gpucache::cold {

class CurlHandlePool;  // cold/s3_transfer.h
struct S3Request;
struct S3Reply;

class S3Client final : public ObjectStore {
 public:
  // Validates `options` (Validate, cold/s3_options.h); a bad option is a kPermanent error whose
  // message names the problem. Initializes libcurl once per process. Uses access_key and
  // secret_key as given: the caller applies ApplyEnvironment and LoadCredentialsFile first.
  static ObjectResult<std::unique_ptr<S3Client>> Create(const S3Options& options);
  ~S3Client() override;
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  ObjectResult<Done> Put(std::string_view key, std::span<const uint8_t> body) override;
  ObjectResult<Done> PutHashed(std::string_view key, std::span<const uint8_t> body,
                               std::string_view sha256_hex) override;
  ObjectResult<ObjectMeta> Head(std::string_view key) override;
  ObjectResult<std::vector<uint8_t>> GetRange(std::string_view key, uint64_t offset,
                                              uint64_t length) override;
  // Streams: each piece curl receives goes to `sink` (no buffer of the whole range).
  ObjectResult<Done> GetRangeInto(std::string_view key, uint64_t offset, uint64_t length,
                                  const RangeSink& sink) override;
  ObjectResult<std::vector<uint8_t>> Get(std::string_view key, uint64_t max_bytes) override;
  ObjectResult<Done> Delete(std::string_view key) override;
  ObjectResult<std::vector<ObjectMeta>> List(std::string_view prefix) override;

  // The daemon is stopping: aborts the transfers in flight (within about a second: curl's
  // progress callback) and fails every later request without sending it, each kTemporary with
  // code "Stopped" (ambiguous as any failed Put or Delete that may have reached the server), so
  // a stop never waits out transfer_timeout on a stalled server. Irreversible. Thread-safe.
  void AbortTransfers() { stopping_ = true; }

  // Swaps the credentials for requests that start after this returns (key rotation on
  // SIGHUP). Thread-safe. Empty values are ignored (returns false).
  bool UpdateCredentials(std::string access_key, std::string secret_key);

 private:
  struct Credentials {
    std::string access_key;
    std::string secret_key;
  };

  explicit S3Client(const S3Options& options);
  std::shared_ptr<const Credentials> CurrentCredentials() const;
  // Runs one request with the current credentials; failures (curl or non-2xx) come back
  // as an ObjectError classified by ClassifyFailure, with `ambiguous` per IsAmbiguous when
  // `mutating`. `accept` says which 2xx (or other) statuses count as success.
  ObjectResult<S3Reply> Exchange(const S3Request& request, bool mutating,
                                 bool (*accept)(long status));
  std::string Url(std::string_view key, std::string_view query = {}) const;
  ObjectResult<S3Reply> ExchangeRange(std::string_view key, uint64_t offset, uint64_t length,
                                      const RangeSink* sink);

  S3Options options_;  // access_key/secret_key cleared: credentials_ holds them
  std::string sigv4_;  // "aws:amz:REGION:s3"
  std::unique_ptr<CurlHandlePool> pool_;
  std::atomic<bool> stopping_{false};  // AbortTransfers: set once, never cleared
  mutable Mutex credentials_mu_;
  std::shared_ptr<const Credentials> credentials_ GUARDED_BY(credentials_mu_);
};

}  // namespace gpucache::cold
