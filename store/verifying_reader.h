// VerifyingReader: the BlockReader that IndexedStore::Open and OpenForCopy hand out. It serves a
// committed block's bytes only after the chunks they come from matched their checksums; a chunk
// that does not is reported to the store (which sets the block aside) and the read fails with
// kChecksumMismatch. Verification on read lives here and nowhere else.
//
// Thread safety: Read may be called from several threads at once (a thread-local buffer each).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "store/block_store.h"
#include "store/checksum.h"
#include "store/medium.h"

namespace gpucache {

class StoreCore;

// While a client's reader lives, the block counts as open (`holds_block`): evicting it
// quarantines it instead of freeing it. The daemon's own copy holds nothing up: it reads on
// from what it opened.
class VerifyingReader final : public BlockReader {
 public:
  VerifyingReader(StoreCore& store, BlockInfo info, std::shared_ptr<StoredPayload> stored,
                  std::unique_ptr<RawSource> src, PayloadChecksums sums, bool holds_block)
      : store_(store), info_(std::move(info)), stored_(std::move(stored)), src_(std::move(src)),
        sums_(std::move(sums)), holds_block_(holds_block) {}
  ~VerifyingReader() override;

  const BlockInfo& info() const override { return info_; }
  Result<size_t> Read(uint64_t offset, std::span<uint8_t> out) override;

 private:
  // Worked out when a read failed, not at each open.
  BlockLocation Location() const;

  StoreCore& store_;
  const BlockInfo info_;
  const std::shared_ptr<StoredPayload> stored_;  // where it was when opened (Location)
  std::unique_ptr<RawSource> src_;
  const PayloadChecksums sums_;
  const bool holds_block_;  // counted among the block's open readers
};

}  // namespace gpucache
