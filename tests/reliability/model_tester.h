// The model-based random tester's state and operations (model_test.cc runs it; the inputs that
// found issue 13's defects live in model_hostile.cc).
#pragma once

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <sstream>

#include "tests/reliability/model_slots.h"
#include "tests/reliability/reliability_helpers.h"

namespace gpucache::test {

// Far above what the slots ever hold (24 slots of at most about 450 KiB).
inline constexpr uint64_t kRetainLimit = 16ull << 20;

class ModelTester {
 public:
  ModelTester(uint64_t seed, MountedFs& m) : seed_(seed), rng_(seed), m_(m), client_(m.mnt()) {
    for (int k = 0; k < kSlots; ++k) {
      Slot s;
      s.id = SlotId(k);
      s.path = client_.PathOf(s.id);
      s.part_path = s.path + ".part";
      slots_.push_back(std::move(s));
    }
    ns_dir_ = NsDir(m_, slots_[0].id);
    REQUIRE(::mkdir(ns_dir_.c_str(), 0770) == 0);
  }

  ~ModelTester() { CloseAll(); }

  bool Run(int ops) {
    for (op_ = 0; op_ < ops && !failed_; ++op_) {
      outcome_ = -1;
      Step();
      if (outcome_ > 0 && !last_op_.empty()) {
        const char* name = strerrorname_np(outcome_);
        counts[last_op_ + "!" + (name ? name : std::to_string(outcome_))]++;
      }
    }
    if (!failed_) CheckAll("final");
    return !failed_;
  }

  std::map<std::string, int> counts;
  int ops_run() const { return op_; }

 private:
  // --- checking ----------------------------------------------------------------------------
  void Log(const std::string& s) {
    last_op_ = s.substr(0, s.find(' '));
    counts[last_op_]++;
    outcome_ = -1;
    recent_.push_back(std::to_string(op_) + ": " + s);
    if (recent_.size() > log_size_) recent_.pop_front();
  }

  bool Expect(bool ok, const std::string& what) {
    if (ok || failed_) return ok;
    failed_ = true;
    std::ostringstream out;
    out << "model divergence at op " << op_ << ": " << what
        << "\nreplay with GPUCACHE_SEED=" << seed_ << "\nlast operations:\n";
    for (const std::string& r : recent_) out << "  " << r << "\n";
    std::fputs(out.str().c_str(), stdout);
    FAIL_CHECK(out.str());
    return false;
  }

  bool ExpectErr(int got, int want, const std::string& what) {
    outcome_ = got;
    return Expect(got == want,
                  what + ": errno " + std::to_string(got) + ", model says " + std::to_string(want));
  }

  // --- operations --------------------------------------------------------------------------
  void Step() {
    // Half the time a slot with a fill in progress, so that fills get somewhere.
    std::vector<int> filling;
    for (int i = 0; i < kSlots; ++i) {
      if (slots_[i].part) filling.push_back(i);
    }
    int k = !filling.empty() && rng_.Chance(0.5) ? filling[rng_.Below(filling.size())]
                                                 : static_cast<int>(rng_.Below(kSlots));
    uint64_t dice = rng_.Below(1000);
    // Weights (per mille).
    if (dice < 100) return Create(k);
    if (dice < 130) return rng_.Chance(0.4) ? ReopenWithFlags(k) : OpenWriter(k);
    if (dice < 320) return Write(k);
    if (dice < 390) return SetIdentity(k);
    if (dice < 450) return Close(k);
    if (dice < 570) return Commit(k);
    if (dice < 680) return Read(k);
    if (dice < 730) return StatOp(k);
    if (dice < 740) return Refusals(k);
    if (dice < 750) return Truncate(k);
    if (dice < 780) return UnlinkBlock(k);
    if (dice < 800) return UnlinkPart(k);
    if (dice < 840) return Pin(k);
    if (dice < 870) return Evict(k);
    if (dice < 920) return Lookup(k);
    if (dice < 930) return List();
    if (dice < 940) return Hostile(k);
    if (dice < 970) return Corrupt(k);
    if (dice < 990) return CheckCounters();
    if (dice < 993) return Fence();
    return Restart();
  }

