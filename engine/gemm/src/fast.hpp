// The SIMD path of the models (mxlab/kernels/gemm_kernel.hpp): which models and operands the kernel runs exactly,
// the operands packed for it, and its per-entry accumulator states. gemm.cpp rounds the states to C and sends
// every entry the kernel could not take (special values, lanes it marked) to the scalar definition.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mxlab/gemm/gemm.hpp"
#include "mxlab/gemm/model.hpp"

namespace mxlab::gemm::detail {

/// The kernel's accumulators of every entry of C (row-major): with acc=exact the exact value is acc + lo; with
/// promotion, outer is the FP32 accumulator. redo marks the entries the scalar definition computes.
struct KernelStates {
  std::vector<double> acc, lo, outer;
  std::vector<std::uint8_t> redo;
};

/// Runs the model's kernel over all of C. Returns why it cannot (the model or operands outside the kernel's exact
/// range; then nothing is computed), or an empty string.
std::string kernel_states(const Model& m, const Operand& a, const Operand& b, unsigned threads, KernelStates& out);

}  // namespace mxlab::gemm::detail
