// Block kernels, the general power-of-two path: each block's plan from mxlab::pow2_block_plan (specials
// policies, peers' scale arithmetic, multiply plans), shared microexponents of subtiles, and the elements.
// Included once per Highway target by the block kernels' translation units (docs/kernels.md has the map).

// Per-target include guard: toggled by foreach_target.h for every target.
#if defined(MXLAB_KERNELS_BLOCK_PLAN_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXLAB_KERNELS_BLOCK_PLAN_INL_H_
#undef MXLAB_KERNELS_BLOCK_PLAN_INL_H_
#else
#define MXLAB_KERNELS_BLOCK_PLAN_INL_H_
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "block_codebook-inl.h"
#include "block_peer-inl.h"
#include "block_scale-inl.h"
#include "mxlab/quantize/quantize.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE::block {

/// One block of the general power-of-two path: its plan and what its element vectors share.
struct PlanBlock {
  Pow2BlockPlan plan;
  double scale_d = 0;         ///< the block scale 2^X (NaN under a NaN scale)
  bool multiply = false;      ///< Pow2BlockPlan::Kind::Multiply
  bool zero_block = false;    ///< Pow2BlockPlan::Kind::Zero
  int factor_e = 0;           ///< log2 of a multiply plan's nonzero factor
  bool deep_scales = false;   ///< scales below 2^-127 (float32 scale formats)
  /// BlockParams::plan_negative_zeros: a zero value of a negative input whose magnitude exceeds this is -0.
  float negative_zero_above = 0;
};

/// mxlab::negative_zero_value's bound for a block: fl32(|x| / 2^d) is 0 up to 2^(d - 150), as a float32
/// (0 below float32's subnormals, where every nonzero input exceeds it; Inf above its range, where none does).
inline float negative_zero_bound(const BlockFormat& f, int divisor_exponent) {
  if (f.options.input != InputPrecision::Float32 || divisor_exponent == QuantizedTensor::kNoExponent) return 0;
  const int e = divisor_exponent - 150;
  if (e < -149) return 0;
  if (e > 127) return std::numeric_limits<float>::infinity();
  // 2^e from its bits (a normal or a subnormal float32).
  const std::uint32_t bits = e >= -126 ? static_cast<std::uint32_t>(e + 127) << 23 : std::uint32_t{1} << (e + 149);
  return std::bit_cast<float>(bits);
}

/// Per-call buffers of the path: subtiles' |x| bits and each element's subtile offset.
struct PlanScratch {
  std::vector<std::uint32_t> abs_buf;     ///< |x| bits of the block's finite elements (0 for NaN/Inf)
  std::vector<std::int32_t> element_off;  ///< the offset d of each element of the block
};

/// Subtile offsets under rule floor with subtiles of 1, 2, 4 or 8 lanes: each lane takes its subtile's largest
/// magnitude (pairs, quads and octets of lanes exchanged and compared), its exponent read from the bits.
HWY_INLINE void vector_subtile_offsets(const BlockParams& p, InputKind in_kind, const std::uint8_t* xb,
                                       const std::uint8_t* in_buf, std::size_t len, std::size_t full,
                                       const Pow2BlockPlan& plan, int lo, std::int32_t* element_off) {
  const DU du;
  const DI di;
  const DF df;
  const std::size_t lanes = hn::Lanes(du);
  const auto sub = static_cast<std::size_t>(p.subtile);
  const VI x_e = hn::Set(di, plan.exponent);
  const VI lo_e = hn::Set(di, lo);
  for (std::size_t k = 0; k < len; k += lanes) {
    const VU u = k == full ? load_any(in_kind, in_buf, 0) : load_any(in_kind, xb, k);
    const VU a = hn::And(u, hn::Set(du, 0x7FFFFFFFU));
    VU m = hn::IfThenElseZero(hn::Lt(a, hn::Set(du, 0x7F800000U)), a);
    if (sub >= 2) m = hn::Max(m, hn::Reverse2(du, m));
    if (sub >= 4) m = hn::Max(m, hn::Reverse4(du, m));
    if (sub >= 8) m = hn::Max(m, hn::Reverse8(du, m));
    const VI field = hn::BitCast(di, hn::ShiftRight<23>(m));
    // A float32 subnormal: the exponent of its fraction converted to float (exact), minus 149.
    const VU m_f = hn::BitCast(du, hn::ConvertTo(df, hn::BitCast(di, m)));
    const VI sub_e = hn::Sub(hn::BitCast(di, hn::ShiftRight<23>(m_f)), hn::Set(di, 127 + 149));
    VI e = hn::IfThenElse(hn::Eq(field, hn::Zero(di)), sub_e, hn::Sub(field, hn::Set(di, 127)));
    if (p.clamp == ClampSite::Amax) e = hn::Min(hn::Max(e, hn::Set(di, -126)), hn::Set(di, 127));
    const VI xs = hn::Min(hn::Max(hn::Sub(e, hn::Set(di, p.emax)), lo_e), x_e);
    VI off = hn::Sub(x_e, xs);
    off = plan.nan_scale ? hn::Zero(di) : hn::IfThenElseZero(hn::RebindMask(di, hn::Ne(m, hn::Zero(du))), off);
    hn::StoreU(off, di, element_off + k);
  }
}

