// A tensor read from a file or generated: shape, source dtype, float32 values and, for float64 sources,
// the exact float64 values alongside.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mxlab/core/error.hpp"

namespace mxlab {

/// The number type a tensor's values came from.
enum class DType : std::uint8_t {
  F32,   ///< IEEE binary32
  F16,   ///< IEEE binary16 (every value is exact in float32)
  BF16,  ///< bfloat16, the upper 16 bits of a binary32 (every value is exact in float32)
  F64,   ///< IEEE binary64 (float32 holds the nearest value; the exact values are kept as double)
};

/// Lower-case name of a dtype: "f32", "f16", "bf16", "f64".
std::string_view dtype_name(DType dtype);

/// Number of elements of a shape (1 for rank 0); an error if a dimension is negative or the product
/// overflows. `what` names the input in the message.
Result<std::size_t> shape_elements(std::span<const std::int64_t> shape, std::string_view what);

/// "1024x1024"; "scalar" for rank 0 (the syntax parse_shape reads back).
std::string format_shape(std::span<const std::int64_t> shape);

/// Values of a tensor in C (row-major) order.
///
/// Storage: `data()` always holds float32 values, so code that works in float32 reads every tensor
/// the same way. For F32, F16 and BF16 sources those are the source values exactly (binary16 and
/// bfloat16 embed in binary32). For an F64 source they are the float64 values rounded to nearest-even
/// (beyond the float32 range: +-inf), and `f64_data()` keeps the exact float64 values, so an exact
/// analysis reads `exact(i)` / `exact_values()` and gets the source value for every dtype. The price is
/// 12 bytes per element for F64 sources instead of 8; the benefit is one float32 path for everything.
///
/// Invariants (kept by the factories): data().size() == shape_elements(shape()); f64_data() is empty
/// unless dtype() == F64, then it has the same size; for F16/BF16 each float is a value of that dtype.
class Tensor {
 public:
  /// An empty 1-D F32 tensor of shape (0).
  Tensor() = default;

  /// Tensor from float32 values. `source` says which dtype they came from (F32, F16 or BF16); for
  /// F16/BF16 every value must be representable in that dtype. F64 is rejected: use from_f64.
  static Result<Tensor> from_f32(std::vector<std::int64_t> shape, std::vector<float> values, DType source = DType::F32);

  /// Tensor from float64 values: keeps them exactly and their float32 roundings alongside.
  static Result<Tensor> from_f64(std::vector<std::int64_t> shape, std::vector<double> values);

  /// The shape, outermost dimension first.
  const std::vector<std::int64_t>& shape() const { return shape_; }
  /// The number of dimensions.
  std::size_t rank() const { return shape_.size(); }
  /// The dtype the values came from.
  DType dtype() const { return dtype_; }
  /// Number of elements.
  std::size_t size() const { return data_.size(); }
  /// Float32 values (exact unless dtype() == F64).
  const std::vector<float>& data() const { return data_; }
  /// Exact float64 values of an F64 source; empty for other dtypes.
  const std::vector<double>& f64_data() const { return f64_; }
  /// Exact source value of element i (any dtype).
  double exact(std::size_t i) const { return f64_.empty() ? static_cast<double>(data_[i]) : f64_[i]; }
  /// Exact source values of all elements (any dtype).
  std::vector<double> exact_values() const;
  /// True when data() holds the source values exactly (always, except F64 sources with values that
  /// float32 cannot hold).
  bool f32_is_exact() const;
  /// The same values under another shape with the same number of elements.
  Result<Tensor> reshaped(std::vector<std::int64_t> shape) const;

 private:
  std::vector<std::int64_t> shape_{0};
  DType dtype_ = DType::F32;
  std::vector<float> data_;
  std::vector<double> f64_;
};

}  // namespace mxlab
