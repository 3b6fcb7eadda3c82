// store/fast_hash.h: the store's XXH3 goes through libxxhash's run-time dispatch (AVX-512, AVX2)
// and gives the same hashes as the plain functions, which this file calls: it includes
// <xxhash.h> alone, never the dispatch header, and declares the store function it checks.
#include <doctest/doctest.h>
#include <xxhash.h>
#if defined(GPUCACHE_XXH_DISPATCH)
#include <xxh_x86dispatch.h>
#endif

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace gpucache {
uint64_t ChunkChecksum(std::span<const uint8_t> chunk, uint64_t chunk_index);  // store/checksum.h
}  // namespace gpucache

#if defined(GPUCACHE_XXH_DISPATCH)
extern "C" XXH128_hash_t XXH3_128bits_dispatch(const void* input, size_t len);
#endif

namespace gpucache {
namespace {

TEST_CASE("fast_hash: the store's chunk checksums are the plain XXH3's, at every size") {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> bytes(3 << 20);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  for (size_t n : {size_t{0}, size_t{1}, size_t{16}, size_t{17}, size_t{128}, size_t{129}, size_t{240},
                   size_t{241}, size_t{1000}, size_t{4096}, size_t{65536}, size_t{65537}, size_t{1} << 20,
                   bytes.size()}) {
    CAPTURE(n);
    std::span<const uint8_t> s(bytes.data(), n);
    CHECK(ChunkChecksum(s, 5) == XXH3_64bits_withSeed(s.data(), s.size(), 5));
#if defined(GPUCACHE_XXH_DISPATCH)
    XXH128_hash_t fast = XXH3_128bits_dispatch(s.data(), s.size()), plain = XXH3_128bits(s.data(), s.size());
    CHECK(fast.low64 == plain.low64);
    CHECK(fast.high64 == plain.high64);
#endif
  }
}

#if defined(__x86_64__)
TEST_CASE("fast_hash: on x86-64 the store hashes through libxxhash's run-time dispatch") {
  // Debian's libxxhash (12 and 13) has it; without it every checksum runs on SSE2 at a quarter
  // of the speed (docs/performance.md, "The commit channel").
  // That each library calls only the dispatched functions is ctest fast_hash_only_dispatched_symbols
  // (tests/store/fast_hash_symbols.sh): a file that bypasses store/fast_hash.h shows there.
#if defined(GPUCACHE_XXH_DISPATCH)
  CHECK(XXH3_64bits_withSeed_dispatch("gpucache", 8, 1) == XXH3_64bits_withSeed("gpucache", 8, 1));
#else
  FAIL("built without GPUCACHE_XXH_DISPATCH: CMake found no XXH3_64bits_dispatch in libxxhash");
#endif
}
#endif

}  // namespace
}  // namespace gpucache
