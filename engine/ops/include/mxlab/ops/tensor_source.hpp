// The tensor a job reads: held in memory, or mapped from its file and read chunk by chunk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/io/mapped.hpp"
#include "mxlab/io/tensor.hpp"

namespace mxlab {
struct BlockInput;
}

namespace mxlab::ops {

class TensorSource {
 public:
  /// A tensor in memory.
  static TensorSource of(Tensor t);
  /// A tensor mapped from its file (or a view of memory); float64 values are read once here to learn
  /// whether float32 holds them all.
  static TensorSource of(MappedTensor t);

  const std::vector<std::int64_t>& shape() const;
  std::size_t size() const;
  DType dtype() const;
  /// Exact value of element i.
  double value(std::size_t i) const;
  /// Whether every value is exact as float32 (all but float64 sources with values float32 cannot hold).
  bool float32_exact() const;
  /// The whole tensor in memory (a mapped file is read).
  Result<Tensor> load() const;
  /// The memory tensor, if this source holds one.
  const Tensor* tensor() const { return tensor_.get(); }
  /// The mapped file, if this source maps one.
  const MappedTensor* mapped() const { return mapped_ ? &*mapped_ : nullptr; }
  /// Elements [0, end) will not be read again (a mapped file gives their pages back).
  void release(std::size_t end) const;

 private:
  std::shared_ptr<const Tensor> tensor_;
  std::optional<MappedTensor> mapped_;
  bool mapped_f32_exact_ = true;  ///< a mapped float64 tensor: whether every value is a float32 value
};

/// The tensor with the given axes moved last and flattened: shape [product of the other axes, product of the
/// given axes], the given axes in the order listed, the others in their order. Blocks along the last axis of
/// the result run along the reduction axes of a weight (a convolution kernel's input channels, a depthwise
/// kernel's H x W). Axes may be negative (counted from the end); each at most once. Read into memory.
Result<TensorSource> block_axes_last(const TensorSource& t, const std::vector<int>& axes);

}  // namespace mxlab::ops
