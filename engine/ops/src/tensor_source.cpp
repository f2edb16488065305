// The tensor a job reads.
#include "mxlab/ops/tensor_source.hpp"

#include <algorithm>
#include <cmath>

namespace mxlab::ops {

TensorSource TensorSource::of(Tensor t) {
  TensorSource s;
  s.tensor_ = std::make_shared<const Tensor>(std::move(t));
  return s;
}

TensorSource TensorSource::of(MappedTensor t) {
  TensorSource s;
  if (t.type() == MappedType::F64) {
    // As Tensor::f32_is_exact: NaN is NaN in either type; every other value must survive the round trip.
    const auto* d = static_cast<const double*>(t.data());
    for (std::size_t i = 0; i < t.size() && s.mapped_f32_exact_; ++i)
      s.mapped_f32_exact_ = static_cast<double>(static_cast<float>(d[i])) == d[i] || d[i] != d[i];
  }
  s.mapped_ = std::move(t);
  return s;
}

const std::vector<std::int64_t>& TensorSource::shape() const { return tensor_ ? tensor_->shape() : mapped_->shape(); }
std::size_t TensorSource::size() const { return tensor_ ? tensor_->size() : mapped_->size(); }
DType TensorSource::dtype() const { return tensor_ ? tensor_->dtype() : mapped_->dtype(); }
double TensorSource::value(std::size_t i) const { return tensor_ ? tensor_->exact(i) : mapped_->value(i); }
bool TensorSource::float32_exact() const { return tensor_ ? tensor_->f32_is_exact() : mapped_f32_exact_; }

Result<Tensor> TensorSource::load() const {
  if (tensor_) return *tensor_;
  return mapped_->load();
}

void TensorSource::release(std::size_t end) const {
  if (mapped_) mapped_->release(end);
}

Result<TensorSource> block_axes_last(const TensorSource& t, const std::vector<int>& axes) {
  const auto& shape = t.shape();
  const int rank = static_cast<int>(shape.size());
  std::vector<int> moved;
  for (int a : axes) {
    const int n = a < 0 ? a + rank : a;
    if (n < 0 || n >= rank)
      return make_error("block axis " + std::to_string(a) + " is outside the tensor's " + std::to_string(rank) +
                        " axes (shape " + format_shape(shape) + ")");
    for (int m : moved)
      if (m == n) return make_error("block axis " + std::to_string(a) + " is given twice");
    moved.push_back(n);
  }
  if (moved.empty()) return make_error("no block axis given");
  std::vector<int> order;
  for (int a = 0; a < rank; ++a)
    if (std::find(moved.begin(), moved.end(), a) == moved.end()) order.push_back(a);
  std::int64_t outer = 1, inner = 1;
  for (int a : order) outer *= shape[static_cast<std::size_t>(a)];
  for (int a : moved) inner *= shape[static_cast<std::size_t>(a)];
  order.insert(order.end(), moved.begin(), moved.end());
  // Row-major strides of the source; walk the result in its order.
  std::vector<std::int64_t> stride(static_cast<std::size_t>(rank), 1);
  for (int a = rank - 2; a >= 0; --a)
    stride[static_cast<std::size_t>(a)] = stride[static_cast<std::size_t>(a) + 1] * shape[static_cast<std::size_t>(a) + 1];
  const std::size_t n = t.size();
  const bool f64 = !t.float32_exact();
  std::vector<float> out32(f64 ? 0 : n);
  std::vector<double> out64(f64 ? n : 0);
  std::vector<std::int64_t> index(static_cast<std::size_t>(rank), 0);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t src = 0;
    for (int k = 0; k < rank; ++k) src += index[static_cast<std::size_t>(k)] * stride[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])];
    const double v = t.value(static_cast<std::size_t>(src));
    if (f64) out64[i] = v;
    else out32[i] = static_cast<float>(v);
    for (int k = rank - 1; k >= 0; --k) {
      auto& ix = index[static_cast<std::size_t>(k)];
      if (++ix < shape[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])]) break;
      ix = 0;
    }
  }
  std::vector<std::int64_t> flat = {outer, inner};
  auto r = f64 ? Tensor::from_f64(flat, std::move(out64)) : Tensor::from_f32(flat, std::move(out32), t.dtype() == DType::F64 ? DType::F32 : t.dtype());
  if (!r) return r.error();
  return TensorSource::of(std::move(*r));
}

}  // namespace mxlab::ops
