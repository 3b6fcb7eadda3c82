#include "store/file_store.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>


#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>

#include "store/data_dir_claim.h"
#include "store/env.h"
#include "store/located_file.h"
#include "store/spare_pool.h"
#include "store/failpoint.h"
#include "store/io/uring_source.h"
#include "store/placement.h"
#include "store/snapshot_writer.h"

namespace gpucache {
namespace {

class FileSource final : public RawSource {
 public:
  // `preads` (borrowed) counts this source's reads, as the io_uring reader counts its own.
  FileSource(Env& env, Fd fd, uint64_t data_offset, std::atomic<uint64_t>& preads)
      : env_(env), fd_(std::move(fd)), data_offset_(data_offset), preads_(preads) {}
  StatusCode ReadRaw(uint64_t offset, std::span<uint8_t> out) override {
    preads_.fetch_add(1, std::memory_order_relaxed);
    return env_.Read(fd_.get(), out, data_offset_ + offset);
  }
  std::optional<FileCutShort> CutShort(uint64_t payload_bytes) override {
    Result<FileStat> st = env_.StatFd(fd_.get());
    if (!st.ok() || st->size >= data_offset_ + payload_bytes) return std::nullopt;
    return FileCutShort{data_offset_ + payload_bytes, st->size};
  }

