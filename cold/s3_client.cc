#include "cold/s3_client.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "cold/s3_request.h"
#include "cold/s3_transfer.h"
#include "cold/s3_xml.h"

namespace gpucache::cold {
namespace {

constexpr size_t kMaxKeyBytes = 1024;                // S3's limit on key length
// One ListObjectsV2 page: at most 1,000 keys (S3's limit on max-keys) of at most 1,024 bytes,
// about 1.4 MB with their metadata. Its parse builds a tree of about 24 times the bytes for a
// page of empty elements, so the cap is also what one hostile page may cost.
constexpr uint64_t kMaxListBody = 4 * 1024 * 1024;
constexpr size_t kMostKeysPerPage = 1000;
// Pages in a row that say "truncated" yet carry no key. S3 may answer a few (it stops a page at
// a time limit), never an endless run: a server that does would page forever, its tokens never
// repeating on the next page, and the key budget below never reached.
constexpr int kMostPagesWithoutKeys = 16;
// What a listing may hold besides its keys' count: their bytes and their ETags', 512 a key on
// average (the keys gpucache writes are at most about 230 bytes with the default prefix, S3
// allows 1,024; an ETag is 32 to 40).
constexpr uint64_t kListBytesPerKey = 512;

CURLcode GlobalInit() {
  static std::once_flag once;
  static CURLcode result = CURLE_OK;
  std::call_once(once, [] { result = curl_global_init(CURL_GLOBAL_DEFAULT); });
  return result;
}

ObjectError Permanent(std::string code, std::string message) {
  return ObjectError{ObjectErrorKind::kPermanent, 0, std::move(code), std::move(message), false};
}

std::optional<ObjectError> CheckKey(std::string_view key) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return Permanent("InvalidKey", "object key must be 1.." + std::to_string(kMaxKeyBytes) +
                                       " bytes, got " + std::to_string(key.size()));
  }
  // A "." or ".." segment is resolved away by URL handling on the way (libcurl removes it;
  // since 8.x it refuses to sign a path kept as is, CURLOPT_PATH_AS_IS): the request would
  // name another key. gpucache's own keys never have one.
  for (size_t begin = 0; begin <= key.size();) {
    size_t end = std::min(key.find('/', begin), key.size());
    std::string_view segment = key.substr(begin, end - begin);
    if (segment == "." || segment == "..") {
      return Permanent("InvalidKey", "object key has a \".\" or \"..\" segment: " + std::string(key));
    }
    begin = end + 1;
  }
  return std::nullopt;
}

bool Is2xx(long status) {
  return status >= 200 && status < 300;
}
bool Is200(long status) {
  return status == 200;
}
bool Is200Or206(long status) {
  return status == 200 || status == 206;
}

// Turns a failed exchange into the classified, scrubbed ObjectError.
ObjectError MakeError(const S3Request& request, const S3Reply& reply, std::string_view secret,
                      bool mutating) {
  ObjectError error;
  error.http_status = static_cast<int>(reply.status);
  std::string where = std::string(request.method) + " " + request.url + ": ";
  if (reply.too_large) {
    error.kind = ObjectErrorKind::kPermanent;
    error.code = "TooLarge";
    error.message = where + "reply larger than " + std::to_string(request.max_body) + " bytes";
    return error;
  }
  if (reply.sink_refused) {
    error.kind = ObjectErrorKind::kPermanent;
    error.code = "Aborted";
    error.message = where + "the receiver refused the bytes";
    return error;
  }
  if (reply.stopped) {
    error.kind = ObjectErrorKind::kTemporary;
    error.code = "Stopped";
    error.message = where + "aborted: the client is stopping";
    error.ambiguous = mutating && IsAmbiguous(reply.connected, error.http_status);
    return error;
  }
  if (reply.out_of_memory) {
    error.kind = ObjectErrorKind::kTemporary;
    error.code = "OutOfMemory";
    error.message = where + "out of memory while receiving the reply";
    return error;
  }
  std::optional<S3ErrorBody> body;
  if (!reply.body.empty()) {
    body = ParseErrorBody(
        std::string_view(reinterpret_cast<const char*>(reply.body.data()), reply.body.size()));
  }
  std::string s3_code = body ? body->code : "";
  error.kind = ClassifyFailure(FailureFacts{reply.curl, error.http_status, s3_code});
  if (reply.curl != CURLE_OK) {
    error.code = CurlCodeName(reply.curl);
    error.message = where + curl_easy_strerror(reply.curl);
    if (!reply.curl_detail.empty()) error.message += " (" + reply.curl_detail + ")";
    if (reply.status != 0) error.message += " after HTTP " + std::to_string(reply.status);
  } else {
    error.code = s3_code;
    error.message = where + "HTTP " + std::to_string(reply.status);
    if (!s3_code.empty()) error.message += " " + s3_code;
    if (body && !body->message.empty()) error.message += ": " + body->message;
  }
  error.code = ScrubSecret(std::move(error.code), secret);
  error.message = ScrubSecret(std::move(error.message), secret);
  error.ambiguous = mutating && IsAmbiguous(reply.connected, error.http_status);
  return error;
}

}  // namespace

