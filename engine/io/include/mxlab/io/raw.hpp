// Raw tensor files: little-endian float32 values with no header; the caller supplies the shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/io/tensor.hpp"

namespace mxlab {

/// Reads a file of little-endian float32 values (names ending in ".gz" are decompressed). With a shape,
/// the file must hold exactly that many values; without one the tensor is 1-D.
Result<Tensor> read_raw_f32(const std::string& path, const std::optional<std::vector<std::int64_t>>& shape = {});

/// Writes float32 values as little-endian bytes, atomically; returns the bytes written.
Result<std::size_t> write_raw_f32(const std::string& path, std::span<const float> values);

}  // namespace mxlab
