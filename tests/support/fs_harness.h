// A Filesystem over a MemoryStore, configured through ParseConfig and built as gpucachefs
// builds it (daemon/main.cc), but with no mount: tests call the operations fs/fuse_ops.cc would
// call and look at what it would reply (tests/support/fuse_reply.h).
//
// Callers: acme is uids 0 and 1000 and group 3000 (uid 1001 belongs through it), globex is
// uid 2000, admins are uid 0. That is expressible in mode bits, so both fuse.permissions
// modes accept it.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>

#include <memory>
#include <string>
#include <vector>

#include "fs/config.h"
#include "fs/filesystem.h"
#include "store/memory_store.h"
#include "tests/support/fuse_reply.h"
#include "tests/support/sample_identity.h"

namespace gpucache::test {

inline const Principal kRoot{0, 0, nullptr};            // admin, and a member of acme
inline const Principal kWriter{1000, 1000, nullptr};    // acme by uid: writes the .parts
inline const Principal kMember{1001, 3000, nullptr};    // acme through group 3000
inline const Principal kOutsider{2000, 2000, nullptr};  // globex
inline const Principal kStranger{3001, 3001, nullptr};  // no tenant at all

// Entry and negative timeouts differ, so that a test can tell which one a reply carries.
inline constexpr double kEntryTimeout = 3600;
inline constexpr double kNegativeTimeout = 1800;

// `limits`: lines added to [limits] (e.g. "max_block_bytes = 16").
inline std::string FsConfigText(const std::string& permissions, const std::string& limits = "") {
  const std::string tenants =
      "[admins]\nuids = [0]\n"
      "[tenants.acme]\nuids = [0, 1000]\ngids = [3000]\n"
      "[tenants.globex]\nuids = [2000]\n";
  const std::string fuse = "[fuse]\nentry_timeout = " + std::to_string(kEntryTimeout) +
                           "\nnegative_timeout = " + std::to_string(kNegativeTimeout) +
                           "\npermissions = \"" + permissions + "\"\n";
  return "[limits]\n" + limits + "\n" + tenants + "[metrics]\nlisten = \"\"\n" + fuse;
}

// The store options gpucachefs derives from a configuration (daemon/main.cc).
inline StoreOptions StoreOptionsOf(const Config& config) {
  StoreOptions o;
  o.limits = ResourceLimitsOf(config);
  o.eviction_policy = config.eviction_policy;
  o.reservation_lease_ns = static_cast<uint64_t>(config.reservation_lease * 1e9);
  return o;
}

inline std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// `Store`: a MemoryStore, or a test's own IndexedStore built from StoreOptions alone.
template <typename Store>
struct BasicFsHarness {
  explicit BasicFsHarness(const std::string& permissions = "daemon", const std::string& limits = "")
      : config(ParseConfig(FsConfigText(permissions, limits), "filesystem_test.toml")),
        store(StoreOptionsOf(config)),
        fs(config, store) {}

  Config config;
  Store store;
  Filesystem fs;

  // Lookup as `c`; REQUIREs a positive entry.
  uint64_t Ino(uint64_t parent, const std::string& name, const Principal& c = kRoot) {
    Reply r = ReplyToEntry(fs.Lookup(c, parent, name));
    REQUIRE(r.err == 0);
    REQUIRE_FALSE(r.negative);
    return r.ino;
  }
  uint64_t Tenant(const std::string& name = "acme") { return Ino(kRootIno, name); }

  // The namespace directory `id` lives in, made by `c` if it does not exist yet.
  uint64_t Namespace(const CacheIdentity& id, const Principal& c = kWriter) {
    uint64_t tenant = Tenant(id.tenant);
    Reply r = ReplyToEntry(fs.MkDir(c, tenant, AddressOf(id).ns));
    REQUIRE((r.err == 0 || r.err == EEXIST));
    return r.err == 0 ? r.ino : Ino(tenant, AddressOf(id).ns);
  }

  // Step 2 of the commit protocol: the reservation, as `c`.
  Reply CreatePart(const CacheIdentity& id, const Principal& c = kWriter) {
    return ReplyToCreate(fs.Create(c, Namespace(id, c), PartName(id)));
  }

  // Steps 2 to 4: a `.part` of `id` holding `payload` and `identity` (the right one unless
  // given), closed. Returns the `.part`'s inode.
  uint64_t WritePart(const CacheIdentity& id, const Bytes& payload, const Principal& c = kWriter,
                     const Bytes* identity = nullptr) {
    Reply part = CreatePart(id, c);
    REQUIRE(part.err == 0);
    Bytes canonical = identity ? *identity : EncodePhysicalKey(id);
    REQUIRE(fs.SetXattr(c, part.ino, "user.gpucache.identity", canonical) == StatusCode::kOk);
    REQUIRE(fs.Write(c, *part.handle, 0, payload).ok());
    Close(*part.handle);
    return part.ino;
  }

  // Step 5: rename <block>.part -> <block>.
  StatusCode Rename(const CacheIdentity& id, const Principal& c = kWriter) {
    uint64_t ns = Namespace(id, c);
    return fs.Rename(c, ns, PartName(id), ns, BlockName(id), 0);
  }

  // The whole protocol; REQUIREs success.
  void Commit(const CacheIdentity& id, const Bytes& payload, const Principal& c = kWriter) {
    WritePart(id, payload, c);
    REQUIRE(Rename(id, c) == StatusCode::kOk);
  }

  // close(2): FLUSH, then RELEASE.
  void Close(Handle& h) {
    fs.Flush(h);
    fs.Release(h);
  }

  // Every byte of a committed block, read through the filesystem as `c`.
  Result<Bytes> ReadBlock(const CacheIdentity& id, const Principal& c = kRoot) {
    Reply entry = ReplyToEntry(fs.Lookup(c, Namespace(id), BlockName(id)));
    if (entry.err || entry.negative) return StatusCode::kNotFound;
    Reply open = ReplyToOpen(fs.Open(c, entry.ino, O_RDONLY));
    if (open.err) return StatusCode::kIoError;
    Bytes out(static_cast<size_t>(entry.attr.st_size) + 1);  // one more: the read must end there
    Result<size_t> n = fs.Read(*open.handle, 0, out);
    fs.Release(*open.handle);
    if (!n.ok()) return n.status();
    out.resize(n.value());
    return out;
  }

  // The size of `id`'s `.part` as getattr reports it, or -1 if it has none.
  off_t PartSize(const CacheIdentity& id) {
    Reply r = ReplyToEntry(fs.Lookup(kRoot, Namespace(id), PartName(id)));
    return r.err || r.negative ? -1 : r.attr.st_size;
  }

  static std::string BlockName(const CacheIdentity& id) { return AddressOf(id).block; }
  static std::string PartName(const CacheIdentity& id) {
    return AddressOf(id).block + std::string(kPartSuffix);
  }
};

using FsHarness = BasicFsHarness<MemoryStore>;

// Another block of acme in the same namespace as SampleIdentity("acme"), told apart by `seed`.
inline CacheIdentity OtherBlock(uint8_t seed) {
  CacheIdentity id = SampleIdentity("acme");
  id.chain[0][0] ^= seed;
  return id;
}

}  // namespace gpucache::test
