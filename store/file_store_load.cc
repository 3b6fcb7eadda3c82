// FileMedium at start-up: the leftovers of the last run emptied, every committed block of a
// data directory found and checked (from INDEX and the journal where the file is still the one
// they saw, from its header otherwise), and the quarantine reloaded. Every file operation goes
// through Env, so the tests can fail any of them (tests/reliability/io_fault_test.cc).
//
// A block whose header is damaged is deleted: it can never be served. A block that cannot be
// read because the device failed (EIO and the like) is only skipped: it stays where it is,
// unindexed, and the next start tries it again; deleting a committed block for a passing error
// would lose it.
#include <errno.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>


#include "store/env.h"
#include "store/file_store.h"
#include "store/file_store_located.h"
#include "store/posix_io.h"

namespace gpucache {
namespace {

// The stat of every name of a namespace, taken on a helper thread while the loading thread
// checks and indexes the names before it: on a start from INDEX the stats are about half the
// work (one path lookup and syscall per block). Only over the POSIX Env: a test Env sees its
// calls in a fixed order.
class StatAhead {
 public:
  StatAhead(Env& env, int dir_fd, const std::vector<std::string>& names, bool enabled)
      : count_(enabled && names.size() >= kMinNames ? names.size() : 0) {
    if (count_ == 0) return;
    // Left unconstructed here: the helper constructs each stat as it takes it (filling 100,000
    // placeholders first cost the loading thread tens of milliseconds of page faults).
    stats_ = std::allocator<Result<FileStat>>().allocate(count_);
    AdviseHugePages(stats_, count_ * sizeof(Result<FileStat>));
    helper_ = std::thread([this, &env, dir_fd, &names] {
      for (size_t i = 0; i < names.size(); ++i) {
        std::construct_at(stats_ + i, env.StatAt(dir_fd, names[i]));
        if ((i + 1) % kBatch == 0 || i + 1 == names.size()) {
          done_.store(i + 1, std::memory_order_release);
          done_.notify_one();
        }
      }
    });
  }
  ~StatAhead() {
    if (count_ == 0) return;
    helper_.join();  // then every stat is constructed
    std::destroy_n(stats_, count_);
    std::allocator<Result<FileStat>>().deallocate(stats_, count_);
  }
  StatAhead(const StatAhead&) = delete;
  StatAhead& operator=(const StatAhead&) = delete;
  // The stat of name `i`, waiting for the helper to get there; null without a helper.
  const Result<FileStat>* Get(size_t i) {
    if (count_ == 0) return nullptr;
    for (size_t done = done_.load(std::memory_order_acquire); done <= i;
         done = done_.load(std::memory_order_acquire)) {
      done_.wait(done, std::memory_order_acquire);
    }
    return &stats_[i];
  }

