#include "store/quarantine_set.h"

namespace gpucache {

bool QuarantineSet::Add(Entry entry) {
  uint64_t region = entry.info.region_id;
  if (by_region_.count(region)) return false;
  if (!Transition(entry.info.state, BlockState::kQuarantined)) return false;
  by_region_.emplace(region, std::move(entry));
  return true;
}

void QuarantineSet::SetStored(uint64_t region_id, std::shared_ptr<StoredPayload> stored) {
  auto it = by_region_.find(region_id);
  if (it == by_region_.end()) return;
  it->second.stored = std::move(stored);
  it->second.moving = false;
}

void QuarantineSet::ReaderClosed(uint64_t region_id) {
  auto it = by_region_.find(region_id);
  if (it != by_region_.end() && it->second.open_readers > 0) it->second.open_readers--;
}

bool QuarantineSet::HoldsAddress(const BlockAddress& address) const {
  for (const auto& [region, e] : by_region_) {
    if (e.info.address == address) return true;
  }
  return false;
}

QuarantineInfo QuarantineSet::InfoOf(uint64_t region_id, const Entry& e) {
  return QuarantineInfo{region_id, e.info.address, e.info.size, e.reason, e.since_epoch, e.open_readers};
}

std::vector<QuarantineInfo> QuarantineSet::List() const {
  std::vector<QuarantineInfo> out;
  out.reserve(by_region_.size());
  for (const auto& [region, e] : by_region_) out.push_back(InfoOf(region, e));
  return out;
}

std::optional<QuarantineInfo> QuarantineSet::Stat(uint64_t region_id) const {
  auto it = by_region_.find(region_id);
  if (it == by_region_.end()) return std::nullopt;
  return InfoOf(region_id, it->second);
}

StatusCode QuarantineSet::TakeDrained(uint64_t region_id, Entry& out) {
  auto it = by_region_.find(region_id);
  if (it == by_region_.end()) return StatusCode::kNotFound;
  if (it->second.open_readers > 0 || it->second.moving) return StatusCode::kBusy;  // a handle, or the move
  out = std::move(it->second);
  by_region_.erase(it);
  MustTransition(out.info.state, BlockState::kAbsent);
  return StatusCode::kOk;
}

std::vector<QuarantineSet::Entry> QuarantineSet::TakeBefore(uint64_t epoch) {
  std::vector<Entry> out;
  for (auto it = by_region_.begin(); it != by_region_.end();) {
    if (it->second.since_epoch >= epoch || it->second.moving) {
      ++it;  // quarantined after that fence (it needs a fence of its own), or still moving
      continue;
    }
    out.push_back(std::move(it->second));
    MustTransition(out.back().info.state, BlockState::kAbsent);
    it = by_region_.erase(it);
  }
  return out;
}

}  // namespace gpucache