ObjectResult<std::unique_ptr<S3Client>> S3Client::Create(const S3Options& options) {
  if (std::string problem = Validate(options); !problem.empty()) {
    return Permanent("InvalidOptions", problem);
  }
  if (CURLcode init = GlobalInit(); init != CURLE_OK) {
    return Permanent(CurlCodeName(init), "curl_global_init failed");
  }
  return std::unique_ptr<S3Client>(new S3Client(options));
}

S3Client::S3Client(const S3Options& options)
    : options_(options),
      sigv4_("aws:amz:" + options.region + ":s3"),
      pool_(std::make_unique<CurlHandlePool>(options.max_idle_handles)),
      credentials_(std::make_shared<const Credentials>(
          Credentials{options.access_key, options.secret_key})) {
  options_.access_key.clear();
  options_.secret_key.clear();
}

S3Client::~S3Client() = default;

bool S3Client::UpdateCredentials(std::string access_key, std::string secret_key) {
  if (access_key.empty() || secret_key.empty()) return false;
  auto fresh = std::make_shared<const Credentials>(
      Credentials{std::move(access_key), std::move(secret_key)});
  MutexLock lock(credentials_mu_);
  credentials_ = std::move(fresh);
  return true;
}

std::shared_ptr<const S3Client::Credentials> S3Client::CurrentCredentials() const {
  MutexLock lock(credentials_mu_);
  return credentials_;
}

std::string S3Client::Url(std::string_view key, std::string_view query) const {
  return ObjectUrl(options_.endpoint, options_.bucket, key, query);
}

ObjectResult<S3Reply> S3Client::Exchange(const S3Request& request, bool mutating,
                                         bool (*accept)(long status)) {
  if (stopping_) {
    return ObjectError{ObjectErrorKind::kTemporary, 0, "Stopped",
                       std::string(request.method) + " " + request.url + ": not sent: the client is stopping",
                       false};
  }
  std::shared_ptr<const Credentials> credentials = CurrentCredentials();
  CURL* handle = pool_->Acquire();
  if (handle == nullptr) {
    return ObjectError{ObjectErrorKind::kTemporary, 0, "OutOfMemory",
                       std::string(request.method) + " " + request.url + ": curl_easy_init failed",
                       false};
  }
  S3Signer signer{sigv4_, credentials->access_key, credentials->secret_key};
  S3Reply reply = PerformS3Request(handle, request, signer, options_, &stopping_);
  if (reply.reusable) {
    pool_->Release(handle);
  } else {
    pool_->Discard(handle);
  }
  if (reply.curl == CURLE_OK && accept(reply.status)) return reply;
  return MakeError(request, reply, credentials->secret_key, mutating);
}

