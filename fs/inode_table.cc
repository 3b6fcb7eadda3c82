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

uint64_t InodeTable::Ref(const Node& node) {
  if (auto fixed = FixedIno(node)) return *fixed;
  MutexLock lock(mu_);
  auto [it, inserted] = by_key_.try_emplace(KeyOf(node), next_);
  if (inserted) by_ino_[next_++] = Entry{node, 0};
  by_ino_[it->second].nlookup++;
  return it->second;
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

void InodeTable::Rename(uint64_t ino, const Node& to) {
  MutexLock lock(mu_);
  auto it = by_ino_.find(ino);
  if (it == by_ino_.end()) return;
  auto k = by_key_.find(KeyOf(it->second.node));
  if (k != by_key_.end() && k->second == ino) by_key_.erase(k);
  it->second.node = to;
  by_key_[KeyOf(to)] = ino;  // a stale inode of an earlier block of that name keeps its number
}

std::optional<uint64_t> InodeTable::Unmap(const Node& node) {
  if (FixedIno(node)) return std::nullopt;
  MutexLock lock(mu_);
  auto k = by_key_.find(KeyOf(node));
  if (k == by_key_.end()) return std::nullopt;
  uint64_t ino = k->second;
  by_key_.erase(k);
  return ino;
}

bool InodeTable::KeepCache(uint64_t ino, uint64_t region) {
  MutexLock lock(mu_);
  auto it = by_ino_.find(ino);
  if (it == by_ino_.end()) return false;
  // A first open finds nothing cached: an inode number is never reused within a mount.
  bool same = it->second.served_region == 0 || it->second.served_region == region;
  it->second.served_region = region;
  return same;
}

size_t InodeTable::DynamicCount() {
  MutexLock lock(mu_);
  return by_ino_.size();
}

}  // namespace gpucache
