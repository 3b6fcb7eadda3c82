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

TEST_CASE("InodeTable: a block that left gives its name a new inode, the old one lives on") {
  InodeTable t({"acme"});
  Node block{NodeKind::kBlock, "acme", "ns", "b"};
  uint64_t old_ino = t.Ref(block);
  CHECK(t.Unmap(block) == old_ino);
  CHECK_FALSE(t.Unmap(block).has_value());
  CHECK_FALSE(t.Find(block).has_value());
  CHECK(t.Get(old_ino) == block);  // an open file of the block that left still resolves
  uint64_t new_ino = t.Ref(block);
  CHECK(new_ino != old_ino);
  t.Forget(old_ino, 1);  // forgetting the old inode leaves the name's new one alone
  CHECK(t.Find(block) == new_ino);
  CHECK_FALSE(t.Unmap(Node{NodeKind::kRoot}).has_value());
}

TEST_CASE("InodeTable: cached pages are kept only across opens of the same stored block") {
  InodeTable t({"acme"});
  uint64_t ino = t.Ref(Node{NodeKind::kBlock, "acme", "ns", "b"});
  CHECK(t.KeepCache(ino, 7));  // first open: nothing cached
  CHECK(t.KeepCache(ino, 7));
  CHECK_FALSE(t.KeepCache(ino, 8));  // another block under the name: its pages are dropped
  CHECK(t.KeepCache(ino, 8));
  CHECK_FALSE(t.KeepCache(ino + 1, 8));  // unknown inode
}

}  // namespace
}  // namespace gpucache
