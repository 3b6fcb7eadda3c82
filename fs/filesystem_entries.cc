// Filesystem: lookups, attributes and the entry-changing operations (mkdir, rmdir, unlink,
// rename = commit).
#include <fcntl.h>
#include <limits.h>
#include <fuse_lowlevel.h>
#include <linux/fs.h>
#include <time.h>
#include <unistd.h>

#include "store/clock.h"
#include "fs/filesystem.h"
#include "fs/store_events.h"
#include "store/entry_name.h"

namespace gpucache {
namespace {

constexpr double kPartAttrTimeout = 1.0;  // seconds
// The commit channel's size: past any frame's end, and a sane number in `ls -l` (adr/0022).
constexpr uint64_t kCommitFileSize = uint64_t{1} << 62;

bool IsDynamicTenantNode(NodeKind k) {
  return k == NodeKind::kNamespace || k == NodeKind::kBlock || k == NodeKind::kPart;
}

void SetTime(struct stat& st, uint64_t ns) {
  st.st_mtim.tv_sec = st.st_ctim.tv_sec = st.st_atim.tv_sec = static_cast<time_t>(ns / 1000000000);
  st.st_mtim.tv_nsec = st.st_ctim.tv_nsec = st.st_atim.tv_nsec = static_cast<long>(ns % 1000000000);
}

struct stat MakeAttr(uint64_t ino, mode_t mode, uint32_t uid, uint32_t gid, uint64_t size) {
  struct stat st {};
  st.st_ino = ino;
  st.st_mode = mode;
  st.st_nlink = S_ISDIR(mode) ? 2 : 1;
  st.st_uid = uid;
  st.st_gid = gid;
  st.st_size = static_cast<off_t>(size);
  st.st_blksize = 1 << 20;
  st.st_blocks = static_cast<blkcnt_t>((size + 511) / 512);
  return st;
}

// A tenant's directories as mode bits, for kernel permission checks (adr/0009): its one uid
// other than root owns them, its one group shares them, nobody else may enter. Config
// validation guarantees at most one of each.
struct TenantMode {
  uint32_t uid = 0, gid = 0;
  mode_t mode = 0700;
};
TenantMode TenantModeOf(const TenantConfig& t, mode_t owner_bits = 0700) {
  TenantMode m;
  for (uint32_t u : t.uids) {
    if (u != 0) m.uid = u;
  }
  m.mode = owner_bits;
  if (!t.gids.empty()) {
    m.gid = t.gids[0];
    m.mode |= owner_bits >> 3;
  }
  return m;
}

// The root and everything in .gpucache/ (the control and commit files included, though anyone
// may write them): nobody changes their attributes or xattrs.
bool IsRootOwnedVirtual(NodeKind k) {
  return k == NodeKind::kRoot || k == NodeKind::kControlDir || k == NodeKind::kStatsFile ||
         k == NodeKind::kEpochFile || k == NodeKind::kQuarantineFile || k == NodeKind::kMetricsFile ||
         k == NodeKind::kConfigFile || k == NodeKind::kCtlFile || k == NodeKind::kCommitFile;
}

}  // namespace

std::vector<std::string> TenantNames(const Config& config) {
  std::vector<std::string> names;
  for (const TenantConfig& t : config.tenants) names.push_back(t.name);
  return names;
}

Filesystem::Filesystem(const Config& config, BlockStore& store)
    : config_(config),
      effective_(std::make_shared<const Config>(config)),
      access_(config),
      store_(store),
      inodes_(TenantNames(config)),
      control_(store, access_),
      mount_time_ns_(static_cast<uint64_t>(time(nullptr)) * 1000000000ull) {
  metrics_.SetLimitsSource([this] { return ResourceLimitsOf(*effective_.load()); });
  // Holds nothing of this Filesystem: the store may outlive it.
  store_.SetAutomaticFenceObserver(LogAutomaticFence);
  store_.SetBackingReadErrorObserver(LogBackingReadError);
}

Result<Node> Filesystem::Resolve(const Principal& c, uint64_t ino) {
  std::optional<Node> n = inodes_.Get(ino);
  if (!n) return StatusCode::kNotFound;
  if (!n->tenant.empty()) Metrics::NoteTenant(n->tenant);  // refusals are counted by tenant
  if ((n->kind == NodeKind::kTenant || IsDynamicTenantNode(n->kind)) &&
      !access_.MayUseTenant(c, n->tenant)) {
    return StatusCode::kAccessDenied;
  }
  return *n;
}

Result<AttrReply> Filesystem::AttrOf(uint64_t ino, const Node& n) {
  Result<AttrReply> a = NodeAttr(ino, n);
  if (a.ok() && n.kind != NodeKind::kBlock && n.kind != NodeKind::kPart && n.kind != NodeKind::kNamespace) {
    SetTime(a->attr, mount_time_ns_);
  }
  return a;
}

StatusCode Filesystem::SameBlock(uint64_t ino, const IndexedBlock& b) {
  if (ino == 0) return StatusCode::kOk;
  const BoundAttrs attrs{b.size, b.owner.uid, b.owner.gid, b.commit_time_ns};
  return inodes_.Bind(ino, b.region_id, attrs) ? StatusCode::kOk : StatusCode::kStale;
}

AttrReply Filesystem::BlockAttr(uint64_t ino, const Node& n, const BlockInfo& b) {
  AttrReply a{FileAttr(ino, NodeKind::kBlock, n.tenant, b.owner, b.size), config_.entry_timeout};
  SetTime(a.attr, b.commit_time_ns);
  return a;
}

Result<AttrReply> Filesystem::NodeAttr(uint64_t ino, const Node& n) {
  const double long_ttl = config_.entry_timeout;
  switch (n.kind) {
    case NodeKind::kRoot: return AttrReply{MakeAttr(ino, S_IFDIR | 0755, 0, 0, 0), long_ttl};
    case NodeKind::kControlDir: return AttrReply{MakeAttr(ino, S_IFDIR | 0555, 0, 0, 0), long_ttl};
    case NodeKind::kStatsFile:
    case NodeKind::kEpochFile:
    case NodeKind::kQuarantineFile:
    case NodeKind::kMetricsFile: return AttrReply{MakeAttr(ino, S_IFREG | 0444, 0, 0, 0), long_ttl};
    // The effective configuration: admins only (with kernel checks admins are root).
    case NodeKind::kConfigFile: return AttrReply{MakeAttr(ino, S_IFREG | 0400, 0, 0, 0), long_ttl};
    case NodeKind::kCtlFile: return AttrReply{MakeAttr(ino, S_IFREG | 0666, 0, 0, 0), long_ttl};
    // Write-only for everyone (the daemon authorizes each frame by its writer). Its size says
    // no frame write ever passes its end: the kernel runs writes past a file's end one at a time
    // per inode, and writes of different commits through this one file must run side by side.
    case NodeKind::kCommitFile:
      return AttrReply{MakeAttr(ino, S_IFREG | 0222, 0, 0, kCommitFileSize), long_ttl};
    case NodeKind::kTenant: {
      std::optional<TenantConfig> t = access_.Tenant(n.tenant);  // as of the last reload
      if (!t) return StatusCode::kNotFound;
      if (config_.KernelPermissions()) {
        TenantMode m = TenantModeOf(*t);
        return AttrReply{MakeAttr(ino, S_IFDIR | m.mode, m.uid, m.gid, 0), long_ttl};
      }
      uint32_t uid = t->uids.empty() ? 0 : t->uids[0], gid = t->gids.empty() ? 0 : t->gids[0];
      return AttrReply{MakeAttr(ino, S_IFDIR | 0770, uid, gid, 0), 0};  // re-checked per walk
    }
    case NodeKind::kNamespace: {
      Result<NamespaceInfo> o = store_.StatNamespace(n.tenant, n.ns);
      if (!o.ok()) return o.status();
      AttrReply a{MakeAttr(ino, S_IFDIR | 0770, o->owner.uid, o->owner.gid, 0), long_ttl};
      if (auto t = config_.KernelPermissions() ? access_.Tenant(n.tenant) : std::nullopt) {
        // Every member, not only its creator, may commit in it: the tenant's mode bits.
        TenantMode m = TenantModeOf(*t);
        a.attr = MakeAttr(ino, S_IFDIR | m.mode, m.uid, m.gid, 0);
      }
      // Changes through the mount invalidate the kernel's copy (it drops a directory's
      // attributes on create, rename and unlink in it; an eviction's entry invalidation too).
      SetTime(a.attr, o->change_time_ns != 0 ? o->change_time_ns : mount_time_ns_);
      return a;
    }
    case NodeKind::kBlock: {
      Result<BlockInfo> b = store_.StatAttributes({n.tenant, n.ns, n.block});
      if (!b.ok()) return b.status();
      if (StatusCode s = SameBlock(ino, b.value()); s != StatusCode::kOk) return s;
      return BlockAttr(ino, n, b.value());
    }
    case NodeKind::kPart: {
      // Gone, or fenced since the caller found it (a LOOKUP asks first): what a vanished
      // `.part` answers, so that a fenced writer's rename hears ESTALE from its lookup too.
      const BlockAddress address{n.tenant, n.ns, n.block};
      auto id = store_.FindReservation(address);
      if (!id) return PartGone(address);
      Result<ReservationInfo> r = store_.StatReservation(*id);
      if (!r.ok()) return PartGone(address);
      // The entry is never cached (every walk revalidates it, so a fenced .part says ESTALE),
      // but its attributes may be for a moment: with kernel permission checks an expired
      // attribute costs a GETATTR round trip per check (the identity setxattr, the rename).
      AttrReply a{FileAttr(ino, NodeKind::kPart, n.tenant, r->owner, r->size), kPartAttrTimeout};
      SetTime(a.attr, r->create_time_ns);
      // Writes and truncates move mtime and ctime, as tools that compare times (make, rsync)
      // expect; atime stays the creation.
      a.attr.st_mtim.tv_sec = a.attr.st_ctim.tv_sec = static_cast<time_t>(r->modify_time_ns / 1000000000);
      a.attr.st_mtim.tv_nsec = a.attr.st_ctim.tv_nsec = static_cast<long>(r->modify_time_ns % 1000000000);
      return a;
    }
  }
  return StatusCode::kNotFound;
}

// With kernel permission checks the mode bits only say who may ask: every member may try to
// write a block (pinning is a setxattr, which the kernel allows only with write permission),
// and the daemon answers EPERM or EBUSY exactly as without them (adr/0009). Outsiders never
// get this far: the tenant directory stops them.
struct stat Filesystem::FileAttr(uint64_t ino, NodeKind kind, const std::string& tenant,
                                 Owner owner, uint64_t size) const {
  if (auto t = config_.KernelPermissions() ? access_.Tenant(tenant) : std::nullopt) {
    TenantMode m = TenantModeOf(*t, 0600);
    return MakeAttr(ino, S_IFREG | m.mode, m.uid, m.gid, size);
  }
  return MakeAttr(ino, S_IFREG | (kind == NodeKind::kBlock ? 0444 : 0600), owner.uid, owner.gid, size);
}

StatusCode Filesystem::RefuseChangeIn(const Node& dir) {
  return IsRootOwnedVirtual(dir.kind) ? StatusCode::kAccessDenied : StatusCode::kImmutable;
}

StatusCode Filesystem::CheckName(std::string_view name) {
  return name.size() > NAME_MAX ? StatusCode::kNameTooLong : StatusCode::kOk;
}

EntryReply Filesystem::Entry(const Node& n, const AttrReply& a, double entry_timeout, uint64_t region) {
  EntryReply e;
  e.ino = inodes_.Ref(n, region);
  e.attr = a.attr;
  e.attr.st_ino = e.ino;
  e.attr_timeout = a.timeout;
  e.entry_timeout = entry_timeout;
  return e;
}

Result<EntryReply> Filesystem::Lookup(const Principal& c, uint64_t parent, std::string_view name) {
  Result<Node> dir = Resolve(c, parent);
  if (!dir.ok()) return dir.status();
  if (StatusCode s = CheckName(name); s != StatusCode::kOk) return s;
  Node child;
  double entry_ttl = config_.entry_timeout;
  switch (dir->kind) {
    case NodeKind::kRoot:
      if (name == ".gpucache") {
        child = Node{NodeKind::kControlDir};
      } else if (access_.IsTenant(name)) {
        Metrics::NoteTenant(name);
        if (!access_.MayUseTenant(c, name)) return StatusCode::kAccessDenied;
        child = Node{NodeKind::kTenant, std::string(name)};
        // Daemon permissions: every walk into a tenant comes back here and is checked. Kernel
        // permissions: the kernel checks the tenant directory's mode bits itself.
        if (!config_.KernelPermissions()) entry_ttl = 0;
      } else {
        return StatusCode::kNotFound;
      }
      break;
    case NodeKind::kControlDir:
      if (name == "stats") child = Node{NodeKind::kStatsFile};
      else if (name == "epoch") child = Node{NodeKind::kEpochFile};
      else if (name == "ctl") child = Node{NodeKind::kCtlFile};
      else if (name == "quarantine") child = Node{NodeKind::kQuarantineFile};
      else if (name == "metrics") child = Node{NodeKind::kMetricsFile};
      else if (name == "config") child = Node{NodeKind::kConfigFile};
      else if (name == "commit") child = Node{NodeKind::kCommitFile};
      else return StatusCode::kNotFound;
      break;
    case NodeKind::kTenant:
      if (!store_.StatNamespace(dir->tenant, name).ok()) {
        return EntryReply{0, {}, NegativeTtlInTenant(), 0};
      }
      child = Node{NodeKind::kNamespace, dir->tenant, std::string(name)};
      entry_ttl = EntryTtlInTenant();
      break;
    case NodeKind::kNamespace: return LookupInNamespace(dir.value(), name);
    default: return StatusCode::kInvalidArgument;  // not a directory
  }
  Result<AttrReply> a = AttrOf(inodes_.Find(child).value_or(0), child);
  if (!a.ok()) return a.status();
  return Entry(child, a.value(), entry_ttl);
}

// Daemon permissions: the kernel checks nothing on a walk, so an entry it caches inside a
// tenant would answer a process whose working directory is there (after a setuid, or a member
// removed by a reload) without asking the daemon, hit or miss: a side channel between tenants
// (issue 29). Those entries are not cached; every walk inside a tenant comes to the daemon,
// which checks the caller. Kernel permissions: the tenant directory's mode bits stop outsiders
// in the kernel, and entries are cached for entry_timeout.
double Filesystem::EntryTtlInTenant() const { return config_.KernelPermissions() ? config_.entry_timeout : 0; }
double Filesystem::NegativeTtlInTenant() const {
  return config_.KernelPermissions() ? config_.negative_timeout : 0;
}

Result<EntryReply> Filesystem::LookupInNamespace(const Node& dir, std::string_view name) {
  const EntryReply miss{0, {}, NegativeTtlInTenant(), 0};
  auto [block_name, part] = ParseEntryName(name);
  std::string block(block_name);
  if (!IsValidBlockName(block)) return miss;
  BlockAddress address{dir.tenant, dir.ns, block};
  if (part) {
    if (!store_.FindReservation(address)) {
      // Never cached. For one reservation lease after a fence the name answers ESTALE, so
      // that the fenced writer's rename (the kernel looks the name up first) says why; then
      // the block can be filled again.
      return PartGone(address);
    }
    Node child{NodeKind::kPart, dir.tenant, dir.ns, block};
    Result<AttrReply> a = AttrOf(0, child);
    if (!a.ok()) return a.status();
    return Entry(child, a.value(), 0);
  }
  Result<BlockInfo> info = store_.Probe(address);  // counts the hit or miss
  if (!info.ok()) return miss;
  Node child{NodeKind::kBlock, dir.tenant, dir.ns, block};
  // The attributes from the probe's answer: one look in the index per LOOKUP, not two. The
  // inode is the one of this stored block: a new one if the name's inode holds another.
  return Entry(child, BlockAttr(0, child, info.value()), EntryTtlInTenant(), info->region_id);
}

void Filesystem::Forget(uint64_t ino, uint64_t nlookup) { inodes_.Forget(ino, nlookup); }

Result<AttrReply> Filesystem::GetAttr(const Principal& c, uint64_t ino, Handle* h) {
  Result<Node> n = Resolve(c, ino);
  if (!n.ok()) return n.status();
  Result<AttrReply> a = AttrOf(ino, n.value());
  // The attributes an open block handle keeps after its block left the namespace (found
  // corrupt, evicted, invalidated), as an unlinked file keeps them: the kernel asks for them
  // with the handle before a read that reaches the end of the file, and the reader must then
  // hear what the read itself says (EIO for corruption), not ENOENT. Found by the reliability
  // suite (tests/reliability/corruption_test.cc).
  // The same when the name holds another block now (kStale): the handle's block is its own.
  const bool left = a.status() == StatusCode::kNotFound || a.status() == StatusCode::kStale;
  if (left && h && h->kind == Handle::Kind::kBlock && h->reader) {
    const BlockInfo& b = h->reader->info();
    AttrReply kept{FileAttr(ino, NodeKind::kBlock, b.address.tenant, b.owner, b.size), 0};
    SetTime(kept.attr, b.commit_time_ns);
    return kept;
  }
  // An fstat comes without its handle: the inode's own block, as bound at its open.
  if (a.status() == StatusCode::kStale) {
    if (std::optional<BoundAttrs> b = inodes_.AttrsOf(ino)) {
      AttrReply kept{FileAttr(ino, NodeKind::kBlock, n->tenant, Owner{b->uid, b->gid}, b->size), 0};
      SetTime(kept.attr, b->commit_time_ns);
      return kept;
    }
  }
  return a;
}

Result<AttrReply> Filesystem::SetAttr(const Principal& c, uint64_t ino, const struct stat& attr,
                                      int to_set) {
  Result<Node> n = Resolve(c, ino);
  if (!n.ok()) return n.status();
  if (IsRootOwnedVirtual(n->kind)) {
    // What the kernel answers a non-owner of a root-owned, read-only node: EPERM for changes
    // only the owner may make, EACCES for those that need write permission.
    bool owner_only = to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID |
                                ((to_set & FUSE_SET_ATTR_ATIME_NOW) ? 0 : FUSE_SET_ATTR_ATIME) |
                                ((to_set & FUSE_SET_ATTR_MTIME_NOW) ? 0 : FUSE_SET_ATTR_MTIME));
    return owner_only ? StatusCode::kImmutable : StatusCode::kAccessDenied;
  }
  if (n->kind != NodeKind::kPart) return StatusCode::kImmutable;
  if (to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
    return StatusCode::kImmutable;
  }
  if (to_set & FUSE_SET_ATTR_SIZE) {
    BlockAddress address{n->tenant, n->ns, n->block};
    Result<ReservationId> id = OwnFill(c, address);
    if (!id.ok()) return id.status();
    if (StatusCode s = store_.Truncate(id.value(), static_cast<uint64_t>(attr.st_size)); s != StatusCode::kOk) {
      return FillAnswer(s, address);
    }
  }
  return AttrOf(ino, n.value());  // times are accepted and ignored: touch works on a .part
}

