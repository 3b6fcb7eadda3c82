#include "cold/s3_transfer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "cold/digest.h"
#include "cold/s3_request.h"
#include "cold/s3_xml.h"

namespace gpucache::cold {
namespace {

constexpr uint64_t kMaxErrorBody = 64 * 1024;       // error XML kept for Code/Message
constexpr uint64_t kMaxReserve = 64 * 1024 * 1024;  // up-front reservation cap

bool IsSuccess(long status) {
  return status >= 200 && status < 300;
}

// Per-transfer state shared with the curl callbacks, which must not throw.
struct Transfer {
  CURL* handle = nullptr;
  S3Reply* reply = nullptr;
  bool want_body = false;
  uint64_t max_body = 0;
  std::span<const uint8_t> upload;
  size_t upload_pos = 0;
  const std::function<bool(uint64_t, std::span<const uint8_t>)>* sink = nullptr;
  const std::atomic<bool>* stop = nullptr;
};

bool Append(S3Reply& reply, const char* data, size_t bytes) {
  try {
    // As bytes, not chars: inserting a char range into a vector<uint8_t> converts element by
    // element instead of one memmove (it showed as 8% of a refilling daemon's CPU).
    const auto* p = reinterpret_cast<const uint8_t*>(data);
    reply.body.insert(reply.body.end(), p, p + bytes);
    return true;
  } catch (...) {
    reply.out_of_memory = true;
    return false;
  }
}

size_t WriteBody(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t bytes = size * count;
  long status = 0;
  curl_easy_getinfo(t->handle, CURLINFO_RESPONSE_CODE, &status);
  std::vector<uint8_t>& body = t->reply->body;
  if (!IsSuccess(status)) {  // error body: keep its head for Code/Message, drain the rest
    size_t room = body.size() < kMaxErrorBody ? kMaxErrorBody - body.size() : 0;
    return Append(*t->reply, data, std::min(bytes, room)) ? bytes : 0;
  }
  if (!t->want_body) return bytes;
  uint64_t& received = t->reply->body_bytes;
  if (received == 0) {
    curl_off_t announced = -1;
    curl_easy_getinfo(t->handle, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &announced);
    if (announced > 0 && static_cast<uint64_t>(announced) > t->max_body) {
      t->reply->too_large = true;
      return 0;  // aborts the transfer with CURLE_WRITE_ERROR
    }
    try {
      if (!t->sink) body.reserve(std::min<uint64_t>(announced > 0 ? announced : 0, kMaxReserve));
    } catch (...) {
    }
  }
  if (received + bytes > t->max_body) {
    t->reply->too_large = true;
    return 0;
  }
  if (t->sink) {
    bool taken = false;
    try {
      taken = (*t->sink)(received, {reinterpret_cast<const uint8_t*>(data), bytes});
    } catch (...) {
    }
    if (!taken) {
      t->reply->sink_refused = true;
      return 0;
    }
    received += bytes;
    return bytes;
  }
  if (!Append(*t->reply, data, bytes)) return 0;
  received += bytes;
  return bytes;
}

size_t ReadBody(char* buffer, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = std::min(size * count, t->upload.size() - t->upload_pos);
  if (n > 0) std::memcpy(buffer, t->upload.data() + t->upload_pos, n);
  t->upload_pos += n;
  return n;
}

// curl rewinds the body when it resends (e.g. on a reused connection that turned out dead).
int SeekBody(void* user, curl_off_t offset, int origin) {
  auto* t = static_cast<Transfer*>(user);
  if (origin != SEEK_SET) return CURL_SEEKFUNC_CANTSEEK;
  if (offset < 0 || static_cast<uint64_t>(offset) > t->upload.size()) return CURL_SEEKFUNC_FAIL;
  t->upload_pos = static_cast<size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

// curl calls it about once a second however the transfer stands (connecting, waiting on a
// stalled server) and more often while bytes move; non-zero aborts it (CURLE_ABORTED_BY_CALLBACK).
int StopWhenAsked(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  if (!t->stop->load(std::memory_order_relaxed)) return 0;
  t->reply->stopped = true;
  return 1;
}

std::string HeaderValue(CURL* handle, const char* name) {
  curl_header* header = nullptr;
  if (curl_easy_header(handle, name, 0, CURLH_HEADER, -1, &header) != CURLHE_OK) return "";
  return header->value;
}

// Headers we add. libcurl 7.88 signs every one of them (and uses our x-amz-content-sha256
// as the payload hash) but adds no x-amz-content-sha256 itself.
curl_slist* BuildHeaders(const S3Request& request) {
  std::string sha = "x-amz-content-sha256: " +
                    (request.body.empty()                    ? std::string(kEmptySha256)
                     : !request.body_sha256_hex.empty() ? request.body_sha256_hex
                                                              : Sha256Hex(request.body));
  curl_slist* headers = curl_slist_append(nullptr, sha.c_str());
  if (headers != nullptr && !request.range.empty()) {
    std::string range = "Range: " + request.range;
    curl_slist* more = curl_slist_append(headers, range.c_str());
    if (more == nullptr) {
      curl_slist_free_all(headers);
      return nullptr;
    }
    headers = more;
  }
  return headers;
}

void Configure(CURL* h, const S3Request& request, const S3Signer& signer, const S3Options& options,
               curl_slist* headers, Transfer& transfer, char* error_buffer) {
  curl_easy_setopt(h, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  // No CURLOPT_PATH_AS_IS: libcurl 8 refuses it with SigV4, and no key has a dot segment
  // (CheckKey refuses them), which is all it kept.
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);    // threads: no SIGALRM for DNS timeouts
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options.connect_timeout_ms));
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(options.transfer_timeout_ms));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(options.low_speed_bytes));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(options.low_speed_time_s));
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_AWS_SIGV4, signer.sigv4.c_str());
  curl_easy_setopt(h, CURLOPT_USERNAME, signer.access_key.c_str());
  curl_easy_setopt(h, CURLOPT_PASSWORD, signer.secret_key.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, WriteBody);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &transfer);
  if (transfer.stop != nullptr) {
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, StopWhenAsked);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &transfer);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  }
  std::string_view method = request.method;
  if (method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (method == "PUT") {
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, ReadBody);
    curl_easy_setopt(h, CURLOPT_READDATA, &transfer);
    curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, SeekBody);
    curl_easy_setopt(h, CURLOPT_SEEKDATA, &transfer);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
    // libcurl 7.88 signs every header we pass, so the usual "Expect:" (which removes the
    // header) would be signed but not sent, and rgw answers SignatureDoesNotMatch. Instead
    // curl's "Expect: 100-continue" stays and its wait is cut to ~nothing (no round trip);
    // the cost is that a refused PUT's connection is not reused (S3Reply::reusable).
    curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS, 1L);
  } else if (method != "GET") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method);
  }
}

}  // namespace