ObjectResult<Done> S3Client::Put(std::string_view key, std::span<const uint8_t> body) {
  if (auto bad = CheckKey(key)) return *bad;
  S3Request request{.method = "PUT", .url = Url(key), .body = body};
  ObjectResult<S3Reply> reply = Exchange(request, /*mutating=*/true, Is2xx);
  if (!reply.ok()) return reply.error();
  return Done{};
}

ObjectResult<Done> S3Client::PutHashed(std::string_view key, std::span<const uint8_t> body,
                                       std::string_view sha256_hex) {
  if (auto bad = CheckKey(key)) return *bad;
  S3Request request{.method = "PUT", .url = Url(key), .body = body,
                    .body_sha256_hex = std::string(sha256_hex)};
  ObjectResult<S3Reply> reply = Exchange(request, /*mutating=*/true, Is2xx);
  if (!reply.ok()) return reply.error();
  return Done{};
}

ObjectResult<ObjectMeta> S3Client::Head(std::string_view key) {
  if (auto bad = CheckKey(key)) return *bad;
  S3Request request{.method = "HEAD", .url = Url(key)};
  ObjectResult<S3Reply> reply = Exchange(request, /*mutating=*/false, Is200);
  if (!reply.ok()) return reply.error();
  if (reply.value().content_length < 0) {
    return Permanent("MalformedReply", "HEAD " + request.url + ": no Content-Length");
  }
  return ObjectMeta{std::string(key), static_cast<uint64_t>(reply.value().content_length),
                    std::move(reply.value().etag), reply.value().last_modified_unix_s};
}

ObjectResult<std::vector<uint8_t>> S3Client::GetRange(std::string_view key, uint64_t offset,
                                                      uint64_t length) {
  if (length == 0) {
    if (auto bad = CheckKey(key)) return *bad;
    return std::vector<uint8_t>{};
  }
  ObjectResult<S3Reply> reply = ExchangeRange(key, offset, length, nullptr);
  if (!reply.ok()) return reply.error();
  return std::move(reply.value().body);
}

ObjectResult<Done> S3Client::GetRangeInto(std::string_view key, uint64_t offset, uint64_t length,
                                          const RangeSink& sink) {
  if (length == 0) return ObjectStore::GetRangeInto(key, offset, length, sink);
  ObjectResult<S3Reply> reply = ExchangeRange(key, offset, length, &sink);
  if (!reply.ok()) return reply.error();
  return Done{};
}

// A GET of bytes [offset, offset + length), checked: the server honoured the range and sent
// exactly `length` bytes (into the reply's body, or to `sink` as they arrived).
ObjectResult<S3Reply> S3Client::ExchangeRange(std::string_view key, uint64_t offset, uint64_t length,
                                              const RangeSink* sink) {
  if (auto bad = CheckKey(key)) return *bad;
  if (length - 1 > UINT64_MAX - offset) {
    return Permanent("InvalidRange", "range past 2^64 for " + std::string(key));
  }
  uint64_t last = offset + length - 1;
  S3Request request{.method = "GET",
                    .url = Url(key),
                    .range = "bytes=" + std::to_string(offset) + "-" + std::to_string(last),
                    .want_body = true,
                    .max_body = length,
                    .body_sink = sink};
  ObjectResult<S3Reply> result = Exchange(request, /*mutating=*/false, Is200Or206);
  if (!result.ok()) return result.error();
  S3Reply& reply = result.value();
  std::string where = "GET " + request.url + " " + request.range + ": ";
  if (reply.status == 200 && offset != 0) {
    return Permanent("MalformedReply", where + "server ignored the range (HTTP 200)");
  }
  std::string expected_start = "bytes " + std::to_string(offset) + "-";
  if (reply.status == 206 && reply.content_range.rfind(expected_start, 0) != 0) {
    return Permanent("MalformedReply", where + "Content-Range '" + reply.content_range + "'");
  }
  if (reply.body_bytes != length) {
    return Permanent("ShortRange", where + "got " + std::to_string(reply.body_bytes) + " of " +
                                       std::to_string(length) + " bytes");
  }
  return result;
}

