#include "cold/control.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/control_protocol.h"
#include "store/identity.h"

namespace gpucache::cold {
namespace {

using nlohmann::json;

using control_protocol::Error;
using control_protocol::kNotAdmin;
using control_protocol::Number;
using control_protocol::Ok;

// cold.retain's longest retention: 100 years (far below the 584 years of nanoseconds that
// fit the record's 64 bits).
constexpr uint64_t kMaxRetainSeconds = 100ull * 365 * 24 * 3600;

json ErrorJson(const JobError& e) {
  return json{{"job", e.job_id}, {"step", e.step}, {"kind", ToString(e.error.kind)},
              {"http_status", e.error.http_status}, {"code", e.error.code},
              {"message", e.error.message}, {"ambiguous", e.error.ambiguous}};
}

json DrainJson(const DrainReport& r) {
  // "failed" is the failed queue now (what an operator has to look at), "newly_failed" what
  // this drain moved there.
  json j{{"rounds", r.rounds}, {"attempted", r.attempted}, {"uploaded", r.uploaded},
         {"requeued", r.requeued}, {"newly_failed", r.newly_failed}, {"pending", r.pending},
         {"failed", r.failed_now}};
  if (r.first_error) j["first_error"] = ErrorJson(*r.first_error);
  return j;
}

json StatsJson(const ColdTierStats& s) {
  return json{{"submitted", s.sink.submitted}, {"refused", s.sink.refused},
              {"uploaded", s.sink.uploaded}, {"failed", s.sink.failed_now},
              {"failed_entries_total", s.sink.failed_entries}, {"redriven", s.sink.redriven},
              {"retried", s.sink.retried},
              {"dropped", s.sink.dropped}, {"requests", s.requests},
              {"sink_requests", s.sink.requests},
              {"pending", s.sink.pending}, {"in_flight", s.sink.in_flight},
              {"failed_now", s.sink.failed_now}, {"bytes_held", s.sink.bytes_held},
              {"queued", s.queued}, {"queue_overflow", s.queue_overflow},
              {"packed_blocks", s.packed_blocks}, {"refills", s.refills},
              {"refill_hits", s.refill_hits}, {"refill_missing", s.refill_missing},
              {"refill_refused", s.refill_refused},
              {"refill_commit_failed", s.refill_commit_failed},
              {"refill_unsealed", s.seal_refusals.unsealed},
              {"refill_unknown_key", s.seal_refusals.unknown_key},
              {"refill_bad_seal", s.seal_refusals.bad_seal},
              {"refill_known", s.refill_known},
              {"refill_known_fallbacks", s.refill_known_fallbacks},
              {"known_places", s.known_places},
              {"invalidations_pending", s.invalidations_pending},
              {"invalidations_overflow", s.invalidations_overflow},
              {"locators_withdrawn", s.locators_withdrawn}};
}

std::string Refill(ColdTier& tier, const Principal& who, const json& req) {
  if (!req.contains("identity") || !req["identity"].is_string()) {
    return Error(EINVAL, "cold.refill needs \"identity\": the hex of the canonical identity");
  }
  auto bytes = HexDecode(req["identity"].get<std::string>());
  if (!bytes) return Error(EINVAL, "identity is not hex");
  uint64_t budget = tier.options().refill_budget_bytes;
  if (req.contains("budget")) {
    auto b = Number(req, "budget");
    if (!b) return Error(EINVAL, "budget must be a non-negative integer (bytes)");
    budget = *b;
  }
  RefillResult r = tier.Refill(who, *bytes, budget, {who.uid, who.gid});
  switch (r.outcome.status) {
    case RefillStatus::kInvalid: return Error(EINVAL, r.outcome.detail);
    case RefillStatus::kWrongTenant: return Error(EACCES, r.outcome.detail);
    case RefillStatus::kRetired: return Error(EACCES, r.outcome.detail);
    case RefillStatus::kMissing:
      return Ok(json{{"result", "missing"}, {"reason", ToString(r.outcome.reason)},
                     {"detail", r.outcome.detail}});
    case RefillStatus::kHit: break;
  }
  json reply{{"result", "hit"}, {"path", r.outcome.address.RelativePath()},
             {"bytes", r.outcome.payload_bytes_downloaded}};
  if (r.commit == StatusCode::kExists) reply["result"] = "already-hot";
  else if (r.commit == StatusCode::kBusy) {
    return Error(EBUSY, "another fill of the block is in flight (a writer's .part, or another refill): "
                        "ask again once it ends");
  } else if (r.commit != StatusCode::kOk) {
    return Error(EIO, "refilled but not committed: " + std::string(ToString(r.commit)));
  }
  return Ok(reply);
}

using Handler = std::string (*)(ColdTier&, const Principal&, const json&);

// Whose share of the async ops a request uses: the caller's tenants (their members share it);
// an admin's own uid. (A caller of no tenant never gets one: MaybeAsync refuses it.)
std::string QuotaKeyOf(const Principal& who) {
  if (who.admin) return "admin:" + std::to_string(who.uid);
  std::string key;
  for (const std::string& t : who.tenants) key += t + ",";  // a set: in order
  return key;
}

// {"op":"cold.refill"|"cold.pack", ..., "async": true}: queued on the tier's workers (a pack
// on their serial lane: AsyncOps::Lane); the reply is the op id at once, and {"op":"cold.op","op_id":N} answers "running" or the op's
// own reply (adr/0013-refill-off-the-control-file.md). Without "async" it runs here.
std::string MaybeAsync(ColdTier& tier, const Principal& who, const json& req, Handler handler,
                       AsyncOps::Lane lane = AsyncOps::Lane::kShared) {
  if (!req.contains("async")) return handler(tier, who, req);
  if (!req["async"].is_boolean()) return Error(EINVAL, "async must be true or false");
  json sync = req;
  sync.erase("async");
  if (!req["async"].get<bool>()) return handler(tier, who, sync);
  // A caller of no tenant is refused by every op that can run async; refused here, at once, it
  // holds no slot: each such uid had a share of its own, so a few of them, never polling, kept
  // the queue full for every tenant until their refusals expired (review, 2026-12-07).
  if (!who.admin && who.tenants.empty()) {
    return Error(EACCES, "the caller is a member of no tenant: no cold operation is open to it");
  }
  uint64_t id = tier.async_ops().Submit(who.uid, [&tier, who, sync, handler] { return handler(tier, who, sync); },
                                        QuotaKeyOf(who), lane);
  if (id == 0) {
    return Error(EAGAIN, "too many cold operations in progress (at most " +
                             std::to_string(tier.async_ops().ShareOfOneKey()) +
                             " unfinished per tenant); poll yours with cold.op, then try again");
  }
  return Ok(json{{"op_id", id}, {"state", "queued"}});
}

std::string PollOp(ColdTier& tier, const Principal& who, const json& req) {
  auto id = Number(req, "op_id");
  if (!id) return Error(EINVAL, "cold.op needs \"op_id\": the id an async request returned");
  uint64_t wait_ms = 0;
  if (req.contains("wait_ms")) {
    auto w = Number(req, "wait_ms");
    if (!w || *w > control_protocol::kMaxWaitMs) {
      return Error(EINVAL, "wait_ms must be 0.." + std::to_string(control_protocol::kMaxWaitMs));
    }
    wait_ms = *w;
  }
  AsyncOps::Poll p = tier.async_ops().Take(*id, who.uid, who.admin, std::chrono::milliseconds(wait_ms));
  if (p.state == AsyncOps::State::kUnknown) {
    return Error(ENOENT, "no op " + std::to_string(*id) + " of this caller (or already answered)");
  }
  if (p.state != AsyncOps::State::kDone) return Ok(json{{"op_id", *id}, {"state", ToString(p.state)}});
  json reply = json::parse(p.reply, nullptr, false);
  if (reply.is_discarded() || !reply.is_object()) return Error(EIO, "op reply unreadable");
  reply["op_id"] = *id;
  reply["state"] = "done";
  return control_protocol::Line(reply);
}

std::string PurgeTenant(ColdTier& tier, const json& req) {
  if (!req.contains("tenant") || !req["tenant"].is_string() ||
      !IsValidTenantName(req["tenant"].get<std::string>())) {
    return Error(EINVAL, "cold.purge_tenant needs \"tenant\": a tenant name");
  }
  uint64_t max_manifests = 100;
  if (req.contains("max_manifests")) {
    auto n = Number(req, "max_manifests");
    if (!n || *n == 0 || *n > 100000) return Error(EINVAL, "max_manifests must be 1..100000");
    max_manifests = *n;
  }
  uint64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::system_clock::now().time_since_epoch()).count();
  PurgeReport p = tier.PurgeTenant(req["tenant"], max_manifests, now);
  if (p.refused) return Error(EPERM, p.reason);
  json reply{{"tenant", req["tenant"]}, {"manifests_deleted", p.manifests_deleted},
             {"locators_deleted", p.locators_deleted}, {"deleted", p.deleted},
             {"kept", p.kept}, {"complete", p.complete}};
  if (p.error) return Error(EIO, "purge stopped: " + p.error->message);
  return Ok(reply);
}

// Orphan pack objects older than `older_than` seconds (at least an hour: cold/sweep.cc says
// why), at most `max_deletes` per request.
std::string Sweep(ColdTier& tier, const json& req) {
  constexpr uint64_t kMinAge = 3600, kMaxAge = 10ull * 366 * 86400;
  uint64_t older_than = 86400, max_deletes = 100;
  if (req.contains("older_than")) {
    auto n = Number(req, "older_than");
    if (!n || *n < kMinAge || *n > kMaxAge) {
      return Error(EINVAL, "older_than must be 3600..316224000 seconds: an upload on any node may "
                           "have its object up and its manifest not yet for up to 10 minutes");
    }
    older_than = *n;
  }
  if (req.contains("max_deletes")) {
    auto n = Number(req, "max_deletes");
    if (!n || *n == 0 || *n > 100000) return Error(EINVAL, "max_deletes must be 1..100000");
    max_deletes = *n;
  }
  uint64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch()).count();
  SweepReport r = tier.SweepOrphans(now, older_than, max_deletes);
  if (r.error) return Error(EIO, "sweep stopped: " + r.error->message);
  return Ok(json{{"packs_listed", r.packs_listed}, {"referenced", r.referenced},
                 {"young", r.young}, {"busy", r.busy}, {"unknown_age", r.unknown_age},
                 {"deleted", r.deleted},
                 {"bytes_deleted", r.bytes_deleted}, {"kept", r.kept}, {"more", r.more},
                 {"complete", r.complete}});
}

