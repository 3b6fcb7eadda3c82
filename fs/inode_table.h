// Inode numbers for the namespace the kernel sees.
//
// Fixed numbers for the root, the control directory and its files, and each configured tenant
// (16 + its index in name order). Namespaces, blocks and reservations get numbers on first
// lookup, counted as the kernel counts them (nlookup), and are dropped when the kernel forgets
// them. Numbers are never reused within a mount.
//
// Thread safety: all methods are safe to call concurrently (one internal mutex).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "store/mutex.h"

namespace gpucache {

enum class NodeKind : uint8_t {
  kRoot,
  kControlDir,  // .gpucache/
  kStatsFile,   // .gpucache/stats
  kEpochFile,   // .gpucache/epoch
  kCtlFile,     // .gpucache/ctl
  kQuarantineFile,  // .gpucache/quarantine
  kMetricsFile,     // .gpucache/metrics
  kConfigFile,      // .gpucache/config
  kCommitFile,      // .gpucache/commit (adr/0022)
  kTenant,
  kNamespace,
  kBlock,       // committed block: <block>
  kPart,        // reservation: <block>.part
};

struct Node {
  NodeKind kind = NodeKind::kRoot;
  std::string tenant;
  std::string ns;
  std::string block;  // block name, without ".part"

  bool operator==(const Node&) const = default;
  auto Key() const { return std::tie(kind, tenant, ns, block); }
};

inline constexpr uint64_t kRootIno = 1;
inline constexpr uint64_t kControlDirIno = 2;
inline constexpr uint64_t kStatsIno = 3;
inline constexpr uint64_t kEpochIno = 4;
inline constexpr uint64_t kCtlIno = 5;
inline constexpr uint64_t kQuarantineIno = 6;
inline constexpr uint64_t kMetricsIno = 7;
inline constexpr uint64_t kConfigIno = 8;
inline constexpr uint64_t kCommitIno = 9;
inline constexpr uint64_t kFirstTenantIno = 16;
inline constexpr uint64_t kFirstDynamicIno = 1 << 20;

class InodeTable {
 public:
  explicit InodeTable(std::vector<std::string> tenants);  // REQUIRES: sorted

  std::optional<Node> Get(uint64_t ino);
  // The inode of `node`, allocated if needed; counts one kernel lookup for dynamic nodes.
  uint64_t Ref(const Node& node);
  // The inode of `node` if the kernel knows it; no reference is taken.
  std::optional<uint64_t> Find(const Node& node);
  void Forget(uint64_t ino, uint64_t nlookup);
  // A reservation became a committed block: the same inode now names the block.
  void Rename(uint64_t ino, const Node& to);
  // `node` left the namespace (a block evicted, invalidated, quarantined): its name no longer
  // leads to its inode, so the next block committed under the name gets a new inode and none
  // of the old one's cached pages. The inode stays for the kernel's references (an open file)
  // until it is forgotten. Returns the inode the name had, if any.
  std::optional<uint64_t> Unmap(const Node& node);
  // Whether the kernel may keep the pages it cached for `ino`: false if its last open served
  // another stored block than `region` (a name that came back as another block while the
  // kernel still held its old entry); this open's block is recorded.
  bool KeepCache(uint64_t ino, uint64_t region);
  size_t DynamicCount();

 private:
  using Key = std::tuple<NodeKind, std::string, std::string, std::string>;
  static Key KeyOf(const Node& n) { return {n.kind, n.tenant, n.ns, n.block}; }
  std::optional<Node> FixedLocked(uint64_t ino) const;
  std::optional<uint64_t> FixedIno(const Node& node) const;

  struct Entry {
    Node node;
    uint64_t nlookup = 0;
    uint64_t served_region = 0;  // the stored block its last open served (0: none yet)
  };
  const std::vector<std::string> tenants_;
  Mutex mu_;
  uint64_t next_ GUARDED_BY(mu_) = kFirstDynamicIno;
  std::unordered_map<uint64_t, Entry> by_ino_ GUARDED_BY(mu_);
  std::map<Key, uint64_t> by_key_ GUARDED_BY(mu_);
};

}  // namespace gpucache
