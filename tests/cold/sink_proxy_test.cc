// The sink against the real gateway through the fault proxy: retries and the failed queue
// when a third of the requests fail in every way an S3 server or network can.
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "cold/s3_client.h"
#include "cold/sink.h"
#include "tests/cold/cold_test_util.h"
#include "tests/cold/rgw_support.h"

namespace gpucache::cold {
using namespace testing;

TEST_CASE("Cold: 1,000 jobs through the proxy at 30% faults: submitted = uploaded + failed") {
  auto env = RgwEnv();
  REQUIRE_MESSAGE(!env.empty(), "GPUCACHE_S3_ENV_FILE: run through ctest (fixture cold_rgw)");
  LoggedProxy proxy(env["GPUCACHE_S3_ENDPOINT"], 0.3, "500,503,slowdown,429,403,reset,stall,truncate",
                   /*stall_seconds=*/3, /*seed=*/7);
  REQUIRE(proxy.ready());
  S3Options o = *ServerOptions();
  o.endpoint = proxy.endpoint();
  o.transfer_timeout_ms = 1000;  // a stall costs one second
  auto client = S3Client::Create(o);
  REQUIRE(client.ok());

  std::string prefix = UniquePrefix("sink");
  SinkLimits limits;
  limits.max_jobs = 1000;
  limits.concurrency = 16;
  Sink sink(*client.value(), prefix, limits);
  for (int i = 0; i < 1000; i++) {
    PackBuilder b(prefix, TestKeyring());
    CacheIdentity id = NthIdentity(i);
    b.Add(AddressOf(id), EncodePhysicalKey(id), PayloadOf(i, 512));
    REQUIRE(sink.Submit(b.Build(i)).admission == Admission::kAccepted);
  }
  DrainReport r = sink.Drain(10);
  SinkStats st = sink.Stats();
  std::vector<FailedJob> failed = sink.Failed();
  MESSAGE("sink via proxy: submitted=" << st.submitted << " uploaded=" << st.uploaded
          << " failed=" << failed.size() << " requests=" << st.requests << " rounds=" << r.rounds);
  CHECK(r.pending == 0);
  CHECK(st.submitted == 1000);
  CHECK(st.uploaded + failed.size() == st.submitted);
  CHECK(failed.size() > 0);
  CHECK(st.uploaded > 0);

  // From the proxy's side: no key is tried more than three times, a key that got a permanent
  // error is never tried again, and the sink never deleted anything.
  std::map<std::string, int> tries;
  std::set<std::string> denied;
  int after_permanent = 0, deletes = 0;
  proxy.Settled();  // stalls are logged when they end
  for (const auto& req : proxy.Requests()) {
    std::string path = req["path"];
    if (path.find("/" + prefix) == std::string::npos) continue;
    deletes += req["method"] == "DELETE";
    if (req["method"] != "PUT") continue;
    if (denied.count(path)) {
      after_permanent++;
      MESSAGE("tried after a 403: " << req.dump());
    }
    tries[path]++;
    if (req["fault"] == "403") denied.insert(path);
  }
  CHECK(deletes == 0);
  CHECK(after_permanent == 0);
  CHECK(!denied.empty());
  int over = 0;
  for (const auto& [path, n] : tries) over += n > 3;
  CHECK(over == 0);
  size_t permanent = 0;
  for (const FailedJob& f : failed) {
    bool perm = f.last_error.error.kind == ObjectErrorKind::kPermanent;
    permanent += perm;
    if (!perm) CHECK(f.attempts == 3);  // temporary: exhausted after exactly three attempts
  }
  CHECK(permanent == denied.size());
}

}  // namespace gpucache::cold
