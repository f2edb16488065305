// Tensor construction and shape helpers.
#include "mxlab/io/tensor.hpp"

#include <limits>
#include <new>

#include "binary.hpp"
#include "mxlab/core/bits.hpp"

namespace mxlab {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "f32";
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    case DType::F64:
      return "f64";
  }
  return "?";
}

Result<std::size_t> shape_elements(std::span<const std::int64_t> shape, std::string_view what) {
  std::size_t n = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0)
      return make_error(std::string(what) + ": dimension " + std::to_string(i + 1) + " is negative (" +
                        std::to_string(shape[i]) + ")");
    const auto d = static_cast<std::uint64_t>(shape[i]);
    if (d != 0 && n > std::numeric_limits<std::size_t>::max() / d)
      return make_error(std::string(what) + ": shape " + format_shape(shape) + " has more elements than fit in memory");
    n *= static_cast<std::size_t>(d);
  }
  return n;
}

std::string format_shape(std::span<const std::int64_t> shape) {
  if (shape.empty()) return "scalar";
  std::string s;
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  return s;
}

Result<Tensor> Tensor::from_f32(std::vector<std::int64_t> shape, std::vector<float> values, DType source) {
  const std::string what = "tensor of shape " + format_shape(shape);
  if (source == DType::F64) return make_error(what + ": float32 values cannot have an f64 source; use from_f64");
  auto n = shape_elements(shape, what);
  if (!n) return n.error();
  if (*n != values.size())
    return make_error(what + ": the shape needs " + std::to_string(*n) + " values, got " +
                      std::to_string(values.size()));
  if (source == DType::F16 || source == DType::BF16) {
    const bool f16 = source == DType::F16;
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (f16 ? io_detail::is_f16_value(values[i]) : io_detail::is_bf16_value(values[i])) continue;
      return make_error(what + ": value " + std::to_string(i) + " (" + g17(values[i]) + ") is not a " +
                        std::string(dtype_name(source)) + " value");
    }
  }
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = source;
  t.data_ = std::move(values);
  return t;
}

Result<Tensor> Tensor::from_f64(std::vector<std::int64_t> shape, std::vector<double> values) {
  const std::string what = "tensor of shape " + format_shape(shape);
  auto n = shape_elements(shape, what);
  if (!n) return n.error();
  if (*n != values.size())
    return make_error(what + ": the shape needs " + std::to_string(*n) + " values, got " +
                      std::to_string(values.size()));
  Tensor t;
  try {
    t.data_.resize(values.size());
  } catch (const std::bad_alloc&) {
    return make_error(what + ": not enough memory for " + std::to_string(values.size()) + " float32 values");
  }
  // static_cast<float> rounds to nearest-even (the default floating-point environment).
  for (std::size_t i = 0; i < values.size(); ++i) t.data_[i] = static_cast<float>(values[i]);
  t.shape_ = std::move(shape);
  t.dtype_ = DType::F64;
  t.f64_ = std::move(values);
  return t;
}

std::vector<double> Tensor::exact_values() const {
  if (!f64_.empty()) return f64_;
  return std::vector<double>(data_.begin(), data_.end());
}

bool Tensor::f32_is_exact() const {
  for (std::size_t i = 0; i < f64_.size(); ++i) {
    const double d = f64_[i];
    // NaN is NaN in either type; everything else must compare equal.
    if (static_cast<double>(data_[i]) != d && !(d != d)) return false;
  }
  return true;
}

Result<Tensor> Tensor::reshaped(std::vector<std::int64_t> shape) const {
  const std::string what = "reshape from " + format_shape(shape_) + " to " + format_shape(shape);
  auto n = shape_elements(shape, what);
  if (!n) return n.error();
  if (*n != data_.size())
    return make_error(what + ": the new shape has " + std::to_string(*n) + " elements, the tensor " +
                      std::to_string(data_.size()));
  try {
    Tensor t = *this;
    t.shape_ = std::move(shape);
    return t;
  } catch (const std::bad_alloc&) {
    return make_error(what + ": not enough memory to copy " + std::to_string(data_.size()) + " values");
  }
}

}  // namespace mxlab
