#include "cold/keyring.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sstream>

#include "store/identity.h"

namespace gpucache::cold {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::shared_ptr<const Keyring> Fail(std::string* error, std::string why) {
  *error = std::move(why);
  return nullptr;
}

}  // namespace

std::shared_ptr<const Keyring> Keyring::Parse(std::string_view text, std::string* error) {
  std::map<std::string, std::vector<uint8_t>> secrets;
  std::string current;
  std::istringstream in{std::string(text)};
  std::string raw;
  for (int line = 1; std::getline(in, raw); line++) {
    std::string_view s = Trim(raw);
    if (s.empty() || s.front() == '#') continue;
    std::string where = "line " + std::to_string(line) + ": ";
    size_t eq = s.find('=');
    if (eq == std::string_view::npos) return Fail(error, where + "expected name = value");
    std::string_view name = Trim(s.substr(0, eq)), value = Trim(s.substr(eq + 1));
    if (name == "current") {
      if (!IsValidKeyId(value)) return Fail(error, where + "current: not a valid key id");
      current = value;
      continue;
    }
    if (name.substr(0, 4) != "key." || !IsValidKeyId(name.substr(4))) {
      return Fail(error, where + "expected 'current' or 'key.<id>' ([A-Za-z0-9._-], 1..32)");
    }
    auto secret = value.size() % 2 == 0 ? HexDecode(value) : std::nullopt;
    if (!secret || secret->size() < 32 || secret->size() > 64) {
      return Fail(error, where + "a key must be 64..128 hex digits (32..64 bytes)");
    }
    if (!secrets.emplace(std::string(name.substr(4)), std::move(*secret)).second) {
      return Fail(error, where + "key listed twice");
    }
  }
  if (secrets.empty()) return Fail(error, "no key.<id> lines");
  if (current.empty()) return Fail(error, "no 'current = <id>' line");
  if (!secrets.count(current)) return Fail(error, "current names a key that is not listed");
  return Of(std::move(secrets), std::move(current));
}

std::shared_ptr<const Keyring> Keyring::Load(const std::string& path, std::string* error) {
  // Checked on the open descriptor, so the file read is the file checked. A symlink is
  // followed (secret volumes are often links); its target must pass the checks.
  // O_NONBLOCK: a FIFO named by mistake is refused below instead of hanging a start or reload.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return Fail(error, path + ": cannot open");
  struct stat st {};
  std::string why;
  if (::fstat(fd, &st) != 0) why = "cannot stat";
  else if (!S_ISREG(st.st_mode)) why = "not a regular file";
  else if (st.st_uid != 0 && st.st_uid != ::geteuid()) why = "must be owned by root or the daemon's user";
  else if (st.st_mode & 077) why = "must not be readable by group or others (chmod 600)";
  else if (st.st_size > 64 * 1024) why = "larger than 64 KiB";
  std::string text;
  if (why.empty()) {
    text.resize(static_cast<size_t>(st.st_size));
    ssize_t n = ::pread(fd, text.data(), text.size(), 0);
    if (n != static_cast<ssize_t>(text.size())) why = "cannot read";
  }
  ::close(fd);
  if (!why.empty()) return Fail(error, path + ": " + why);
  auto k = Parse(text, &why);
  if (!k) return Fail(error, path + ": " + why);
  return k;
}

std::shared_ptr<const Keyring> Keyring::Of(std::map<std::string, std::vector<uint8_t>> secrets,
                                           std::string current) {
  auto k = std::make_shared<Keyring>();
  k->secrets_ = std::move(secrets);
  k->current_ = std::move(current);
  return k;
}

std::vector<std::string> Keyring::ids() const {
  std::vector<std::string> out;
  for (const auto& [id, s] : secrets_) out.push_back(id);
  return out;
}

std::optional<TenantKey> Keyring::TenantKeyOf(std::string_view id, std::string_view tenant) const {
  auto it = secrets_.find(std::string(id));
  if (it == secrets_.end()) return std::nullopt;
  return DeriveTenantKey(it->second, tenant);
}

Keyring::Seal Keyring::SealFor(std::string_view domain, std::string_view tenant,
                               std::span<const uint8_t> message) const {
  Seal s{current_, {}};
  s.mac = ComputeSealMac(*TenantKeyOf(current_, tenant), domain, tenant, current_, message);
  return s;
}

SealCheck Keyring::Verify(std::string_view domain, std::string_view tenant,
                          std::span<const uint8_t> message, const Seal& seal) const {
  std::optional<TenantKey> key = TenantKeyOf(seal.key_id, tenant);
  if (!key) return SealCheck::kUnknownKey;
  SealMac want = ComputeSealMac(*key, domain, tenant, seal.key_id, message);
  return SealMacEqual(want, seal.mac) ? SealCheck::kOk : SealCheck::kBadSeal;
}

}  // namespace gpucache::cold
