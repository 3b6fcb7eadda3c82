// Daemon permission checks and the kernel's dentry cache (issue 29): a process whose working
// directory is inside a namespace asks the kernel for names there without walking through the
// tenant directory. An entry the kernel cached would answer it without the daemon being asked:
// a committed block's existence and attributes, or a cached miss, told to a process that is no
// longer a member. Every such answer must be the daemon's: EACCES.
#include <doctest/doctest.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/mount/mount_helpers.h"

namespace gpucache {
namespace {

using namespace test;

// In a child: chdir into `dir` and stat `names` as root (so the kernel caches them), become
// uid/gid 2000 (a member of globex only), stat them again. Exit code: bit i set when name i
// did not answer EACCES the second time; 64 when the first stats did not see what they should.
int StatAfterSetuid(const std::string& dir, const std::string& hit, const std::string& miss) {
  pid_t pid = ::fork();
  if (pid == 0) {
    struct stat st {};
    if (::chdir(dir.c_str()) != 0) ::_exit(64);
    for (int i = 0; i < 3; i++) {  // looked up and cached, as a member sees them
      if (::stat(hit.c_str(), &st) != 0 || ::stat(miss.c_str(), &st) == 0) ::_exit(64);
    }
    if (::setgroups(0, nullptr) != 0 || ::setgid(2000) != 0 || ::setuid(2000) != 0) ::_exit(65);
    int bad = 0;
    if (::stat(hit.c_str(), &st) == 0 || errno != EACCES) bad |= 1;
    if (::stat(miss.c_str(), &st) == 0 || errno != EACCES) bad |= 2;
    if (::access(hit.c_str(), R_OK) == 0 || errno != EACCES) bad |= 4;
    ::_exit(bad);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 255;
}

}  // namespace

TEST_CASE("Daemon permissions: a cached block or miss is not shown to a process that left the tenant") {
  MountedFs m;  // fuse.permissions = "daemon" (the default), entries cached for an hour
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity("acme");
  REQUIRE(client.Commit(id, Payload(1000)) == 0);
  std::string path = client.PathOf(id);
  std::string dir = path.substr(0, path.find_last_of('/'));
  std::string block = path.substr(path.find_last_of('/') + 1);
  std::string missing = std::string(block.size(), '0');
  CHECK(StatAfterSetuid(dir, block, missing) == 0);
}

TEST_CASE("Daemon permissions: a member removed by a reload is refused inside the namespace its shell sits in") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity("acme");
  REQUIRE(client.Commit(id, Payload(1000)) == 0);
  std::string path = client.PathOf(id);
  std::string dir = path.substr(0, path.find_last_of('/'));
  int to_child[2], from_child[2];
  REQUIRE(::pipe(to_child) == 0);
  REQUIRE(::pipe(from_child) == 0);
  pid_t pid = ::fork();
  if (pid == 0) {  // uid 1000, a member of acme, sits in the namespace
    char go;
    if (::setgroups(0, nullptr) != 0 || ::setgid(1000) != 0 || ::setuid(1000) != 0) ::_exit(65);
    struct stat st {};
    if (::chdir(dir.c_str()) != 0 || ::stat(path.substr(dir.size() + 1).c_str(), &st) != 0) ::_exit(64);
    (void)!::write(from_child[1], "r", 1);
    (void)!::read(to_child[0], &go, 1);  // the reload happened
    bool refused = ::stat(path.substr(dir.size() + 1).c_str(), &st) != 0 && errno == EACCES;
    ::_exit(refused ? 0 : 1);
  }
  char ready;
  REQUIRE(::read(from_child[0], &ready, 1) == 1);
  // acme loses uid 1000.
  std::ofstream(m.config()) << "data_dir = \"" << m.data() << "\"\n[admins]\nuids = [0]\n"
                            << "[tenants.acme]\nuids = [0]\n[tenants.globex]\nuids = [2000]\n"
                            << "[metrics]\nlisten = \"\"\n";
  size_t before = m.Log().size();
  REQUIRE(::kill(m.pid(), SIGHUP) == 0);
  for (int i = 0; i < 500 && m.Log().substr(before).find("reload: ") == std::string::npos; i++) {
    ::usleep(20000);
  }
  REQUIRE(m.Log().substr(before).find("reload: configuration reloaded") != std::string::npos);
  (void)!::write(to_child[1], "g", 1);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK((WIFEXITED(status) ? WEXITSTATUS(status) : 255) == 0);
}

}  // namespace gpucache
