#include "ctl/commands.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "clients/cpp/identity_file.h"
#include "ctl/channel.h"
#include "ctl/discover.h"
#include "ctl/progress.h"
#include "store/block_file.h"
#include "store/checksum.h"
#include "store/identity.h"
#include "store/posix_io.h"
#include "store/layout.h"

namespace gpucache::ctl {
namespace {

using nlohmann::json;


std::optional<CacheIdentity> LoadIdentity(const std::string& file) {
  try {
    return IdentityFromTomlFile(file);
  } catch (const std::exception& e) {
    Fail(e.what(), 64);
    return std::nullopt;
  }
}

std::optional<std::string> Xattr(const std::string& path, const std::string& key) {
  char buf[16384];
  ssize_t n = ::getxattr(path.c_str(), ("user.gpucache." + key).c_str(), buf, sizeof buf);
  if (n < 0) return std::nullopt;
  return std::string(buf, n);
}

// Reads the payload of a block file and checks every chunk; the index of the first bad chunk,
// or -1 when all match. Each chunk is hashed as it is read, in pieces of at most 1 MiB: the
// header's chunk size comes from the file, and a crafted one (up to 4 GiB, with a header seal
// anyone can recompute) must not size a buffer (found by review: 4 GiB, or bad_alloc).
long FirstBadChunk(int fd, const BlockHeader& h) {
  const auto& sums = h.checksums;
  constexpr uint64_t kPiece = 1 << 20;
  Bytes buf(std::min<uint64_t>(sums.chunk_size, kPiece));
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  for (size_t c = 0; c < sums.chunks.size(); ++c) {
    const uint64_t start = c * uint64_t{sums.chunk_size};
    const uint64_t len = std::min<uint64_t>(sums.chunk_size, h.payload_length - start);
    XXH3_64bits_reset_withSeed(state.get(), c);
    for (uint64_t at = 0; at < len;) {
      std::span<uint8_t> piece(buf.data(), std::min<uint64_t>(buf.size(), len - at));
      if (PreadFull(fd, piece, h.data_offset + start + at) != StatusCode::kOk) return static_cast<long>(c);
      XXH3_64bits_update(state.get(), piece.data(), piece.size());
      at += piece.size();
    }
    if (XXH3_64bits_digest(state.get()) != sums.chunks[c]) return static_cast<long>(c);
  }
  return -1;
}

// Reads a whole block through the mount: the daemon verifies every byte it returns.
int VerifyThroughMount(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  char buf[1 << 16];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) {
  }
  int err = n < 0 ? errno : 0;
  ::close(fd);
  return err;
}

// A flat report: pretty JSON, or one "key: value" line per field.
void PrintReport(const json& j, bool as_json) {
  if (as_json) {
    std::cout << j.dump(2) << "\n";
    return;
  }
  for (auto& [k, v] : j.items()) std::cout << k << ": " << (v.is_string() ? v.get<std::string>() : v.dump()) << "\n";
}

// The report of an inspect, and for a failure what failed: with --json, "ok": false, "error" and
// "exit_code" beside the report's fields (docs/gpucachectl.md: every failure carries them);
// without, the message on stderr as well. Exit 2 for a failure, else 0.
int InspectReport(json j, bool as_json, const std::string& failure) {
  if (!failure.empty() && as_json) {
    j["ok"] = false;
    j["error"] = failure;
    j["exit_code"] = 2;
  }
  PrintReport(j, as_json);
  if (failure.empty()) return 0;
  if (!as_json) std::cerr << "gpucachectl: " << failure << "\n";
  return 2;
}

// An xattr's decimal text as a number in the report (as inspect of a backing file gives it).
json NumberOrText(const std::string& v) {
  bool digits = !v.empty() && v.size() <= 19 && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  return digits ? json(std::stoull(v)) : json(v);
}

// A path that cannot be opened: exit 1 when it does not exist (the block asked about is absent),
// 2 for any other error.
int Absent(const std::string& path, int err) {
  return Fail(path + ": " + std::strerror(err), err == ENOENT ? 1 : 2, err);
}

int InspectMounted(const std::string& path, bool verify, bool as_json) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Absent(path, errno);
  json j{{"path", path}, {"size", st.st_size}, {"owner_uid", st.st_uid}, {"owner_gid", st.st_gid}};
  for (const char* key : {"state", "identity_text", "checksum"}) {
    if (auto v = Xattr(path, key)) j[key] = *v;
  }
  for (const char* key : {"epoch", "region", "valid_length"}) {
    if (auto v = Xattr(path, key)) j[key] = NumberOrText(*v);
  }
  std::string failure;
  if (verify) {
    int err = VerifyThroughMount(path);
    j["verified"] = err == 0 ? "ok" : std::string("failed: ") + std::strerror(err);
    if (err) failure = path + ": verification failed: " + std::strerror(err);
  }
  return InspectReport(j, as_json, failure);
}

