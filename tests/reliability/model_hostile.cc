// The model tester's operations that found issue 13's defects: reopening a .part with
// O_TRUNC, O_APPEND or O_RDWR, another member of the tenant touching the writer's .part, and
// refusals (names of 255 and 256 bytes, commits larger than anything could make room for).
#include "tests/reliability/model_tester.h"

namespace gpucache::test {

void ModelTester::ReopenWithFlags(int k) {
  Slot& s = slots_[k];
  if (!s.part || s.part->fd >= 0) return OpenWriter(k);
  int how = static_cast<int>(rng_.Below(3));
  int flags = how == 0 ? O_WRONLY | O_TRUNC : how == 1 ? O_WRONLY | O_APPEND : O_RDWR;
  Log(std::string("reopen ") + std::to_string(k) +
      (how == 0 ? " O_TRUNC" : how == 1 ? " O_APPEND" : " O_RDWR"));
  int fd = ::open(s.part_path.c_str(), flags | O_CLOEXEC);
  int err = fd < 0 ? errno : 0;
  int want = s.fence_blocked ? ESTALE : s.part->fenced ? ENOENT : 0;
  if (!ExpectErr(err, want, "reopen of .part of slot " + std::to_string(k))) return;
  if (fd < 0) return;
  s.part->fd = fd;
  s.part->append = how == 1;
  if (how == 0) s.part->data.clear();
  if (how == 2) {
    char c;
    ExpectErr(::pread(fd, &c, 1, 0) < 0 ? errno : 0, EBUSY, "read through an O_RDWR .part");
  }
}

void ModelTester::Hostile(int k) {
  Slot& s = slots_[k];
  uint64_t what = rng_.Below(4);
  // AsUser forks, and the child's exit closes its copies of every open .part descriptor,
  // which (as any close does) ends their writer role: only with none open.
  bool any_open = std::any_of(slots_.begin(), slots_.end(),
                              [](const Slot& o) { return o.part && o.part->fd >= 0; });
  if (what == 0 && any_open) what = 1;
  if (what == 0) {
    Log("second_member " + std::to_string(k));
    int want = s.fence_blocked ? ESTALE : (s.part && !s.part->fenced) ? EBUSY : ENOENT;
    int err = AsUser(1000, 1000, [&] {
      int fd = ::open(s.part_path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
      if (fd >= 0) ::close(fd);
      return fd < 0 ? errno : 0;
    });
    if (!ExpectErr(err, want, "another member's O_TRUNC of slot " + std::to_string(k))) return;
    err = AsUser(1000, 1000, [&] { return ::truncate(s.part_path.c_str(), 0) == 0 ? 0 : errno; });
    if (!ExpectErr(err, want, "another member's truncate of slot " + std::to_string(k))) return;
    if (want == EBUSY) {
      err = AsUser(1000, 1000, [&] { return ::unlink(s.part_path.c_str()) == 0 ? 0 : errno; });
      ExpectErr(err, EBUSY, "another member's unlink of slot " + std::to_string(k));
    }
    return;
  }
  if (what == 1) {
    size_t len = rng_.Chance(0.5) ? 255 : 256;
    Log("long_name " + std::to_string(len));
    struct stat st;
    std::string name = ns_dir_ + "/" + std::string(len, 'a');
    int err = ::stat(name.c_str(), &st) == 0 ? 0 : errno;
    if (!ExpectErr(err, len > 255 ? ENAMETOOLONG : ENOENT, "stat of a long name")) return;
    std::string part = ns_dir_ + "/" + std::string(len - 5, 'a') + ".part";
    int fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    err = fd < 0 ? errno : 0;
    if (fd >= 0) ::close(fd);
    ExpectErr(err, len > 255 ? ENAMETOOLONG : EINVAL, "create of a long .part name");
    return;
  }
  // Larger than max_retained_bytes (kRetainLimit): refused up front, nothing evicted, by the
  // declared size (fallocate) and by plain writes alike.
  if (s.part || s.committed || s.fence_blocked) return;
  bool declared = what == 2;
  Log(std::string("oversize ") + std::to_string(k) + (declared ? " declared" : " written"));
  uint64_t evictions = Counter(m_, "evictions");
  int fd = ::open(s.part_path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (!ExpectErr(fd < 0 ? errno : 0, 0, "create for an oversize commit")) return;
  Bytes ident = EncodePhysicalKey(s.id);
  int err = ::fsetxattr(fd, "user.gpucache.identity", ident.data(), ident.size(), 0) == 0 ? 0 : errno;
  if (declared && !err) err = ::fallocate(fd, 0, 0, kRetainLimit + 1) == 0 ? 0 : errno;
  if (!declared && !err) {
    Bytes piece = SeededPayload(rng_.Next(), 1 << 20);
    for (uint64_t at = 0; !err && at <= kRetainLimit; at += piece.size()) {
      err = ::pwrite(fd, piece.data(), piece.size(), static_cast<off_t>(at)) < 0 ? errno : 0;
    }
  }
  ::close(fd);
  if (!err) err = ::rename(s.part_path.c_str(), s.path.c_str()) == 0 ? 0 : errno;
  ::unlink(s.part_path.c_str());
  // Written piece by piece, a piece below the limit may first take every fill's uncommitted
  // bytes together past it: EAGAIN (they wait for each other's commits), refused all the same.
  if (!declared && err == EAGAIN) err = ENOSPC;
  if (!ExpectErr(err, ENOSPC, "oversize commit of slot " + std::to_string(k))) return;
  Expect(Counter(m_, "evictions") == evictions, "an oversize commit evicted blocks");
  s.fill = "failed";
}

void ModelTester::Refusals(int k) {
  Slot& s = slots_[k];
  Log("refusals " + std::to_string(k));
  int fd = ::open(s.part_path.c_str(), O_RDONLY | O_CLOEXEC);
  int err = fd < 0 ? errno : 0;
  if (fd >= 0) ::close(fd);
  int want = s.fence_blocked ? ESTALE : (s.part && !s.part->fenced) ? EBUSY : ENOENT;
  if (!ExpectErr(err, want, "read-open of .part of slot " + std::to_string(k))) return;
  fd = ::open(s.path.c_str(), O_WRONLY | O_CLOEXEC);
  err = fd < 0 ? errno : 0;
  if (fd >= 0) ::close(fd);
  if (!ExpectErr(err, s.committed ? EPERM : ENOENT, "write-open of slot " + std::to_string(k)))
    return;
  err = ::truncate(s.path.c_str(), 0) == 0 ? 0 : errno;
  ExpectErr(err, s.committed ? EPERM : ENOENT, "truncate of slot " + std::to_string(k));
}

}  // namespace gpucache::test