StatusCode Filesystem::Access(const Principal& c, uint64_t ino, int mask) {
  Result<Node> n = Resolve(c, ino);
  if (!n.ok()) return n.status();
  bool read_only = n->kind == NodeKind::kBlock || n->kind == NodeKind::kStatsFile ||
                   n->kind == NodeKind::kEpochFile || n->kind == NodeKind::kQuarantineFile ||
                   n->kind == NodeKind::kMetricsFile || n->kind == NodeKind::kConfigFile ||
                   n->kind == NodeKind::kControlDir;
  if ((mask & W_OK) && read_only) return StatusCode::kAccessDenied;
  if ((mask & R_OK) && n->kind == NodeKind::kCommitFile) return StatusCode::kAccessDenied;  // 0222
  // The effective configuration is the admins' (0400, and its open refuses anyone else): access
  // says so too, or a tool that asks first is told it may read it (review, 2026-12-07).
  if (n->kind == NodeKind::kConfigFile && (mask & R_OK) && !access_.IsAdmin(c)) return StatusCode::kAccessDenied;
  return StatusCode::kOk;
}

Result<EntryReply> Filesystem::MkDir(const Principal& c, uint64_t parent, std::string_view name) {
  Result<Node> dir = Resolve(c, parent);
  if (!dir.ok()) return dir.status();
  if (StatusCode s = CheckName(name); s != StatusCode::kOk) return s;
  if (dir->kind != NodeKind::kTenant) return RefuseChangeIn(dir.value());  // tenants come from config
  if (!IsValidNamespaceName(name)) return StatusCode::kInvalidArgument;
  StatusCode s = store_.CreateNamespace(dir->tenant, name, Owner{c.uid, c.gid});
  if (s != StatusCode::kOk) return s;
  Node child{NodeKind::kNamespace, dir->tenant, std::string(name)};
  Result<AttrReply> a = AttrOf(0, child);
  if (!a.ok()) return a.status();
  return Entry(child, a.value(), EntryTtlInTenant());
}

