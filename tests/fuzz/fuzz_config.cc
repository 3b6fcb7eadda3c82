// libFuzzer: the configuration loader. Property: a file is either refused with a ConfigError
// naming what is wrong, or yields a configuration that survives its own rendering.
#include <cstdlib>

#include "fs/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  gpucache::Config c;
  try {
    c = gpucache::ParseConfig(text, "fuzz.toml");
  } catch (const gpucache::ConfigError& e) {
    if (std::string(e.what()).empty()) std::abort();
    return 0;
  }
  if (c.tenants.empty() || c.data_dirs.empty()) std::abort();
  gpucache::Config again = gpucache::ParseConfig(gpucache::EffectiveConfigText(c), "effective");
  if (again.data_dirs != c.data_dirs || again.tenants.size() != c.tenants.size()) std::abort();
  return 0;
}