/// The subtiles' offsets of one block: 2^(X - d), d as large as the subtile's own exponent allows (within
/// d <= dmax, X - d >= x_min), as the reference's rule gives them; stored per element in s.element_off and,
/// for packed output, per subtile.
HWY_INLINE void plan_subtiles(const BlockParams& p, const BlockCall& call, const Pow2BlockPlan& plan,
                              const std::uint8_t* xb, const std::uint8_t* in_buf, std::size_t start, std::size_t len,
                              std::size_t full, PlanScratch& s) {
  const DU du;
  const std::size_t lanes = hn::Lanes(du);
  const auto sub = static_cast<std::size_t>(p.subtile);
  const std::size_t nsub = ceil_div(len, sub);
  const int lo = std::max(plan.exponent - p.subtile_dmax, p.x_min);
  const bool vector_subtiles =
      p.rule == ScaleRule::Floor && sub <= lanes && lanes % sub == 0 && sub <= 8 && (sub & (sub - 1)) == 0;
  if (vector_subtiles) {
    vector_subtile_offsets(p, call.input, xb, in_buf, len, full, plan, lo, s.element_off.data());
  } else {
    for (std::size_t k = 0; k < len; k += lanes) {
      const VU u = k == full ? load_any(call.input, in_buf, 0) : load_any(call.input, xb, k);
      const VU a = hn::And(u, hn::Set(du, 0x7FFFFFFFU));
      hn::StoreU(hn::IfThenElseZero(hn::Lt(a, hn::Set(du, 0x7F800000U)), a), du, s.abs_buf.data() + k);
    }
    for (std::size_t j = 0; j < nsub; ++j) {
      std::uint32_t m = 0;
      for (std::size_t i = j * sub; i < std::min(len, (j + 1) * sub); ++i) m = std::max(m, s.abs_buf[i]);
      int off = 0;
      if (!plan.nan_scale && m != 0) off = plan.exponent - std::clamp(block_exponent(p, m), lo, plan.exponent);
      std::fill(s.element_off.begin() + static_cast<std::ptrdiff_t>(j * sub),
                s.element_off.begin() + static_cast<std::ptrdiff_t>(std::min(len, (j + 1) * sub)), off);
    }
  }
  if (call.out == BlockOut::Packed) {
    const std::int64_t r = static_cast<std::int64_t>(start) / call.row;
    const std::int64_t first =
        r * call.subtiles_per_row + (static_cast<std::int64_t>(start) - r * call.row) / static_cast<std::int64_t>(sub);
    for (std::size_t j = 0; j < nsub; ++j)
      call.subtile_offsets[static_cast<std::size_t>(first) + j] = static_cast<std::uint8_t>(s.element_off[j * sub]);
  }
}