// The reply of a pack that was checked by Pack: runs the backfill (on a worker when async).
std::string RunPack(ColdTier& tier, const Principal&, const json& req) {
  std::string tenant = req.value("tenant", "");
  uint64_t budget = req.contains("budget") ? req["budget"].get<uint64_t>() : UINT64_MAX;
  DrainReport d;
  BackfillReport b = tier.Pack(tenant, budget, {}, &d);
  // "complete": every block this pack looked at is in S3 now or was already (nothing failed,
  // pending, refused or unknown), and it looked at every block (the daemon did not stop it).
  // gpucachectl exits non-zero when it is false.
  bool complete = d.failed_now == 0 && d.pending == 0 && b.refused == 0 && b.skipped_unknown == 0 &&
                  !b.stopped;
  json reply{{"blocks", b.blocks}, {"bytes", b.bytes}, {"packs", b.packs},
             {"skipped_cold", b.skipped_cold}, {"skipped_unknown", b.skipped_unknown},
             {"invalid_locators", b.invalid_locators},
             {"refused_packs", b.refused}, {"budget_reached", b.budget_reached},
             {"complete", complete}, {"drain", DrainJson(d)}};
  if (b.list_error) reply["list_error"] = b.list_error->message;
  return Ok(reply);
}

// Checks a pack request here, before it is queued: a refusal is answered at once.
std::string Pack(ColdTier& tier, const Principal& who, const json& req) {
  std::string tenant;
  if (req.contains("tenant")) {
    if (!req["tenant"].is_string() || !IsValidTenantName(req["tenant"].get<std::string>())) {
      return Error(EINVAL, "tenant must be a tenant name");
    }
    tenant = req["tenant"];
  }
  if (!who.admin && (tenant.empty() || !who.tenants.count(tenant))) {
    return Error(EACCES, "cold.pack needs an admin, or a member of the named tenant");
  }
  if (!tenant.empty() && tier.ops().IsRetired(tenant)) {
    return Error(EACCES, "tenant " + tenant + " is retired");
  }
  if (req.contains("budget") && !Number(req, "budget")) {
    return Error(EINVAL, "budget must be a non-negative integer (bytes)");
  }
  if (req.contains("async") && !req["async"].is_boolean()) return Error(EINVAL, "async must be true or false");
  // On the serial lane: a pack may run for hours, and packs run one at a time anyway
  // (ColdTier::Pack), so a second one waits in the queue, not on a refill worker.
  return MaybeAsync(tier, who, req, RunPack, AsyncOps::Lane::kSerial);
}

