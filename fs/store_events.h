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

// A block file could not be read (BlockAdmin::SetBackingReadErrorObserver: its payload by any
// reader, its header at an open, its payload read back at a commit): a warning that names the
// data directory, the block and its file, at most three lines a minute per data directory, with
// how many more failed there since. An I/O error points at the device; a file cut short since
// it was opened (BackingReadError::cut_short) points elsewhere, and its line says so instead.
void LogBackingReadError(const BackingReadError& error);

}  // namespace gpucache