/// Codebook codes of the exact quotients x * 2^(d - X) in double lanes (codebook_lanes64), d the lanes' offsets.
HWY_INLINE VU plan_codebook_codes(const BlockParams& p, const PlanBlock& pb, VU u, VI off, VU random, MU* over) {
  const DU du;
  const DI di;
  const DF df;
  const DF64 df64;
  const D64 d64;
  const DUh duh;
  const hn::Rebind<std::int32_t, D64> dih;
  const std::size_t lanes = hn::Lanes(du);
  const std::size_t l64 = hn::Lanes(df64);
  HWY_ALIGN float xs[kMaxLanes];
  HWY_ALIGN std::int32_t ks[kMaxLanes];
  HWY_ALIGN std::uint32_t rs[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_codes[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_over[kMaxLanes];
  hn::Store(hn::BitCast(df, u), df, xs);
  hn::Store(hn::Sub(off, hn::Set(di, pb.plan.divisor_exponent)), di, ks);
  hn::Store(random, du, rs);
  for (std::size_t h = 0; h < lanes; h += l64) {
    const VF64 x64 = hn::PromoteTo(df64, hn::LoadU(DFh(), xs + h));
    const auto k64 = hn::PromoteTo(DI64(), hn::LoadU(dih, ks + h));
    const VF64 pow = hn::BitCast(df64, hn::ShiftLeft<52>(hn::Add(k64, hn::Set(DI64(), 1023))));
    M64 cb_over;
    const V64 cb =
        codebook_lanes64(p, hn::Mul(x64, pow), hn::PromoteTo(d64, hn::LoadU(duh, rs + h)), &cb_over, nullptr);
    hn::StoreU(hn::TruncateTo(duh, cb), duh, lane_codes + h);
    hn::StoreU(hn::TruncateTo(duh, hn::VecFromMask(d64, cb_over)), duh, lane_over + h);
  }
  *over = hn::Ne(hn::Load(du, lane_over), hn::Zero(du));
  return apply_zero_sign(p, hn::Load(du, lane_codes), u);
}

/// The peers' float32 scaled values fl32(x / 2^(X - d)) = fl32(x * 2^(d - X)): the power is a float32, the
/// product rounded once. Past 2^127 (scales below 2^-127, as float32 scale formats have) x first takes the
/// excess exactly: the block's elements lie below 2^(X + emax + 2), far from float32's largest values.
HWY_INLINE VF plan_peer_values(const PlanBlock& pb, VU u, VI off) {
  const DI di;
  const DF df;
  const VF x = hn::BitCast(df, u);
  if (pb.multiply) return hn::Mul(x, hn::Set(df, static_cast<float>(pb.plan.factor)));  // 0 or 2^k >= 2^-149
  const VI e = hn::Sub(off, hn::Set(di, pb.plan.divisor_exponent));
  if (!pb.deep_scales) return hn::Mul(x, pow2_lanes(e));
  const VF x_up = hn::Mul(x, pow2_lanes(hn::Max(hn::Sub(e, hn::Set(di, 127)), hn::Zero(di))));
  return hn::Mul(x_up, pow2_lanes(hn::Min(e, hn::Set(di, 127))));
}

/// The element codes of one vector of a planned block, in vector lanes; false when the vector must take the
/// reference's own element step instead (mxlab::pow2_element_cast): NaN or Inf under the peers' arithmetic or
/// with a codebook, codebooks under a multiply plan or a peer, Inf times a zero factor.
HWY_INLINE bool plan_vector_codes(const BlockParams& p, const CastVectors& c, const PlanBlock& pb, VU u, VI off,
                                  VU random, VU* code, MU* over) {
  const DU du;
  const DI di;
  const bool specials = !hn::AllFalse(du, hn::Gt(hn::And(u, hn::Set(du, 0x7FFFFFFFU)), hn::Set(du, 0x7F7FFFFFU)));
  if (pb.zero_block) {
    *code = hn::Set(du, p.zero_code_pos);
    return true;
  }
  if (p.codebook) {
    if (specials || pb.multiply || p.peer) return false;
    *code = plan_codebook_codes(p, pb, u, off, random, over);
    return true;
  }
  if (p.peer) {
    if (specials) return false;
    const VF v = plan_peer_values(pb, u, off);
    const VU vb = hn::BitCast(du, v);
    const VU wb = p.add_half ? add_half_lanes(p, v) : vb;
    *code = apply_zero_sign(p, cast_lanes<AnyRounding>(c, wb, random, hn::Zero(di), over), vb);
    return true;
  }
  if (pb.multiply && pb.plan.factor == 0 && specials) return false;  // Inf * 0
  VU xin = u;
  VI minus_x = hn::Sub(off, hn::Set(di, pb.plan.divisor_exponent));
  if (pb.multiply) {
    if (pb.plan.factor == 0) xin = hn::And(u, hn::Set(du, 0x80000000U));  // finite x * 0: a zero of x's sign
    minus_x = hn::Set(di, pb.factor_e);
  }
  *code = apply_zero_sign(p, cast_lanes<AnyRounding>(c, xin, random, minus_x, over), u);
  return true;
}

/// The reference's own element step (mxlab::pow2_element_cast) for every lane of a vector.
HWY_INLINE VU plan_scalar_codes(const BlockParams& p, const PlanBlock& pb, VU u, VI off, VU random, MU* over) {
  const DU du;
  const DI di;
  HWY_ALIGN std::uint32_t lane_x[kMaxLanes];
  HWY_ALIGN std::uint32_t rnd[kMaxLanes];
  HWY_ALIGN std::int32_t lane_off[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_codes[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_over[kMaxLanes];
  hn::Store(u, du, lane_x);
  hn::Store(random, du, rnd);
  hn::Store(off, di, lane_off);
  for (std::size_t l = 0; l < hn::Lanes(du); ++l) {
    const double x = static_cast<double>(std::bit_cast<float>(lane_x[l]));
    const CastResult r = pow2_element_cast(*p.owner, p.element_opts, pb.plan, lane_off[l], x, rnd[l]);
    lane_codes[l] = r.code;
    lane_over[l] = r.overflow ? ~0U : 0U;
  }
  *over = hn::Ne(hn::Load(du, lane_over), hn::Zero(du));
  return hn::Load(du, lane_codes);
}

/// The outputs of elements [index, index + count) of a planned block from their codes: packed codes, the
/// fake-quantized values decode(code) * 2^(X - d) rounded once to float32 (NaN under a NaN scale), metrics.
HWY_INLINE void plan_vector_outputs(const BlockParams& p, const BlockCall& call, const PlanBlock& pb, CodeSink& sink,
                                    std::size_t index, std::size_t count, VU u, VI off, VU code, MU over) {
  const DU du;
  const DI di;
  const DF df;
  if (call.out == BlockOut::Packed) sink.put(du, code, index, count);
  if (call.out == BlockOut::Fake) {
    HWY_ALIGN float out_buf[kMaxLanes];
    const VF s = pb.plan.nan_scale ? hn::Set(df, std::numeric_limits<float>::quiet_NaN())
                                   : pow2_lanes(hn::Sub(hn::Set(di, pb.plan.exponent), off));
    VF v = hn::Mul(hn::GatherIndex(df, p.decode_f32.data(), hn::BitCast(di, code)), s);
    if (p.plan_negative_zeros) {
      const VU sign = hn::Set(du, 0x80000000U);
      const VU vb = hn::BitCast(du, v);
      const auto minus = hn::And(hn::Eq(hn::AndNot(sign, vb), hn::Zero(du)),
                                 hn::And(hn::Ne(hn::And(u, sign), hn::Zero(du)),
                                         hn::RebindMask(du, hn::Gt(hn::Abs(hn::BitCast(df, u)),
                                                                   hn::Set(df, pb.negative_zero_above)))));
      v = hn::BitCast(df, hn::Or(vb, hn::IfThenElseZero(minus, sign)));
    }
    hn::Store(v, df, out_buf);
    std::memcpy(call.fake + index, out_buf, count * sizeof(float));
  }
  if (call.metrics == nullptr) return;
  if (p.subtile == 0) {  // one scale for every lane
    add_lane_metrics(p, call, index, count, du, u, code, hn::VecFromMask(du, over), pb.scale_d);
    return;
  }
  HWY_ALIGN std::uint32_t lane_x[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_codes[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_over[kMaxLanes];
  HWY_ALIGN std::int32_t lane_off[kMaxLanes];
  hn::Store(u, du, lane_x);
  hn::Store(code, du, lane_codes);
  hn::Store(hn::VecFromMask(du, over), du, lane_over);
  hn::Store(off, di, lane_off);
  for (std::size_t l = 0; l < count; ++l) {
    const double deq = p.decode_f64[lane_codes[l]] * std::ldexp(pb.scale_d, -lane_off[l]);
    add_metric_at(call, index + l, static_cast<double>(std::bit_cast<float>(lane_x[l])), deq, lane_over[l] != 0);
  }
}

/// The general power-of-two path over blocks [b0, b1) (BlockParams::planned): each block's decision is
/// mxlab::pow2_block_plan's; the subtiles' offsets follow the reference's rule; elements are cast in vectors,
/// except vectors holding NaN or Inf under the peers' arithmetic (or Inf times a zero factor), which go
/// through mxlab::pow2_element_cast, the reference's own element step.
/// Runs under the default floating-point environment (the float32 steps must round to nearest without
/// flushing), set for the call and restored after it.
HWY_NOINLINE inline void plan_loop(const BlockParams& p, const BlockCall& call) {
  const DU du;
  const DI di;
  const std::size_t lanes = hn::Lanes(du);
  const std::size_t in_bytes = call.input == InputKind::F32 ? 4 : 2;
  const auto* in = static_cast<const std::uint8_t*>(call.x);
  const CastVectors c(p.cast);
  const bool elements = call.out != BlockOut::None || call.metrics != nullptr;
  CodeSink sink(p, call);
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
  PlanScratch scratch;
  if (p.subtile > 0) {
    scratch.abs_buf.resize(static_cast<std::size_t>(call.block) + kMaxLanes);
    scratch.element_off.assign(static_cast<std::size_t>(call.block) + kMaxLanes, 0);
  }
  const DefaultFpEnvironment fp_env;
  BlockCursor cursor(call.row, call.block, call.blocks_per_row, call.b0);
  for (std::int64_t b = call.b0; b < call.b1; ++b) {
    std::size_t start = 0;
    std::size_t len = 0;
    cursor.next(&start, &len);
    const std::uint8_t* xb = in + start * in_bytes;
    const std::size_t full = len - len % lanes;
    if (full != len) {
      std::memset(in_buf, 0, sizeof(in_buf));
      std::memcpy(in_buf, xb + full * in_bytes, (len - full) * in_bytes);
    }
    if constexpr (HWY_TARGET != HWY_SCALAR) {
      for (std::size_t k = 0; k < len * in_bytes; k += 64) hwy::Prefetch(xb + k + call.prefetch);
    }
    const BlockStats st = block_stats(call.input, xb, in_buf, len, full);
    const float amax = std::bit_cast<float>(st.amax_bits);
    if (call.amax != nullptr) call.amax[b] = amax;
    if (call.tensor_amax != nullptr) *call.tensor_amax = std::max(*call.tensor_amax, amax);
    if (call.tensor_nan != nullptr && st.has_nan) *call.tensor_nan = true;
    if (!elements) continue;
    PlanBlock pb;
    pb.plan = pow2_block_plan(*p.owner, static_cast<double>(amax), st.has_nan, st.has_inf, call.any_nan, p.x_min,
                              p.x_max);
    const auto xi = static_cast<std::size_t>(pb.plan.exponent - p.x_min);
    if (call.out == BlockOut::Packed)
      write_scale(p, call.scales, static_cast<std::int64_t>(b), pb.plan.nan_scale ? p.scale_nan_code : p.scale_code[xi]);
    pb.scale_d = pb.plan.nan_scale ? std::numeric_limits<double>::quiet_NaN() : p.pow2_value_d[xi];
    if (p.subtile > 0) plan_subtiles(p, call, pb.plan, xb, in_buf, start, len, full, scratch);
    if (pb.plan.kind == Pow2BlockPlan::Kind::NanCodes) {
      nan_elements(p, call, sink, start, len);
      continue;
    }
    pb.multiply = pb.plan.kind == Pow2BlockPlan::Kind::Multiply;
    pb.zero_block = pb.plan.kind == Pow2BlockPlan::Kind::Zero;
    pb.factor_e = pb.multiply && pb.plan.factor != 0 ? std::ilogb(pb.plan.factor) : 0;
    pb.deep_scales = p.x_min < -127;
    if (p.plan_negative_zeros) pb.negative_zero_above = negative_zero_bound(*p.owner, pb.plan.divisor_exponent);
    for (std::size_t k = 0; k < len; k += lanes) {
      const bool tail = k == full;
      const VU u = tail ? load_any(call.input, in_buf, 0) : load_any(call.input, xb, k);
      // Lanes past the block: never stored.
      const VI off = p.subtile > 0 ? hn::LoadU(di, scratch.element_off.data() + k) : hn::Zero(di);
      VU random = hn::Zero(du);
      if (p.stochastic) random = stochastic_bits_lanes(p.seed_key, static_cast<std::uint64_t>(start + k));
      MU over = hn::FirstN(du, 0);
      VU code = hn::Zero(du);
      if (!plan_vector_codes(p, c, pb, u, off, random, &code, &over)) code = plan_scalar_codes(p, pb, u, off, random, &over);
      plan_vector_outputs(p, call, pb, sink, start + k, tail ? len - full : lanes, u, off, code, over);
    }
  }
  if (call.out == BlockOut::Packed) sink.finish();
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE::block
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
