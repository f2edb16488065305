// Raw little-endian float32 files.
#include "mxlab/io/raw.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <new>

#include "binary.hpp"
#include "input_file.hpp"
#include "mxlab/core/atomic_file.hpp"

namespace mxlab {

Result<Tensor> read_raw_f32(const std::string& path, const std::optional<std::vector<std::int64_t>>& shape) {
  auto in = io_detail::InputFile::open(path, "raw");
  if (!in) return in.error();
  std::size_t expected = 0;
  if (shape) {
    auto n = shape_elements(*shape, "raw '" + path + "'");
    if (!n) return n.error();
    if (*n > SIZE_MAX / 4) return in->fail("shape " + format_shape(*shape) + " is too large");
    expected = *n;
    if (auto rem = in->remaining(); rem && *rem != expected * 4)
      return in->fail("holds " + std::to_string(*rem) + " bytes, but shape " + format_shape(*shape) + " needs " +
                      std::to_string(expected) + " float32 values = " + std::to_string(expected * 4) + " bytes");
  }
  std::vector<float> values;
  try {
    if (auto rem = in->remaining()) {
      // Known size: read straight into the values.
      if (*rem % 4 != 0)
        return in->fail("holds " + std::to_string(*rem) +
                        " bytes, which is not a whole number of 4-byte float32 values");
      values.resize(static_cast<std::size_t>(*rem / 4));
      auto got = in->read(values.data(), values.size() * 4);
      if (!got) return got.error();
      if (*got != values.size() * 4) return in->fail("the file shrank while it was being read");
      if (!io_detail::kHostLittle)
        for (float& v : values) {
          const auto u = std::bit_cast<std::uint32_t>(v);
          v = std::bit_cast<float>(
              static_cast<std::uint32_t>(io_detail::load_uint(reinterpret_cast<const unsigned char*>(&u), 4, true)));
        }
    } else {
      auto bytes = in->read_rest();
      if (!bytes) return bytes.error();
      if (bytes->size() % 4 != 0)
        return in->fail("holds " + std::to_string(bytes->size()) +
                        " bytes, which is not a whole number of 4-byte float32 values");
      values.resize(bytes->size() / 4);
      const auto* p = reinterpret_cast<const unsigned char*>(bytes->data());
      for (std::size_t i = 0; i < values.size(); ++i)
        values[i] = std::bit_cast<float>(static_cast<std::uint32_t>(io_detail::load_uint(p + 4 * i, 4, true)));
    }
  } catch (const std::bad_alloc&) {
    return in->fail("not enough memory to hold the file");
  }
  const std::size_t n = values.size();
  if (shape && n != expected)
    return in->fail("holds " + std::to_string(n) + " float32 values, but shape " + format_shape(*shape) + " needs " +
                    std::to_string(expected));
  std::vector<std::int64_t> dims = shape ? *shape : std::vector<std::int64_t>{static_cast<std::int64_t>(n)};
  return Tensor::from_f32(std::move(dims), std::move(values), DType::F32);
}

Result<std::size_t> write_raw_f32(const std::string& path, std::span<const float> values) {
  auto f = AtomicFile::create(path, "raw");
  if (!f) return f.error();
  unsigned char buf[1 << 14];
  for (std::size_t i = 0; i < values.size();) {
    const std::size_t m = std::min(sizeof buf / 4, values.size() - i);
    for (std::size_t j = 0; j < m; ++j)
      io_detail::store_le(buf + 4 * j, std::bit_cast<std::uint32_t>(values[i + j]), 4);
    if (!f->write(buf, 4 * m)) break;
    i += m;
  }
  return f->commit();
}

}  // namespace mxlab
