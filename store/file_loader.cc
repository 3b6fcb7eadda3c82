// FileLoader at start-up (store/file_loader.h): the leftovers of the last run emptied, every
// committed block of a data directory found and checked (from INDEX and the journal where the
// file is still the one they saw, from its header otherwise), and the quarantine reloaded.
// Every file operation goes through Env, so the tests can fail any of them
// (tests/reliability/io_fault_test.cc).
//
// A block whose header is damaged is set aside: it can never be served. A block that cannot be
// read because the device failed (EIO and the like) is only skipped: it stays where it is,
// unindexed, and the next start tries it again; deleting a committed block for a passing error
// would lose it.
#include "store/file_loader.h"

#include <errno.h>

#include <algorithm>
#include <utility>

#include "store/block_files.h"
#include "store/located_file.h"
#include "store/index_entry.h"
#include "store/stat_ahead.h"

namespace gpucache {
namespace {

// "<digits><suffix>": how the daemon names reservations (tmp/N.part), parked files
// (tmp/N.dropped) and spares (spare/N).
bool IsNumberedName(std::string_view name, std::string_view suffix) {
  if (!name.ends_with(suffix)) return false;
  name.remove_suffix(suffix.size());
  return !name.empty() && name.size() <= 20 &&
         std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

FileLoader::FileLoader(Env& env, const DeviceSet& devices,
                       std::span<const std::shared_ptr<StoredPayload>> located,
                       std::span<const std::unique_ptr<IndexLog>> logs, bool stat_ahead)
    : env_(env), devices_(devices), located_(located), logs_(logs), stat_ahead_(stat_ahead) {}

std::optional<size_t> FileLoader::Load(MediumReport& report, bool verify_later,
                                       uint64_t journal_rotate_bytes) {
  pins_ = LoadPins();
  DropLeftovers(report);
  // Verification after start needs the entries of one directory kept for the walk: with
  // several, each is checked before the store opens (adr/0016).
  const bool background = verify_later && devices_.size() == 1;
  std::optional<size_t> walk;
  for (size_t dev = 0; dev < devices_.size(); ++dev) {
    LoadSnapshot(dev);
    ReportCutJournal(dev, report);
    if (background && CanVerifyLater()) {
      RestoreFromIndex(dev, report);
      LoadQuarantine(dev, report);
      KeepJournalForWalk(dev, report);
      {
        WriterLock lock(walk_state_mu_);  // before the store is shared: uncontended
        walk_state_ = true;
      }
      walk_dev_ = dev;
      walk = dev;
      continue;
    }
    LoadBlocks(dev, report);
    LoadQuarantine(dev, report);
    StartJournal(dev, journal_rotate_bytes);
    DropSnapshot();
  }
  return walk;
}

// Swapped with an empty one: `v = {}` would pick the initializer-list assignment, which
// keeps the buffer (4 B per block of used_ stayed resident for the daemon's life).
template <class Container>
void FreeAll(Container& c) {
  Container().swap(c);
}

void FileLoader::DropSnapshot() {
  FreeAll(snapshot_);
  snapshot_table_ = EntryTable{};
  FreeAll(snapshot_namespaces_);
  FreeAll(used_);
  FreeAll(ns_of_snapshot_);
  FreeAll(loaded_.entries);
}

size_t FileLoader::HeldBytes() const {
  return snapshot_.capacity() * sizeof(SnapshotEntry) + used_.capacity() * sizeof(uint32_t) +
         ns_of_snapshot_.capacity() * sizeof(uint32_t) + loaded_.entries.capacity() * sizeof(SnapshotEntry) +
         found_.capacity() * sizeof(Found) + found_names_.size() * sizeof(std::string) +
         unverified_.live.capacity() * sizeof(uint64_t);
}

std::vector<std::string> FileLoader::ListOrReport(const std::string& dir, MediumReport& report) {
  Result<std::vector<std::string>> names = env_.ListDir(dir);
  if (names.ok()) return std::move(names.value());
  if (names.status() != StatusCode::kNotFound) {
    report.problems.push_back("cannot list " + dir + ": " + std::string(ToString(names.status())));
  }
  return {};
}

void FileLoader::DropLeftovers(MediumReport& report) {
  if (std::exchange(leftovers_dropped_, true)) return;
  uint64_t reservations = 0;
  for (size_t dev = 0; dev < devices_.size(); ++dev) {
    const DataDir& dir = devices_.dir(dev);
    // Only names the daemon gives its own files are deleted (adr/0017): anything else was put
    // there by someone else, and is left for them with a warning.
    for (const std::string& name : ListOrReport(dir.Tmp(), report)) {
      if (!IsNumberedName(name, ".part") && !IsNumberedName(name, ".dropped")) {
        report.problems.push_back("left " + DataDir::In(dir.Tmp(), name) +
                                  " alone: not a name gpucache writes");
        continue;
      }
      env_.Remove(DataDir::In(dir.Tmp(), name));
      reservations++;
    }
    // A spare that holds bytes was a reservation's payload; the others were never used.
    for (const std::string& name : ListOrReport(dir.Spare(), report)) {
      if (!IsNumberedName(name, "")) {
        report.problems.push_back("left " + DataDir::In(dir.Spare(), name) +
                                  " alone: not a name gpucache writes");
        continue;
      }
      std::string path = DataDir::In(dir.Spare(), name);
      Result<FileStat> st = env_.StatAt(-1, path);
      if (st.ok() && st->size > 0) reservations++;
      env_.Remove(path);
    }
  }
  report.reservations_dropped = reservations;
}

void FileLoader::ForEachNamespaceDir(const DataDir& dir, MediumReport& report,
                                     const std::function<void(const std::string&, const std::string&)>& visit) {
  for (const std::string& tenant : ListOrReport(dir.Blocks(), report)) {
    if (!IsValidTenantName(tenant)) {
      report.problems.push_back("ignored " + dir.Tenant(tenant) + ": not a tenant name");
      continue;
    }
    for (const std::string& ns : ListOrReport(dir.Tenant(tenant), report)) {
      if (!IsValidNamespaceName(ns)) {
        report.problems.push_back("ignored " + tenant + "/" + ns + ": not a namespace name");
        continue;
      }
      visit(tenant, ns);
    }
  }
}

void FileLoader::LoadBlocks(size_t dev, MediumReport& report) {
  ForEachNamespaceDir(devices_.dir(dev), report, [&](const std::string& tenant, const std::string& ns) {
    LoadNamespace(dev, tenant, ns, report);
  });
}

void FileLoader::LoadNamespace(size_t dev, const std::string& tenant, const std::string& ns,
                               MediumReport& report) {
  std::string ns_path = devices_.dir(dev).Namespace(tenant, ns);
  Result<FileStat> ns_stat = env_.StatAt(-1, ns_path);
  Owner owner = ns_stat.ok() ? Owner{ns_stat->uid, ns_stat->gid} : Owner{0, 0};
  FoundPart(dev).namespaces.push_back({tenant, ns, owner});
  const std::string ns_name = tenant + "/" + ns;
  const std::string relative_prefix = ns_name + "/";
  auto in_snapshot = snapshot_namespaces_.find(ns_name);
  int64_t snapshot_ns = in_snapshot == snapshot_namespaces_.end() ? int64_t{-1} : int64_t{in_snapshot->second};
  const uint32_t loaded_ns = static_cast<uint32_t>(loaded_.namespaces.size());
  loaded_.namespaces.push_back(ns_name);
  if (snapshot_ns >= 0) ns_of_snapshot_[static_cast<size_t>(snapshot_ns)] = loaded_ns;
  // Entries are checked relative to the directory: no walk of the whole path per block.
  Fd dir(env_.OpenRead(ns_path));
  std::string path, relative;
  IndexedBlock b;
  b.address = BlockAddress{tenant, ns, {}};
  std::vector<std::string> names = ListOrReport(ns_path, report);
  StatAhead ahead(env_, dir.get(), names, stat_ahead_ && snapshot_ns >= 0 && dir.valid());
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    path.assign(ns_path).append("/").append(name);
    const SnapshotEntry* known = FromSnapshot(dir.get(), path, snapshot_ns, name, ahead.Get(i));
    std::optional<SnapshotEntry> entry;  // of a block read in full
    if (known) {
      FillFromEntry(b, *known);
      b.address.block = name;
      b.pinned = !pins_.empty() &&
                 pins_.Pinned(relative.assign(relative_prefix).append(name), b.commit_time_ns);
    } else {
      relative.assign(relative_prefix).append(name);
      std::string why;
      Result<BlockInfo> info = IsValidBlockName(name) ? ReadBlockInfo(env_, path, why)
                                                      : Result<BlockInfo>(StatusCode::kInvalidArgument);
      if (info.ok() && info->address != BlockAddress{tenant, ns, name}) {
        why = "identity does not match the path";
        info = StatusCode::kInvalidArgument;
      }
      if (!info.ok()) {
        report.problems.push_back("skipped " + relative + ": " + SkippedBecause(name, why, info.status(), dev, path));
        report.blocks_skipped++;
        if (IsValidBlockName(name) && info.status() != StatusCode::kIoError) report.damaged[tenant]++;
        continue;
      }
      info->pinned = pins_.Pinned(relative, info->commit_time_ns);
      entry = EntryOfBlock(info.value(), info->checksum, dir.get(), name);
      b = std::move(info.value());
    }
    // The same block in two directories: keep the first one found, and remove the other (one
    // identity names the same bytes). Left in place, it would be uncounted disk space, and bring
    // the block back at a start after the copy kept was invalidated or evicted.
    if (devices_.size() > 1 && !found_names_.insert(relative.assign(relative_prefix).append(name)).second) {
      StatusCode removed = env_.Remove(path);
      report.problems.push_back("skipped " + path + ": a duplicate of a block already loaded" +
                                (removed == StatusCode::kOk ? "; removed" : "; could not be removed"));
      report.blocks_skipped++;
      continue;
    }
    Found& part = FoundPart(dev);
    part.blocks.push_back(b);
    part.count++;
    if (known) {
      report.from_snapshot++;
      NoteLoaded(loaded_ns, *known, true);
    } else if (entry) {
      NoteLoaded(loaded_ns, *entry, false);
    } else {
      index_current_ = false;  // left out of INDEX: read in full next time
    }
    report.blocks_loaded++;
  }
}

// A journal whose records end before its last byte lost what follows, whether a crash cut its
// last append or a damaged record hid whole ones behind it; the start reads in full the block
// files those named, and says so (review, 2026-12-07: a damaged record in mid-file dropped the
// rest of the journal with nothing said).
void FileLoader::ReportCutJournal(size_t dev, MediumReport& report) {
  for (const auto* read : {&old_journal_, &journal_}) {
    if (!read->torn || !read->readable || read->size <= read->valid_bytes) continue;
    const char* file = read == &journal_ ? kJournalFile : kOldJournalFile;
    report.problems.push_back(devices_.dir(dev).File(file) + ": " +
                              std::to_string(read->size - read->valid_bytes) + " bytes after its first " +
                              std::to_string(read->valid_bytes) +
                              " are not whole records (a crash in mid-append, or damage) and are "
                              "dropped; the block files they named are read in full");
  }
}

void FileLoader::LoadSnapshot(size_t dev) {
  IndexSnapshot snapshot;
  index_current_ = false;
  if (std::optional<IndexSnapshot> decoded = logs_[dev]->ReadIndex()) {
    snapshot = std::move(*decoded);
    index_current_ = true;
  }
  index_whole_ = index_current_;
  // What happened since INDEX was written (a crash left it; a rotation may have left two).
  JournalReplay replay(snapshot);
  old_journal_ = logs_[dev]->ReplayJournal(replay, /*old=*/true);
  journal_ = logs_[dev]->ReplayJournal(replay, /*old=*/false);
  if (replay.records() != 0) index_current_ = false;
  snapshot_table_ = replay.Finish();
  for (uint32_t i = 0; i < snapshot.namespaces.size(); ++i) {
    snapshot_namespaces_.emplace(std::move(snapshot.namespaces[i]), i);
  }
  ns_of_snapshot_.assign(snapshot.namespaces.size(), 0);
  snapshot_ = std::move(snapshot.entries);
  used_.reserve(snapshot_table_.live());
  found_.emplace_back().expected_blocks = snapshot_table_.live();
}

const SnapshotEntry* FileLoader::FromSnapshot(int dir_fd, const std::string& path, int64_t ns,
                                              const std::string& name,
                                              const Result<FileStat>* taken) {
  if (ns < 0) return nullptr;
  std::optional<BlockDigest> block = ParseBlockName(name);
  if (!block) return nullptr;
  uint32_t index = snapshot_table_.Find(snapshot_, static_cast<uint32_t>(ns), *block);
  if (index == EntryTable::kNone) return nullptr;
  const SnapshotEntry& e = snapshot_[index];
  Result<FileStat> st = taken ? *taken : dir_fd >= 0 ? env_.StatAt(dir_fd, name) : env_.StatAt(-1, path);
  if (!st.ok() || !st->regular || st->inode != e.inode || st->size != e.file_size ||
      st->ctime_sec != e.ctime_sec || st->ctime_nsec != e.ctime_nsec) {
    return nullptr;  // not the file the snapshot saw: read it in full
  }
  return &e;
}

std::optional<SnapshotEntry> FileLoader::EntryOfBlock(const IndexedBlock& b, std::string_view checksum,
                                                      int dir_fd, const std::string& name) {
  Result<FileStat> st = env_.StatAt(dir_fd, name);
  if (!st.ok()) return std::nullopt;
  if (checksum.starts_with("xxh3-128:")) checksum.remove_prefix(9);
  return EntryOf(b, ParseBlockName(checksum).value_or(BlockDigest{}), st.value());
}

void FileLoader::NoteLoaded(uint32_t ns, const SnapshotEntry& e, bool from_snapshot) {
  if (from_snapshot) {
    used_.push_back(static_cast<uint32_t>(&e - snapshot_.data()));
    return;
  }
  index_current_ = false;
  SnapshotEntry& noted = loaded_.entries.emplace_back(e);
  noted.ns = ns;
}

IndexSnapshot FileLoader::Verified() const {
  IndexSnapshot out;
  out.namespaces = loaded_.namespaces;
  out.entries.reserve(used_.size() + loaded_.entries.size());
  for (uint32_t i : used_) {
    SnapshotEntry& e = out.entries.emplace_back(snapshot_[i]);
    e.ns = ns_of_snapshot_[e.ns];
  }
  out.entries.insert(out.entries.end(), loaded_.entries.begin(), loaded_.entries.end());
  return out;
}

void FileLoader::LoadQuarantine(size_t dev, MediumReport& report) {
  const DataDir& dir = devices_.dir(dev);
  for (const std::string& name : ListOrReport(dir.Quarantine(), report)) {
    std::string path = DataDir::In(dir.Quarantine(), name);
    // Only names gpucache gives its quarantined files (a region id) are its to drop (adr/0017,
    // decision 4): anything else there is left, with a line in the report.
    if (name.empty() || name.size() > 20 || name.find_first_not_of("0123456789") != std::string::npos) {
      report.problems.push_back("left quarantine/" + name + ": not a name gpucache gives its files");
      continue;
    }
    std::string why;
    Result<BlockInfo> info = ReadBlockInfo(env_, path, why);
    if (info.status() == StatusCode::kIoError) {  // kept for the next start or reclaim
      report.problems.push_back("skipped quarantine/" + name + ": " + why);
      continue;
    }
    if (!info.ok() || std::to_string(info->region_id) != name) {
      report.problems.push_back("dropped quarantine/" + name + ": " + (why.empty() ? "misnamed" : why));
      env_.Remove(path);
      continue;
    }
    found_.emplace_back().quarantined.push_back(
        {std::move(info.value()), std::make_shared<QuarantinedFile>(path)});
    report.quarantined++;
  }
}

// After a device loaded. A journal that INDEX and the start's checks left standing is kept,
// its torn tail cut and the entries this start had to read in full appended: the next start
// replays it again, and nothing here is paid for on the way up. Otherwise what the start
// verified becomes INDEX (unless INDEX already says exactly that) and the journal starts
// empty. A rotation left half-done (JOURNAL.old) is always folded.
void FileLoader::StartJournal(size_t dev, uint64_t journal_rotate_bytes) {
  if (used_.size() != snapshot_table_.live()) index_current_ = false;
  bool keep = index_whole_ && !old_journal_.exists && old_journal_.readable && journal_.exists &&
              journal_.readable && journal_.valid_bytes > 0 &&
              journal_.valid_bytes < journal_rotate_bytes / 2;
  if (keep && KeepJournal(dev)) {
    // kept
  } else {
    // What this start verified could not become INDEX: the old one goes, so that the next
    // start, with the journal emptied here, checks every file instead of trusting it.
    if (!index_current_ && !logs_[dev]->Write(Verified())) logs_[dev]->RemoveIndex();
    logs_[dev]->Empty();
  }
  loaded_ = IndexSnapshot{};  // used_ and the snapshot go with DropSnapshot, which follows
}

// The journal stays as it is (its torn tail cut), appended to from now on: what the walk finds
// is appended too, so INDEX and the journal stay as after a crash until the walk finished.
// INDEX cannot be written instead (nothing is verified yet). When the journal cannot be kept,
// the next record opens it again keeping its whole records; no block is lost (a later start
// reads in full the files no record names), but the operator hears of it, as of a journal
// write that failed.
void FileLoader::KeepJournalForWalk(size_t dev, MediumReport& report) {
  if (KeepJournal(dev)) return;
  metadata_errors_++;
  report.problems.push_back("cannot keep " + devices_.dir(dev).File(kJournalFile) +
                            " (it could not be opened, cut or appended to: check the device); the "
                            "next record tries again, and the next start reads in full the block "
                            "files the journal and INDEX do not name");
}

bool FileLoader::KeepJournal(size_t dev) {
  std::vector<JournalRecord> records;  // the blocks read in full
  records.reserve(loaded_.entries.size());
  for (const SnapshotEntry& e : loaded_.entries) {
    JournalRecord& r = records.emplace_back();
    r.ns = loaded_.namespaces[e.ns];
    r.entry = e;
  }
  return logs_[dev]->Keep(journal_, records);
}

Found& FileLoader::FoundPart(size_t dev) {
  if (found_.empty() || found_.back().stored != located_[dev] || !found_.back().quarantined.empty()) {
    found_.emplace_back().stored = located_[dev];
  }
  return found_.back();
}

bool FileLoader::NextFound(Found& part) {
  if (next_found_ < found_.size()) {
    part = std::move(found_[next_found_++]);
    return true;
  }
  FreeAll(found_);
  FreeAll(found_names_);
  return NextUnverified(part);
}

PinsFile FileLoader::LoadPins() {
  PinsFile pins;
  for (size_t dev = 0; dev < devices_.size(); ++dev) {
    std::optional<Bytes> bytes = ReadBounded(env_, devices_.dir(dev).File("PINS"));
    if (!bytes) continue;  // none yet (an unreadable one costs the pins, never a block)
    pins.Merge(PinsFile::Decode({reinterpret_cast<const char*>(bytes->data()), bytes->size()}));
  }
  return pins;
}

std::string FileLoader::SkippedBecause(const std::string& name, const std::string& why, StatusCode status,
                                       size_t dev, const std::string& path) {
  if (!IsValidBlockName(name)) return "not a block name: not gpucache's, left where it is";
  if (status == StatusCode::kIoError) return why + "; left in place for the next start";
  return why + "; " + SetAsideDamaged(env_, devices_.dir(dev), path);
}

}  // namespace gpucache