 private:
  Env& env_;
  Fd fd_;
  const uint64_t data_offset_;
  std::atomic<uint64_t>& preads_;
};


// ", pid N" from the LOCK file its holder wrote, or "" when it says nothing usable.
std::string LockHolder(Env& env, int fd) {
  uint8_t buf[32] = {};
  Result<size_t> n = env.ReadUpTo(fd, buf, 0);
  if (!n.ok() || n.value() == 0) return "";
  std::string_view text(reinterpret_cast<const char*>(buf), n.value());
  size_t digits = text.find_first_not_of("0123456789");
  if (digits == 0 || digits == std::string_view::npos) return "";
  return ", pid " + std::string(text.substr(0, digits));
}

// Claims one data directory for this process: its layout's directories made, its LOCK held
// (our pid written in it for the message another start prints). Through `env`, so that a test
// can fail any step; nothing is written before the lock is held but the empty directories.
std::optional<FileMedium::Device> OpenDevice(Env& env, const std::string& dir, std::string* error) {
  std::string root;
  if (!ClaimDataDir(dir, &root, error)) return std::nullopt;
  DataDir layout(root);
  for (const std::string& sub :
       {layout.Blocks(), layout.Tmp(), layout.Spare(), layout.Quarantine()}) {
    StatusCode made = env.MakeDir(sub);
    if (made != StatusCode::kOk && made != StatusCode::kExists) {
      *error = "cannot create " + sub + ": " + std::string(ToString(made));
      return std::nullopt;
    }
  }
  std::string lock_path = layout.File("LOCK");
  Fd lock(env.OpenLockFile(lock_path));
  if (!lock.valid()) {
    *error = "cannot open " + lock_path + ": " + std::strerror(-lock.get()) +
             " (is the data directory writable?)";
    return std::nullopt;
  }
  if (StatusCode locked = env.TryLock(lock.get()); locked != StatusCode::kOk) {
    if (locked != StatusCode::kBusy) {
      *error = "cannot lock " + lock_path + ": " + std::string(ToString(locked));
    } else {
      *error = "data directory " + dir + " is in use by another gpucachefs" +
               LockHolder(env, lock.get()) + " (" + lock_path +
               " is locked); stop it first, or give this one another data_dir";
    }
    return std::nullopt;
  }
  std::string pid = std::to_string(::getpid()) + "\n";
  if (env.Truncate(lock.get(), 0) == StatusCode::kOk) {
    auto bytes = reinterpret_cast<const uint8_t*>(pid.data());
    (void)env.Write(lock.get(), std::span(bytes, pid.size()), 0);
  }
  return FileMedium::Device{std::move(layout), std::move(lock), false};
}

}  // namespace


FileMedium::FileMedium(std::vector<Device> devices, const StoreOptions& options)
    : options_(options),
      journal_rotate_bytes_(options.journal_rotate_bytes ? options.journal_rotate_bytes : kJournalRotateBytes),
      devices_(options_.env ? *options_.env : Env::Posix(), std::move(devices), options_.min_free_percent),
      env_(options_.env ? *options_.env : Env::Posix()) {
  for (size_t dev = 0; dev < devices_.size(); ++dev) {
    located_.push_back(std::make_shared<Located>(dev));
    logs_.push_back(std::make_unique<IndexLog>(env_, devices_.dir(dev)));
  }
  if (options_.backing_io == "uring") {
    UringReaderOptions o;
    o.probe_dir = devices_.size() == 0 ? std::string() : devices_.dir(0).root();  // sizes the queue depth
    uring_ = UringReader::Create(o);  // null only for invalid pool options: then pread
  }
}

MediumIoStats FileMedium::IoStats() const {
  MediumIoStats io;
  if (uring_) {
    io.uring = uring_->stats();
    io.description = io.uring->status;
  } else {
    io.description = "posix (pread through the page cache)";
    io.pread_reads = pread_reads_.load(std::memory_order_relaxed);
  }
  io.read_back_bytes = read_back_bytes_.load(std::memory_order_relaxed);
  return io;
}

size_t FileMedium::SparesReady(size_t dev) const { return spares_ ? spares_->Ready(dev) : 0; }

FileMedium::~FileMedium() = default;

std::unique_ptr<IndexedStore> OpenFileStore(const std::vector<std::string>& data_dirs,
                                            StoreOptions options, FileStoreReport* report,
                                            std::string* error) {
  using Device = FileMedium::Device;
  if (data_dirs.empty()) {
    *error = "no data directory configured";
    return nullptr;
  }
  if (options.backing_io != "posix" && options.backing_io != "uring") {
    *error = "backing_io must be \"posix\" or \"uring\", not \"" + options.backing_io + "\"";
    return nullptr;
  }
  if (std::string why = DataDirsOverlap(data_dirs); !why.empty()) {
    *error = why;
    return nullptr;
  }
  Env& env = options.env ? *options.env : Env::Posix();
  std::vector<Device> devices;
  for (const std::string& dir : data_dirs) {
    std::optional<Device> device = OpenDevice(env, dir, error);
    if (!device) return nullptr;
    devices.push_back(std::move(*device));
  }
  auto medium = std::make_unique<FileMedium>(std::move(devices), options);
  auto store = std::make_unique<IndexedStore>(std::move(options), std::move(medium));
  FileStoreReport local;
  if (!store->Load(report ? *report : local, *error)) return nullptr;
  return store;
}

Result<uint64_t> FileMedium::ReadEpoch(const std::string& path) {
  Result<FileStat> st = env_.StatAt(-1, path);
  if (st.status() == StatusCode::kNotFound) return uint64_t{0};  // a new data directory
  std::optional<Bytes> bytes = ReadBounded(env_, path);
  if (!st.ok() || !bytes) return StatusCode::kIoError;  // not a reason to start from 0
  std::string_view text(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  uint64_t epoch = 0;
  auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), epoch);
  if (err != std::errc() || end == text.data()) return StatusCode::kInvalidArgument;
  if (epoch >= kLastEpoch) return StatusCode::kTooLarge;  // no next epoch to start in
  return epoch;
}

