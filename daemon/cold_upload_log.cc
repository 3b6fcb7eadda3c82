#include "daemon/cold_upload_log.h"

#include <spdlog/spdlog.h>

#include "common/printable.h"

namespace gpucache {
namespace {

// Room for the step, the kind, the HTTP status, an S3 code and the start of its message.
constexpr size_t kErrorChars = 240;

std::string FirstError(const std::optional<cold::JobError>& error) {
  return error ? Printable(error->Describe(), kErrorChars) : "none reported";
}

}  // namespace

void ColdUploadLog::Unlogged::Add(size_t n, const std::optional<cold::JobError>& error) {
  if (n == 0) return;
  jobs += n;
  if (!first_error) first_error = error;
}

void ColdUploadLog::Note(const cold::DrainReport& round) {
  failed_.Add(round.newly_failed, round.first_failed_error);
  requeued_.Add(round.requeued, round.first_requeued_error);
  // Asked only for rounds that add jobs: each refusal counts as a suppressed line
  // (gpucache_log_lines_suppressed_total). Jobs left unlogged when failures stop are in the
  // line that says uploads succeed again.
  if (round.newly_failed != 0 && failed_lines_.Allow()) LogFailed(round.failed_now);
  if (round.requeued != 0 && requeued_lines_.Allow()) LogRequeued();
  // A round that uploaded and failed nothing: the object store takes uploads again.
  if (warned_ && round.uploaded != 0 && round.newly_failed == 0 && round.requeued == 0) {
    LogRecovered(round.uploaded);
  }
}

void ColdUploadLog::LogFailed(size_t failed_now) {
  failed_lines_.Suppressed();  // the rounds left out are in the count
  spdlog::warn("cold tier: {} upload job(s) moved to the failed queue since the last such line "
               "({} there now, gpucache_cold_jobs_failed_now; after a temporary error they are "
               "retried by themselves, see gpucachectl cold failed, cold retry); first error: {}",
               failed_.jobs, failed_now, FirstError(failed_.first_error));
  failed_ = {};
  warned_ = true;
}

void ColdUploadLog::LogRequeued() {
  requeued_lines_.Suppressed();
  spdlog::warn("cold tier: {} upload attempt(s) failed with a temporary error since the last such "
               "line and wait to be retried (backoff); first error: {}",
               requeued_.jobs, FirstError(requeued_.first_error));
  requeued_ = {};
  warned_ = true;
}

void ColdUploadLog::LogRecovered(size_t uploaded) {
  spdlog::info("cold tier: uploads succeed again ({} job(s) uploaded); {} more requeued and {} "
               "more failed since the last warning",
               uploaded, requeued_.jobs, failed_.jobs);
  failed_ = {};
  requeued_ = {};
  warned_ = false;
}

}  // namespace gpucache
