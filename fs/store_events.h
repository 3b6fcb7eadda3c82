// Log lines for what the store tells the daemon through its observers and answers, and that
// an operator must hear about: each says what happened, where, and what to do.
//
// Thread safety: any thread; the lines are rate-limited (fs/log.h).
#pragma once

#include "store/block_store.h"

namespace gpucache {

// One warning per automatic fence (BlockAdmin::SetAutomaticFenceObserver), at most one a
// minute: fills that hear ESTALE with no operator's fence have this line to explain them.
void LogAutomaticFence(const AutomaticFence& fence);

// A block's payload could not be read (an I/O error from its data directory's device, for any
// reader: BlockAdmin::SetBackingReadErrorObserver): a warning that names the data directory,
// the block and its file, at most three lines a minute per data directory, with how many more
// failed there since.
void LogBackingReadError(const BlockAddress& address, const BlockLocation& where);

}  // namespace gpucache
