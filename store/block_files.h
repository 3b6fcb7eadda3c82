// Committed block files as a start and the walk meet them in a data directory: a file's header
// read and checked into the BlockInfo it describes, and a damaged file set aside for
// examination. Every file operation goes through Env.
#pragma once

#include <cstddef>
#include <string>

#include "store/block_store.h"
#include "store/data_dir.h"
#include "store/env.h"

namespace gpucache {

// Damaged block files kept in a directory's damaged/ for examination (the newest).
inline constexpr size_t kMaxDamagedFiles = 32;

// Reads and checks the block file at `path`; the BlockInfo it describes, or why not (in `why`):
// kInvalidArgument if the file is damaged (it can be set aside), kIoError if it could not be
// read (it is kept: a passing error is no reason to lose a block).
Result<BlockInfo> ReadBlockInfo(Env& env, const std::string& path, std::string& why);

// Moves the damaged block file at `path` into `dir`'s damaged/, keeping only the newest
// kMaxDamagedFiles there; where it cannot be moved, it is deleted. Says what became of it
// ("PATH moved to DAMAGED" or "PATH deleted ...").
std::string SetAsideDamaged(Env& env, const DataDir& dir, const std::string& path);

}  // namespace gpucache
