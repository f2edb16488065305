// The SIMD kernel of the GEMM accumulation models (docs/gemm.md "Speed"): one row of A against a panel of B's
// columns, a column per double lane, each lane running the model's definition on its own dot product. Plain
// data only; engine/gemm packs the operands, decides which models and operands the kernel takes, and recomputes
// with the scalar definition every lane the kernel marks (a value that left the kernel's exact range).
#pragma once

#include <cstddef>
#include <cstdint>

#include "mxlab/formats/cast.hpp"

namespace mxlab {

/// One rounding of an exact double to a float grid: `precision` significant bits, normals down to
/// 2^min_exponent and subnormals below. A result beyond max_finite saturates to it (formats without infinities,
/// whose overflow policy is to saturate) or marks the lane (formats with infinities); so does a value not finite.
struct GemmRounding {
  int precision = 24;
  int min_exponent = -126;
  double max_finite = 0;
  bool saturate = false;
  Rounding mode = Rounding::NearestEven;
};

/// An accumulation model as the kernel runs it (mxlab::gemm::Model, with the operands' facts decided).
struct GemmKernelModel {
  bool scale_product = false;     ///< block scales on each product (else on each group's sum)
  bool round_product = false;     ///< products rounded by `product`
  GemmRounding product;
  bool round_sum = false;         ///< group sums rounded by `sum` at each addition
  GemmRounding sum;
  bool sequential = false;        ///< the group's order (else pairwise)
  enum class Acc : std::uint8_t { Exact, Float, Aligned } acc = Acc::Exact;
  GemmRounding acc_rounding;      ///< Acc::Float
  int aligned_bits = 0;           ///< Acc::Aligned
  bool aligned_nearest = false;   ///< Acc::Aligned: to nearest (else truncated)
  /// Exact group sums add the products in plain double arithmetic (the caller proved every partial sum is a
  /// double); else each product enters a pair of doubles by error-free additions.
  bool plain_group_sum = false;
  GemmRounding fp32;              ///< the promotion accumulator
};

/// One row of A against one panel of B (gemm_lanes() columns).
struct GemmPanelCall {
  std::int64_t depth = 0;
  const double* a_element = nullptr;  ///< the row's elements (depth)
  const double* a_scaled = nullptr;   ///< elements times their block scales
  const double* a_scale = nullptr;    ///< block scales
  const double* b_element = nullptr;  ///< the panel's elements, depth x lanes, lane fastest
  const double* b_scaled = nullptr;
  const double* b_scale = nullptr;
  const std::int32_t* group_end = nullptr;  ///< each group's end along K, ascending, the last is depth
  const std::uint8_t* promote_after = nullptr;  ///< per group: 1 when the accumulator is promoted after it
  std::size_t groups = 0;
  double* scratch = nullptr;  ///< room for the longest group's products: its length x lanes doubles
  // Outputs, gemm_lanes() each: the accumulator (with Acc::Exact its exact value is acc + lo), the promoted FP32
  // accumulator, and 1 where the lane must be recomputed by the scalar definition.
  double* acc = nullptr;
  double* lo = nullptr;
  double* outer = nullptr;
  std::uint64_t* redo = nullptr;
};

/// A panel's width (columns of C) on the target the kernels dispatch to now: two vectors of double lanes.
std::size_t gemm_lanes();

/// Runs the model over one row and panel.
void gemm_panel(const GemmKernelModel& m, const GemmPanelCall& call);

}  // namespace mxlab