bool FileMedium::Load(FileStoreReport& report, std::string& error) {
  uint64_t epoch = 0;
  for (size_t dev = 0; dev < devices_.size(); ++dev) {
    Result<uint64_t> e = ReadEpoch(devices_.dir(dev).File("EPOCH"));
    if (!e.ok()) {
      error = devices_.dir(dev).File("EPOCH") +
              (e.status() == StatusCode::kInvalidArgument ? " does not hold a number; refusing to guess the epoch"
               : e.status() == StatusCode::kTooLarge
                   ? " holds an epoch of " + std::to_string(kLastEpoch) +
                         " or more (damaged: region ids would repeat); refusing to guess the epoch"
                   : " cannot be read (a read error, or longer than a quarter of memory); refusing "
                     "to guess the epoch");
      return false;
    }
    // No EPOCH beside an index is not a new directory: EPOCH was deleted. Starting from epoch 1
    // would give out region ids its blocks hold (found by review: a quarantined block of
    // epoch 1 shared its id with the next commit, and left every count).
    if (e.value() == 0) {
      for (const char* file : {kSnapshotFile, kJournalFile}) {
        if (env_.StatAt(-1, devices_.dir(dev).File(file)).ok()) {
          error = devices_.dir(dev).File("EPOCH") + " is missing beside " + devices_.dir(dev).File(file) +
                  ": refusing to guess the epoch (region ids would repeat). Write the last epoch "
                  "used (the highest `epoch` that `gpucachectl inspect` prints for its block files) "
                  "to it, or empty the directory";
          return false;
        }
      }
    }
    epoch = std::max(epoch, e.value());
  }
  report.epoch = epoch + 1;
  const bool stat_ahead = options_.env == nullptr;  // a test Env sees its calls in order
  loader_ = std::make_unique<FileLoader>(env_, devices_, located_, logs_, stat_ahead);
  // Before EPOCH: a fill cut by a crash may have filled the disk, and its bytes are freed here
  // anyway (review, 2026-12-07: such a start refused to run, for want of EPOCH.tmp's block).
  loader_->DropLeftovers(report);
  std::string failed;
  if (StatusCode s = WriteEpochFiles(report.epoch, &failed); s != StatusCode::kOk) {
    error = "cannot write the epoch to " + failed + " (" + std::string(ToString(s)) +
            "; or its temporary file " + failed + ".tmp); refusing to start" +
            (s == StatusCode::kNoSpace ? ": free some space on its filesystem (block files under its "
                                         "blocks/ directory may be deleted: each becomes a miss)"
                                       : "");
    return false;
  }
  if (std::optional<size_t> walk = loader_->Load(report, options_.verify_in_background, journal_rotate_bytes_)) {
    walk_started_ = true;
    walk_over_.store(false, std::memory_order_release);
    walk_dev_ = *walk;
  }
  for (uint64_t i = 0; i < loader_->MetadataErrors(); i++) CountMetadataError();
  if (!options_.env) {  // filled from now on, off the start's path
    std::vector<std::string> spare_dirs;
    for (size_t dev = 0; dev < devices_.size(); ++dev) spare_dirs.push_back(devices_.dir(dev).Spare());
    spares_ = std::make_unique<SparePool>(env_, std::move(spare_dirs), kSpareDepth);
  }
  return true;
}

bool FileMedium::Upkeep::NextFound(Found& part) { return m_.loader_->NextFound(part); }

std::unique_ptr<IndexWriter> FileMedium::Close() {
  // The store stopped its walk first (IndexedStore's destructor). Stopped before every file was
  // checked: INDEX and the journal are left as a crash leaves them (the journal was appended to
  // all along); the next start checks them again.
  if (walk_started_ && !walk_completed_) return nullptr;
  std::vector<size_t> in_service;
  for (size_t dev = 0; dev < devices_.size(); ++dev) {
    if (!devices_.Isolated(dev)) in_service.push_back(dev);
  }
  return std::make_unique<SnapshotWriter>(logs_, in_service, [this, in_service](const std::vector<size_t>& written) {
    // A device whose INDEX could not be written keeps its journals, as a crash leaves them:
    // emptied, the next start would trust the old INDEX without what they hold.
    for (size_t dev : written) logs_[dev]->Empty();
    if (written.size() != in_service.size()) CountMetadataError();
  });
}

std::string FileMedium::PathIn(size_t dev, const BlockAddress& a) const {
  return devices_.dir(dev).Block(a);
}

StatusCode FileMedium::IsolateDomain(const std::string& path, StoredTest& lost) {
  size_t dev;
  bool newly;
  StatusCode s = devices_.Isolate(path, dev, newly);
  if (s != StatusCode::kOk || !newly) return s;
  if (spares_) spares_->Retire(dev);
  lost = [dev](const StoredPayload* stored) {
    auto* l = dynamic_cast<const Located*>(stored);
    return l && l->dev == dev;
  };
  return StatusCode::kOk;
}

