// What the daemon logs for an operator about events the store only counts: each line says what
// happened, where, and what to do (fs/store_events.h). Checked through the captured log.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "store/memory_store.h"
#include "tests/support/fs_harness.h"
#include "tests/support/log_capture.h"

namespace gpucache {
namespace {

using namespace test;

// Two region ids an epoch (instead of about 4 billion): the third fill makes the store fence.
class SmallEpochs final : public IndexedStore {
 public:
  explicit SmallEpochs(StoreOptions options)
      : IndexedStore(TwoIdsAnEpoch(std::move(options)), std::make_unique<MemoryMedium>()) {}

 private:
  static StoreOptions TwoIdsAnEpoch(StoreOptions options) {
    options.region_ids_per_epoch = 2;
    return options;
  }
};

TEST_CASE("Filesystem log: an automatic fence names the new epoch and the fills it fenced") {
  BasicFsHarness<SmallEpochs> h;
  LogCapture log;
  const uint64_t first = h.store.Epoch();
  Reply open1 = h.CreatePart(SampleBlock(1));
  Reply open2 = h.CreatePart(SampleBlock(2));
  REQUIRE(open1.err == 0);
  REQUIRE(open2.err == 0);
  CHECK(log.text().find("automatic fence") == std::string::npos);

  Reply third = h.CreatePart(SampleBlock(3));  // the epoch gave out its ids: fenced first
  REQUIRE(third.err == 0);
  REQUIRE(h.store.Stats().automatic_fences == 1);
  const std::string text = log.text();
  CAPTURE(text);
  CHECK(text.find("warning: automatic fence") != std::string::npos);
  CHECK(text.find("into epoch " + std::to_string(first + 1)) != std::string::npos);
  CHECK(text.find("2 fill(s) open then hear ESTALE") != std::string::npos);
  for (Reply* r : {&open1, &open2, &third}) h.Close(*r->handle);
}

}  // namespace
}  // namespace gpucache
