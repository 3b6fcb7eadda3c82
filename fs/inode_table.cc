#include "fs/inode_table.h"

#include <algorithm>

namespace gpucache {

InodeTable::InodeTable(std::vector<std::string> tenants) : tenants_(std::move(tenants)) {}

std::optional<Node> InodeTable::FixedLocked(uint64_t ino) const {
  switch (ino) {
    case kRootIno: return Node{NodeKind::kRoot};
    case kControlDirIno: return Node{NodeKind::kControlDir};
    case kStatsIno: return Node{NodeKind::kStatsFile};
    case kEpochIno: return Node{NodeKind::kEpochFile};
    case kCtlIno: return Node{NodeKind::kCtlFile};
    case kQuarantineIno: return Node{NodeKind::kQuarantineFile};
    case kMetricsIno: return Node{NodeKind::kMetricsFile};
    case kConfigIno: return Node{NodeKind::kConfigFile};
    case kCommitIno: return Node{NodeKind::kCommitFile};
  }
  if (ino >= kFirstTenantIno && ino < kFirstTenantIno + tenants_.size()) {
    return Node{NodeKind::kTenant, tenants_[ino - kFirstTenantIno]};
  }
  return std::nullopt;
}

std::optional<uint64_t> InodeTable::FixedIno(const Node& node) const {
  switch (node.kind) {
    case NodeKind::kRoot: return kRootIno;
    case NodeKind::kControlDir: return kControlDirIno;
    case NodeKind::kStatsFile: return kStatsIno;
    case NodeKind::kEpochFile: return kEpochIno;
    case NodeKind::kCtlFile: return kCtlIno;
    case NodeKind::kQuarantineFile: return kQuarantineIno;
    case NodeKind::kMetricsFile: return kMetricsIno;
    case NodeKind::kConfigFile: return kConfigIno;
    case NodeKind::kCommitFile: return kCommitIno;
    case NodeKind::kTenant: {
      auto it = std::lower_bound(tenants_.begin(), tenants_.end(), node.tenant);
      if (it != tenants_.end() && *it == node.tenant) return kFirstTenantIno + (it - tenants_.begin());
      return std::nullopt;
    }
    default: return std::nullopt;
  }
}

std::optional<Node> InodeTable::Get(uint64_t ino) {
  if (ino < kFirstDynamicIno) return FixedLocked(ino);
  MutexLock lock(mu_);
  auto it = by_ino_.find(ino);
  if (it == by_ino_.end()) return std::nullopt;
  return it->second.node;
}

uint64_t InodeTable::Ref(const Node& node, uint64_t region) {
  if (auto fixed = FixedIno(node)) return *fixed;
  MutexLock lock(mu_);
  auto k = by_key_.find(KeyOf(node));
  if (k != by_key_.end()) {
    Entry& e = by_ino_.at(k->second);
    if (region == 0 || e.region == 0 || e.region == region) {
      if (region != 0) e.region = region;
      e.nlookup++;
      return k->second;
    }
    e.unmapped = true;  // another stored block under the name: a new inode for it
    by_key_.erase(k);
  }
  uint64_t ino = next_++;
  by_key_.emplace(KeyOf(node), ino);
  by_ino_[ino] = Entry{node, 1, region};
  return ino;
}

std::optional<uint64_t> InodeTable::Find(const Node& node) {
  if (auto fixed = FixedIno(node)) return fixed;
  MutexLock lock(mu_);
  auto it = by_key_.find(KeyOf(node));
  if (it == by_key_.end()) return std::nullopt;
  return it->second;
}

void InodeTable::Forget(uint64_t ino, uint64_t nlookup) {
  if (ino < kFirstDynamicIno) return;
  MutexLock lock(mu_);
  auto it = by_ino_.find(ino);
  if (it == by_ino_.end()) return;
  it->second.nlookup -= std::min(it->second.nlookup, nlookup);
  if (it->second.nlookup > 0) return;
  auto k = by_key_.find(KeyOf(it->second.node));
  if (k != by_key_.end() && k->second == ino) by_key_.erase(k);
  by_ino_.erase(it);
}

void InodeTable::Rename(uint64_t ino, const Node& to, uint64_t region) {
  MutexLock lock(mu_);
  auto it = by_ino_.find(ino);
  if (it == by_ino_.end()) return;
  auto k = by_key_.find(KeyOf(it->second.node));
  if (k != by_key_.end() && k->second == ino) by_key_.erase(k);
  it->second.node = to;
  it->second.region = region;
  // A stale inode of an earlier block of that name keeps its number, not the name.
  auto [old, inserted] = by_key_.try_emplace(KeyOf(to), ino);
  if (!inserted && old->second != ino) {
    if (auto o = by_ino_.find(old->second); o != by_ino_.end()) o->second.unmapped = true;
    old->second = ino;
  }
}

std::optional<uint64_t> InodeTable::Unmap(const Node& node, uint64_t keep) {
  if (FixedIno(node)) return std::nullopt;
  MutexLock lock(mu_);
  auto k = by_key_.find(KeyOf(node));
  if (k == by_key_.end()) return std::nullopt;
  uint64_t ino = k->second;
  if (keep != 0) {
    auto it = by_ino_.find(ino);
    if (it != by_ino_.end() && it->second.region == keep) return std::nullopt;
  }
  by_key_.erase(k);
  if (auto it = by_ino_.find(ino); it != by_ino_.end()) it->second.unmapped = true;
  return ino;
}

bool InodeTable::Bind(uint64_t ino, uint64_t region, const BoundAttrs& attrs) {
  MutexLock lock(mu_);
  auto it = by_ino_.find(ino);
  if (it == by_ino_.end() || it->second.unmapped) return false;
  Entry& e = it->second;
  if (e.region != 0 && e.region != region) return false;
  e.region = region;
  if (!e.attrs) e.attrs = attrs;
  return true;
}

std::optional<BoundAttrs> InodeTable::AttrsOf(uint64_t ino) {
  MutexLock lock(mu_);
  auto it = by_ino_.find(ino);
  if (it == by_ino_.end()) return std::nullopt;
  return it->second.attrs;
}

size_t InodeTable::DynamicCount() {
  MutexLock lock(mu_);
  return by_ino_.size();
}

}  // namespace gpucache
