#include "cold/s3_options.h"

#include <cstdlib>
#include <optional>
#include <sstream>
#include <string_view>

#include "store/posix_io.h"

namespace gpucache::cold {
namespace {

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

bool LooksLikeIpv4(const std::string& s) {
  int dots = 0;
  for (char c : s) {
    if (c == '.') {
      ++dots;
    } else if (c < '0' || c > '9') {
      return false;
    }
  }
  return dots == 3;
}

void Overlay(const char* variable, std::string& field) {
  const char* value = std::getenv(variable);
  if (value != nullptr && *value != '\0') field = value;
}

}  // namespace

bool IsValidBucketName(const std::string& name) {
  if (name.size() < 3 || name.size() > 63) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
    if (!ok) return false;
  }
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  if (name.find("..") != std::string::npos) return false;
  if (name.find(".-") != std::string::npos || name.find("-.") != std::string::npos) return false;
  if (StartsWith(name, "xn--") || StartsWith(name, "sthree-")) return false;
  if (name.ends_with("-s3alias") || name.ends_with("--ol-s3")) return false;
  return !LooksLikeIpv4(name);
}

std::string Validate(const S3Options& options) {
  const std::string& endpoint = options.endpoint;
  if (!StartsWith(endpoint, "http://") && !StartsWith(endpoint, "https://")) {
    return "s3 endpoint must start with http:// or https://";
  }
  std::string_view rest(endpoint);
  rest.remove_prefix(rest.find("//") + 2);
  if (rest.empty() || rest.front() == '/') return "s3 endpoint has no host";
  if (rest.find_first_of("?#@ ") != std::string_view::npos) {
    return "s3 endpoint must not contain '?', '#', '@' or spaces";
  }
  if (!IsValidBucketName(options.bucket)) {
    return "s3 bucket name does not follow the S3 naming rules";
  }
  if (options.region.empty()) return "s3 region is empty";
  if (options.region.find_first_of(": /") != std::string::npos) {
    return "s3 region contains ':', ' ' or '/'";
  }
  if (options.access_key.empty()) return "s3 access key is empty";
  if (options.secret_key.empty()) return "s3 secret key is empty";
  if (options.connect_timeout_ms == 0) return "s3 connect timeout must be positive";
  if (options.transfer_timeout_ms == 0) return "s3 transfer timeout must be positive";
  return "";
}

void ApplyEnvironment(S3Options& options) {
  Overlay("GPUCACHE_S3_ENDPOINT", options.endpoint);
  Overlay("GPUCACHE_S3_BUCKET", options.bucket);
  Overlay("GPUCACHE_S3_REGION", options.region);
  Overlay("GPUCACHE_S3_ACCESS_KEY", options.access_key);
  Overlay("GPUCACHE_S3_SECRET_KEY", options.secret_key);
  Overlay("GPUCACHE_S3_CREDENTIALS_FILE", options.credentials_file);
}

std::string LoadCredentialsFile(S3Options& options) {
  if (options.credentials_file.empty()) return "";
  const std::string& path = options.credentials_file;
  // Not blocking on a FIFO, not reading /dev/zero forever: a regular file of at most 64 KiB.
  std::string why;
  std::optional<std::string> bytes = ReadSmallRegularFile(path, 64 * 1024, &why);
  if (!bytes) return "cannot read s3 credentials file " + why;
  std::istringstream in(*bytes);
  std::string access, secret, line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::string_view text = Trim(line);
    if (text.empty() || text.front() == '#') continue;
    size_t eq = text.find('=');
    if (eq == std::string_view::npos) {
      return path + " line " + std::to_string(number) +
             ": expected access_key=... or secret_key=...";
    }
    std::string_view name = Trim(text.substr(0, eq));
    std::string_view value = Trim(text.substr(eq + 1));
    if (name == "access_key") {
      access = value;
    } else if (name == "secret_key") {
      secret = value;
    } else {
      return path + " line " + std::to_string(number) +
             ": unknown key (expected access_key or secret_key)";
    }
  }
  if (access.empty() || secret.empty()) {
    return path + ": needs both access_key=... and secret_key=...";
  }
  options.access_key = std::move(access);
  options.secret_key = std::move(secret);
  return "";
}

}  // namespace gpucache::cold
