// Filesystem: extended attributes. Only `user.gpucache.*` exists; everything else is ENOTSUP.
//
// On a committed block (read-only):
//   user.gpucache.identity       canonical identity bytes (GPCK), for engines to compare
//   user.gpucache.identity_text  the identity as one readable line
//   user.gpucache.state          COMMITTED
//   user.gpucache.checksum       xxh3-128:<hex> of the payload
//   user.gpucache.epoch          epoch the block was committed in
//   user.gpucache.region         region id (monotonic, never recycled)
//   user.gpucache.valid_length   tokens in the block
//   user.gpucache.pinned         "1" or "0"; a tenant member may set it (pinned: never evicted)
//   user.gpucache.owner          uid:gid of the committer
//   user.gpucache.open_handles   handles open on it now (an open block is never evicted)
// On a reservation (<block>.part): identity (writable by its owner until commit), state,
// epoch, region, and fill ("pending").
// On a namespace directory: user.gpucache.fill.<block> is the outcome of that block's latest
// fill (pending, finished, failed, fenced): how a single-flight joiner learns it
// (docs/single-flight.md). Not listed, since it names blocks; ask for it by name.
#include <sys/xattr.h>

#include "fs/filesystem.h"

namespace gpucache {
namespace {

constexpr std::string_view kPrefix = "user.gpucache.";
constexpr std::string_view kIdentity = "identity";
const std::vector<std::string> kBlockKeys = {"identity", "identity_text", "state", "checksum",
                                             "epoch", "region", "valid_length", "pinned", "owner",
                                             "open_handles"};
const std::vector<std::string> kPartKeys = {"identity", "state", "epoch", "region", "fill"};
constexpr std::string_view kFillPrefix = "fill.";

// Block keys only the block's header holds (its identity and payload checksum): reading one
// is a read of the medium (Stat). The others are the index's, answered from memory
// (StatAttributes), as a stat is.
bool NeedsHeader(std::string_view key) {
  return key == kIdentity || key == "identity_text" || key == "checksum" || key == "valid_length";
}

// The key after the prefix, or nullopt when the name is not ours.
std::optional<std::string_view> OurKey(std::string_view name) {
  if (!name.starts_with(kPrefix)) return std::nullopt;
  return name.substr(kPrefix.size());
}

}  // namespace

Result<std::string> Filesystem::BlockXattr(uint64_t ino, const Node& n, std::string_view key) {
  const BlockAddress a{n.tenant, n.ns, n.block};
  Result<BlockInfo> b = NeedsHeader(key) ? store_.Stat(a) : store_.StatAttributes(a);
  if (!b.ok()) return b.status();
  if (StatusCode s = SameBlock(ino, b.value()); s != StatusCode::kOk) return s;
  if (key == kIdentity) {
    return std::string(b->canonical_identity.begin(), b->canonical_identity.end());
  }
  if (key == "identity_text") return RenderIdentity(b->identity);
  if (key == "state") return std::string(ToString(b->state));
  if (key == "checksum") return b->checksum;
  if (key == "epoch") return std::to_string(b->commit_epoch);
  if (key == "region") return std::to_string(b->region_id);
  if (key == "valid_length") return std::to_string(b->identity.valid_length);
  if (key == "pinned") return std::string(b->pinned ? "1" : "0");
  if (key == "owner") return std::to_string(b->owner.uid) + ":" + std::to_string(b->owner.gid);
  if (key == "open_handles") return std::to_string(b->open_handles);
  return StatusCode::kNoAttribute;
}

Result<std::string> Filesystem::PartXattr(const Node& n, std::string_view key) {
  // A fill that ended is answered as a vanished `.part` (ESTALE after a fence), never as a
  // missing attribute: ENODATA for its identity would tell the writer it was never set.
  const BlockAddress address{n.tenant, n.ns, n.block};
  auto id = store_.FindReservation(address);
  if (!id) return PartGone(address);
  Result<ReservationInfo> r = store_.StatReservation(*id);
  if (!r.ok()) return FillAnswer(r.status(), address);
  if (key == kIdentity) {
    Result<Bytes> bytes = store_.GetIdentity(*id);
    if (bytes.ok()) return std::string(bytes->begin(), bytes->end());
    // Not set yet (the attribute is missing), or the fill ended since StatReservation.
    if (store_.StatReservation(*id).ok()) return StatusCode::kNoAttribute;
    return PartGone(address);
  }
  if (key == "state") return std::string(ToString(r->state));
  if (key == "epoch") return std::to_string(r->epoch);
  if (key == "region") return std::to_string(r->region_id);
  if (key == "fill") return std::string(ToString(FillState::kPending));
  return StatusCode::kNoAttribute;
}

Result<std::string> Filesystem::GetXattr(const Principal& c, uint64_t ino, std::string_view name) {
  auto key = OurKey(name);
  if (!key) return StatusCode::kNotSupported;
  Result<Node> n = Resolve(c, ino);
  if (!n.ok()) return n.status();
  if (n->kind == NodeKind::kBlock) return BlockXattr(ino, n.value(), *key);
  if (n->kind == NodeKind::kPart) return PartXattr(n.value(), *key);
  if (n->kind == NodeKind::kNamespace && key->starts_with(kFillPrefix)) {
    std::string block(key->substr(kFillPrefix.size()));
    if (!IsValidBlockName(block)) return StatusCode::kNoAttribute;
    auto outcome = store_.FillOutcome({n->tenant, n->ns, block});
    if (!outcome) return StatusCode::kNoAttribute;
    return std::string(ToString(*outcome));
  }
  return StatusCode::kNoAttribute;
}

Result<std::vector<std::string>> Filesystem::ListXattr(const Principal& c, uint64_t ino) {
  Result<Node> n = Resolve(c, ino);
  if (!n.ok()) return n.status();
  std::vector<std::string> names;
  if (n->kind == NodeKind::kBlock) {
    // A committed block has every key: one Stat (a read of its header) says whether it is
    // still there, not one per key that needs the header. One that left since it was looked
    // up answers ENOENT, as its stat does.
    Result<BlockInfo> b = store_.Stat({n->tenant, n->ns, n->block});
    if (!b.ok()) return b.status();
    if (StatusCode s = SameBlock(ino, b.value()); s != StatusCode::kOk) return s;
    for (const std::string& k : kBlockKeys) names.push_back(std::string(kPrefix) + k);
    return names;
  }
  if (n->kind != NodeKind::kPart) return names;
  for (const std::string& k : kPartKeys) {
    // Only names that have a value right now (a reservation may not have its identity yet);
    // a node that is gone (a fenced `.part`) answers as it would to a getxattr.
    Result<std::string> value = PartXattr(n.value(), k);
    if (value.ok()) {
      names.push_back(std::string(kPrefix) + k);
    } else if (value.status() != StatusCode::kNoAttribute) {
      return value.status();
    }
  }
  return names;
}

StatusCode Filesystem::SetXattr(const Principal& c, uint64_t ino, std::string_view name,
                                std::span<const uint8_t> value, int flags) {
  Result<Node> n = Resolve(c, ino);
  if (!n.ok()) return n.status();
  // Root-owned, read-only nodes: what the kernel answers a non-owner, whatever the name.
  if (RefuseChangeIn(n.value()) == StatusCode::kAccessDenied) {
    return StatusCode::kAccessDenied;
  }
  auto key = OurKey(name);
  if (!key) return StatusCode::kNotSupported;
  if (n->kind == NodeKind::kBlock && *key == "pinned") {
    std::string v(value.begin(), value.end());
    if (v != "0" && v != "1") return StatusCode::kInvalidArgument;
    if (flags & XATTR_CREATE) return StatusCode::kExists;  // a block's pin always has a value
    BlockAddress a{n->tenant, n->ns, n->block};
    // A pin through an inode of a block that left would pin the block that came back.
    if (Result<BlockInfo> b = store_.StatAttributes(a); b.ok()) {
      if (StatusCode s = SameBlock(ino, b.value()); s != StatusCode::kOk) return s;
    }
    StatusCode s = store_.SetPinned(a, v == "1");
    if (control_.MayLogActionOf(c)) {
      spdlog::info("xattr: uid {} gid {} {} {} -> {}", c.uid, c.gid, v == "1" ? "pinned" : "unpinned",
                   a.RelativePath(), ToString(s));
    }
    return s;
  }
  if (n->kind != NodeKind::kPart || *key != kIdentity) return StatusCode::kImmutable;
  BlockAddress address{n->tenant, n->ns, n->block};
  // A fence between the create and this setxattr took the reservation: the writer must hear
  // ESTALE, as its write or rename would (adr/0006), not ENOENT (found by tests/load).
  Result<ReservationId> id = OwnFill(c, address);
  if (!id.ok()) return id.status();
  // The caller's conditions (ignored once: review, 2026-12-07).
  if (flags & (XATTR_CREATE | XATTR_REPLACE)) {
    const bool set = store_.GetIdentity(id.value()).ok();
    if ((flags & XATTR_CREATE) && set) return StatusCode::kExists;
    if ((flags & XATTR_REPLACE) && !set) return StatusCode::kNoAttribute;
  }
  // Stored as given; Commit checks it against the path and refuses the rename if it is wrong.
  return FillAnswer(store_.SetIdentity(id.value(), value), address);
}

StatusCode Filesystem::RemoveXattr(const Principal& c, uint64_t ino, std::string_view name) {
  Result<Node> n = Resolve(c, ino);
  if (!n.ok()) return n.status();
  if (RefuseChangeIn(n.value()) == StatusCode::kAccessDenied) {
    return StatusCode::kAccessDenied;
  }
  if (!OurKey(name)) return StatusCode::kNotSupported;
  return StatusCode::kImmutable;
}

}  // namespace gpucache
