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

/// The general power-of-two path over blocks [b0, b1) (BlockParams::planned): each block's decision is
/// mxlab::pow2_block_plan's; the subtiles' offsets follow the reference's rule; elements are cast in vectors,
/// except vectors holding NaN or Inf under the peers' arithmetic (or Inf times a zero factor), which go
/// through mxlab::pow2_element_cast, the reference's own element step.
/// Runs under the default floating-point environment (the float32 steps must round to nearest without
/// flushing), set for the call and restored after it.
HWY_NOINLINE inline void plan_loop(const BlockParams& p, const BlockCall& call) {
  const DU du;
  const DI di;
  const DF df;
  const std::size_t lanes = hn::Lanes(du);
  const InputKind in_kind = call.input;
  const std::size_t in_bytes = in_kind == InputKind::F32 ? 4 : 2;
  const auto* in = static_cast<const std::uint8_t*>(call.x);
  const CastVectors c(p.cast);
  const bool want_metrics = call.metrics != nullptr;
  const bool elements = call.out != BlockOut::None || want_metrics;
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFU);
  const VU inf_bits = hn::Set(du, 0x7F800000U);
  const VU sign_mask = hn::Set(du, 0x80000000U);
  const auto sub = static_cast<std::size_t>(p.subtile);
  CodeSink sink(p, call);
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
  HWY_ALIGN std::uint32_t lane_x[kMaxLanes];
  HWY_ALIGN std::int32_t lane_off[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_codes[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_over[kMaxLanes];
  HWY_ALIGN float out_buf[kMaxLanes];
  std::vector<std::uint32_t> abs_buf;  // subtiles: |x| bits of the block's finite elements (0 for NaN/Inf)
  std::vector<std::int32_t> element_off;  // subtiles: the offset of each element of the block
  if (sub > 0) {
    abs_buf.resize(static_cast<std::size_t>(call.block) + kMaxLanes);
    element_off.assign(static_cast<std::size_t>(call.block) + kMaxLanes, 0);
  }
  const bool vector_subtiles = sub > 0 && p.rule == ScaleRule::Floor && sub <= lanes && lanes % sub == 0 && sub <= 8 &&
                               (sub & (sub - 1)) == 0;
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
    const BlockStats st = block_stats(in_kind, xb, in_buf, len, full);
    const float amax = std::bit_cast<float>(st.amax_bits);
    if (call.amax != nullptr) call.amax[b] = amax;
    if (call.tensor_amax != nullptr) *call.tensor_amax = std::max(*call.tensor_amax, amax);
    if (call.tensor_nan != nullptr && st.has_nan) *call.tensor_nan = true;
    if (!elements) continue;
    const Pow2BlockPlan plan = pow2_block_plan(*p.owner, static_cast<double>(amax), st.has_nan, st.has_inf,
                                               call.any_nan, p.x_min, p.x_max);
    const auto xi = static_cast<std::size_t>(plan.exponent - p.x_min);
    const std::uint32_t scode = plan.nan_scale ? p.scale_nan_code : p.scale_code[xi];
    if (call.out == BlockOut::Packed) write_scale(p, call.scales, static_cast<std::int64_t>(b), scode);
    const double scale_d = plan.nan_scale ? std::numeric_limits<double>::quiet_NaN() : p.pow2_value_d[xi];

    // Subtiles: 2^(X - d), d as large as the subtile's own exponent allows (within d <= dmax, X - d >= x_min).
    if (sub > 0) {
      const std::size_t nsub = (len + sub - 1) / sub;
      const int lo = std::max(plan.exponent - p.subtile_dmax, p.x_min);
      if (vector_subtiles) {
        // Rule floor with subtiles of 1, 2, 4 or 8 lanes: each lane takes its subtile's largest magnitude
        // (pairs, quads and octets of lanes exchanged and compared), its exponent read from the bits.
        const VI x_e = hn::Set(di, plan.exponent);
        const VI lo_e = hn::Set(di, lo);
        const bool none = plan.nan_scale;
        for (std::size_t k = 0; k < len; k += lanes) {
          const VU u = k == full ? load_any(in_kind, in_buf, 0) : load_any(in_kind, xb, k);
          const VU a = hn::And(u, abs_mask);
          VU m = hn::IfThenElseZero(hn::Lt(a, inf_bits), a);
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
          off = none ? hn::Zero(di) : hn::IfThenElseZero(hn::RebindMask(di, hn::Ne(m, hn::Zero(du))), off);
          hn::StoreU(off, di, element_off.data() + k);
        }
      } else {
        for (std::size_t k = 0; k < len; k += lanes) {
          const VU u = k == full ? load_any(in_kind, in_buf, 0) : load_any(in_kind, xb, k);
          const VU a = hn::And(u, abs_mask);
          hn::StoreU(hn::IfThenElseZero(hn::Lt(a, inf_bits), a), du, abs_buf.data() + k);
        }
        for (std::size_t j = 0; j < nsub; ++j) {
          std::uint32_t m = 0;
          for (std::size_t i = j * sub; i < std::min(len, (j + 1) * sub); ++i) m = std::max(m, abs_buf[i]);
          int off = 0;
          if (!plan.nan_scale && m != 0) off = plan.exponent - std::clamp(block_exponent(p, m), lo, plan.exponent);
          std::fill(element_off.begin() + static_cast<std::ptrdiff_t>(j * sub),
                    element_off.begin() + static_cast<std::ptrdiff_t>(std::min(len, (j + 1) * sub)), off);
        }
      }
      if (call.out == BlockOut::Packed) {
        const std::int64_t r = static_cast<std::int64_t>(start) / call.row;
        const std::int64_t first = r * call.subtiles_per_row +
                                   (static_cast<std::int64_t>(start) - r * call.row) / static_cast<std::int64_t>(sub);
        for (std::size_t j = 0; j < nsub; ++j)
          call.subtile_offsets[static_cast<std::size_t>(first) + j] = static_cast<std::uint8_t>(element_off[j * sub]);
      }
    }
    if (plan.kind == Pow2BlockPlan::Kind::NanCodes) {
      nan_elements(p, call, sink, start, len);
      continue;
    }
    const bool multiply = plan.kind == Pow2BlockPlan::Kind::Multiply;
    const bool zero_block = plan.kind == Pow2BlockPlan::Kind::Zero;
    const VI divisor_e = hn::Set(di, plan.divisor_exponent);
    const VI scale_e = hn::Set(di, plan.exponent);
    const int factor_e = multiply && plan.factor != 0 ? std::ilogb(plan.factor) : 0;
    const VF factor_v = hn::Set(df, static_cast<float>(plan.factor));  // 0 or a power of two >= 2^-149
    const bool deep_scales = p.x_min < -127;
    for (std::size_t k = 0; k < len; k += lanes) {
      const bool tail = k == full;
      const std::size_t count = tail ? len - full : lanes;
      const VU u = tail ? load_any(in_kind, in_buf, 0) : load_any(in_kind, xb, k);
      VI off = hn::Zero(di);
      if (sub > 0) off = hn::LoadU(di, element_off.data() + k);  // lanes past the block: never stored
      VU random = hn::Zero(du);
      if (p.stochastic) random = stochastic_bits_lanes(p.seed_key, static_cast<std::uint64_t>(start + k));
      const VU abs = hn::And(u, abs_mask);
      const bool specials = !hn::AllFalse(du, hn::Gt(abs, hn::Set(du, 0x7F7FFFFFU)));
      MU over = hn::FirstN(du, 0);
      VU code = hn::Zero(du);
      bool scalar = false;
      if (zero_block) {
        code = hn::Set(du, p.zero_code_pos);
      } else if (p.codebook) {
        if (specials || multiply || p.peer) {
          scalar = true;  // the reference's own element step (mxlab::pow2_element_cast)
        } else {
          // Exact quotients x * 2^(d - X) in double lanes, cast by the codebook's table (codebook_lanes64).
          const DF64 df64;
          const D64 d64;
          const DUh duh;
          const hn::Rebind<std::int32_t, D64> dih;
          const std::size_t l64 = hn::Lanes(df64);
          HWY_ALIGN float xs[kMaxLanes];
          HWY_ALIGN std::int32_t ks[kMaxLanes];
          HWY_ALIGN std::uint32_t rs[kMaxLanes];
          hn::Store(hn::BitCast(df, u), df, xs);
          hn::Store(hn::Sub(off, divisor_e), di, ks);
          hn::Store(random, du, rs);
          for (std::size_t h = 0; h < lanes; h += l64) {
            const VF64 x64 = hn::PromoteTo(df64, hn::LoadU(DFh(), xs + h));
            const auto k64 = hn::PromoteTo(DI64(), hn::LoadU(dih, ks + h));
            const VF64 pow = hn::BitCast(df64, hn::ShiftLeft<52>(hn::Add(k64, hn::Set(DI64(), 1023))));
            M64 cb_over;
            const V64 cb = codebook_lanes64(p, hn::Mul(x64, pow), hn::PromoteTo(d64, hn::LoadU(duh, rs + h)),
                                            &cb_over, nullptr);
            hn::StoreU(hn::TruncateTo(duh, cb), duh, lane_codes + h);
            hn::StoreU(hn::TruncateTo(duh, hn::VecFromMask(d64, cb_over)), duh, lane_over + h);
          }
          code = apply_zero_sign(p, hn::Load(du, lane_codes), u);
          over = hn::Ne(hn::Load(du, lane_over), hn::Zero(du));
        }
      } else if (p.peer) {
        if (specials) {
          scalar = true;
        } else {
          const VF x = hn::BitCast(df, u);
          // fl32(x / 2^(X - d)) = fl32(x * 2^(d - X)): the power is a float32, the product rounded once. Past
          // 2^127 (scales below 2^-127, as float32 scale formats have) x first takes the excess exactly: the
          // block's elements lie below 2^(X + emax + 2), far from float32's largest values.
          VF v;
          if (multiply) {
            v = hn::Mul(x, factor_v);
          } else if (deep_scales) {
            const VI e = hn::Sub(off, divisor_e);
            const VF x_up = hn::Mul(x, pow2_lanes(hn::Max(hn::Sub(e, hn::Set(di, 127)), hn::Zero(di))));
            v = hn::Mul(x_up, pow2_lanes(hn::Min(e, hn::Set(di, 127))));
          } else {
            v = hn::Mul(x, pow2_lanes(hn::Sub(off, divisor_e)));
          }
          const VU vb = hn::BitCast(du, v);
          VU wb = vb;
          if (p.add_half) wb = add_half_lanes(p, v);
          code = apply_zero_sign(p, cast_lanes<AnyRounding>(c, wb, random, hn::Zero(di), &over), vb);
        }
      } else {
        if (multiply && (plan.factor == 0 ? specials : false)) {
          scalar = true;  // Inf * 0
        } else {
          VU xin = u;
          VI minus_x = hn::Sub(off, divisor_e);
          if (multiply) {
            if (plan.factor == 0) xin = hn::And(u, sign_mask);  // finite x * 0: a zero of x's sign
            minus_x = hn::Set(di, factor_e);
          }
          code = apply_zero_sign(p, cast_lanes<AnyRounding>(c, xin, random, minus_x, &over), u);
        }
      }
      if (scalar) {
        hn::Store(u, du, lane_x);
        HWY_ALIGN std::uint32_t rnd[kMaxLanes];
        hn::Store(random, du, rnd);
        hn::Store(off, di, lane_off);
        for (std::size_t l = 0; l < lanes; ++l) {
          const double x = static_cast<double>(std::bit_cast<float>(lane_x[l]));
          const CastResult r = pow2_element_cast(*p.owner, p.element_opts, plan, lane_off[l], x, rnd[l]);
          lane_codes[l] = r.code;
          lane_over[l] = r.overflow ? ~0U : 0U;
        }
        code = hn::Load(du, lane_codes);
        over = hn::Ne(hn::Load(du, lane_over), hn::Zero(du));
      }
      if (call.out == BlockOut::Packed) sink.put(du, code, start + k, count);
      if (call.out == BlockOut::Fake) {
        // decode(code) * 2^(X - d), rounded once to float32 (NaN under a NaN scale).
        const VF s = plan.nan_scale ? hn::Set(df, std::numeric_limits<float>::quiet_NaN())
                                    : pow2_lanes(hn::Sub(scale_e, off));
        const VF value = hn::Mul(hn::GatherIndex(df, p.decode_f32.data(), hn::BitCast(di, code)), s);
        hn::Store(value, df, out_buf);
        std::memcpy(call.fake + start + k, out_buf, count * sizeof(float));
      }
      if (want_metrics) {
        hn::Store(u, du, lane_x);
        hn::Store(code, du, lane_codes);
        hn::Store(hn::VecFromMask(du, over), du, lane_over);
        hn::Store(off, di, lane_off);
        for (std::size_t l = 0; l < count; ++l) {
          const double deq = p.decode_f64[lane_codes[l]] * std::ldexp(scale_d, -lane_off[l]);
          add_metric_at(call, start + k + l, static_cast<double>(std::bit_cast<float>(lane_x[l])), deq,
                      lane_over[l] != 0);
        }
      }
    }
  }
  if (call.out == BlockOut::Packed) sink.finish();
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE::block
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
