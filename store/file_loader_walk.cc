// FileLoader: verification after start (adr/0016). Load hands over the blocks INDEX and the
// journal name without looking at their files (RestoreFromIndex) and returns; the store's walk
// (store/indexed_store_verify.cc) then asks for every file of every namespace (NextWalkItem)
// and has each checked by the rule an eager start applies (file_loader.cc): the file the
// entry saw (inode, size and ctime) is trusted, another one is read in full, a damaged one is
// set aside, one that cannot be read is left for the next start, a file no entry names is read
// in full and indexed, an entry without a file is forgotten. VerifyBlock applies the same rule
// to one block, for the store to call before its first use. Every file operation goes through
// Env.
#include <bit>

#include "store/block_files.h"
#include "store/env.h"
#include "store/file_loader.h"
#include "store/located_file.h"
#include "store/index_entry.h"

namespace gpucache {
namespace {

constexpr size_t kRestoreBatch = 256;  // blocks per part NextUnverified hands over

}  // namespace

bool FileLoader::CanVerifyLater() const {
  // A start that must fold the journal into a new INDEX (a damaged INDEX, a rotation left half
  // done) checks every file first, as before. A long journal is kept and folded once the walk
  // is done (Walk): checking a million files first to fold it at start took 7.8 s where the
  // replay takes 0.1 s (docs/performance.md, "The loader at a million blocks").
  return index_whole_ && !old_journal_.exists && old_journal_.readable && journal_.readable;
}

const SnapshotEntry* FileLoader::EntryNamed(uint32_t ns, const std::string& name) const {
  std::optional<BlockDigest> block = ParseBlockName(name);
  if (!block) return nullptr;
  uint32_t index = snapshot_table_.Find(snapshot_, ns, *block);
  return index == EntryTable::kNone ? nullptr : &snapshot_[index];
}

void FileLoader::RestoreFromIndex(size_t dev, MediumReport& report) {
  const DataDir& dir = devices_.dir(dev);
  // The namespaces as an eager start finds them, by their directories (a few listings); the
  // blocks in them are not listed here.
  Found& part = found_.emplace_back();
  ForEachNamespaceDir(dir, report, [&](const std::string& tenant, const std::string& ns) {
    Result<FileStat> ns_stat = env_.StatAt(-1, dir.Namespace(tenant, ns));
    part.namespaces.push_back({tenant, ns, ns_stat.ok() ? Owner{ns_stat->uid, ns_stat->gid} : Owner{0, 0}});
    walk_namespaces_.emplace_back(tenant, ns);
  });
  // Every block INDEX and the journal leave standing in a namespace that is there, unchecked,
  // handed over in parts by NextUnverified.
  UnverifiedCursor& c = unverified_;
  c.parts.assign(ns_of_snapshot_.size(), nullptr);
  for (const auto& tn : walk_namespaces_) {
    auto in_snapshot = snapshot_namespaces_.find(tn.first + "/" + tn.second);
    if (in_snapshot != snapshot_namespaces_.end()) c.parts[in_snapshot->second] = &tn;
  }
  c.live = snapshot_table_.LiveBits(snapshot_);
  c.word = 0;
  c.bits = 0;
  c.active = true;
}

bool FileLoader::NextUnverified(Found& part) {
  UnverifiedCursor& c = unverified_;
  if (!c.active) return false;
  // The blocks' strings keep their buffers from one part to the next.
  if (part.blocks.size() < kRestoreBatch) part.blocks.resize(kRestoreBatch);
  part.count = 0;
  part.namespaces.clear();
  part.quarantined.clear();
  part.expected_blocks = 0;
  part.stored = located_[walk_dev_];
  part.unverified = true;
  while (part.count < kRestoreBatch) {
    while (c.bits == 0) {
      if (c.word == c.live.size()) {
        c = UnverifiedCursor{};
        return part.count != 0;
      }
      c.bits = c.live[c.word++];
    }
    uint32_t i = static_cast<uint32_t>((c.word - 1) * 64 + static_cast<size_t>(std::countr_zero(c.bits)));
    c.bits &= c.bits - 1;
    const SnapshotEntry& e = snapshot_[i];
    const auto* tn = c.parts[e.ns];
    if (!tn) continue;  // its namespace is gone: an eager start would not find it
    IndexedBlock& b = part.blocks[part.count++];
    FillFromEntry(b, e);
    b.address.tenant = tn->first;
    b.address.ns = tn->second;
    FormatBlockNameInto(e.block, b.address.block);
    b.pinned = !pins_.empty() &&
               pins_.Pinned(c.relative.assign(tn->first).append("/").append(tn->second).append("/").append(
                                b.address.block),
                            b.commit_time_ns);
  }
  return true;
}

Verdict FileLoader::Check(int dir_fd, const std::string& path, const BlockAddress& address,
                          const SnapshotEntry& e, std::vector<std::string>& problems,
                          std::optional<JournalRecord>& read) {
  Result<FileStat> st = dir_fd >= 0 ? env_.StatAt(dir_fd, address.block) : env_.StatAt(-1, path);
  if (st.ok() && st->regular && st->inode == e.inode && st->size == e.file_size &&
      st->ctime_sec == e.ctime_sec && st->ctime_nsec == e.ctime_nsec) {
    return {};
  }
  if (st.status() == StatusCode::kNotFound) return {Verdict::Kind::kGone, {}};
  // Not the file the entry saw: read in full, as an eager start does.
  std::string why;
  Result<BlockInfo> info = ReadBlockInfo(env_, path, why);
  if (info.ok() && info->address != address) {
    why = "identity does not match the path";
    info = StatusCode::kInvalidArgument;
  }
  std::string relative = address.RelativePath();
  if (!info.ok()) {
    bool damaged = info.status() != StatusCode::kIoError;
    problems.push_back("skipped " + relative + ": " + why + (damaged ? "" : "; left in place for the next start"));
    return {damaged ? Verdict::Kind::kDamaged : Verdict::Kind::kGone, {}};
  }
  info->pinned = pins_.Pinned(relative, info->commit_time_ns);
  // Named in the journal from now on, with the file's stat: the next start trusts it.
  if (std::optional<SnapshotEntry> entry = EntryOfBlock(info.value(), info->checksum, dir_fd,
                                                                 dir_fd >= 0 ? address.block : path)) {
    JournalRecord& r = read.emplace();
    r.ns = address.tenant + "/" + address.ns;
    r.entry = *entry;
  }
  return {Verdict::Kind::kReplaced, std::move(info.value())};
}

Verdict FileLoader::VerifyBlock(const BlockAddress& address, const std::string& path,
                                std::optional<JournalRecord>& read) {
  ReaderLock lock(walk_state_mu_);
  // The walk is over: it settled every block (a use that raced it finds this one settled).
  if (!walk_state_) return {};
  auto ns = snapshot_namespaces_.find(address.tenant + "/" + address.ns);
  const SnapshotEntry* e = ns == snapshot_namespaces_.end() ? nullptr : EntryNamed(ns->second, address.block);
  if (!e) return {Verdict::Kind::kGone, {}};  // restored from an entry: not reached
  std::vector<std::string> problems;
  Verdict v = Check(-1, path, address, *e, problems, read);
  if (!problems.empty()) {
    MutexLock g(gate_problems_mu_);
    gate_problems_.insert(gate_problems_.end(), problems.begin(), problems.end());
  }
  return v;
}

std::vector<std::string> FileLoader::NamesToWalk(const std::string& ns_path, int64_t snapshot_ns,
                                                 MediumReport& report) {
  Result<std::vector<std::string>> names = env_.ListDir(ns_path);
  if (names.ok()) return std::move(names.value());
  std::vector<std::string> named;
  if (names.status() == StatusCode::kNotFound) return named;  // gone since the start
  // The directory cannot be listed now (out of descriptors, an I/O error): the blocks INDEX
  // names are checked by their paths, as a use checks one, instead of being forgotten as if
  // their files were gone. Files no entry names wait for the next start.
  report.problems.push_back("cannot list " + ns_path + ": " + std::string(ToString(names.status())) +
                            "; the blocks INDEX names there are checked one by one");
  if (snapshot_ns < 0) return named;
  snapshot_table_.ForEachLive(snapshot_, [&](uint32_t i) {
    if (snapshot_[i].ns == static_cast<uint32_t>(snapshot_ns)) named.push_back(FormatBlockName(snapshot_[i].block));
  });
  return named;
}

bool FileLoader::OpenNextWalkNamespace() {
  WalkCursor& c = cursor_;
  if (c.next_ns == walk_namespaces_.size()) return false;
  const auto& [tenant, ns] = walk_namespaces_[c.next_ns++];
  c.ns_path = devices_.dir(walk_dev_).Namespace(tenant, ns);
  auto in_snapshot = snapshot_namespaces_.find(tenant + "/" + ns);
  c.snapshot_ns = in_snapshot == snapshot_namespaces_.end() ? int64_t{-1} : int64_t{in_snapshot->second};
  c.dir = Fd(env_.OpenRead(c.ns_path));
  c.names = NamesToWalk(c.ns_path, c.snapshot_ns, c.report);
  c.next_name = 0;
  return true;
}

bool FileLoader::NextWalkItem(MediumUpkeep::WalkItem& item) {
  WalkCursor& c = cursor_;
  while (c.next_name == c.names.size()) {
    if (!OpenNextWalkNamespace()) return false;
  }
  const std::string& name = c.names[c.next_name++];
  const auto& [tenant, ns] = walk_namespaces_[c.next_ns - 1];
  c.path.assign(c.ns_path).append("/").append(name);
  c.entry = c.snapshot_ns >= 0 ? EntryNamed(static_cast<uint32_t>(c.snapshot_ns), name) : nullptr;
  c.found.reset();
  item.address.tenant = tenant;
  item.address.ns = ns;
  item.address.block = name;
  item.stored = located_[walk_dev_];
  item.region_id = c.entry ? std::optional<uint64_t>(c.entry->region_id) : std::nullopt;
  return true;
}

Verdict FileLoader::CheckWalkItem(const MediumUpkeep::WalkItem& item, std::optional<JournalRecord>& read) {
  WalkCursor& c = cursor_;
  return Check(c.dir.get(), c.path, item.address, *c.entry, c.report.problems, read);
}

Result<BlockInfo> FileLoader::ReadWalkItem(const MediumUpkeep::WalkItem& item) {
  WalkCursor& c = cursor_;
  const std::string& name = item.address.block;
  std::string why;
  Result<BlockInfo> info = IsValidBlockName(name) ? ReadBlockInfo(env_, c.path, why)
                                                  : Result<BlockInfo>(StatusCode::kInvalidArgument);
  if (info.ok() && info->address != item.address) {
    why = "identity does not match the path";
    info = StatusCode::kInvalidArgument;
  }
  std::string relative = item.address.RelativePath();
  if (!info.ok()) {
    c.report.problems.push_back("skipped " + relative + ": " + SkippedBecause(name, why, info.status(), walk_dev_, c.path));
    return info.status();
  }
  info->pinned = pins_.Pinned(relative, info->commit_time_ns);
  c.found = EntryOfBlock(info.value(), info->checksum, c.dir.get(),
                         c.dir.valid() ? name : c.path);
  return info;
}

std::optional<JournalRecord> FileLoader::AdoptedWalkItem(const MediumUpkeep::WalkItem& item) {
  if (!cursor_.found) return std::nullopt;
  JournalRecord r;
  r.ns = item.address.tenant + "/" + item.address.ns;
  r.entry = *cursor_.found;
  return r;
}

MediumReport FileLoader::EndWalk(bool completed, const MediumUpkeep::WalkCounts& counts) {
  MediumReport report = std::move(cursor_.report);
  if (completed) {
    report.blocks_loaded = counts.loaded;
    report.from_snapshot = counts.from_snapshot;
    report.blocks_skipped = counts.skipped;
    {
      MutexLock g(gate_problems_mu_);
      report.problems.insert(report.problems.end(), gate_problems_.begin(), gate_problems_.end());
      gate_problems_.clear();
    }
    report.walk_ns = counts.walk_ns;
  }
  cursor_ = WalkCursor{};
  WriterLock lock(walk_state_mu_);
  walk_state_ = false;
  DropSnapshot();
  return report;
}

}  // namespace gpucache
