// The seal keyring: the cluster secrets the cold tier seals and verifies with (docs/cold-tier.md,
// "Seals and the keyring"; adr/0012).
//
// File format (`[cold] keyring_file`), one setting a line; blank lines and lines starting with
// '#' are ignored; spaces around names and values are trimmed; anything else is an error:
//   current = 2026-12
//   key.2026-12 = <64..128 hex digits: a 32..64-byte cluster secret>
//   key.2026-06 = <hex>            # an older key, still accepted for reads
// `current` names the key new objects are sealed with and must be one of the keys. Every key
// listed verifies seals; a key removed from the file is an unknown key (its objects are
// refused), so remove one only after `gpucachectl cold reseal` has moved everything off it.
//
// The file (or a symlink's target) must be a regular file of at most 64 KiB owned by root or
// the daemon's user with no group or other permission bits (0600 or 0400): whoever reads it
// can seal objects for every tenant.
// Error messages name the file and line, never a secret.
//
// Thread safety: a Keyring is immutable; SealKeys swaps keyrings under a lock (SIGHUP reload).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cold/seal.h"
#include "store/mutex.h"

namespace gpucache::cold {

class Keyring {
 public:
  // nullptr and *error when the text is not a valid keyring.
  static std::shared_ptr<const Keyring> Parse(std::string_view text, std::string* error);
  // Checks the file's type, owner and mode, then parses it.
  static std::shared_ptr<const Keyring> Load(const std::string& path, std::string* error);
  // REQUIRES: valid ids, secrets of 32..64 bytes, `current` among them.
  static std::shared_ptr<const Keyring> Of(std::map<std::string, std::vector<uint8_t>> secrets,
                                           std::string current);

  const std::string& current() const { return current_; }
  bool Has(std::string_view id) const { return secrets_.count(std::string(id)) > 0; }
  std::vector<std::string> ids() const;
  // The tenant's key under key `id`; nullopt when the keyring does not hold `id`.
  std::optional<TenantKey> TenantKeyOf(std::string_view id, std::string_view tenant) const;

  struct Seal {
    std::string key_id;
    SealMac mac{};
  };
  // Seals `message` for `tenant` under the current key.
  Seal SealFor(std::string_view domain, std::string_view tenant,
               std::span<const uint8_t> message) const;
  SealCheck Verify(std::string_view domain, std::string_view tenant,
                   std::span<const uint8_t> message, const Seal& seal) const;

 private:
  std::map<std::string, std::vector<uint8_t>> secrets_;
  std::string current_;
};

// The keyring in use, replaceable at run time (a SIGHUP reload after adding a key).
class SealKeys {
 public:
  explicit SealKeys(std::shared_ptr<const Keyring> keyring) : keyring_(std::move(keyring)) {}
  std::shared_ptr<const Keyring> Get() const {
    MutexLock l(mu_);
    return keyring_;
  }
  void Set(std::shared_ptr<const Keyring> keyring) {
    MutexLock l(mu_);
    keyring_ = std::move(keyring);
  }

 private:
  mutable Mutex mu_;
  std::shared_ptr<const Keyring> keyring_ GUARDED_BY(mu_);
};

}  // namespace gpucache::cold