StatusCode Filesystem::RmDir(const Principal& c, uint64_t parent, std::string_view name) {
  Result<Node> dir = Resolve(c, parent);
  if (!dir.ok()) return dir.status();
  if (StatusCode s = CheckName(name); s != StatusCode::kOk) return s;
  if (dir->kind != NodeKind::kTenant) return RefuseChangeIn(dir.value());
  return store_.RemoveNamespace(dir->tenant, name);
}

Result<ReservationId> Filesystem::OwnFill(const Principal& c, const BlockAddress& address) {
  std::optional<uint32_t> uid;
  if (!access_.IsAdmin(c)) uid = c.uid;  // an admin may end or finish anyone's fill
  Result<ReservationId> id = store_.FillFor(address, uid);
  // None, or fenced: the writer must hear ESTALE within a lease of the fence, not that the fill
  // is another's (found by tests/load: EBUSY at the identity's setxattr).
  if (id.status() == StatusCode::kNotFound) return PartGone(address);
  return id;
}

StatusCode Filesystem::FillAnswer(StatusCode s, const BlockAddress& address) {
  return s == StatusCode::kNotFound ? PartGone(address) : s;
}

StatusCode Filesystem::Unlink(const Principal& c, uint64_t parent, std::string_view name) {
  Result<Node> dir = Resolve(c, parent);
  if (!dir.ok()) return dir.status();
  if (StatusCode s = CheckName(name); s != StatusCode::kOk) return s;
  if (dir->kind != NodeKind::kNamespace) return RefuseChangeIn(dir.value());
  auto [block, part] = ParseEntryName(name);
  BlockAddress address{dir->tenant, dir->ns, std::string(block)};
  if (!part) {  // the explicit client invalidation
    StatusCode s = store_.Invalidate(address);
    // Any answer but "no such block" comes after the block left the index (an error then is
    // its removal's durability, with sync_commits): its inode and RAM copy go either way.
    if (s != StatusCode::kNotFound) BlockLeft(address);
    return s;
  }
  Result<ReservationId> id = OwnFill(c, address);
  // Abandoning a fill that a fence already ended: there is nothing left to remove.
  if (id.status() == StatusCode::kFenced) return StatusCode::kNotFound;
  if (!id.ok()) return id.status();
  return store_.Abort(id.value());
}

