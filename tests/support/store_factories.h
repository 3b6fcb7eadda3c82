// The two media a store test runs on, as factories for doctest's TEST_CASE_TEMPLATE: the
// in-memory reference and the file medium in a scratch directory.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "store/file_store.h"
#include "store/memory_store.h"
#include "tests/support/temp_dir.h"

namespace gpucache::test {

struct MemoryFactory {
  std::unique_ptr<IndexedStore> Make(StoreOptions o = {}) { return std::make_unique<MemoryStore>(o); }
};

struct FileFactory {
  TempDir dir;
  std::unique_ptr<IndexedStore> Make(StoreOptions o = {}) {
    std::string error;
    auto s = OpenFileStore(dir.path() + "/data", o, nullptr, &error);
    REQUIRE_MESSAGE(s, error);
    return s;
  }
};

}  // namespace gpucache::test