std::vector<DomainInfo> FileMedium::Domains() { return devices_.Domains(); }

std::string FileMedium::PathOf(const BlockAddress& a, const StoredPayload* stored) {
  return PathIn(stored ? DeviceOf(stored) : devices_.PlaceFor(a), a);
}

BlockLocation FileMedium::LocationOf(const BlockAddress& a, const StoredPayload* stored) {
  const size_t dev = DeviceOf(stored);
  return {dev, devices_.dir(dev).root(), PathIn(dev, a)};
}

// Namespaces exist in every directory in service, so that any placement can publish there.
// With sync_commits a new directory's name is synced in its parent before a commit may land in
// it: the commit syncs only the namespace directory, whose own entry a power cut could drop, and
// every acknowledged block in it (review, 2026-12-07).
StatusCode FileMedium::MakeDurableDir(const std::string& path, const std::string& parent) {
  StatusCode s = env_.MakeDir(path);
  if (!options_.sync_commits) return s == StatusCode::kExists ? StatusCode::kOk : s;
  if (s == StatusCode::kOk) {
    MutexLock lock(unsynced_dirs_mu_);
    unsynced_dirs_.insert(path);
  } else if (s == StatusCode::kExists) {
    MutexLock lock(unsynced_dirs_mu_);
    if (!unsynced_dirs_.count(path)) return StatusCode::kOk;  // found at start, or synced since
  } else {
    return s;
  }
  if (env_.SyncDir(parent) != StatusCode::kOk) return StatusCode::kIoError;
  MutexLock lock(unsynced_dirs_mu_);
  unsynced_dirs_.erase(path);
  return StatusCode::kOk;
}

StatusCode FileMedium::CreateNamespace(std::string_view tenant, std::string_view ns, Owner owner) {
  for (size_t dev = 0; dev < devices_.size(); ++dev) {
    if (devices_.Isolated(dev)) continue;
    const DataDir& dir = devices_.dir(dev);
    StatusCode s = MakeDurableDir(dir.Tenant(tenant), dir.Blocks());
    if (s != StatusCode::kOk) return s;
    std::string path = dir.Namespace(tenant, ns);
    s = MakeDurableDir(path, dir.Tenant(tenant));
    if (s != StatusCode::kOk) return s;
    // The backing directory records who created the namespace, for listings after a restart.
    s = env_.Chown(path, owner.uid, owner.gid);
    if (s != StatusCode::kOk && s != StatusCode::kAccessDenied) return s;
  }
  return StatusCode::kOk;
}

// As CreateNamespace, only the directories in service: an isolated one keeps its blocks (out of
// the index, on disk) where they are, and its namespace directory with them.
StatusCode FileMedium::RemoveNamespace(std::string_view tenant, std::string_view ns) {
  for (size_t dev = 0; dev < devices_.size(); ++dev) {
    if (devices_.Isolated(dev)) continue;
    StatusCode s = env_.RemoveDir(devices_.dir(dev).Namespace(tenant, ns));
    if (s != StatusCode::kOk && s != StatusCode::kNotFound) return s;
  }
  return StatusCode::kOk;
}

Result<std::pair<Fd, BlockHeader>> FileMedium::OpenChecked(const BlockInfo& info,
                                                           const StoredPayload* stored) {
  int opened = env_.OpenRead(PathIn(DeviceOf(stored), info.address));
  if (opened == -ENOENT) return StatusCode::kNotFound;  // gone from under the index (StoreReads)
  if (opened < 0) return StatusFromErrno(-opened);
  Fd fd(opened);
  // The header is re-read at every open: a file replaced or damaged on disk since it was
  // indexed is caught here, before any payload byte is served.
  // (IndexedStore checks the identity it returns.)
  // A header that cannot be read (EIO) is an error for this caller, not proof of damage: the
  // block stays. One that reads but does not check out is never served.
  Result<BlockHeader> header = ReadBlockHeader(env_, fd.get());
  if (!header.ok() && header.status() != StatusCode::kInvalidArgument) return header.status();
  if (!header.ok() || header->region_id != info.region_id || header->payload_length != info.size) {
    return StatusCode::kChecksumMismatch;
  }
  return std::pair<Fd, BlockHeader>(std::move(fd), std::move(header.value()));
}

