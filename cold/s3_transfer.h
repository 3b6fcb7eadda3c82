// One S3 HTTP exchange over libcurl, and the pool of easy handles that carries them.
// Internal to the cold tier: S3Client (cold/s3_client.h) builds requests and interprets
// replies; this file only knows how to configure curl, sign, send and collect.
#pragma once

#include <curl/curl.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cold/s3_options.h"
#include "store/mutex.h"

namespace gpucache::cold {

struct S3Request {
  const char* method = "GET";     // GET, PUT, HEAD or DELETE
  std::string url;                // ObjectUrl(...): already canonical
  std::span<const uint8_t> body;  // PUT only; borrowed for the call
  std::string range;              // "bytes=a-b", or empty
  bool want_body = false;         // false: a 2xx body is drained and dropped (PUT, DELETE)
  uint64_t max_body = 0;          // want_body: a longer 2xx body aborts (S3Reply::too_large)
  std::string body_sha256_hex;    // the body's SHA-256 when the caller knows it; else computed
  // want_body: a 2xx body goes here as it arrives (offset within the body) instead of into
  // S3Reply::body, which then stays empty; false aborts (S3Reply::sink_refused). Borrowed.
  const std::function<bool(uint64_t, std::span<const uint8_t>)>* body_sink = nullptr;
};

struct S3Reply {
  CURLcode curl = CURLE_OK;
  long status = 0;            // final status; 0: none arrived (a 100 Continue alone is not one)
  std::vector<uint8_t> body;  // 2xx: the body; otherwise at most 64 KiB of the error body
  std::string etag;           // ETag header, unquoted
  uint64_t last_modified_unix_s = 0;  // Last-Modified header; 0 when absent or unparsable
  std::string content_range;  // Content-Range header, raw
  int64_t content_length = -1;
  bool connected = false;  // the request may have reached the server (see IsAmbiguous)
  // False when the connection must not carry another request: a request with a body that
  // failed. With Expect: 100-continue cut short (see Configure) the body may already be on the
  // wire when the server refuses the request without reading it; rgw then parses that body as
  // the next request on the connection.
  bool reusable = true;
  bool too_large = false;  // aborted: the 2xx body exceeded max_body
  bool sink_refused = false;  // aborted: the body sink returned false
  bool stopped = false;       // aborted: the client is stopping (S3Client::AbortTransfers)
  uint64_t body_bytes = 0;    // 2xx body bytes received (into body, or handed to the sink)
  bool out_of_memory = false;
  std::string curl_detail;  // curl's error buffer; holds no credentials
};

// Who we talk to and as whom; copied per request so credentials can rotate underneath.
struct S3Signer {
  std::string sigv4;  // "aws:amz:REGION:s3"
  std::string access_key;
  std::string secret_key;
};

// A mutex-protected free list of curl easy handles. Each easy handle keeps its own
// connection cache, so reusing handles reuses connections. Thread-safe.
class CurlHandlePool {
 public:
  explicit CurlHandlePool(size_t max_idle) : max_idle_(max_idle) {}
  ~CurlHandlePool();
  CurlHandlePool(const CurlHandlePool&) = delete;
  CurlHandlePool& operator=(const CurlHandlePool&) = delete;

  // An idle handle or a new one; nullptr when curl cannot allocate. Return it with Release.
  CURL* Acquire();
  // Keeps `handle` for reuse unless max_idle handles are already idle.
  void Release(CURL* handle);
  // Closes `handle` and its connections (a connection whose state we cannot trust).
  void Discard(CURL* handle) { curl_easy_cleanup(handle); }

 private:
  const size_t max_idle_;
  Mutex mu_;
  std::vector<CURL*> idle_ GUARDED_BY(mu_);
};

// Runs `request` on `handle` (reset and fully reconfigured first). Never throws. Once `stop`
// (optional, borrowed) is true the transfer is aborted within about a second, whatever it is
// waiting for (connect, a stalled server): S3Reply::stopped.
S3Reply PerformS3Request(CURL* handle, const S3Request& request, const S3Signer& signer,
                         const S3Options& options, const std::atomic<bool>* stop = nullptr);

}  // namespace gpucache::cold