ObjectResult<std::vector<uint8_t>> S3Client::Get(std::string_view key, uint64_t max_bytes) {
  if (auto bad = CheckKey(key)) return *bad;
  S3Request request{.method = "GET", .url = Url(key), .want_body = true, .max_body = max_bytes};
  ObjectResult<S3Reply> reply = Exchange(request, /*mutating=*/false, Is200);
  if (!reply.ok()) return reply.error();
  return std::move(reply.value().body);
}

ObjectResult<Done> S3Client::Delete(std::string_view key) {
  if (auto bad = CheckKey(key)) return *bad;
  S3Request request{.method = "DELETE", .url = Url(key)};
  ObjectResult<S3Reply> reply = Exchange(request, /*mutating=*/true, Is2xx);
  if (!reply.ok() && reply.error().kind != ObjectErrorKind::kNotFound) return reply.error();
  return Done{};
}

// A listed key no object under `prefix` could have: refused, as a malformed reply.
bool IsListedKey(std::string_view key, std::string_view prefix) {
  return !key.empty() && key.size() <= kMaxKeyBytes && key.starts_with(prefix);
}

ObjectResult<std::vector<ObjectMeta>> S3Client::List(std::string_view prefix) {
  std::vector<ObjectMeta> objects;
  std::string token;
  uint64_t held_bytes = 0;
  int pages_without_keys = 0;
  while (true) {
    QueryParams params = {{"list-type", "2"}, {"prefix", std::string(prefix)}};
    if (!token.empty()) params.emplace_back("continuation-token", token);
    if (options_.list_page_size > 0) {
      params.emplace_back("max-keys", std::to_string(options_.list_page_size));
    }
    S3Request request{.method = "GET",
                      .url = Url("", CanonicalQuery(std::move(params))),
                      .want_body = true,
                      .max_body = kMaxListBody};
    ObjectResult<S3Reply> reply = Exchange(request, /*mutating=*/false, Is200);
    if (!reply.ok()) return reply.error();
    const std::vector<uint8_t>& body = reply.value().body;
    std::optional<ListPage> page =
        ParseListPage(std::string_view(reinterpret_cast<const char*>(body.data()), body.size()));
    if (!page) return Permanent("MalformedReply", "GET " + request.url + ": malformed XML");
    if (page->truncated && page->next_token == token) {
      return Permanent("MalformedReply", "GET " + request.url + ": continuation token repeats");
    }
    if (page->objects.size() > std::max<size_t>(kMostKeysPerPage, options_.list_page_size)) {
      return Permanent("MalformedReply", "GET " + request.url + ": more keys in a page than max-keys");
    }
    pages_without_keys = page->truncated && page->objects.empty() ? pages_without_keys + 1 : 0;
    if (pages_without_keys > kMostPagesWithoutKeys) {
      return Permanent("MalformedReply", "GET " + request.url + ": " +
                                             std::to_string(pages_without_keys) +
                                             " pages in a row without a key, each saying more follow");
    }
    for (const ObjectMeta& meta : page->objects) {
      if (!IsListedKey(meta.key, prefix)) {
        return Permanent("MalformedReply", "GET " + request.url + ": a listed key of " +
                                               std::to_string(meta.key.size()) +
                                               " bytes that is not a key under the prefix listed");
      }
      held_bytes += meta.key.size() + meta.etag.size();  // both are held
    }
    if (objects.size() + page->objects.size() > options_.list_max_objects ||
        held_bytes > options_.list_max_objects * kListBytesPerKey) {
      return Permanent("ListingTooLarge", "GET " + request.url + ": more than " +
                                              std::to_string(options_.list_max_objects) + " keys (or " +
                                              std::to_string(kListBytesPerKey) +
                                              " bytes a key, with its ETag) under the prefix; refusing to hold them");
    }
    for (ObjectMeta& meta : page->objects) objects.push_back(std::move(meta));
    if (!page->truncated) return objects;
    token = std::move(page->next_token);
  }
}

}  // namespace gpucache::cold