Result<Medium::Opened> FileMedium::Open(const BlockInfo& info,
                                        const std::shared_ptr<StoredPayload>& stored) {
  Result<std::pair<Fd, BlockHeader>> checked = OpenChecked(info, stored.get());
  if (!checked.ok()) return checked.status();
  auto& [fd, header] = checked.value();
  uint64_t data_offset = header.data_offset;
  std::unique_ptr<RawSource> source;
  if (uring_) {
    source = std::make_unique<UringSource>(*uring_, std::move(fd), data_offset);
  } else {
    source = std::make_unique<FileSource>(env_, std::move(fd), data_offset, pread_reads_);
  }
  return Opened{std::move(source), std::move(header.checksums), std::move(header.identity)};
}

Result<Medium::Held> FileMedium::ReadHeld(const BlockInfo& info,
                                          const std::shared_ptr<StoredPayload>& stored) {
  Result<std::pair<Fd, BlockHeader>> checked = OpenChecked(info, stored.get());
  if (!checked.ok()) return checked.status();
  BlockHeader& header = checked.value().second;
  return Held{std::move(header.identity), "xxh3-128:" + header.checksums.digest_hex};
}

std::shared_ptr<StoredPayload> FileMedium::Quarantine(
    const BlockInfo& info, const std::shared_ptr<StoredPayload>& stored) {
  size_t dev = DeviceOf(stored);
  std::string from = PathIn(dev, info.address);
  std::string to = devices_.dir(dev).Quarantined(info.region_id);
  JournalRemoval(dev, info.address);
  // Open handles keep reading the same inode; the name is freed for a new commit.
  if (env_.Rename(from, to) == StatusCode::kOk) return std::make_shared<QuarantinedFile>(to);
  // Left under its name, the block would be indexed again at the next start. Unlinking it
  // keeps the same promise (open handles still hold the inode); reclaim then has no name to
  // remove: the block's name is free for a new commit at this address as soon as Finish
  // returns, and removing it at reclaim would delete that block's file. If even the unlink
  // fails, reclaim tries the name again, but only while it holds this block's inode (a new
  // commit's rename may have put another block there since). Counted twice in the medium's
  // errors.
  CountError();
  StatusCode removed = env_.Remove(from);
  if (removed == StatusCode::kOk || removed == StatusCode::kNotFound) {
    return std::make_shared<QuarantinedFile>(std::string());
  }
  CountError();
  Result<FileStat> st = env_.StatAt(-1, from);
  return std::make_shared<QuarantinedFile>(from, /*live_name=*/true, st.ok() ? st.value().inode : 0);
}

// A quarantined block still under its live name (Quarantine could neither move nor unlink
// it): removed only if the name still holds its inode. Another inode is a block committed at
// the address since, and an unknown one (the stat failed too) is left for the next start, which
// indexes it again and whose first read finds it corrupt once more.
bool FileMedium::StillUnderLiveName(const QuarantinedFile& q) {
  if (q.live_inode == 0) return false;
  Result<FileStat> st = env_.StatAt(-1, q.path);
  return st.ok() && st.value().inode == q.live_inode;
}

// The data directory a path is in (its root a prefix of it); 0 if none is.
size_t FileMedium::DeviceOfPath(const std::string& path) const {
  for (size_t dev = 0; dev < devices_.size(); ++dev) {
    const std::string& root = devices_.dir(dev).root();
    if (path.size() > root.size() && path.starts_with(root) && path[root.size()] == '/') return dev;
  }
  return 0;
}