std::optional<Sha256> ManifestArg(const json& req) {
  if (!req.contains("manifest") || !req["manifest"].is_string()) return std::nullopt;
  return Sha256FromHex(req["manifest"].get<std::string>());
}

std::string Reclaim(ColdTier& tier, const Principal& who, const json& req) {
  auto m = ManifestArg(req);
  if (!m) return Error(EINVAL, "cold.reclaim needs \"manifest\": 64 lowercase hex digits");
  uint64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::system_clock::now().time_since_epoch()).count();
  ReclaimReport r = tier.Reclaim(*m, now, who);
  json reply{{"refused", r.refused}, {"reason", r.reason}, {"deleted", r.deleted}, {"kept", r.kept}};
  if (r.error) reply["error_detail"] = r.error->message;
  if (r.absent) return Error(ENOENT, "no such manifest: " + ManifestKey(tier.options().prefix, *m));
  if (r.busy) return Error(EBUSY, r.reason);
  if (r.refused) return Error(r.reason.rfind("not an owner", 0) == 0 ? EACCES : EPERM, r.reason);
  if (r.error) return Error(EIO, "reclaim stopped: " + r.error->message);
  return Ok(reply);
}

std::string Retain(ColdTier& tier, const json& req) {
  auto m = ManifestArg(req);
  auto seconds = Number(req, "seconds");
  if (!m || !seconds) return Error(EINVAL, "cold.retain needs \"manifest\" and \"seconds\"");
  // In nanoseconds past now it must fit 64 bits: a larger count wrapped to a deadline that was
  // almost now, and the manifest became reclaimable at once.
  if (*seconds > kMaxRetainSeconds) {
    return Error(EINVAL, "seconds must be at most " + std::to_string(kMaxRetainSeconds) + " (100 years)");
  }
  uint64_t until = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::system_clock::now().time_since_epoch()).count() +
                   *seconds * 1'000'000'000ull;
  auto r = tier.ops().RecordRetention(*m, until);
  if (!r.ok()) return Error(EIO, r.error().message);
  return Ok(json{{"retain_until_unix_ns", until}});
}