  void Create(int k) {
    Slot& s = slots_[k];
    Log("create " + std::to_string(k));
    int fd = ::open(s.part_path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    int err = fd < 0 ? errno : 0;
    int want = s.fence_blocked ? ESTALE : (s.part || s.committed) ? EEXIST : 0;
    if (!ExpectErr(err, want, "create .part of slot " + std::to_string(k))) return;
    if (fd >= 0) {
      s.part = Part{};
      s.part->fd = fd;
      s.fill = "pending";
    }
  }

  void OpenWriter(int k) {
    Slot& s = slots_[k];
    if (s.part && s.part->fd >= 0) return;
    Log("open_writer " + std::to_string(k));
    int fd = ::open(s.part_path.c_str(), O_WRONLY | O_CLOEXEC);
    int err = fd < 0 ? errno : 0;
    int want = s.fence_blocked ? ESTALE : s.part ? 0 : ENOENT;
    if (!ExpectErr(err, want, "open .part of slot " + std::to_string(k) + " for writing")) return;
    if (fd >= 0) s.part->fd = fd;
  }

  void Write(int k) {
    Slot& s = slots_[k];
    if (!s.part) return Create(k);
    if (s.part->fd < 0) return OpenWriter(k);
    Part& p = *s.part;
    size_t len = rng_.Range(1, 48 * 1024);
    size_t off = rng_.Chance(0.7) ? p.data.size() : rng_.Below(p.data.size() + 8192);
    if (off + len > 400 * 1024) off = rng_.Below(p.data.size() + 1);
    if (p.append) off = p.data.size();  // whatever offset pwrite names (Linux, O_APPEND)
    Log("write " + std::to_string(k) + " [" + std::to_string(off) + ", +" + std::to_string(len) +
        ")");
    Bytes bytes = SeededPayload(rng_.Next(), len);
    ssize_t n = ::pwrite(p.fd, bytes.data(), len, static_cast<off_t>(off));
    int err = n < 0 ? errno : 0;
    if (!ExpectErr(err, p.fenced ? ESTALE : 0, "write to .part of slot " + std::to_string(k)))
      return;
    if (n < 0) return;
    if (!Expect(static_cast<size_t>(n) == len, "short write")) return;
    if (p.data.size() < off + len) p.data.resize(off + len, 0);
    std::copy(bytes.begin(), bytes.end(), p.data.begin() + static_cast<long>(off));
  }

  // The writer reopens its own .part: O_TRUNC empties it (defect 1: it did not, and the rename
  // published the old bytes under the new), O_APPEND writes at its end, O_RDWR cannot read.
  void ReopenWithFlags(int k);  // model_hostile.cc

  // What another member (uid 1000; the writer is root) and over-long names may not do, and
  // commits that no eviction can make room for. None of it changes anything.
  void Hostile(int k);  // model_hostile.cc

  void SetIdentity(int k, bool right = false) {
    Slot& s = slots_[k];
    if (!s.part) return;
    int which = right || rng_.Chance(0.85) ? 1 : 2;
    Bytes ident = EncodePhysicalKey(which == 1 ? s.id : slots_[(k + 1) % kSlots].id);
    bool by_fd = s.part->fd >= 0;
    Log("set_identity " + std::to_string(k) + (which == 1 ? " right" : " wrong") +
        (by_fd ? " (fd)" : " (path)"));
    int rc = by_fd
                 ? ::fsetxattr(s.part->fd, "user.gpucache.identity", ident.data(), ident.size(), 0)
                 : ::setxattr(s.part_path.c_str(), "user.gpucache.identity", ident.data(),
                              ident.size(), 0);
    int err = rc < 0 ? errno : 0;
    // A fenced fill hears ESTALE, by path (the name) and by descriptor (adr/0006).
    int want = s.part->fenced ? ESTALE : 0;
    if (!ExpectErr(err, want, "set identity of slot " + std::to_string(k))) return;
    if (rc == 0) s.part->identity = which;
  }

  void Close(int k) {
    Slot& s = slots_[k];
    if (!s.part || s.part->fd < 0) return;
    Log("close " + std::to_string(k));
    int rc = ::close(s.part->fd);
    s.part->fd = -1;
    Expect(rc == 0, "close of a .part failed: errno " + std::to_string(errno));
    if (s.part->fenced) s.part.reset();  // a fenced fill is gone once its last writer closes
  }

  void Commit(int k) {
    Slot& s = slots_[k];
    // The usual idiom is write, close, rename: mostly close first.
    if (s.part && s.part->identity != 1 && rng_.Chance(0.6)) SetIdentity(k, true);
    if (s.part && s.part->fd >= 0 && rng_.Chance(0.6)) Close(k);
    Log("commit " + std::to_string(k));
    int rc = ::rename(s.part_path.c_str(), s.path.c_str());
    int err = rc < 0 ? errno : 0;
    int want;
    if (s.fence_blocked)
      want = ESTALE;
    else if (!s.part)
      want = ENOENT;
    else if (s.part->fd >= 0)
      want = EBUSY;
    else if (s.part->identity != 1 || s.part->data.empty())
      want = EINVAL;
    else
      want = 0;
    if (!ExpectErr(err, want, "commit of slot " + std::to_string(k))) return;
    if (rc == 0) {
      s.committed = std::move(s.part->data);
      s.part.reset();
      s.fill = "finished";
      s.pinned = s.read = s.corrupt = false;
    }
  }

  void Read(int k) {
    Slot& s = slots_[k];
    bool whole = !s.committed || s.corrupt || rng_.Chance(0.5);
    if (whole) {
      Log("read " + std::to_string(k));
      ReadOutcome r = ReadWhole(s.path);
      s.read = true;
      if (!s.committed) {
        ExpectErr(r.err, ENOENT, "read of absent slot " + std::to_string(k));
        return;
      }
      if (!Expect(WrongBytes(r.got, *s.committed) == 0,
                  "wrong bytes read from slot " + std::to_string(k)))
        return;
      if (s.corrupt) {
        if (!ExpectErr(r.err, EIO, "read of damaged slot " + std::to_string(k))) return;
        failures_since_start_++;
        Removed(k);
        return;
      }
      ExpectErr(r.err, 0, "read of slot " + std::to_string(k));
      Expect(r.got.size() == s.committed->size(), "short read of slot " + std::to_string(k));
      return;
    }
    size_t size = s.committed->size();
    size_t off = rng_.Below(size + 100), len = rng_.Range(1, 200 * 1024);
    Log("pread " + std::to_string(k) + " [" + std::to_string(off) + ", +" + std::to_string(len) +
        ")");
    int fd = ::open(s.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (!ExpectErr(fd < 0 ? errno : 0, 0, "open of slot " + std::to_string(k))) return;
    Bytes buf(len);
    ssize_t n = ::pread(fd, buf.data(), len, static_cast<off_t>(off));
    int err = n < 0 ? errno : 0;
    ::close(fd);
    s.read = true;
    if (!ExpectErr(err, 0, "pread of slot " + std::to_string(k))) return;
    size_t want = off >= size ? 0 : std::min(len, size - off);
    if (!Expect(static_cast<size_t>(n) == want,
                "pread returned " + std::to_string(n) + ", model " + std::to_string(want))) {
      return;
    }
    Expect(std::equal(buf.begin(), buf.begin() + n,
                      s.committed->begin() + static_cast<long>(std::min(off, size))),
           "wrong bytes in pread of slot " + std::to_string(k));
  }

  void StatOp(int k) {
    Slot& s = slots_[k];
    Log("stat " + std::to_string(k));
    struct stat st;
    int err = ::stat(s.path.c_str(), &st) == 0 ? 0 : errno;
    if (!ExpectErr(err, s.committed ? 0 : ENOENT, "stat of slot " + std::to_string(k))) return;
    if (s.committed) {
      Expect(static_cast<size_t>(st.st_size) == s.committed->size(),
             "size of slot " + std::to_string(k));
      char v[4];
      ssize_t n = ::getxattr(s.path.c_str(), "user.gpucache.pinned", v, sizeof v);
      Expect(n == 1 && v[0] == (s.pinned ? '1' : '0'), "pinned xattr of slot " + std::to_string(k));
    }
    err = ::stat(s.part_path.c_str(), &st) == 0 ? 0 : errno;
    int want = s.fence_blocked ? ESTALE : (s.part && !s.part->fenced) ? 0 : ENOENT;
    if (!ExpectErr(err, want, "stat of .part of slot " + std::to_string(k))) return;
    if (err == 0)
      Expect(static_cast<size_t>(st.st_size) == s.part->data.size(),
             ".part size of slot " + std::to_string(k));
    // What joiners see: the outcome of the latest fill, on the namespace directory.
    char v[32];
    std::string key = "user.gpucache.fill." + AddressOf(s.id).block;
    ssize_t n = ::getxattr(ns_dir_.c_str(), key.c_str(), v, sizeof v);
    std::string fill =
        n < 0 ? (errno == ENODATA ? "" : "errno " + std::to_string(errno)) : std::string(v, n);
    Expect(fill == s.fill, "fill outcome of slot " + std::to_string(k) + ": '" + fill +
                               "', model '" + s.fill + "'");
  }

  // Calls that must be refused: reading a .part (EBUSY), writing or truncating a committed
  // block (EPERM).
  void Refusals(int k);  // model_hostile.cc

  // ftruncate of a .part being written: shrinks or extends (with zeros) the reservation.
  void Truncate(int k) {
    Slot& s = slots_[k];
    if (!s.part || s.part->fd < 0) return;
    Part& p = *s.part;
    size_t to =
        rng_.Chance(0.5) ? rng_.Below(p.data.size() + 1) : p.data.size() + rng_.Below(16384);
    Log("truncate " + std::to_string(k) + " to " + std::to_string(to));
    int err = ::ftruncate(p.fd, static_cast<off_t>(to)) == 0 ? 0 : errno;
    // A fenced fill should hear ESTALE (adr/0006); the size change says ENOENT today (the
    // reservation is gone). Either is accepted until that is settled.
    if (p.fenced && err == ENOENT) err = ESTALE;
    if (!ExpectErr(err, p.fenced ? ESTALE : 0, "truncate of .part of slot " + std::to_string(k)))
      return;
    if (err == 0) p.data.resize(to, 0);
  }

  void UnlinkBlock(int k) {
    Slot& s = slots_[k];
    Log("unlink " + std::to_string(k));
    int err = ::unlink(s.path.c_str()) == 0 ? 0 : errno;
    if (!ExpectErr(err, s.committed ? 0 : ENOENT, "unlink of slot " + std::to_string(k))) return;
    if (err == 0) {
      s.committed.reset();
      s.corrupt = false;
    }
  }

  void UnlinkPart(int k) {
    Slot& s = slots_[k];
    if (s.part && s.part->fd >= 0) Close(k);
    Log("unlink_part " + std::to_string(k));
    int err = ::unlink(s.part_path.c_str()) == 0 ? 0 : errno;
    int want = s.fence_blocked ? ESTALE : s.part ? 0 : ENOENT;
    if (!ExpectErr(err, want, "unlink of .part of slot " + std::to_string(k))) return;
    if (err == 0) {
      s.part.reset();
      s.fill = "failed";
    }
  }

  void Pin(int k) {
    Slot& s = slots_[k];
    bool pin = rng_.Chance(0.6);
    bool by_ctl = rng_.Chance(0.5);
    Log(std::string(pin ? "pin " : "unpin ") + std::to_string(k) +
        (by_ctl ? " (ctl)" : " (xattr)"));
    int err;
    if (by_ctl) {
      nlohmann::json j =
          ControlJson(m_, std::string("{\"op\":\"") + (pin ? "pin" : "unpin") + "\",\"path\":\"" +
                              AddressOf(s.id).RelativePath() + "\"}");
      err = j.value("ok", false) ? 0 : j.value("errno", "") == "ENOENT" ? ENOENT : EIO;
    } else {
      err = ::setxattr(s.path.c_str(), "user.gpucache.pinned", pin ? "1" : "0", 1, 0) == 0 ? 0
                                                                                           : errno;
    }
    if (!ExpectErr(err, s.committed ? 0 : ENOENT, "pin of slot " + std::to_string(k))) return;
    if (err == 0) s.pinned = pin;
  }

  void Evict(int k) {
    Slot& s = slots_[k];
    Log("evict " + std::to_string(k));
    nlohmann::json j =
        ControlJson(m_, "{\"op\":\"evict\",\"path\":\"" + AddressOf(s.id).RelativePath() + "\"}");
    std::string got = j.value("ok", false) ? "ok" : j.value("errno", "?");
    std::string want = !s.committed ? "ENOENT" : s.pinned ? "EBUSY" : "ok";
    if (got != "ok") counts["evict!" + got]++;
    if (!Expect(got == want,
                "evict of slot " + std::to_string(k) + ": " + got + ", model says " + want))
      return;
    if (got == "ok") Removed(k);
  }

  // A block that left the namespace behind the kernel's back: the daemon invalidates the
  // kernel's entry from a thread of its own, so wait for it.
  void Removed(int k) {
    Slot& s = slots_[k];
    s.committed.reset();
    s.corrupt = false;
    Expect(WaitForMiss(s.path) == ENOENT,
           "slot " + std::to_string(k) + " still visible after its removal");
  }

  void Lookup(int k) {
    Slot& s = slots_[k];
    Log("lookup " + std::to_string(k));
    nlohmann::json j = ControlJson(
        m_, "{\"op\":\"lookup\",\"identity\":\"" + HexEncode(EncodePhysicalKey(s.id)) + "\"}");
    std::string got = j.value("result", "?");
    std::string want = s.committed                               ? "hit"
                       : (k % 2 == 1 && slots_[k - 1].committed) ? "prefix_hit"
                                                                 : "miss";
    counts["lookup=" + got]++;
    if (!Expect(got == want,
                "lookup of slot " + std::to_string(k) + ": " + got + ", model says " + want))
      return;
    if (want == "prefix_hit") {
      Expect(j.value("path", "") == AddressOf(slots_[k - 1].id).RelativePath(),
             "prefix hit names the wrong block");
    }
  }

  void List() {
    Log("list");
    std::vector<std::string> got = ListMounted(ns_dir_), want;
    for (const Slot& s : slots_) {
      if (s.committed) want.push_back(AddressOf(s.id).block);
      if (s.part && !s.part->fenced) want.push_back(AddressOf(s.id).block + ".part");
    }
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    Expect(got == want, "listing has " + std::to_string(got.size()) + " entries, model " +
                            std::to_string(want.size()));
  }

  // Damage a payload byte on disk. Only blocks whose pages the kernel cannot have cached (not
  // read since the last restart): the product promises that every byte served was verified
  // once, not that later damage under cached pages is seen (corruption_test covers that).
  void Corrupt(int) {
    std::vector<int> fresh;
    for (int i = 0; i < kSlots; ++i) {
      if (slots_[i].committed && !slots_[i].read && !slots_[i].corrupt) fresh.push_back(i);
    }
    if (fresh.empty()) return;
    int k = fresh[rng_.Below(fresh.size())];
    Slot& s = slots_[k];
    size_t at = rng_.Below(s.committed->size());
    Log("corrupt " + std::to_string(k) + " payload byte " + std::to_string(at));
    std::string backing = m_.data() + "/blocks/" + AddressOf(s.id).RelativePath();
    int fd = ::open(backing.c_str(), O_RDWR);
    if (!Expect(fd >= 0, "no backing file for committed slot " + std::to_string(k))) return;
    uint8_t b = static_cast<uint8_t>((*s.committed)[at] ^ (1u << rng_.Below(8)));
    bool ok = ::pwrite(fd, &b, 1, static_cast<off_t>(64 * 1024 + at)) == 1;
    ::close(fd);
    if (Expect(ok, "damaging slot " + std::to_string(k))) s.corrupt = true;
  }

  void CheckCounters() {
    Log("counters");
    uint64_t blocks = 0, bytes = 0, reservations = 0, inflight = 0;
    for (const Slot& s : slots_) {
      if (s.committed) {
        blocks++;
        bytes += s.committed->size();
      }
      if (s.part && !s.part->fenced) {
        reservations++;
        inflight += s.part->data.size();
      }
    }
    nlohmann::json j = ControlJson(m_, R"({"op":"status"})");
    const nlohmann::json& t = j["tenants"]["acme"];
    Expect(t.value("blocks", ~0ull) == blocks, "blocks counter");
    Expect(t.value("bytes", ~0ull) == bytes, "bytes counter");
    Expect(t.value("reservations", ~0ull) == reservations, "reservations counter");
    Expect(t.value("inflight_bytes", ~0ull) == inflight, "inflight_bytes counter");
    Expect(t.value("checksum_failures", ~0ull) == failures_since_start_,
           "checksum_failures counter");
  }

  void Fence() {
    Log("fence");
    nlohmann::json j = ControlJson(m_, R"({"op":"fence"})");
    if (!Expect(j.value("ok", false), "fence refused")) return;
    for (Slot& s : slots_) {
      if (!s.part || s.part->fenced) continue;
      s.fence_blocked = true;
      s.fill = "fenced";
      if (s.part->fd >= 0)
        s.part->fenced = true;  // lives until its writer closes
      else
        s.part.reset();
    }
  }

  void CloseAll() {
    for (Slot& s : slots_) {
      if (s.part && s.part->fd >= 0) ::close(s.part->fd);
      if (s.part) s.part->fd = -1;
    }
  }

  void Restart() {
    bool crash = rng_.Chance(0.5);
    Log(crash ? "restart (SIGKILL)" : "restart (SIGTERM)");
    CloseAll();
    if (crash)
      m_.Kill();
    else
      Expect(m_.Stop() == 0, "clean stop failed");
    m_.Start();
    failures_since_start_ = 0;
    for (Slot& s : slots_) {
      s.part.reset();
      s.fence_blocked = false;
      s.fill.clear();  // outcomes are remembered by the running daemon only
      s.read = false;  // a new mount: no cached pages
    }
    CheckAll("after restart");
  }

  void CheckAll(const std::string& when) {
    Log("check all " + when);
    for (int k = 0; k < kSlots && !failed_; ++k) {
      Slot& s = slots_[k];
      if (s.corrupt) continue;  // left for a read to find
      ReadOutcome r = ReadWhole(s.path);
      s.read = true;
      if (s.committed) {
        Expect(r.err == 0 && r.got == *s.committed, when + ": slot " + std::to_string(k) +
                                                        " differs (errno " + std::to_string(r.err) +
                                                        ")");
      } else {
        ExpectErr(r.err, ENOENT, when + ": absent slot " + std::to_string(k));
      }
    }
    List();
    CheckCounters();
  }

  uint64_t seed_;
  Rng rng_;
  MountedFs& m_;
  MountClient client_;
  std::string ns_dir_;
  std::vector<Slot> slots_;
  std::deque<std::string> recent_;
  // Operations printed at a divergence (GPUCACHE_MODEL_LOG=<n> for more).
  size_t log_size_ = std::getenv("GPUCACHE_MODEL_LOG")
                         ? std::strtoul(std::getenv("GPUCACHE_MODEL_LOG"), nullptr, 10)
                         : 40;
  int op_ = 0;
  int outcome_ = -1;  // errno of the operation's main call (0: success)
  std::string last_op_;
  bool failed_ = false;
  uint64_t failures_since_start_ = 0;
};

}  // namespace gpucache::test
