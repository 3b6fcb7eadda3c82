// unit_sandbox UNIT -- COMMAND...: runs COMMAND under the restrictions of a systemd unit's
// [Service] section that can be applied without systemd as PID 1, so a test can start the
// daemon the way the unit would (tests/ops/hardened_test.cc).
//
// Applied: UMask=, LimitNOFILE=, CapabilityBoundingSet= (also the permitted and effective sets a
// root exec gets), NoNewPrivileges=, SystemCallFilter= (groups expanded by `systemd-analyze
// syscall-filter`, refusals with SystemCallErrorNumber=), SystemCallArchitectures=native,
// RestrictAddressFamilies=, RestrictNamespaces=yes, MemoryDenyWriteExecute=, LockPersonality=.
// Not applied (they need systemd's cgroup or its own set-up): DevicePolicy=/DeviceAllow=,
// KeyringMode=, ProtectHostname='s UTS namespace, RestrictSUIDSGID= and RestrictRealtime=
// beyond what the system-call filter already refuses.
#include <errno.h>
#include <linux/capability.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "unit_sandbox: %s\n", what.c_str());
  std::exit(126);
}

std::vector<std::string> Words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// Every assignment in [Service], in order (a key may repeat).
std::vector<std::pair<std::string, std::string>> ServiceSettings(const std::string& unit) {
  std::ifstream in(unit);
  if (!in) Die("cannot read " + unit);
  std::vector<std::pair<std::string, std::string>> out;
  bool service = false;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      service = line == "[Service]";
      continue;
    }
    size_t eq = line.find('=');
    if (service && eq != std::string::npos) out.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  return out;
}

// System calls named by a SystemCallFilter= item: a name, or a group expanded (recursively)
// by systemd's own table.
void Expand(const std::string& item, std::set<std::string>& out) {
  if (item[0] != '@') {
    out.insert(item);
    return;
  }
  std::string cmd = "systemd-analyze syscall-filter --no-pager " + item + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) Die("cannot run systemd-analyze");
  char line[256];
  std::vector<std::string> names;
  while (std::fgets(line, sizeof line, p)) {
    std::string s(line);
    if (s.rfind("    ", 0) != 0) continue;
    s = s.substr(4);
    s.erase(s.find_last_not_of(" \n") + 1);
    if (!s.empty() && s[0] != '#') names.push_back(s);
  }
  if (::pclose(p) != 0 || names.empty()) Die("unknown system call group " + item);
  for (const std::string& n : names) Expand(n, out);
}

int CapabilityNumber(const std::string& name) {
  static const char* kNames[] = {
      "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
      "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
      "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW",
      "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT",
      "CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
      "CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
      "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE",
      "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ",
      "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE"};
  for (int i = 0; i < static_cast<int>(sizeof kNames / sizeof *kNames); ++i) {
    if (name == kNames[i]) return i;
  }
  Die("unknown capability " + name);
}

int FamilyNumber(const std::string& name) {
  static const std::map<std::string, int> kFamilies = {
      {"AF_UNIX", AF_UNIX}, {"AF_INET", AF_INET}, {"AF_INET6", AF_INET6},
      {"AF_NETLINK", AF_NETLINK}, {"AF_PACKET", AF_PACKET}};
  auto it = kFamilies.find(name);
  if (it == kFamilies.end()) Die("unknown address family " + name);
  return it->second;
}

void DropCapabilities(const std::vector<std::string>& keep_names) {
  std::set<int> keep;
  for (const std::string& n : keep_names) keep.insert(CapabilityNumber(n));
  for (int cap = 0; cap <= CAP_LAST_CAP; ++cap) {
    if (!keep.count(cap) && ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
      Die("PR_CAPBSET_DROP: " + std::string(std::strerror(errno)));
    }
  }
}

struct Filter {
  std::set<std::string> allowed;
  bool allow_list = false;
  int error = EPERM;
  std::vector<int> families;
  bool restrict_namespaces = false, deny_write_execute = false, lock_personality = false;
};

void Rule(scmp_filter_ctx ctx, uint32_t action, const char* name, std::vector<scmp_arg_cmp> cmp) {
  int nr = ::seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR) return;  // not on this architecture
  if (::seccomp_rule_add_array(ctx, action, nr, static_cast<unsigned>(cmp.size()), cmp.data()) != 0) {
    Die(std::string("seccomp rule for ") + name);
  }
}

