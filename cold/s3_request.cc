#include "cold/s3_request.h"

#include <algorithm>

namespace gpucache::cold {
namespace {

bool IsUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == '~';
}

bool IsTemporaryCurlCode(CURLcode code) {
  switch (code) {
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:  // DNS blips; a misconfigured name retries to no harm
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:  // handshake cut off
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM: return true;
    default: return false;
  }
}

bool IsTemporaryS3Code(std::string_view code) {
  return code == "SlowDown" || code == "RequestTimeout" || code == "InternalError" ||
         code == "ServiceUnavailable";
}

bool IsTemporaryStatus(int status) {
  return status >= 500 || status == 429;
}

}  // namespace

std::string UriEncode(std::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() * 3);
  for (unsigned char c : s) {
    if (IsUnreserved(c) || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    }
  }
  return out;
}

std::string CanonicalQuery(QueryParams params) {
  for (auto& [name, value] : params) {
    name = UriEncode(name, false);
    value = UriEncode(value, false);
  }
  std::sort(params.begin(), params.end());
  std::string out;
  for (const auto& [name, value] : params) {
    if (!out.empty()) out.push_back('&');
    out += name;
    out.push_back('=');
    out += value;
  }
  return out;
}

std::string ObjectUrl(std::string_view endpoint, std::string_view bucket, std::string_view key,
                      std::string_view query) {
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.remove_suffix(1);
  std::string url(endpoint);
  url.push_back('/');
  url += UriEncode(bucket, false);
  if (!key.empty()) {
    url.push_back('/');
    url += UriEncode(key, true);
  }
  if (!query.empty()) {
    url.push_back('?');
    url += query;
  }
  return url;
}

ObjectErrorKind ClassifyFailure(const FailureFacts& facts) {
  if (facts.curl != CURLE_OK) {
    if (IsTemporaryCurlCode(facts.curl) || IsTemporaryStatus(facts.http_status)) {
      return ObjectErrorKind::kTemporary;
    }
    return ObjectErrorKind::kPermanent;
  }
  if (IsTemporaryS3Code(facts.s3_code) || IsTemporaryStatus(facts.http_status)) {
    return ObjectErrorKind::kTemporary;
  }
  if (facts.s3_code == "NoSuchKey") return ObjectErrorKind::kNotFound;
  if (facts.http_status == 404 && facts.s3_code != "NoSuchBucket") {
    return ObjectErrorKind::kNotFound;
  }
  return ObjectErrorKind::kPermanent;
}

bool IsAmbiguous(bool connected, int http_status) {
  return connected && !(http_status >= 400 && http_status < 500);
}

std::string CurlCodeName(CURLcode code) {
  switch (code) {
    case CURLE_OK: return "CURLE_OK";
    case CURLE_UNSUPPORTED_PROTOCOL: return "CURLE_UNSUPPORTED_PROTOCOL";
    case CURLE_URL_MALFORMAT: return "CURLE_URL_MALFORMAT";
    case CURLE_COULDNT_RESOLVE_HOST: return "CURLE_COULDNT_RESOLVE_HOST";
    case CURLE_COULDNT_CONNECT: return "CURLE_COULDNT_CONNECT";
    case CURLE_PARTIAL_FILE: return "CURLE_PARTIAL_FILE";
    case CURLE_WRITE_ERROR: return "CURLE_WRITE_ERROR";
    case CURLE_READ_ERROR: return "CURLE_READ_ERROR";
    case CURLE_OUT_OF_MEMORY: return "CURLE_OUT_OF_MEMORY";
    case CURLE_OPERATION_TIMEDOUT: return "CURLE_OPERATION_TIMEDOUT";
    case CURLE_SSL_CONNECT_ERROR: return "CURLE_SSL_CONNECT_ERROR";
    case CURLE_ABORTED_BY_CALLBACK: return "CURLE_ABORTED_BY_CALLBACK";
    case CURLE_GOT_NOTHING: return "CURLE_GOT_NOTHING";
    case CURLE_SEND_ERROR: return "CURLE_SEND_ERROR";
    case CURLE_RECV_ERROR: return "CURLE_RECV_ERROR";
    case CURLE_PEER_FAILED_VERIFICATION: return "CURLE_PEER_FAILED_VERIFICATION";
    case CURLE_HTTP2: return "CURLE_HTTP2";
    case CURLE_HTTP2_STREAM: return "CURLE_HTTP2_STREAM";
    case CURLE_WEIRD_SERVER_REPLY: return "CURLE_WEIRD_SERVER_REPLY";
    default: return "CURLE_" + std::to_string(static_cast<int>(code));
  }
}

std::string ScrubSecret(std::string text, std::string_view secret) {
  if (secret.empty()) return text;
  for (size_t at = text.find(secret); at != std::string::npos; at = text.find(secret, at + 3)) {
    text.replace(at, secret.size(), "***");
  }
  return text;
}

}  // namespace gpucache::cold
