// S3Options: where the cold tier's bucket is and how to reach it.
//
// Sources, later ones overriding earlier ones (the daemon applies them in this order):
//   1. the configuration file (fields below);
//   2. the environment (ApplyEnvironment): GPUCACHE_S3_ENDPOINT, GPUCACHE_S3_BUCKET,
//      GPUCACHE_S3_REGION, GPUCACHE_S3_ACCESS_KEY, GPUCACHE_S3_SECRET_KEY,
//      GPUCACHE_S3_CREDENTIALS_FILE;
//   3. the credentials file, when `credentials_file` is set (LoadCredentialsFile).
// Re-reading 2 and 3 and calling S3Client::UpdateCredentials rotates keys without a restart.
//
// Credentials file format (one key per line; blank lines and lines starting with '#' are
// ignored; spaces around the key and the value are trimmed; other keys are an error):
//   access_key=AKIA...
//   secret_key=...
//
// The secret key is never logged, never put in an error message, and has no ToString().
#pragma once

#include <cstdint>
#include <string>

namespace gpucache::cold {

struct S3Options {
  std::string endpoint;                // "http://host:port" or "https://host"; path-style requests
  std::string bucket;                  // S3 bucket name rules (3-63 chars, lowercase, digits, . -)
  std::string region;                  // SigV4 signing region, e.g. "us-east-1"
  std::string access_key;              // SigV4 access key id
  std::string secret_key;              // SigV4 secret; never logged
  std::string credentials_file;        // optional: overrides access_key/secret_key (format above)
  uint32_t connect_timeout_ms = 2000;  // TCP (+TLS) connect, per request
  uint32_t transfer_timeout_ms = 30000;  // whole request, connect included
  uint32_t low_speed_bytes = 1024;       // a transfer slower than this ...
  uint32_t low_speed_time_s = 10;        // ... for this long is a stall (kTemporary)
  uint32_t list_page_size = 0;           // ListObjectsV2 max-keys; 0 = server default (1000)
  uint32_t max_idle_handles = 16;        // curl handles (and their connections) kept for reuse

  // "" when usable, else what is wrong (names the field, never echoes a key).
  std::string Validate() const;
};

// Overlays the GPUCACHE_S3_* variables that are set (and non-empty) onto `options`.
void ApplyEnvironment(S3Options& options);

// Reads options.credentials_file (if set) into access_key/secret_key. Returns "" on success
// or nothing to do, else an error naming the file and line (never the line's contents).
std::string LoadCredentialsFile(S3Options& options);

// Whether `name` follows the S3 bucket naming rules.
bool IsValidBucketName(const std::string& name);

}  // namespace gpucache::cold