// Re-seals objects under the current key, bounded by "budget" bytes, after manifest key "after".
std::string Reseal(ColdTier& tier, const json& req) {
  uint64_t budget = UINT64_MAX;
  if (req.contains("budget")) {
    auto b = Number(req, "budget");
    if (!b) return Error(EINVAL, "budget must be a non-negative integer (bytes)");
    budget = *b;
  }
  std::string after;
  if (req.contains("after")) {
    if (!req["after"].is_string() || req["after"].get<std::string>().size() > 1024) {
      return Error(EINVAL, "after must be a manifest key from a previous reseal");
    }
    after = req["after"];
  }
  ResealReport r = tier.ops().Reseal(budget, after);
  json reply{{"manifests_scanned", r.manifests_scanned},
             {"manifests_resealed", r.manifests_resealed},
             {"manifests_current", r.manifests_current},
             {"locators_resealed", r.locators_resealed},
             {"locators_current", r.locators_current}, {"refused", r.refused},
             {"bytes", r.bytes}, {"budget_reached", r.budget_reached},
             {"resume_after", r.resume_after}};
  if (r.error) {
    return Error(EIO, "reseal stopped: " + r.error->message +
                            (r.resume_after.empty() ? "" : " (resume after " + r.resume_after + ")"));
  }
  return Ok(reply);
}

