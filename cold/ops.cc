#include "cold/ops.h"

#include <chrono>
#include <thread>

#include "cold/locator.h"
#include "cold/manifest.h"
#include "cold/pack.h"
#include "store/layout.h"

namespace gpucache::cold {
namespace {

uint64_t NowUnixNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Whether a listed object of `size` bytes can be a locator of `a` that a refill would read:
// a v1 locator, or a v2 one sealed under a key of `keys` (every other field of a v2 locator
// has a fixed size for a given address). Anything else is garbage, a truncated upload, or
// sealed under a key no longer held: the block is not cold, whatever the listing says.
// (A locator of the right size that does not verify is found by a refill, as bad-seal.)
bool CouldBeLocatorOf(const BlockAddress& a, uint64_t size, const Keyring& keys) {
  if (size == EncodeLegacyLocator(Sha256{}).size()) return true;
  Locator l;
  l.address = a;
  l.seal.key_id = "k";
  const uint64_t without_key_id = EncodeLocator(l).size() - 1;
  for (const std::string& id : keys.ids()) {
    if (size == without_key_id + id.size()) return true;
  }
  return false;
}

std::vector<std::string> TenantsOf(BlockStore& store, const std::string& only) {
  if (!only.empty()) return {only};
  std::vector<std::string> out;
  for (const auto& [name, counters] : store.Stats().tenants) out.push_back(name);
  return out;
}

}  // namespace

ObjectResult<Done> ColdOps::RecordRetention(const Sha256& manifest, uint64_t until) const {
  std::string s = EncodeRetention(until);
  return objects_.Put(RetentionKey(prefix_, manifest), {reinterpret_cast<const uint8_t*>(s.data()), s.size()});
}

ObjectResult<uint64_t> ColdOps::RetentionOf(const Sha256& manifest) const {
  auto r = objects_.Get(RetentionKey(prefix_, manifest), 128);
  if (!r.ok()) {
    if (r.error().kind == ObjectErrorKind::kNotFound) return uint64_t{0};
    return r.error();
  }
  return DecodeRetention({reinterpret_cast<const char*>(r.value().data()), r.value().size()});
}

bool ColdOps::DeleteConfirmed(const std::string& key, ReclaimReport& report) const {
  auto d = objects_.Delete(key);
  if (!d.ok()) {
    report.error = d.error();
    return false;
  }
  auto h = objects_.Head(key);
  if (h.ok() || h.error().kind != ObjectErrorKind::kNotFound) {
    report.error = h.ok() ? ObjectError{ObjectErrorKind::kPermanent, 0, "StillPresent",
                                        key + " is still visible after DELETE"}
                          : h.error();
    return false;
  }
  report.deleted.push_back(key);
  return true;
}

ColdOps::Reference ColdOps::LiveReference(const Sha256& self, const Sha256& object,
                                          ReclaimReport& r, std::string& why) const {
  auto keys = objects_.List(ManifestPrefix(prefix_));
  if (!keys.ok()) {
    r.error = keys.error();
    why = "cannot list manifests to prove the object unreferenced";
    return Reference::kUnknown;
  }
  for (const ObjectMeta& meta : keys.value()) {
    std::optional<Sha256> digest = ManifestDigestOfKey(prefix_, meta.key);
    // A key that names no manifest is nothing a refill reaches (locators name manifests by
    // digest): whatever it holds, it references nothing (review, 2026-12-07: one such object
    // held up every reclaim).
    if (!digest || *digest == self) continue;
    auto bytes = objects_.Get(meta.key, kMaxManifestBytes);
    if (!bytes.ok()) {
      why = meta.key + " cannot be read";
      r.error = bytes.error();
      return Reference::kUnknown;
    }
    DecodedManifest d = DecodeManifest(bytes.value());
    if (d.error != ManifestError::kNone) {
      why = meta.key + " is not a v3 or v4 manifest";
      r.error = ObjectError{ObjectErrorKind::kPermanent, 0, "UnknownReference",
                            why + ": the object's references cannot be proved"};
      return Reference::kUnknown;
    }
    if (d.manifest.object_digest == object) {
      why = "referenced by " + meta.key;
      return Reference::kReferenced;
    }
  }
  return Reference::kNone;
}

ReclaimReport ColdOps::Reclaim(const Sha256& manifest, uint64_t now, const Principal& who,
                               const std::function<std::string(const std::string&)>& allowed) const {
  ReclaimReport r;
  auto refuse = [&r](std::string why) {
    r.refused = true;
    r.reason = std::move(why);
    return r;
  };
  const std::string mkey = ManifestKey(prefix_, manifest);
  auto bytes = objects_.Get(mkey, kMaxManifestBytes);
  if (!bytes.ok()) {
    r.error = bytes.error();
    r.absent = bytes.error().kind == ObjectErrorKind::kNotFound;
    return refuse(bytes.error().kind == ObjectErrorKind::kNotFound ? "no such manifest"
                                                                    : "manifest unreadable");
  }
  DecodedManifest d = DecodeManifest(bytes.value());
  if (d.error != ManifestError::kNone) {
    return refuse("manifest version " + std::to_string(d.version) + " refused: " + d.detail);
  }
  if (d.body_digest != manifest) return refuse("manifest does not match its key");
  if (d.version == kManifestVersion) {
    SealCheck c = VerifyManifest(*keys_->Get(), d.manifest);
    if (c != SealCheck::kOk) return refuse("manifest seal refused: " + std::string(ToString(c)));
  }
  // Ownership first, and without naming the tenant: a caller who owns none of it learns
  // neither whose blocks it lists nor how long it is retained.
  for (const ManifestEntry& e : d.manifest.entries) {
    if (!who.MayActFor(e.address.tenant)) return refuse("not an owner of every tenant the manifest lists");
  }
  auto until = RetentionOf(manifest);
  if (!until.ok()) {
    r.error = until.error();
    return refuse("retention record unreadable");
  }
  if (until.value() > now) return refuse("retained until " + std::to_string(until.value()));
  const std::string okey = PackKey(prefix_, d.manifest.object_digest);
  if (std::string busy = allowed ? allowed(okey) : ""; !busy.empty()) {
    r.busy = true;
    return refuse(std::move(busy));
  }
  // A manifest that cannot be read now would keep the object at the proof below, after the
  // locators went: the blocks would lose their cold copies and the bucket keep their bytes.
  // Checked first, it stops the reclaim before it deletes anything (review, 2026-12-07); the
  // proof below still runs, for a manifest written meanwhile.
  std::string why;
  if (LiveReference(manifest, d.manifest.object_digest, r, why) == Reference::kUnknown) {
    r.kept.push_back(mkey + ": kept with its locators, nothing deleted: " + why);
    return r;
  }
  r.error.reset();
  for (const ManifestEntry& e : d.manifest.entries) {
    std::string lkey = LocatorKey(prefix_, e.address);
    // Read, decide and delete under the key's lock, which the sink's locator PUT holds too: a
    // newer locator for this block is never deleted for naming this manifest (LocatorLocks).
    MutexLock locator(locks_->For(lkey));
    auto loc = objects_.Get(lkey, kMaxLocatorBytes);
    if (!loc.ok() && loc.error().kind == ObjectErrorKind::kNotFound) continue;
    if (!loc.ok()) {
      r.error = loc.error();
      return r;
    }
    std::optional<Locator> l = DecodeLocator(loc.value());
    if (!l || l->manifest_digest != manifest) {
      r.kept.push_back(lkey + ": names another manifest");
      continue;
    }
    if (!DeleteConfirmed(lkey, r)) return r;
  }
  // Whether the object may go is settled before the manifest goes: a manifest deleted with its
  // object's fate unknown left the object with nothing naming it, for good (a second reclaim
  // finds no manifest, and nothing else deletes packs).
  why.clear();
  Reference ref = LiveReference(manifest, d.manifest.object_digest, r, why);
  if (ref == Reference::kUnknown) {
    r.kept.push_back(mkey + ": kept, so that the reclaim can be run again: " + why);
    r.kept.push_back(okey + ": " + why);
    return r;
  }
  if (!DeleteConfirmed(mkey, r)) return r;
  if (ref == Reference::kReferenced) {
    // The other manifest may be going in a reclaim of its own this moment, which saw this
    // one: asked again now that this one is gone, the last of the two sees neither.
    std::string again;
    if (LiveReference(manifest, d.manifest.object_digest, r, again) != Reference::kNone) {
      r.kept.push_back(okey + ": " + (again.empty() ? why : again));
      return r;
    }
  }
  if (!DeleteConfirmed(okey, r)) return r;
  if (until.value() != 0) DeleteConfirmed(RetentionKey(prefix_, manifest), r);
  return r;
}

StatusCode ColdOps::AddBlock(BlockStore& store, const BlockAddress& a, PackBuilder& builder) {
  // Opened for a copy, not as a client read: packing is not a use of the block, so it neither
  // moves the block up the eviction order (nor counts a miss if it left) nor holds it open.
  Result<std::shared_ptr<BlockReader>> reader = store.OpenForCopy(a);
  if (!reader.ok()) return reader.status();
  const BlockInfo& info = reader.value()->info();
  StatusCode status = StatusCode::kOk;
  // Read straight into the pack object: a copy per payload byte less than a buffer would cost.
  bool added = builder.AddFilled(a, info.canonical_identity, info.size, [&](std::span<uint8_t> room) {
    for (uint64_t done = 0; done < room.size();) {
      Result<size_t> n = reader.value()->Read(done, room.subspan(done));
      if (!n.ok() || n.value() == 0) {
        status = n.ok() ? StatusCode::kIoError : n.status();
        return false;
      }
      done += n.value();
    }
    return true;
  });
  // Already in this pack (a listing may name a block twice if it left and came back during
  // the pass): not counted again.
  if (!added && status == StatusCode::kOk) return StatusCode::kExists;
  return status;
}

ObjectResult<std::map<std::string, uint64_t>> ColdOps::TenantLocators(const std::string& tenant) const {
  const std::string listed = prefix_ + "locators/" + tenant + "/";
  auto keys = objects_.List(listed);
  if (!keys.ok()) return keys.error();
  std::map<std::string, uint64_t> out;
  for (const ObjectMeta& m : keys.value()) {
    // The listing is the object store's answer, not ours: a purge deletes what this returns,
    // so a key is taken only if it is a locator key of this tenant's (its own prefix, then a
    // valid namespace and block name), whatever a faulty or hostile store lists besides.
    if (!m.key.starts_with(listed)) continue;
    std::string_view rest = std::string_view(m.key).substr(listed.size());
    size_t slash = rest.find('/');
    if (slash == std::string_view::npos || !IsValidNamespaceName(rest.substr(0, slash)) ||
        !IsValidBlockName(rest.substr(slash + 1))) {
      continue;
    }
    out.emplace(m.key, m.size);
  }
  return out;
}

// One listing per tenant tells which blocks already have a locator (instead of a HEAD per
// block). A listing that fails leaves the tenant's blocks "unknown": they are skipped, not
// packed again, and reported, so the caller knows the pack was incomplete.
BackfillReport ColdOps::Backfill(BlockStore& store, Sink& sink, const std::string& tenant,
                                 uint64_t budget, const PackOptions& pack,
                                 const std::function<void(const BackfillReport&)>& progress,
                                 const std::function<bool()>& stopping) const {
  BackfillReport rep;
  auto stop_asked = [&] { return stopping && stopping(); };
  std::shared_ptr<const Keyring> keyring = keys_->Get();
  PackBuilder builder(prefix_, keyring);
  builder.Reserve(pack.target_bytes);
  auto flush = [&] {
    if (builder.count() == 0) return;
    const size_t blocks = builder.count();
    PackedPair p = builder.Build(NowUnixNs());
    builder.Reserve(pack.target_bytes);
    SubmitOutcome s = sink.TrySubmit(p);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(pack.wait_for_room_ms);
    while (s.admission == Admission::kFull && std::chrono::steady_clock::now() < deadline && !stop_asked()) {
      SinkStats st = sink.Stats();
      if (st.pending + st.in_flight == 0) break;  // nothing will make room
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      s = sink.TrySubmit(p);
    }
    if (s.admission != Admission::kAccepted) {
      rep.refused++;
      return;
    }
    rep.packs++;
    rep.packed_blocks += blocks;
  };
  for (const std::string& t : TenantsOf(store, tenant)) {
    if (IsRetired(t)) continue;
    std::optional<ObjectResult<std::map<std::string, uint64_t>>> cold;  // listed at the first block
    // One pass over the store's index for the tenant (a listing per namespace was a pass each).
    store.VisitBlocks(t, [&](const BlockAddress& a) {
      if (stop_asked()) {
        rep.stopped = true;
        return false;
      }
      Result<BlockInfo> info = store.Stat(a);
      if (!info.ok()) return true;  // gone, or leaving
      if (!cold) cold = TenantLocators(t);
      if (!cold->ok()) {
        if (!rep.list_error) rep.list_error = cold->error();
        rep.skipped_unknown++;
        return true;
      }
      if (auto it = cold->value().find(LocatorKey(prefix_, a)); it != cold->value().end()) {
        if (CouldBeLocatorOf(a, it->second, *keyring)) {
          rep.skipped_cold++;
          return true;
        }
        rep.invalid_locators++;  // packed again below: its new locator replaces the bad one
      }
      if (rep.bytes + info->size > budget) {
        rep.budget_reached = true;
        return false;
      }
      if (AddBlock(store, a, builder) != StatusCode::kOk) return true;
      rep.blocks++;
      rep.bytes += info->size;
      if (progress) progress(rep);
      if (builder.payload_bytes() >= pack.target_bytes || builder.count() >= pack.max_blocks) {
        flush();
      }
      return true;
    });
    // A pack holds one tenant's blocks: a tenant may then reclaim its own manifests, and a
    // retired tenant's purge finds none that another tenant's blocks keep.
    flush();
    if (rep.budget_reached || rep.stopped) break;
  }
  return rep;
}

}  // namespace gpucache::cold
