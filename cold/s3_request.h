// The pure parts of an S3 request, kept apart from the transfer so they can be unit-tested:
// percent-encoding, the canonical query string, URLs, and the one function
// that classifies a failed request (ClassifyFailure) plus the ambiguity rule (IsAmbiguous).
//
// libcurl 7.88 signs (CURLOPT_AWS_SIGV4) the path and query exactly as they appear in the URL,
// so the URL we hand it must already be canonical: every byte but the unreserved ones
// (A-Z a-z 0-9 - _ . ~) is %XX with uppercase hex; '/' is kept in object keys and encoded in
// query values; query parameters are sorted by name and an empty value renders as "name=".
#pragma once

#include <curl/curl.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cold/object_store.h"

namespace gpucache::cold {

// SigV4 URI encoding of `s`; '/' is kept when `keep_slash` (object key paths).
std::string UriEncode(std::string_view s, bool keep_slash);

// The canonical query string: parameters sorted by encoded name (then value), each
// "name=value" with both parts UriEncode'd (slash encoded), joined by '&'. Empty values
// render as "name=" (S3 signs "?uploads" as "uploads=").
using QueryParams = std::vector<std::pair<std::string, std::string>>;
std::string CanonicalQuery(QueryParams params);

// ENDPOINT/BUCKET/KEY (key UriEncode'd with '/' kept) plus "?query" when query is non-empty.
// A trailing '/' on the endpoint is ignored. An empty key addresses the bucket ("/BUCKET").
std::string ObjectUrl(std::string_view endpoint, std::string_view bucket, std::string_view key,
                      std::string_view query = {});

// Sha256Hex (cold/digest.h) of no bytes: the x-amz-content-sha256 of a bodiless request.
inline constexpr std::string_view kEmptySha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// What we know about a failed request: the curl result, the HTTP status if a status line
// arrived (0 otherwise), and the S3 error code from the reply body if there was one.
struct FailureFacts {
  CURLcode curl = CURLE_OK;
  int http_status = 0;
  std::string_view s3_code;
};

// The one classification (see object_store.h):
//   curl transport failures that a retry can cure (timeouts, refused/failed connects, resets,
//   empty or truncated replies, DNS, TLS handshake) -> kTemporary; other curl errors -> kPermanent;
//   S3 code SlowDown/RequestTimeout/InternalError/ServiceUnavailable, HTTP 5xx, 429 -> kTemporary;
//   HTTP 404 (except NoSuchBucket) or code NoSuchKey -> kNotFound; anything else -> kPermanent.
// A curl error with a temporary HTTP status (e.g. a truncated 503) is kTemporary.
ObjectErrorKind ClassifyFailure(const FailureFacts& facts);

// The ambiguity rule for failed Put/Delete: the outcome is unknown when the request may have
// reached the server, i.e. the connection was established (`connected`) and no 4xx status
// arrived (a 4xx means the server refused it). Failures before connecting (refused, DNS,
// connect timeout, bad URL) and 4xx replies are unambiguous.
bool IsAmbiguous(bool connected, int http_status);

// "CURLE_OPERATION_TIMEDOUT" etc. for the codes we classify; "CURLE_<n>" for others.
std::string CurlCodeName(CURLcode code);

// `text` with every occurrence of `secret` (if non-empty) replaced by "***".
std::string ScrubSecret(std::string text, std::string_view secret);

}  // namespace gpucache::cold