std::string FailedList(ColdTier& tier) {
  json jobs = json::array();
  for (const FailedJob& f : tier.sink().Failed()) {
    jobs.push_back(json{{"job", f.id}, {"manifest", f.manifest_key}, {"blocks", f.blocks},
                        {"bytes", f.bytes}, {"attempts", f.attempts},
                        {"error", ErrorJson(f.last_error)}});
  }
  return Ok(json{{"failed", jobs}});
}

std::string RetryOrDrop(ColdTier& tier, const json& req, bool retry) {
  auto job = Number(req, "job");
  if (!job) return Error(EINVAL, "needs \"job\": a failed job's id (gpucachectl cold failed)");
  bool done = retry ? tier.sink().Retry(*job) : tier.sink().Drop(*job);
  if (!done) return Error(ENOENT, "no failed job " + std::to_string(*job));
  return Ok(json{{"job", *job}});
}

}  // namespace

std::string HandleColdRequest(ColdTier& tier, const Principal& who, std::string_view request) {
  json req = json::parse(request, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded() || !req.is_object() || !req.contains("op") || !req["op"].is_string()) {
    return Error(EINVAL, "request is not a JSON object with an \"op\"");
  }
  std::string op = req["op"];
  if (op == "cold.refill") return MaybeAsync(tier, who, req, Refill);
  if (op == "cold.op") return PollOp(tier, who, req);
  if (op == "cold.pack") return Pack(tier, who, req);
  if (op == "cold.reclaim") return Reclaim(tier, who, req);
  bool known = op == "cold.report" || op == "cold.failed" || op == "cold.retry" ||
               op == "cold.drop" || op == "cold.drain" || op == "cold.retain" ||
               op == "cold.reseal" || op == "cold.purge_tenant" || op == "cold.sweep";
  if (!known) {
    return Error(EINVAL, "unknown cold op (known: cold.refill, cold.op, cold.pack, cold.reclaim, "
                           "cold.report, cold.failed, cold.retry, cold.drop, cold.drain, "
                           "cold.retain, cold.reseal, cold.purge_tenant, cold.sweep)");
  }
  if (!who.admin) return Error(EACCES, kNotAdmin);
  if (op == "cold.report") return Ok(json{{"cold", StatsJson(tier.Stats())}});
  if (op == "cold.failed") return FailedList(tier);
  if (op == "cold.retry") return RetryOrDrop(tier, req, true);
  if (op == "cold.drop") return RetryOrDrop(tier, req, false);
  if (op == "cold.drain") return Ok(json{{"drain", DrainJson(tier.DrainNow())}});
  if (op == "cold.reseal") return Reseal(tier, req);
  if (op == "cold.purge_tenant") return PurgeTenant(tier, req);
  if (op == "cold.sweep") return Sweep(tier, req);
  return Retain(tier, req);
}

namespace {

// The `reason` label of a Missing refill: its reason as cold.refill answers it, in snake_case
// as Prometheus labels are ("unknown-key" is unknown_key), so it is as stable as the protocol.
std::string ReasonLabel(MissingReason r) {
  std::string label(ToString(r));
  std::replace(label.begin(), label.end(), '-', '_');
  return label;
}

// gpucache_cold_refill_missing_total{reason=...}: every reason a Missing can carry, from 0, so
// increase() sees a reason's first refill. kNone is not one (it means found), and not exported.
void RenderMissingByReason(const ColdTierStats& s, std::ostream& out) {
  static_assert(static_cast<size_t>(MissingReason::kNone) == 0, "the loop below starts after kNone");
  out << "# HELP gpucache_cold_refill_missing_total Refills answered Missing, by reason.\n"
         "# TYPE gpucache_cold_refill_missing_total counter\n";
  for (size_t i = 1; i < kMissingReasonCount; i++) {
    out << "gpucache_cold_refill_missing_total{reason=\"" << ReasonLabel(static_cast<MissingReason>(i))
        << "\"} " << s.refill_missing_by_reason[i] << "\n";
  }
}

}  // namespace

