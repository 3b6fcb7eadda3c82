// AsyncOps (cold/async_ops.h): the pool that runs asynchronous cold requests: bounded, shared
// fairly between tenants, waited on with a bound, and a serial lane that never takes a worker.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cold/async_ops.h"

namespace gpucache::cold {

TEST_CASE("AsyncOps: bounded: live ops fill it and refuse more, finished ones are forgotten first") {
  AsyncOps ops(1, 2);
  std::atomic<bool> release{false};
  auto blocked = [&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return std::string("{\"ok\":true}\n");
  };
  uint64_t a = ops.Submit(1000, blocked), b = ops.Submit(1000, blocked);
  REQUIRE(a != 0);
  REQUIRE(b != 0);
  CHECK(ops.Submit(1000, blocked) == 0);  // both held ops are live
  CHECK(ops.Take(a, 1001, false).state == AsyncOps::State::kUnknown);  // not the owner
  release = true;
  for (int i = 0; i < 2000 && ops.Take(b, 0, true).state != AsyncOps::State::kUnknown; i++) {
    // (an admin's Take of a finished op answers it; poll b until it has been answered)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  uint64_t c = ops.Submit(1000, [] { return std::string("{\"ok\":true}\n"); });
  CHECK(c != 0);  // room: b was taken, and a finished one goes before a refusal
  uint64_t d = ops.Submit(1000, [] { return std::string("{\"ok\":true}\n"); });
  CHECK(d != 0);
  CHECK(ops.held() <= 2);
}

// Regression (2026-12-07): an op that threw left its worker thread, which ends the process
// (std::terminate): the daemon, for one failed request.
TEST_CASE("AsyncOps: an op that throws answers EIO, and the worker goes on with the next op") {
  AsyncOps ops(1, 8);
  uint64_t bad = ops.Submit(1000, []() -> std::string { throw std::runtime_error("listing too long"); });
  uint64_t next = ops.Submit(1000, [] { return std::string("{\"ok\":true}\n"); });
  REQUIRE(bad != 0);
  REQUIRE(next != 0);
  AsyncOps::Poll p = ops.Take(bad, 1000, false, std::chrono::milliseconds(10000));
  CHECK(p.state == AsyncOps::State::kDone);
  CHECK(p.reply.find("\"errno\":\"EIO\"") != std::string::npos);
  CHECK(p.reply.find("the op failed: listing too long") != std::string::npos);
  CHECK(ops.Take(next, 1000, false, std::chrono::milliseconds(10000)).reply == "{\"ok\":true}\n");
}

TEST_CASE("AsyncOps: one tenant's unpolled ops take at most its share, and another tenant's are still taken") {
  AsyncOps ops(1, 8);  // a share is 2 unfinished ops
  std::atomic<bool> release{false};
  auto blocked = [&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return std::string("{\"ok\":true}\n");
  };
  // Four processes of acme submit and never poll: two are taken, the rest refused.
  int acme_taken = 0;
  for (int i = 0; i < 6; i++) acme_taken += ops.Submit(1000 + i % 4, blocked, "acme,") != 0;
  CHECK(acme_taken == 2);
  // globex's ops are not refused because of acme's (before: the pool was one shared bound).
  CHECK(ops.Submit(2000, blocked, "globex,") != 0);
  CHECK(ops.Submit(2000, blocked, "globex,") != 0);
  CHECK(ops.Submit(2000, blocked, "globex,") == 0);
  release = true;
}

// Regression (review, 2026-12-06): a full pool forgot the oldest finished result whoever it
// belonged to, and only unfinished ops counted against a key's share: other callers' floods of
// ops that fail at once erased a tenant's refill result before the tenant polled it.
TEST_CASE("AsyncOps: other keys' floods never erase a result its owner has not taken") {
  AsyncOps ops(1, 8);  // a share is 2
  auto quick = [] { return std::string("{\"ok\":true}\n"); };
  auto until_done = [&](uint64_t id) {
    for (int i = 0; i < 5000 && ops.Peek(id) != AsyncOps::State::kDone; i++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    REQUIRE(ops.Peek(id) == AsyncOps::State::kDone);
  };
  uint64_t mine = ops.Submit(1000, quick, "acme,");
  REQUIRE(mine != 0);
  until_done(mine);  // finished, waiting for its owner
  // Six other keys, two results each at most: together they fill the pool, and go on asking.
  bool filled = false;
  for (int round = 0; round < 5; round++) {
    for (uint32_t k = 0; k < 6; k++) {
      uint64_t id = ops.Submit(3000 + k, quick, "uid:" + std::to_string(3000 + k));
      if (id != 0) until_done(id);
      filled |= ops.held() == 8;
    }
  }
  CHECK(filled);  // the pool was full: the case that once took another key's result
  CHECK(ops.Peek(mine) == AsyncOps::State::kDone);
  AsyncOps::Poll p = ops.Take(mine, 1000, false);
  CHECK(p.state == AsyncOps::State::kDone);
  CHECK(p.reply == "{\"ok\":true}\n");
}

TEST_CASE("AsyncOps: a Take with a wait answers when the op is done, and only `workers` callers wait") {
  AsyncOps ops(1, 8);
  std::atomic<bool> release{false};
  uint64_t a = ops.Submit(1000, [&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return std::string("{\"ok\":true,\"result\":\"hit\"}\n");
  });
  REQUIRE(a != 0);
  AsyncOps::Poll waited;
  std::atomic<bool> waiting{false};
  std::thread waiter([&] {
    waiting = true;
    waited = ops.Take(a, 1000, false, std::chrono::seconds(60));
  });
  while (!waiting || ops.waiting() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // One worker: a second caller is not made to wait, it gets the state at once. (Its bound is
  // past the test's timeout: one made to wait fails the test, instead of passing after it.)
  AsyncOps::Poll other = ops.Take(a, 1000, false, std::chrono::seconds(120));
  CHECK(other.state != AsyncOps::State::kDone);
  CHECK(other.state != AsyncOps::State::kUnknown);
  release = true;
  waiter.join();
  CHECK(waited.state == AsyncOps::State::kDone);  // it waited for the op, not for its bound
  CHECK(waited.reply.find("hit") != std::string::npos);
  CHECK(ops.Take(a, 1000, false, std::chrono::seconds(1)).state == AsyncOps::State::kUnknown);  // answered once
}

// Review of stop 44: the shared lane ran ops in the order they were queued, whoever's: one
// tenant's share of slow refills (64 of them, up to a minute each on a slow pack) held every
// other tenant's refill behind all of them. The next op is the oldest of the key with the
// fewest running.
TEST_CASE("AsyncOps: a key's queued ops do not hold up another key's op behind all of them") {
  AsyncOps ops(1, 16);  // one worker; a share is 4 unfinished ops
  std::atomic<bool> release{false};
  std::atomic<int> acme_ran{0};
  auto slow = [&] {
    acme_ran++;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return std::string("{\"ok\":true}\n");
  };
  std::vector<uint64_t> acme;
  for (int i = 0; i < 4; i++) acme.push_back(ops.Submit(1000, slow, "acme,"));
  for (uint64_t id : acme) REQUIRE(id != 0);
  for (int i = 0; i < 2000 && acme_ran == 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(acme_ran == 1);  // the first runs, three are queued
  std::atomic<int> acme_before_globex{-1};
  uint64_t globex = ops.Submit(2000, [&] {
    acme_before_globex = acme_ran.load();
    return std::string("{\"ok\":true}\n");
  }, "globex,");
  REQUIRE(globex != 0);
  release = true;  // the running one ends; the next to run is globex's, not acme's second
  AsyncOps::Poll p = ops.Take(globex, 2000, false, std::chrono::milliseconds(5000));
  CHECK(p.state == AsyncOps::State::kDone);
  CHECK(acme_before_globex == 1);
}

TEST_CASE("AsyncOps: serial ops run one at a time on their own thread, never on a worker") {
  AsyncOps ops(1, 16);
  std::atomic<bool> release{false};
  auto blocked = [&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return std::string("{\"ok\":true}\n");
  };
  uint64_t first = ops.Submit(1000, blocked, "", AsyncOps::Lane::kSerial);
  uint64_t second = ops.Submit(1000, blocked, "", AsyncOps::Lane::kSerial);
  REQUIRE(first != 0);
  REQUIRE(second != 0);
  uint64_t quick = ops.Submit(2000, [] { return std::string("{\"ok\":true}\n"); });
  CHECK(ops.Take(quick, 2000, false, std::chrono::seconds(5)).state == AsyncOps::State::kDone);
  CHECK(ops.Take(second, 1000, false).state == AsyncOps::State::kQueued);  // behind the first
  release = true;
  CHECK(ops.Take(first, 1000, false, std::chrono::seconds(5)).state == AsyncOps::State::kDone);
  CHECK(ops.Take(second, 1000, false, std::chrono::seconds(5)).state == AsyncOps::State::kDone);
}

}  // namespace gpucache::cold