int InspectFile(const std::string& path, bool verify, bool as_json) {
  // O_NONBLOCK: opening a FIFO for reading waits for a writer, for ever (review, 2026-12-07);
  // it is refused below as not a regular file.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Absent(path, errno);
  struct stat st {};
  if (::fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {  // a directory read as a header: "I/O error"
    ::close(fd);
    return Fail(path + ": " + (S_ISDIR(st.st_mode) ? "a directory" : "not a regular file") +
                    ", not a block file",
                2, S_ISDIR(st.st_mode) ? EISDIR : EINVAL);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // a regular file's reads block, as usual
  Result<BlockHeader> h = ReadBlockHeader(fd);
  if (!h.ok()) {
    ::close(fd);
    if (h.status() != StatusCode::kInvalidArgument) {  // unreadable says nothing of its bytes
      return Fail(path + ": cannot read its header (" + std::string(ToString(h.status())) + ")");
    }
    return Fail(path + ": not a valid gpucache block file (bad magic, header checksum or length)");
  }
  Result<CacheIdentity> id = DecodePhysicalKey(h->identity);
  json j{{"path", path},
         {"format", "GPCF v1"},
         {"payload_bytes", h->payload_length},
         {"data_offset", h->data_offset},
         {"chunk_size", h->checksums.chunk_size},
         {"chunks", h->checksums.chunks.size()},
         {"checksum", "xxh3-128:" + h->checksums.digest_hex},
         {"epoch", h->commit_epoch},
         {"region", h->region_id},
         {"owner_uid", h->owner_uid},
         {"owner_gid", h->owner_gid},
         {"commit_time_ns", h->commit_time_ns}};
  if (id.ok()) {
    j["identity_text"] = RenderIdentity(id.value());
    j["relative_path"] = AddressOf(id.value()).RelativePath();
  } else {
    j["identity_text"] = "<invalid identity>";
  }
  std::string failure = id.ok() ? "" : path + ": its identity does not decode";
  if (verify) {
    long bad = FirstBadChunk(fd, h.value());
    j["verified"] = bad < 0 ? std::string("ok") : "chunk " + std::to_string(bad) + " does not match";
    if (bad >= 0 && failure.empty()) failure = path + ": verification failed: chunk " + std::to_string(bad) + " does not match";
  }
  ::close(fd);
  return InspectReport(j, as_json, failure);
}

// What is wrong with `rel` as TENANT/NAMESPACE/BLOCK; empty when nothing is.
std::string BlockShapeProblem(const std::string& rel) {
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    size_t slash = rel.find('/', start);
    parts.push_back(rel.substr(start, slash == std::string::npos ? slash : slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  if (rel.empty() || parts.size() != 3) {
    return "a block path has 3 parts, TENANT/NAMESPACE/BLOCK; " +
           (rel.empty() ? std::string("this is the mount itself")
                        : "this has " + std::to_string(parts.size()));
  }
  auto quoted = [](const std::string& part) { return "\"" + part + "\""; };
  if (!IsValidTenantName(parts[0])) {
    return quoted(parts[0]) + " is not a tenant name (1-64 of a-z 0-9 _ -)";
  }
  if (!IsValidNamespaceName(parts[1])) {
    return quoted(parts[1]) + " is not a namespace name (SLUG-<32 hex digits>)";
  }
  if (parts[2].ends_with(kPartSuffix)) {
    return quoted(parts[2]) + " is a fill in progress, not a block";
  }
  if (!IsValidBlockName(parts[2])) {
    return quoted(parts[2]) + " is not a block name (32 lowercase hex digits)";
  }
  return "";
}

// Absolute and lexically normal, without a trailing slash; no filesystem access.
std::string Lexical(const std::string& p) {
  std::error_code ec;
  std::string s = std::filesystem::absolute(p, ec).lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// TENANT/NAMESPACE/BLOCK for evict, pin and unpin, from that form (relative to the mount) or
// from the block's path in the mount: absolute, or relative to the current directory. Nullopt
// with `why` when `block` is neither.
std::optional<std::string> RelativeBlockPath(const std::string& mountpoint,
                                             const std::string& block, std::string& why) {
  if (BlockShapeProblem(block).empty()) return block;
  std::optional<std::string> rel;
  auto mount = FindGpucacheMount(mountpoint);
  auto where = FindGpucacheMount(block);
  if (mount && where) {
    if (where->mountpoint != mount->mountpoint) {
      why = "it is in another gpucachefs mount, " + where->mountpoint;
      return std::nullopt;
    }
    rel = where->inside;
  } else {  // a mount the table does not show as gpucachefs: compare the paths as written
    std::string mnt = Lexical(mountpoint), path = Lexical(block);
    std::string below = mnt == "/" ? mnt : mnt + "/";
    if (path == mnt) {
      rel = "";
    } else if (path.starts_with(below)) {
      rel = path.substr(below.size());
    }
  }
  if (!rel) {  // as TENANT/NAMESPACE/BLOCK, what is wrong with it; a path, where it is
    why = (block.starts_with("/") ? "it" : BlockShapeProblem(block) + ", and it") +
          " is not a path inside " + mountpoint;
    return std::nullopt;
  }
  why = BlockShapeProblem(*rel);
  if (!why.empty()) return std::nullopt;
  return rel;
}

// An example of each accepted form, for the refusal of a BLOCK argument.
std::string BlockForms(const std::string& mountpoint) {
  const std::string example =
      "default/Llama-3.1-8B.bf16.tp0of2.pp0of1-3bbe1be7cbf4954872f656c6c5df4db3/"
      "24205b3ebca2baf46b68bcd3ca26e4b5";
  std::string mnt = mountpoint;
  while (mnt.size() > 1 && mnt.back() == '/') mnt.pop_back();
  return "BLOCK is TENANT/NAMESPACE/BLOCK relative to the mount, as `gpucachectl path` and "
         "`lookup` print it (e.g. " + example + "), or the block's path in the mount, absolute or "
         "relative to the current directory (e.g. " + mnt + "/" + example + ")";
}

}  // namespace

int Fence(const std::string& mountpoint, bool as_json) {
  return Send(mountpoint, {{"op", "fence"}}, as_json, [](const json& r) {
    return "fenced: epoch is now " + r["epoch"].dump() + "\n";
  });
}

int Reclaim(const std::string& mountpoint, std::optional<uint64_t> fenced_epoch,
            std::optional<uint64_t> drained_region, bool as_json) {
  if (fenced_epoch.has_value() == drained_region.has_value()) {
    return Fail("reclaim needs exactly one of --fenced EPOCH or --drained REGION", 64);
  }
  json req{{"op", "reclaim"}};
  if (fenced_epoch) req["fenced"] = *fenced_epoch;
  if (drained_region) req["drained"] = *drained_region;
  return Send(mountpoint, req, as_json, [](const json& r) {
    return "reclaimed " + r["reclaimed"].dump() + " quarantined block(s)\n";
  });
}

int Quarantine(const std::string& mountpoint, bool as_json) {
  return Send(mountpoint, {{"op", "quarantine"}}, as_json, [](const json& r) {
    std::string out;
    for (const auto& q : r["quarantine"]) {
      out += "region=" + q["region"].dump() + " path=" + q["path"].get<std::string>() +
             " bytes=" + q["bytes"].dump() + " reason=" + q["reason"].get<std::string>() +
             " since_epoch=" + q["since_epoch"].dump() + " open_handles=" + q["open_handles"].dump() + "\n";
    }
    return out.empty() ? std::string("no quarantined blocks\n") : out;
  });
}

int Drain(const std::string& mountpoint, const std::string& action, bool as_json) {
  return Send(mountpoint, {{"op", "drain"}, {"action", action}}, as_json, [&](const json& r) {
    return "drain " + action + ": " + (r["draining"].get<bool>() ? "admits refused" : "admits accepted") +
           ", epoch " + r["epoch"].dump() + "\n";
  });
}

namespace {
// A data directory as the daemon knows it: absolute, links resolved, no trailing '/'. So the
// configuration's own spelling (a link), "d2/", or a path relative to here all name it (found
// by review: only the resolved path itself was found, mid-incident).
std::string DataDirArgument(const std::string& dir) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(dir, ec);
  if (ec) return dir;
  std::filesystem::path real = std::filesystem::weakly_canonical(p, ec);  // a dead device: EIO
  std::string s = (ec ? p.lexically_normal() : real).string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}
}  // namespace

int Isolate(const std::string& mountpoint, const std::string& dir, bool as_json) {
  return Send(mountpoint, {{"op", "isolate"}, {"dir", DataDirArgument(dir)}}, as_json, [&](const json&) {
    return "isolated " + dir + ": its blocks are misses now; remove it from the configuration "
           "before the next start\n";
  });
}

int Discover(const std::string& sysfs, const std::string& proc, const std::string& dev,
             bool as_json) {
  // A tree that is not there is a mistake, not a machine without block devices.
  for (const std::string& dir : {sysfs + "/class/block", proc, dev}) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) return Fail(dir + ": " + std::strerror(errno), 2, errno);
  }
  std::unique_ptr<Progress> progress;
  auto devices = Discover(DiscoverRoots{sysfs, proc, dev}, [&](size_t done, size_t total) {
    if (!progress) {  // only on a terminal, and only once the scan has taken a second
      ProgressOptions o;
      o.terminal_only = true;
      progress = std::make_unique<Progress>("scanning block devices", total, o);
    }
    if (done > 0) progress->Step();
  });
  if (progress) progress->Step();  // the last device
  progress.reset();
  json list = json::array();
  for (const BlockDevice& d : devices) {
    list.push_back({{"name", d.name}, {"parent", d.parent}, {"bytes", d.bytes},
                    {"filesystem", d.filesystem}, {"mountpoint", d.mountpoint},
                    {"candidate", d.candidate}, {"reason", d.reason},
                    {"suggested_data_dir", d.suggested_dir}});
  }
  if (as_json) {
    std::cout << json{{"devices", list}}.dump(2) << "\n";
    return 0;
  }
  // Decimal gigabytes (10^9 bytes), as disks are sold and as docs/operations.md says.
  std::printf("%-14s %11s %-6s %-10s %s\n", "DEVICE", "SIZE", "FS", "CANDIDATE", "WHY");
  for (const BlockDevice& d : devices) {
    std::printf("%-14s %8.1f GB %-6s %-10s %s\n", d.name.c_str(), double(d.bytes) / 1e9,
                d.filesystem.empty() ? "-" : d.filesystem.c_str(), d.candidate ? "yes" : "no",
                d.reason.c_str());
  }
  for (const BlockDevice& d : devices) {
    if (!d.suggested_dir.empty()) {
      std::printf("suggest: data_dirs += \"%s\"   (%s, %.1f GB)\n", d.suggested_dir.c_str(),
                  d.name.c_str(), double(d.bytes) / 1e9);
    }
  }
  return 0;
}

int BlockOp(const std::string& mountpoint, const std::string& op, const std::string& block,
            bool as_json) {
  std::string why;
  auto path = RelativeBlockPath(mountpoint, block, why);
  if (!path) {
    return Fail(op + ": given \"" + block + "\", which is not a block: " + why + ". " +
                    BlockForms(mountpoint),
                64);
  }
  return Send(mountpoint, {{"op", op}, {"path", *path}}, as_json,
              [&](const json&) { return op + ": " + *path + "\n"; });
}

int Path(const std::string& identity_file, bool as_json) {
  auto id = LoadIdentity(identity_file);
  if (!id) return 64;
  BlockAddress a = AddressOf(*id);
  if (as_json) {
    std::cout << json{{"path", a.RelativePath()}, {"tenant", a.tenant}, {"namespace", a.ns},
                      {"block", a.block}, {"identity_hex", HexEncode(EncodePhysicalKey(*id))}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << a.RelativePath() << "\n";
  }
  return 0;
}

int Lookup(const std::string& mountpoint, const std::string& identity_file, bool as_json) {
  auto id = LoadIdentity(identity_file);
  if (!id) return 64;
  std::string error;
  int err = 0;
  auto reply = Request(mountpoint, {{"op", "lookup"}, {"identity", HexEncode(EncodePhysicalKey(*id))}},
                       error, &err);
  if (!reply) return Fail(error, 2, err);
  if (!reply->value("ok", false)) return Refused(*reply);
  std::string result = (*reply)["result"];
  if (as_json) {
    std::cout << reply->dump(2) << "\n";
  } else {
    if (result == "miss") std::cout << "miss (" << (*reply)["reason"].get<std::string>() << ")\n";
    else std::cout << result << " " << (*reply)["path"].get<std::string>() << " valid_length="
                   << (*reply)["valid_length"] << "\n";
  }
  return result == "miss" ? 1 : 0;
}

int Status(const std::string& mountpoint, bool as_json) {
  std::string error;
  int err = 0;
  auto reply = Request(mountpoint, {{"op", "status"}}, error, &err);
  if (!reply) return Fail(error, 2, err);
  if (!reply->value("ok", false)) return Refused(*reply);
  if (as_json) {
    std::cout << reply->dump(2) << "\n";
    return 0;
  }
  std::cout << "mountpoint: " << mountpoint << "\nepoch: " << (*reply)["epoch"]
            << ((*reply).value("draining", false) ? " (draining: new fills refused)" : "") << "\n";
  if (reply->contains("data_dirs")) {
    for (const auto& d : (*reply)["data_dirs"]) {
      std::cout << "data dir: " << d["path"].get<std::string>()
                << (d["isolated"].get<bool>() ? " (isolated)" : "") << "\n";
    }
  }
  if ((*reply)["tenants"].empty()) {
    // The daemon lists only the caller's tenants (all of them for an admin).
    if (reply->contains("data_dirs")) {
      std::cout << "no tenants: the configuration defines none\n";
    } else {
      std::cout << "no tenants: the caller (uid " << ::geteuid() << ", gid " << ::getegid()
                << ") is a member of no tenant, by uid or group; status lists only the caller's "
                   "tenants (admins see every tenant)\n";
    }
    return 0;
  }
  std::printf("%-20s %8s %14s %6s %10s %10s %10s %8s %9s\n", "TENANT", "BLOCKS", "BYTES", "RESV",
              "HITS", "PREFIX", "MISSES", "COMMITS", "CSUM_ERR");
  for (auto& [name, t] : (*reply)["tenants"].items()) {
    std::printf("%-20s %8llu %14llu %6llu %10llu %10llu %10llu %8llu %9llu\n", name.c_str(),
                t["blocks"].get<unsigned long long>(), t["bytes"].get<unsigned long long>(),
                t["reservations"].get<unsigned long long>(), t["hits"].get<unsigned long long>(),
                t["prefix_hits"].get<unsigned long long>(), t["misses"].get<unsigned long long>(),
                t["commits"].get<unsigned long long>(),
                t["checksum_failures"].get<unsigned long long>());
  }
  return 0;
}

int Inspect(const std::string& block_path, bool verify, bool as_json) {
  // A path inside a gpucachefs mount answers our xattrs; anything else is read as a backing
  // block file (offline, no daemon needed).
  if (Xattr(block_path, "state")) return InspectMounted(block_path, verify, as_json);
  return InspectFile(block_path, verify, as_json);
}

}  // namespace gpucache::ctl
