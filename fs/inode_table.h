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

// A block inode's attributes as of its binding (InodeTable::Bind): what its stat answers once
// its name holds another block.
struct BoundAttrs {
  uint64_t size = 0;
  uint32_t uid = 0, gid = 0;
  uint64_t commit_time_ns = 0;
};

class InodeTable {
 public:
  explicit InodeTable(std::vector<std::string> tenants);  // REQUIRES: sorted

  std::optional<Node> Get(uint64_t ino);
  // The inode of `node`, allocated if needed; counts one kernel lookup for dynamic nodes.
  // `region`, for a block, is the stored block the lookup found: a name whose inode is bound to
  // another one (the block left and came back, and its Unmap is still to come) gets a new inode.
  uint64_t Ref(const Node& node, uint64_t region = 0);
  // The inode of `node` if the kernel knows it; no reference is taken.
  std::optional<uint64_t> Find(const Node& node);
  void Forget(uint64_t ino, uint64_t nlookup);
  // A reservation became a committed block (stored as `region`, 0 if not known): the same inode
  // now names the block.
  void Rename(uint64_t ino, const Node& to, uint64_t region = 0);
  // `node` left the namespace (a block evicted, invalidated, quarantined): its name no longer
  // leads to its inode, so the next block committed under the name gets a new inode and none
  // of the old one's cached pages. The inode stays for the kernel's references (an open file)
  // until it is forgotten. Returns the inode the name had, if any.
  // `keep`: the stored block the name holds now, if any; an inode bound to it keeps the name.
  std::optional<uint64_t> Unmap(const Node& node, uint64_t keep = 0);
  // Binds a block inode to the stored block an open of its name found: false if the inode's
  // name has left it or it names another stored block (the name came back as another block
  // while the kernel, or a process through /proc/PID/fd, still held the old inode). One inode,
  // one stored block: its page cache and its attributes are never another block's.
  bool Bind(uint64_t ino, uint64_t region, const BoundAttrs& attrs);
  // The attributes of the block `ino` was bound to, if it was.
  std::optional<BoundAttrs> AttrsOf(uint64_t ino);
  size_t DynamicCount();

 private:
  using Key = std::tuple<NodeKind, std::string, std::string, std::string>;
  static Key KeyOf(const Node& n) { return {n.kind, n.tenant, n.ns, n.block}; }
  std::optional<Node> FixedLocked(uint64_t ino) const;
  std::optional<uint64_t> FixedIno(const Node& node) const;

  struct Entry {
    Node node;
    uint64_t nlookup = 0;
    uint64_t region = 0;    // the stored block it names (blocks; 0: not bound yet)
    bool unmapped = false;  // its name leads elsewhere now (Unmap)
    std::optional<BoundAttrs> attrs;  // that block's, once an open or a stat bound it
  };
  const std::vector<std::string> tenants_;
  Mutex mu_;
  uint64_t next_ GUARDED_BY(mu_) = kFirstDynamicIno;
  std::unordered_map<uint64_t, Entry> by_ino_ GUARDED_BY(mu_);
  std::map<Key, uint64_t> by_key_ GUARDED_BY(mu_);
};

}  // namespace gpucache