 private:
  static constexpr size_t kMinNames = 4096;  // below this a thread costs more than it saves
  static constexpr size_t kBatch = 512;      // names per wake-up of the loading thread
  const size_t count_;
  Result<FileStat>* stats_ = nullptr;  // count_ of them, constructed below done_
  std::atomic<size_t> done_{0};
  std::thread helper_;
};

// "<digits><suffix>": how the daemon names reservations (tmp/N.part), parked files
// (tmp/N.dropped) and spares (spare/N).
bool IsNumberedName(std::string_view name, std::string_view suffix) {
  if (!name.ends_with(suffix)) return false;
  name.remove_suffix(suffix.size());
  return !name.empty() && name.size() <= 20 &&
         std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::vector<std::string> FileMedium::ListOrReport(const std::string& dir, FileStoreReport& report) {
  Result<std::vector<std::string>> names = env_.ListDir(dir);
  if (names.ok()) return std::move(names.value());
  if (names.status() != StatusCode::kNotFound) {
    report.problems.push_back("cannot list " + dir + ": " + std::string(ToString(names.status())));
  }
  return {};
}

std::string FileMedium::SetAsideDamaged(size_t dev, const std::string& path) {
  const DataDir& d = devices_.dir(dev);
  // Named by when it was found, then its own name: the oldest sort first.
  auto now = std::chrono::system_clock::now().time_since_epoch();
  char stamp[24];
  std::snprintf(stamp, sizeof stamp, "%020llu", static_cast<unsigned long long>(
                                                    std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()));
  std::string to =
      DataDir::In(d.Damaged(), std::string(stamp) + "-" + path.substr(path.find_last_of('/') + 1));
  StatusCode made = env_.MakeDir(d.Damaged());
  if ((made != StatusCode::kOk && made != StatusCode::kExists) || env_.Rename(path, to) != StatusCode::kOk) {
    env_.Remove(path);
    return path + " deleted (it could not be moved to " + d.Damaged() + ")";
  }
  std::string done = path + " moved to " + to;
  Result<std::vector<std::string>> listed = env_.ListDir(d.Damaged());
  if (!listed.ok()) return done;
  std::vector<std::string> kept = std::move(listed.value());
  if (kept.size() <= kMaxDamaged) return done;
  std::sort(kept.begin(), kept.end());
  for (size_t i = 0; i + kMaxDamaged < kept.size(); ++i) {
    env_.Remove(DataDir::In(d.Damaged(), kept[i]));
  }
  return done;
}

uint64_t FileMedium::DropLeftovers(FileStoreReport& report) {
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
  return reservations;
}

void FileMedium::ForEachNamespaceDir(const DataDir& dir, FileStoreReport& report,
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

void FileMedium::LoadBlocks(size_t dev, FileStoreReport& report) {
  ForEachNamespaceDir(devices_.dir(dev), report, [&](const std::string& tenant, const std::string& ns) {
    LoadNamespace(dev, tenant, ns, report);
  });
}

Result<BlockInfo> FileMedium::ReadBlockInfo(const std::string& path, std::string& why) {
  int opened = env_.OpenRead(path);
  if (opened == -ELOOP) {  // a symlink planted where a block belongs
    why = "not a regular file";
    return StatusCode::kInvalidArgument;
  }
  if (opened < 0) {
    why = "cannot open (" + std::string(ToString(StatusFromErrno(-opened))) + ")";
    return StatusCode::kIoError;
  }
  Fd fd(opened);
  Result<BlockHeader> header = ReadBlockHeader(env_, fd.get());
  if (!header.ok()) {
    bool damaged = header.status() == StatusCode::kInvalidArgument;
    why = damaged ? "corrupt or truncated header"
                  : "cannot read (" + std::string(ToString(header.status())) + ")";
    return damaged ? StatusCode::kInvalidArgument : StatusCode::kIoError;
  }
  Result<CacheIdentity> identity = DecodePhysicalKey(header->identity);
  if (!identity.ok()) {
    why = "invalid identity";
    return StatusCode::kInvalidArgument;
  }
  BlockInfo info;
  info.address = AddressOf(identity.value());
  info.identity = std::move(identity.value());
  info.canonical_identity = std::move(header->identity);
  info.size = header->payload_length;
  info.commit_epoch = header->commit_epoch;
  info.region_id = header->region_id;
  info.owner = Owner{header->owner_uid, header->owner_gid};
  info.commit_time_ns = header->commit_time_ns;
  info.checksum = "xxh3-128:" + header->checksums.digest_hex;
  return info;
}

void FileMedium::LoadNamespace(size_t dev, const std::string& tenant, const std::string& ns,
                               FileStoreReport& report) {
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
    bool pinned = false;
    if (!pins_.empty()) pinned = pins_.count(relative.assign(relative_prefix).append(name)) != 0;
    const SnapshotEntry* known = FromSnapshot(dir.get(), path, snapshot_ns, name, ahead.Get(i));
    std::optional<SnapshotEntry> entry;  // of a block read in full
    if (known) {
      FillFromEntry(b, *known);
      b.address.block = name;
      b.pinned = pinned;
    } else {
      relative.assign(relative_prefix).append(name);
      std::string why;
      Result<BlockInfo> info = IsValidBlockName(name) ? ReadBlockInfo(path, why)
                                                      : Result<BlockInfo>(StatusCode::kInvalidArgument);
      if (info.ok() && info->address != BlockAddress{tenant, ns, name}) {
        why = "identity does not match the path";
        info = StatusCode::kInvalidArgument;
      }
      if (!info.ok()) {
        bool damaged = info.status() != StatusCode::kIoError;
        report.problems.push_back("skipped " + relative + ": " + (why.empty() ? "not a block name" : why) +
                                  (damaged ? "" : "; left in place for the next start"));
        report.blocks_skipped++;
        if (damaged) SetAsideDamaged(dev, path);
        continue;
      }
      info->pinned = pinned;
      entry = EntryOfBlock(info.value(), dir.get(), name);
      b = IndexedBlockOf(std::move(info.value()));
    }
    // The same block in two directories: keep the first one found.
    if (devices_.size() > 1 && !found_names_.insert(relative.assign(relative_prefix).append(name)).second) {
      report.problems.push_back("skipped " + path + ": a duplicate of a block already loaded");
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

void FileMedium::LoadQuarantine(size_t dev, FileStoreReport& report) {
  const DataDir& dir = devices_.dir(dev);
  for (const std::string& name : ListOrReport(dir.Quarantine(), report)) {
    std::string path = DataDir::In(dir.Quarantine(), name);
    std::string why;
    Result<BlockInfo> info = ReadBlockInfo(path, why);
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

Found& FileMedium::FoundPart(size_t dev) {
  if (found_.empty() || found_.back().stored != located_[dev] || !found_.back().quarantined.empty()) {
    found_.emplace_back().stored = located_[dev];
  }
  return found_.back();
}

bool FileMedium::NextFound(Found& part) {
  if (next_found_ < found_.size()) {
    part = std::move(found_[next_found_++]);
    return true;
  }
  found_ = {};
  found_names_ = {};
  return NextUnverified(part);
}

std::set<std::string> FileMedium::LoadPins() {
  std::set<std::string> pins;
  for (size_t dev = 0; dev < devices_.size(); ++dev) {
    std::optional<Bytes> bytes = ReadBounded(env_, devices_.dir(dev).File("PINS"));
    if (!bytes) continue;  // none yet (an unreadable one costs the pins, never a block)
    std::string_view text(reinterpret_cast<const char*>(bytes->data()), bytes->size());
    while (!text.empty()) {
      size_t end = text.find('\n');
      std::string_view line = text.substr(0, end);
      if (!line.empty()) pins.emplace(line);
      text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    }
  }
  return pins;
}

}  // namespace gpucache
