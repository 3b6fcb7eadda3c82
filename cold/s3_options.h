// S3Options: where the cold tier's bucket is and how to reach it.
//
// Sources, later ones overriding earlier ones (the daemon applies them in this order):
//   1. the configuration file ([cold], common/cold_options.h);
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

#include <string>

#include "common/cold_options.h"  // S3Options

namespace gpucache::cold {

// "" when usable, else what is wrong (names the field, never echoes a key).
std::string Validate(const S3Options& options);

// Overlays the GPUCACHE_S3_* variables that are set (and non-empty) onto `options`.
void ApplyEnvironment(S3Options& options);

// Reads options.credentials_file (if set) into access_key/secret_key. Returns "" on success
// or nothing to do, else an error naming the file and line (never the line's contents).
std::string LoadCredentialsFile(S3Options& options);

// Whether `name` follows the S3 bucket naming rules.
bool IsValidBucketName(const std::string& name);

}  // namespace gpucache::cold