StatusCode FileMedium::Drop(const BlockInfo& info, const std::shared_ptr<StoredPayload>& stored) {
  auto* q = dynamic_cast<QuarantinedFile*>(stored.get());
  size_t dev = DeviceOf(stored);  // a quarantined file is on device 0's paths or its own
  // Nothing in an isolated directory is touched (docs/operations.md): a block quarantined there
  // before the isolation, reclaimed since, keeps its file (the next start with the directory
  // back reclaims it). A quarantined file knows its directory by its path only.
  if (devices_.Isolated(q ? DeviceOfPath(q->path) : dev)) return StatusCode::kOk;
  if (q && q->path.empty()) return StatusCode::kOk;  // unlinked when quarantined (its rename failed)
  if (q && q->kept_live_name && !StillUnderLiveName(*q)) return StatusCode::kOk;
  std::string path = q ? q->path : PathIn(dev, info.address);
  if (!q) JournalRemoval(dev, info.address);
  StatusCode s = env_.Remove(path);
  if (s == StatusCode::kOk || s == StatusCode::kNotFound) return StatusCode::kOk;
  CountError();
  if (q && !q->kept_live_name) return StatusCode::kOk;  // in quarantine/, not under its name
  // Left where it is, the next start would load it again: move it to tmp/, which every start
  // empties. If that fails too, it is counted twice and comes back as a block.
  if (q || env_.Rename(path, devices_.dir(dev).Dropped(info.region_id)) != StatusCode::kOk) {
    if (!q) CountError();
    return StatusCode::kIoError;
  }
  return StatusCode::kOk;
}

bool FileMedium::KeptUnderName(const StoredPayload* quarantined) const {
  auto* q = dynamic_cast<const QuarantinedFile*>(quarantined);
  return q && q->kept_live_name;
}

StatusCode FileMedium::MakeRemovalDurable(const BlockInfo& info, const StoredPayload* stored) {
  if (!options_.sync_commits) return StatusCode::kOk;  // as for commits: the page cache's pace
  size_t dev = DeviceOf(stored);
  std::string path = PathIn(dev, info.address);
  // The namespace's directory (the name gone) and quarantine/ (the name it went to, if the
  // block was open): a rename is durable once its target directory is synced.
  std::string dir = path.substr(0, path.find_last_of('/'));
  StatusCode s = env_.SyncDir(dir);
  // The namespace's directory went with its last block (an rmdir since): its tenant's
  // directory holds that removal.
  if (s == StatusCode::kNotFound) s = env_.SyncDir(dir.substr(0, dir.find_last_of('/')));
  if (s == StatusCode::kOk) s = env_.SyncDir(devices_.dir(dev).Quarantine());
  // Never "not found": the block did leave (Filesystem::Unlink tells the two apart).
  return s == StatusCode::kOk ? s : StatusCode::kIoError;
}

std::string FileMedium::SetAside(const BlockInfo& info, const std::shared_ptr<StoredPayload>& stored) {
  // Only indexed blocks are set aside: their file is under the block's name.
  size_t dev = DeviceOf(stored);
  JournalRemoval(dev, info.address);
  return SetAsideDamaged(env_, devices_.dir(dev), PathIn(dev, info.address));
}

StatusCode FileMedium::PersistEpoch(uint64_t epoch) { return WriteEpochFiles(epoch, nullptr); }

StatusCode FileMedium::WriteEpochFiles(uint64_t epoch, std::string* failed) {
  for (size_t dev = 0; dev < devices_.size(); ++dev) {
    if (devices_.Isolated(dev)) continue;
    const std::string path = devices_.dir(dev).File("EPOCH");
    StatusCode s = WriteFileAtomically(env_, path, std::to_string(epoch) + "\n");
    if (s == StatusCode::kOk) continue;
    if (failed) *failed = path;
    return s;
  }
  return StatusCode::kOk;
}

void FileMedium::PersistPins(const std::vector<PinnedBlock>& pinned) {
  for (size_t dev = 0; dev < devices_.size(); ++dev) {
    if (devices_.Isolated(dev)) continue;  // its PINS stays as it was, for when it comes back
    std::vector<const PinnedBlock*> here;
    for (const PinnedBlock& p : pinned) {
      if (DeviceOf(p.stored) == dev) here.push_back(&p);
    }
    const std::string text = PinsFile::Encode(here);
    if (WriteFileAtomically(env_, devices_.dir(dev).File("PINS"), text) != StatusCode::kOk) {
      CountMetadataError();
    }
  }
}

}  // namespace gpucache