std::string RenderColdMetrics(const ColdTierStats& s) {
  std::ostringstream out;
  auto counter = [&](const char* name, const char* help, uint64_t v, const char* type = "counter") {
    out << "# HELP gpucache_cold_" << name << " " << help << "\n# TYPE gpucache_cold_" << name
        << " " << type << "\ngpucache_cold_" << name << " " << v << "\n";
  };
  counter("jobs_submitted_total", "Pack jobs admitted to the sink.", s.sink.submitted);
  counter("jobs_refused_total", "Pack jobs refused (invalid or sink full).", s.sink.refused);
  counter("jobs_uploaded_total", "Pack jobs fully uploaded.", s.sink.uploaded);
  counter("jobs_failed_total", "Entries into the failed queue (a re-driven job can enter again).",
          s.sink.failed_entries);
  counter("jobs_redriven_total", "Failed jobs moved back to the queue by the background re-drive.",
          s.sink.redriven);
  counter("jobs_dropped_total", "Failed jobs dropped by an operator.", s.sink.dropped);
  counter("requests_total", "Object store requests made by the cold tier (uploads, refills, "
          "listings, reclaims).", s.requests);
  counter("jobs_pending", "Pack jobs waiting to be uploaded.", s.sink.pending, "gauge");
  counter("jobs_in_flight", "Pack jobs being uploaded.", s.sink.in_flight, "gauge");
  // Not "jobs_failed": beside the counter jobs_failed_total that name is rejected by
  // Prometheus and OpenMetrics parsers (a counter's family name is its name without _total).
  counter("jobs_failed_now", "Pack jobs in the failed queue now.", s.sink.failed_now, "gauge");
  counter("bytes_held", "Bytes held by pending, in-flight and failed jobs.", s.sink.bytes_held, "gauge");
  counter("queue_overflow_total", "Commits not queued for write-back (queue full).", s.queue_overflow);
  counter("packed_blocks_total", "Blocks in packs the sink accepted (write-back and backfill).", s.packed_blocks);
  counter("refills_total", "Refill requests.", s.refills);
  counter("refill_hits_total", "Refills that returned a verified block.", s.refill_hits);
  RenderMissingByReason(s, out);
  counter("refill_refused_total", "Refills refused (tenant, retired, invalid).", s.refill_refused);
  counter("refill_commit_failed_total", "Refills whose verified block the hot tier refused (EIO; EBUSY while another fill holds the block).",
          s.refill_commit_failed);
  counter("refill_unsealed_total", "Refills refused: unsealed (v1 locator, v3 manifest).",
          s.seal_refusals.unsealed);
  counter("refill_unknown_key_total", "Refills refused: sealed under a key not in the keyring.",
          s.seal_refusals.unknown_key);
  counter("refill_bad_seal_total", "Refills refused: the seal does not verify (forged).",
          s.seal_refusals.bad_seal);
  counter("refill_known_total", "Refill hits through a known place: one range GET, no locator.",
          s.refill_known);
  counter("refill_known_fallbacks_total", "Known places that failed a refill (absent, short, "
          "corrupt, error); the locator decided instead.", s.refill_known_fallbacks);
  counter("known_places", "Blocks whose place in the object store this node remembers.",
          s.known_places, "gauge");
  counter("invalidations_pending", "Blocks the engine invalidated whose locators are still to be "
          "withdrawn (refills of those bytes are refused meanwhile).", s.invalidations_pending, "gauge");
  counter("invalidations_overflow_total", "Invalidations not noted (the list was full): those "
          "blocks' locators stay.", s.invalidations_overflow);
  counter("locators_withdrawn_total", "Locators deleted because they named bytes the engine "
          "invalidated.", s.locators_withdrawn);
  return out.str();
}

}  // namespace gpucache::cold
