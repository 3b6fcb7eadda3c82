// Little-endian, length-delimited byte encoding shared by the identity keys and the block
// file header. The reader is built for hostile input: every read is bounds-checked and a
// failure is sticky, so a decoder checks ok() once at the end.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gpucache {

class ByteWriter {
 public:
  void U8(uint8_t v) { out_.push_back(v); }
  void U16(uint16_t v) { Le(v, 2); }
  void U32(uint32_t v) { Le(v, 4); }
  void U64(uint64_t v) { Le(v, 8); }
  void Raw(std::span<const uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void Raw(std::string_view s) { Raw({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); }
  // u16 length, then the bytes. REQUIRES: size <= 65535 (callers validate first).
  void Str(std::string_view s) { U16(static_cast<uint16_t>(s.size())); Raw(s); }
  // A short name: u8 length, then the bytes (the caller validated it is at most 255 bytes).
  void Str8(std::string_view s) { U8(static_cast<uint8_t>(s.size())); Raw(s); }
  void Blob16(std::span<const uint8_t> b) { U16(static_cast<uint16_t>(b.size())); Raw(b); }
  std::vector<uint8_t>& bytes() { return out_; }
  std::vector<uint8_t> Take() { return std::move(out_); }

 private:
  void Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> out_;
};

// Little-endian loads from bytes a caller has already bounds-checked (ByteReader::Raw of a
// fixed-width record): one move per field instead of a check and a loop per byte.
inline uint64_t LoadLe(const uint8_t* p, int n) {
  uint64_t v = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&v, p, static_cast<size_t>(n));
  } else {
    for (int i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  }
  return v;
}

// Reads fixed-width fields off a span whose length the caller checked against the fields'
// total: the checks were paid once, for the whole record.
class FixedReader {
 public:
  explicit FixedReader(std::span<const uint8_t> checked) : p_(checked.data()) {}
  uint8_t U8() { return *p_++; }
  uint32_t U32() { return static_cast<uint32_t>(Take(4)); }
  uint64_t U64() { return Take(8); }
  template <size_t N>
  void Copy(std::array<uint8_t, N>& out) {
    std::memcpy(out.data(), p_, N);
    p_ += N;
  }

 private:
  uint64_t Take(int n) {
    uint64_t v = LoadLe(p_, n);
    p_ += n;
    return v;
  }
  const uint8_t* p_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> in) : in_(in) {}

  bool ok() const { return ok_; }
  bool AtEnd() const { return pos_ == in_.size(); }
  size_t pos() const { return pos_; }
  uint8_t U8() { return static_cast<uint8_t>(Le(1)); }
  uint16_t U16() { return static_cast<uint16_t>(Le(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Le(4)); }
  uint64_t U64() { return Le(8); }
  std::span<const uint8_t> Raw(size_t n) {
    if (!Need(n)) return {};
    auto s = in_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  std::string Str() {
    auto b = Raw(U16());
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }
  std::string Str8() {
    auto b = Raw(U8());
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }
  std::vector<uint8_t> Blob16() {
    auto b = Raw(U16());
    return {b.begin(), b.end()};
  }
  // N bytes as an array (zeros, and !ok(), if fewer are left).
  template <size_t N>
  std::array<uint8_t, N> Array() {
    std::array<uint8_t, N> a{};
    auto b = Raw(N);
    if (b.size() == N) std::copy(b.begin(), b.end(), a.begin());
    return a;
  }
  // Consumes `magic` exactly or fails.
  void Expect(std::string_view magic) {
    auto b = Raw(magic.size());
    if (ok_ && std::memcmp(b.data(), magic.data(), magic.size()) != 0) ok_ = false;
  }
  void Fail() { ok_ = false; }

 private:
  bool Need(size_t n) {
    if (!ok_ || in_.size() - pos_ < n) {
      ok_ = false;
      return false;
    }
    return true;
  }
  uint64_t Le(int n) {
    if (!Need(n)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{in_[pos_ + i]} << (8 * i);
    pos_ += n;
    return v;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace gpucache
