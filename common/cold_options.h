// The cold tier's options: the [cold] table of the configuration file (docs/configuration.md),
// defined once. fs/config.cc parses it into these fields (and prints them for
// --check-config and .gpucache/config); the daemon hands them as they are to cold/ (S3Client,
// ColdTier). Plain data with no behaviour: checks live with their users (cold/s3_options.h).
//
// Times are in the units the tier uses (milliseconds, nanoseconds); the file gives seconds,
// converted once where they are parsed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

namespace gpucache::cold {

// Where the bucket is and how to reach it (cold/s3_options.h: sources, checks, credentials).
// The keys are never read from the configuration file: they come from credentials_file or the
// GPUCACHE_S3_* environment, and are never printed.
struct S3Options {
  std::string endpoint;                // "http://host:port" or "https://host"; path-style requests
  std::string bucket;                  // S3 bucket name rules (3-63 chars, lowercase, digits, . -)
  std::string region = "us-east-1";    // SigV4 signing region
  std::string access_key;              // SigV4 access key id
  std::string secret_key;              // SigV4 secret; never logged
  std::string credentials_file;        // optional: overrides access_key/secret_key
  uint32_t connect_timeout_ms = 2000;  // TCP (+TLS) connect, per request
  uint32_t transfer_timeout_ms = 30000;  // whole request, connect included
  uint32_t low_speed_bytes = 1024;       // a transfer slower than this ...
  uint32_t low_speed_time_s = 10;        // ... for this long is a stall (kTemporary)
  uint32_t list_page_size = 0;           // ListObjectsV2 max-keys; 0 = server default (1000)
  // The most keys one listing (all its pages) may hold, so that a server that never stops
  // paging cannot take the daemon's memory (about 200 B a key); not a configuration key.
  uint64_t list_max_objects = 10'000'000;
  uint32_t max_idle_handles = 16;        // curl handles (and their connections) kept for reuse
};

struct PackOptions {
  uint64_t target_bytes = 64ull << 20;  // close a pack at this many payload bytes
  size_t max_blocks = 1024;             // or this many blocks (<= kMaxManifestEntries)
  // A full sink: wait up to this long for room (while a drainer uploads) before refusing.
  uint64_t wait_for_room_ms = 0;
};

// The sink's bounds and retry schedule (cold/sink.h).
struct SinkLimits {
  size_t max_jobs = 256;              // pending + in flight + failed
  uint64_t max_bytes = 1ull << 30;    // object + manifest bytes of those jobs
  int max_attempts = 5;               // attempts per job before it is failed
  int concurrency = 4;                // uploads in flight during a drain round
  uint64_t backoff_base_ms = 500;     // delay after the first temporary error ...
  uint64_t backoff_max_ms = 10000;    // ... doubling per attempt up to this
  uint64_t redrive_interval_ms = 30000;  // a temporary failure is re-driven after this; 0: never
  size_t redrive_batch = 64;          // failed jobs re-driven per Redrive() call
  // A job back at its manifest longer than this after its object went up puts the object
  // again first (cold/sink.h, "Orphan sweeps"). Not a configuration key: the orphan sweep's
  // one-hour floor is set against the default; tests lower it.
  uint64_t object_fresh_ms = 600000;
};

enum class WriteBack : uint8_t { kAfterCommit, kManual };

constexpr std::string_view ToString(WriteBack w) {
  return w == WriteBack::kManual ? "manual" : "after-commit";
}

// How the tier runs (cold/tier.h).
struct ColdTierOptions {
  std::string prefix = "gpucache/";       // key prefix in the bucket ("" or ends with '/')
  WriteBack write_back = WriteBack::kAfterCommit;
  PackOptions pack;
  SinkLimits sink;
  uint64_t flush_interval_ms = 2000;      // pack what is queued at least this often
  size_t max_queued_commits = 65536;      // addresses waiting to be packed
  uint64_t refill_budget_bytes = 256ull << 20;  // default and ceiling per refill request
  std::set<std::string> retired_tenants;  // never packed, never refilled
  uint64_t retention_ns = 0;              // each new manifest is kept this long (0: no record)
  size_t refill_workers = 4;              // threads running asynchronous refills
  size_t max_refill_ops = 256;            // refills queued, running or finished and not taken
  bool accept_unsealed = false;           // refill v1 locators / v3 manifests (docs/cold-tier.md)
  size_t known_places = 65536;            // blocks whose pack place this node remembers; 0: off
  // A refill of a block another fill holds (a writer's .part, another refill) waits this long
  // for it, as a single-flight follower: not a configuration key (tests shorten it).
  uint64_t follow_fill_ms = 5000;
};

// [cold] as a whole.
struct ColdOptions {
  bool enabled = false;
  S3Options s3;
  ColdTierOptions tier;
  std::string keyring_file;  // seal keys (required when enabled); re-read on SIGHUP
};

}  // namespace gpucache::cold
