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

// Regression (review, 2026-12-07): an inode stood for a name, so an open through an inode of a
// block that left (the kernel's entry, /proc/PID/fd) opened the block that came back under the
// name, and the two shared one page cache: a reader got pages of both.
TEST_CASE("InodeTable: an inode names one stored block, whichever way the name changes") {
  InodeTable t({"acme"});
  Node block{NodeKind::kBlock, "acme", "ns", "b"};
  uint64_t ino = t.Ref(block);
  const BoundAttrs seven{700, 1, 2, 3}, eight{800, 1, 2, 4};
  CHECK_FALSE(t.AttrsOf(ino).has_value());
  CHECK(t.Bind(ino, 7, seven));  // first open: bound to what the name holds
  CHECK(t.Bind(ino, 7, seven));
  CHECK_FALSE(t.Bind(ino, 8, eight));  // another stored block under the name: not this inode's
  CHECK(t.AttrsOf(ino)->size == 700);  // its own block's attributes stay
  CHECK_FALSE(t.Bind(ino + 1, 7, seven));  // unknown inode
  SUBCASE("a lookup that finds another block gets a new inode") {
    uint64_t again = t.Ref(block, 7);
    CHECK(again == ino);
    uint64_t other = t.Ref(block, 8);  // the removal's Unmap has not come yet
    CHECK(other != ino);
    CHECK(t.Find(block) == other);
    CHECK_FALSE(t.Bind(ino, 7, seven));  // its name left it
    CHECK(t.Bind(other, 8, eight));
  }
  SUBCASE("a late notice of the block that left keeps the inode of the one that came back") {
    uint64_t other = t.Ref(block, 8);
    CHECK_FALSE(t.Unmap(block, 8).has_value());
    CHECK(t.Find(block) == other);
    CHECK(t.Bind(other, 8, eight));
    CHECK(t.Unmap(block, 9) == other);  // a notice while a third block holds the name
  }
  SUBCASE("an unmapped inode binds to nothing, even the block it had") {
    t.Unmap(block);
    CHECK_FALSE(t.Bind(ino, 7, seven));
  }
  SUBCASE("a rename over a stale inode's name takes the name from it") {
    Node part{NodeKind::kPart, "acme", "ns", "b"};
    uint64_t fill = t.Ref(part);
    t.Rename(fill, block, 9);
    CHECK(t.Find(block) == fill);
    CHECK_FALSE(t.Bind(ino, 7, seven));
    CHECK(t.Bind(fill, 9, eight));
    CHECK_FALSE(t.Bind(fill, 7, seven));
  }
}

}  // namespace
}  // namespace gpucache