CurlHandlePool::~CurlHandlePool() {
  for (CURL* h : idle_) curl_easy_cleanup(h);
}

CURL* CurlHandlePool::Acquire() {
  {
    MutexLock lock(mu_);
    if (!idle_.empty()) {
      CURL* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void CurlHandlePool::Release(CURL* handle) {
  {
    MutexLock lock(mu_);
    if (idle_.size() < max_idle_) {
      try {
        idle_.push_back(handle);
        return;
      } catch (...) {
      }
    }
  }
  curl_easy_cleanup(handle);
}

S3Reply PerformS3Request(CURL* h, const S3Request& request, const S3Signer& signer,
                         const S3Options& options, const std::atomic<bool>* stop) {
  S3Reply reply;
  Transfer transfer{h, &reply, request.want_body, request.max_body, request.body, 0, request.body_sink, stop};
  curl_slist* headers = BuildHeaders(request);
  if (headers == nullptr) {
    reply.curl = CURLE_OUT_OF_MEMORY;
    return reply;
  }
  char error_buffer[CURL_ERROR_SIZE] = {};
  curl_easy_reset(h);  // keeps the connection and DNS caches
  Configure(h, request, signer, options, headers, transfer, error_buffer);
  reply.curl = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &reply.status);
  curl_off_t pretransfer_us = 0, length = -1;
  long request_bytes = 0;
  curl_easy_getinfo(h, CURLINFO_PRETRANSFER_TIME_T, &pretransfer_us);
  curl_easy_getinfo(h, CURLINFO_REQUEST_SIZE, &request_bytes);
  curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
  if (reply.status < 200) reply.status = 0;  // an interim 100 Continue only
  reply.connected = reply.status != 0 || request_bytes > 0 || pretransfer_us > 0;
  bool failed = reply.curl != CURLE_OK || !IsSuccess(reply.status);
  reply.reusable = !(failed && std::string_view(request.method) == "PUT");
  reply.content_length = length;
  if (reply.status != 0) {
    reply.etag = UnquoteEtag(HeaderValue(h, "ETag"));
    // libcurl's own date parser (RFC 1123 and the older HTTP forms); -1 when it is none.
    std::string modified = HeaderValue(h, "Last-Modified");
    time_t t = modified.empty() ? -1 : curl_getdate(modified.c_str(), nullptr);
    reply.last_modified_unix_s = t > 0 ? static_cast<uint64_t>(t) : 0;
    reply.content_range = HeaderValue(h, "Content-Range");
  }
  reply.curl_detail = error_buffer;
  // Nothing of this request may outlive the call on the pooled handle.
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, nullptr);
  curl_slist_free_all(headers);
  return reply;
}

}  // namespace gpucache::cold