StatusCode Filesystem::Rename(const Principal& c, uint64_t parent, std::string_view name,
                              uint64_t new_parent, std::string_view new_name, unsigned flags) {
  Result<Node> dir = Resolve(c, parent);
  if (!dir.ok()) return dir.status();
  Result<Node> new_dir = Resolve(c, new_parent);
  if (!new_dir.ok()) return new_dir.status();
  if (StatusCode s = CheckName(name); s != StatusCode::kOk) return s;
  if (StatusCode s = CheckName(new_name); s != StatusCode::kOk) return s;
  if (IsRootOwnedVirtual(dir->kind) || IsRootOwnedVirtual(new_dir->kind)) {
    return StatusCode::kAccessDenied;
  }
  // The only rename gpucache knows is the commit: <block>.part -> <block> in one namespace, plain
  // or RENAME_NOREPLACE (a commit never replaces). No whiteout is made: EINVAL, as filesystems
  // without them answer (it committed the block and ignored the flag: review, 2026-12-07).
  if (flags & RENAME_WHITEOUT) return StatusCode::kInvalidArgument;
  EntryName entry = ParseEntryName(name);
  if (dir->kind != NodeKind::kNamespace || parent != new_parent || (flags & RENAME_EXCHANGE) ||
      !entry.part) {
    return StatusCode::kImmutable;
  }
  std::string block(entry.block);
  if (new_name != block) return StatusCode::kInvalidArgument;  // the identity names the path
  BlockAddress address{dir->tenant, dir->ns, block};
  // A fill fenced by an epoch bump: fenced is not success, and the writer must hear why.
  Result<ReservationId> id = OwnFill(c, address);
  if (!id.ok()) return id.status();
  if (StatusCode s = store_.Commit(id.value()); s != StatusCode::kOk) {
    if (s == StatusCode::kInvalidArgument) LogInvalidCommit(address, id.value());
    return FillAnswer(s, address);
  }
  Node part_node{NodeKind::kPart, dir->tenant, dir->ns, block};
  if (auto ino = inodes_.Find(part_node)) {
    Result<BlockInfo> stored = store_.StatAttributes(address);  // 0: gone already, bound at its open
    inodes_.Rename(*ino, Node{NodeKind::kBlock, dir->tenant, dir->ns, block}, stored.ok() ? stored->region_id : 0);
  }
  if (ram_) ram_->Committed(address);
  return StatusCode::kOk;
}