// The calls the other directives restrict by argument: allowed only in the forms they permit.
void ConditionalRules(scmp_filter_ctx ctx, Filter& f) {
  auto take = [&](const char* name) { return f.allowed.erase(name) > 0 || !f.allow_list; };
  if (!f.families.empty() && take("socket")) {
    for (int fam : f.families) Rule(ctx, SCMP_ACT_ALLOW, "socket", {SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(fam))});
  }
  if (f.restrict_namespaces) {
    take("unshare");
    take("setns");
    if (take("clone")) Rule(ctx, SCMP_ACT_ALLOW, "clone", {SCMP_A0(SCMP_CMP_MASKED_EQ, 0x7E020000, 0)});
    if (take("clone3")) Rule(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3", {});  // as systemd: glibc falls back
  }
  if (f.deny_write_execute) {
    for (const char* name : {"mmap", "mprotect", "pkey_mprotect"}) {
      if (!take(name)) continue;
      Rule(ctx, SCMP_ACT_ALLOW, name, {SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0)});
      Rule(ctx, SCMP_ACT_ALLOW, name, {SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_WRITE, 0)});
    }
  }
  if (f.lock_personality && take("personality")) {
    Rule(ctx, SCMP_ACT_ALLOW, "personality", {SCMP_A0(SCMP_CMP_EQ, 0xffffffff)});
    Rule(ctx, SCMP_ACT_ALLOW, "personality", {SCMP_A0(SCMP_CMP_EQ, 0)});
  }
}

void LoadFilter(Filter& f) {
  scmp_filter_ctx ctx = ::seccomp_init(f.allow_list ? SCMP_ACT_ERRNO(f.error) : SCMP_ACT_ALLOW);
  if (!ctx) Die("seccomp_init");
  // libseccomp sets no_new_privs by default: leave that to NoNewPrivileges= (we are root).
  if (::seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0) != 0) Die("seccomp_attr_set");
  ConditionalRules(ctx, f);
  if (f.allow_list) {
    for (const std::string& name : f.allowed) Rule(ctx, SCMP_ACT_ALLOW, name.c_str(), {});
  }
  if (::seccomp_load(ctx) != 0) Die("seccomp_load");
  ::seccomp_release(ctx);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || std::string(argv[2]) != "--") Die("usage: unit_sandbox UNIT -- COMMAND...");
  Filter f;
  std::vector<std::string> capabilities;
  bool bound = false, no_new_privs = false;
  for (const auto& [key, value] : ServiceSettings(argv[1])) {
    if (key == "UMask") ::umask(static_cast<mode_t>(std::strtoul(value.c_str(), nullptr, 8)));
    else if (key == "LimitNOFILE") {
      rlim_t n = std::strtoull(value.c_str(), nullptr, 10);
      rlimit r{n, n};
      // A container may cap the hard limit below the unit's: keep what it allows.
      if (::setrlimit(RLIMIT_NOFILE, &r) != 0 && ::getrlimit(RLIMIT_NOFILE, &r) == 0) {
        r.rlim_cur = r.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &r);
      }
    } else if (key == "CapabilityBoundingSet") {
      bound = true;
      for (const std::string& c : Words(value)) capabilities.push_back(c);
    } else if (key == "NoNewPrivileges") no_new_privs = value == "yes";
    else if (key == "SystemCallFilter") {
      bool deny = !value.empty() && value[0] == '~';
      std::set<std::string> names;
      for (const std::string& w : Words(deny ? value.substr(1) : value)) Expand(w, names);
      if (deny) {
        for (const std::string& n : names) f.allowed.erase(n);
      } else {
        f.allow_list = true;
        f.allowed.insert(names.begin(), names.end());
      }
    } else if (key == "SystemCallErrorNumber") {
      if (value != "EPERM") Die("SystemCallErrorNumber other than EPERM");
    } else if (key == "RestrictAddressFamilies") {
      for (const std::string& w : Words(value)) f.families.push_back(FamilyNumber(w));
    } else if (key == "RestrictNamespaces") f.restrict_namespaces = value == "yes";
    else if (key == "MemoryDenyWriteExecute") f.deny_write_execute = value == "yes";
    else if (key == "LockPersonality") f.lock_personality = value == "yes";
  }
  if (bound) DropCapabilities(capabilities);
  if (no_new_privs && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) Die("PR_SET_NO_NEW_PRIVS");
  LoadFilter(f);
  ::execvp(argv[3], argv + 3);
  Die(std::string("exec ") + argv[3] + ": " + std::strerror(errno));
}
