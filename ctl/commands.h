// gpucachectl commands. Each returns the process exit code (docs/gpucachectl.md):
//   0 success, 1 the thing asked about is absent (a miss), 2 an error, 64 bad usage.
#pragma once

#include <string>

namespace gpucache::ctl {

int Path(const std::string& identity_file, bool json);
int Lookup(const std::string& mountpoint, const std::string& identity_file, bool json);
int Status(const std::string& mountpoint, bool json);
int Inspect(const std::string& block_path, bool verify, bool json);

}  // namespace gpucache::ctl
