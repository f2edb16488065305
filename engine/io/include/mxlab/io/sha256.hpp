// SHA-256 (FIPS 180-4) of bytes and files, for checking downloaded data against known digests.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "mxlab/core/error.hpp"

namespace mxlab {

/// Incremental SHA-256: update() with the message in any pieces, then digest() once.
class Sha256 {
 public:
  Sha256();
  /// Appends bytes to the message.
  void update(const void* data, std::size_t n);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  /// Pads the message and returns the 32-byte digest; the object must not be updated afterwards.
  std::array<std::uint8_t, 32> digest();
  /// digest() as 64 lower-case hexadecimal digits.
  std::string hex_digest();

 private:
  void block(const std::uint8_t* p);

  std::array<std::uint32_t, 8> h_;
  std::array<std::uint8_t, 64> buf_{};
  std::size_t used_ = 0;
  std::uint64_t length_ = 0;  // message bytes so far
};

/// Lower-case hexadecimal SHA-256 of bytes.
std::string sha256_hex(std::string_view bytes);

/// Lower-case hexadecimal SHA-256 of a file's contents (read in pieces; errors name the file).
Result<std::string> sha256_file(const std::string& path);

}  // namespace mxlab