void Filesystem::LogInvalidCommit(const BlockAddress& address, ReservationId id) {
  LogLimiter* limiter;
  {
    MutexLock lock(invalid_log_mu_);
    auto& l = invalid_log_[address.tenant];
    if (!l) l = std::make_unique<LogLimiter>(std::chrono::seconds(1));
    limiter = l.get();
  }
  if (!limiter->Allow()) return;
  spdlog::warn("commit of {} refused (EINVAL): {} ({} more refused in this tenant since the last report)",
               address.RelativePath(), store_.ExplainInvalidCommit(id), limiter->Suppressed());
}

StatusCode Filesystem::RefuseNewEntry(const Principal& c, uint64_t parent, std::string_view name) {
  Result<Node> dir = Resolve(c, parent);
  if (!dir.ok()) return dir.status();
  if (StatusCode s = CheckName(name); s != StatusCode::kOk) return s;
  return RefuseChangeIn(dir.value());
}

// A `.part` whose reservation is gone: ESTALE while it was fenced less than a lease ago (its
// writer must hear the fence at its next step, adr/0006), else ENOENT.
StatusCode Filesystem::PartGone(const BlockAddress& address) {
  return store_.RecentlyFenced(address, LeaseNowNs()) ? StatusCode::kFenced : StatusCode::kNotFound;
}

}  // namespace gpucache
