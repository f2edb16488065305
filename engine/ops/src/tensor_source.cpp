// The tensor a job reads.
#include "mxlab/ops/tensor_source.hpp"

#include <cmath>

namespace mxlab::ops {

TensorSource TensorSource::of(Tensor t) {
  TensorSource s;
  s.tensor_ = std::make_shared<const Tensor>(std::move(t));
  return s;
}

TensorSource TensorSource::of(MappedTensor t) {
  TensorSource s;
  s.mapped_ = std::move(t);
  return s;
}

const std::vector<std::int64_t>& TensorSource::shape() const { return tensor_ ? tensor_->shape() : mapped_->shape(); }
std::size_t TensorSource::size() const { return tensor_ ? tensor_->size() : mapped_->size(); }
DType TensorSource::dtype() const { return tensor_ ? tensor_->dtype() : mapped_->dtype(); }
double TensorSource::value(std::size_t i) const { return tensor_ ? tensor_->exact(i) : mapped_->value(i); }
bool TensorSource::float32_exact() const { return tensor_ ? tensor_->f32_is_exact() : true; }

Result<Tensor> TensorSource::load() const {
  if (tensor_) return *tensor_;
  return mapped_->load();
}

void TensorSource::release(std::size_t end) const {
  if (mapped_) mapped_->release(end);
}

}  // namespace mxlab::ops
