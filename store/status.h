// Status and Result<T>: how every store operation reports its outcome.
//
// The store never throws on the hot path and never speaks errno. Each operation returns a
// closed StatusCode; the FUSE layer maps it to errno in exactly one place (fs/errno_map.cc),
// and a test walks every code so that a new one cannot ship unmapped.
//
// A miss (kNotFound) is a normal, counted outcome, not an error condition.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <variant>

namespace gpucache {

enum class StatusCode : uint8_t {
  kOk = 0,
  kNotFound,          // miss: no committed block (or namespace) at that address
  kIncompatible,      // same logical key, different physical key: also a miss
  kAccessDenied,      // caller is not a member of the tenant that owns the path
  kBusy,              // not COMMITTED (not readable), or commit while a writer is open
  kChecksumMismatch,  // stored checksums do not match the bytes: never served
  kImmutable,         // write/truncate/chmod/setxattr on a committed block
  kExists,            // reservation already held (single-flight) or block already committed
  kInvalidArgument,   // malformed identity, identity not matching the path, bad name
  kTooLarge,          // block larger than the object-size limit
  kTenantQuota,       // tenant retained-byte quota exceeded, nothing evictable
  kNoSpace,           // global retained bytes or backing disk full, nothing evictable
  kExhausted,         // in-flight credits (requests, bytes, registrations) exhausted
  kFenced,            // reservation fenced by an epoch bump
  kDraining,          // admits refused while draining for an upgrade
  kNotSupported,      // operation or attribute outside what gpucache offers
  kNotEmpty,          // namespace directory still holds blocks or reservations
  kIoError,           // backing storage failed (not a checksum problem)
  kNameTooLong,       // a path component longer than NAME_MAX (255 bytes)
  kNoHandles,         // the daemon's file table is full (EMFILE/ENFILE): retry later
  kNoAttribute,       // the node has no extended attribute of that name (its node is there)
  kStale,             // the inode names a block that left; its name now holds another block
};

// Every code, in declaration order; tests iterate it to prove each one is mapped.
inline constexpr StatusCode kAllStatusCodes[] = {
    StatusCode::kOk,           StatusCode::kNotFound,     StatusCode::kIncompatible,
    StatusCode::kAccessDenied, StatusCode::kBusy,         StatusCode::kChecksumMismatch,
    StatusCode::kImmutable,    StatusCode::kExists,       StatusCode::kInvalidArgument,
    StatusCode::kTooLarge,     StatusCode::kTenantQuota,  StatusCode::kNoSpace,
    StatusCode::kExhausted,    StatusCode::kFenced,       StatusCode::kDraining,
    StatusCode::kNotSupported, StatusCode::kNotEmpty,     StatusCode::kIoError,
    StatusCode::kNameTooLong,  StatusCode::kNoHandles,    StatusCode::kNoAttribute,
    StatusCode::kStale,
};

std::string_view ToString(StatusCode code);

// A value or a non-OK status. Small and copyable when T is; no exceptions.
template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(StatusCode code) : v_(code) {}      // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(v_); }
  StatusCode status() const { return ok() ? StatusCode::kOk : std::get<StatusCode>(v_); }
  // REQUIRES: ok()
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, StatusCode> v_;
};

}  // namespace gpucache
