// Daemon logging: spdlog to stderr, one line per event an operator should know about.
//
// Under systemd (JOURNAL_STREAM set) each line starts with its syslog priority, "<3>" for an
// error and so on, which journald turns into the entry's priority; otherwise lines carry a time
// stamp and a level. Nothing secret is logged: paths, tenants, counts, errno names.
#pragma once

#include <spdlog/spdlog.h>

namespace gpucache {

// `debug` lowers the level to debug.
void InitLogging(bool debug);
// After detaching (mount helper mode) stderr is gone: log to syslog instead.
void SwitchToSyslog();

}  // namespace gpucache
