#include "fs/inode_table.h"

#include <doctest/doctest.h>

namespace gpucache {
namespace {

TEST_CASE("InodeTable: fixed inodes for the root, control files and tenants") {
  InodeTable t({"acme", "globex"});
  CHECK(t.Get(kRootIno)->kind == NodeKind::kRoot);
  CHECK(t.Get(kCtlIno)->kind == NodeKind::kCtlFile);
  CHECK(t.Get(kFirstTenantIno + 1)->tenant == "globex");
  CHECK(t.Ref(Node{NodeKind::kTenant, "acme"}) == kFirstTenantIno);
  CHECK_FALSE(t.Get(kFirstTenantIno + 2).has_value());
}

TEST_CASE("InodeTable: dynamic inodes live while the kernel remembers them") {
  InodeTable t({"acme"});
  Node block{NodeKind::kBlock, "acme", "ns", "b"};
  uint64_t ino = t.Ref(block);
  CHECK(ino >= kFirstDynamicIno);
  CHECK(t.Ref(block) == ino);  // two lookups
  t.Forget(ino, 1);
  CHECK(t.Get(ino) == block);
  t.Forget(ino, 1);
  CHECK_FALSE(t.Get(ino).has_value());
  CHECK(t.Ref(block) != ino);  // numbers are not reused
}

TEST_CASE("InodeTable: a committed reservation keeps its inode under the block's name") {
  InodeTable t({"acme"});
  Node part{NodeKind::kPart, "acme", "ns", "b"};
  Node block{NodeKind::kBlock, "acme", "ns", "b"};
  uint64_t ino = t.Ref(part);
  t.Rename(ino, block);
  CHECK(t.Get(ino) == block);
  CHECK(t.Find(block) == ino);
  CHECK_FALSE(t.Find(part).has_value());
  t.Forget(ino, 1);
  CHECK(t.DynamicCount() == 0);
}

}  // namespace
}  // namespace gpucache
