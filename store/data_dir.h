// DataDir: the paths of one data directory's layout (store/file_store.h), built in one place
// instead of by string concatenation at every use.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "store/layout.h"

namespace gpucache {

class DataDir {
 public:
  explicit DataDir(std::string root = {}) : root_(std::move(root)) {}
  const std::string& root() const { return root_; }
  // A file at the top: LOCK, EPOCH, PINS, INDEX, JOURNAL.
  std::string File(std::string_view name) const { return Join(root_, name); }
  std::string Tmp() const { return root_ + "/tmp"; }
  // A reservation's payload.
  std::string Part(uint64_t region) const { return Tmp() + "/" + std::to_string(region) + ".part"; }
  // A block file that could not be unlinked, parked where the next start empties.
  std::string Dropped(uint64_t region) const {
    return Tmp() + "/" + std::to_string(region) + ".dropped";
  }
  std::string Spare() const { return root_ + "/spare"; }
  std::string Blocks() const { return root_ + "/blocks"; }
  std::string Tenant(std::string_view tenant) const { return Join(Blocks(), tenant); }
  std::string Namespace(std::string_view tenant, std::string_view ns) const {
    return Join(Tenant(tenant), ns);
  }
  std::string Block(const BlockAddress& a) const { return Join(Namespace(a.tenant, a.ns), a.block); }
  std::string Quarantine() const { return root_ + "/quarantine"; }
  // Block files a start found damaged, kept for examination (the newest few).
  std::string Damaged() const { return root_ + "/damaged"; }
  std::string Quarantined(uint64_t region) const { return Quarantine() + "/" + std::to_string(region); }
  // The entry `name` of one of the directories above (a name a listing of it returned).
  static std::string In(const std::string& dir, std::string_view name) { return Join(dir, name); }

 private:
  static std::string Join(const std::string& dir, std::string_view name) {
    std::string out;
    out.reserve(dir.size() + 1 + name.size());
    return out.append(dir).append("/").append(name);
  }
  std::string root_;
};

}  // namespace gpucache
