// CastKernel: reduces a format and resolved cast options to CastParams (the rules of the reference cast,
// docs/casting.md, as constants), splits calls over threads, and keeps the scalar reference loop.
#include <bit>
#include <cmath>
#include <limits>
#include <memory>

#include "element_fake.hpp"
#include "grid_params.hpp"
#include "kernel_params.hpp"
#include "mxlab/core/random.hpp"
#include "mxlab/kernels/cast_kernel.hpp"
#include "parallel.hpp"

namespace mxlab {
namespace {

using kernel_detail::CastParams;
using kernel_detail::InputKind;

/// IEEE 754 section 7.4 as the reference applies it (cast.cpp overflow_to_special): an overflow goes to
/// the special value under the nearest modes, stochastic rounding and directed rounding away from zero;
/// toward zero, the other directed mode and round-to-odd keep the largest finite value.
bool overflow_goes_special(Rounding r, bool negative) {
  switch (r) {
    case Rounding::NearestEven:
    case Rounding::NearestAway:
    case Rounding::NearestZero:
    case Rounding::Stochastic:
      return true;
    case Rounding::Up:
      return !negative;
    case Rounding::Down:
      return negative;
    case Rounding::TowardZero:
    case Rounding::Odd:
      return false;
  }
  return false;
}


}  // namespace

namespace kernel_detail {

CastParams build_cast_params(const Format& f, const CastOptions& o) {
  const FormatSpec& s = f.spec();
  CastParams p;
  kernel_detail::fill_grid_params(p, f, o);
  p.is_unsigned = !s.is_signed;

  for (int sign = 0; sign < 2; ++sign) {
    const bool neg = sign == 1;
    p.zero_code[sign] = f.has_zero() ? f.zero_code(neg) : f.max_code(true);
    p.zero_input_code[sign] = f.has_zero() ? f.zero_code(neg) : f.max_code(true);
    if (o.overflow == Overflow::Saturate || !overflow_goes_special(o.rounding, neg)) {
      p.overflow_code[sign] = f.max_code(neg);
    } else {
      p.overflow_code[sign] = o.overflow == Overflow::Inf ? f.inf_code(neg) : f.nan_code(neg);
    }
    switch (o.overflow) {
      case Overflow::Inf:
        p.inf_code[sign] = f.inf_code(neg);
        break;
      case Overflow::Nan:
        p.inf_code[sign] = f.nan_code(neg);
        break;
      default:
        p.inf_code[sign] = f.max_code(neg);
        break;
    }
    if (f.has_nan()) {
      p.nan_code[sign] = f.nan_code(neg);
    } else {
      p.nan_code[sign] = f.has_zero() ? f.zero_code(false) : f.max_code(true);
    }
  }
  p.negative_unsigned_code = o.overflow == Overflow::Nan ? f.nan_code(false) : f.max_code(true);
  if (o.subnormals == SubnormalMode::FlushInput || o.subnormals == SubnormalMode::Flush) {
    // The threshold is a power of two; below float32's range (f64 source) it is 0: nothing is flushed.
    p.flush_input_below_bits = std::bit_cast<std::uint32_t>(static_cast<float>(source_min_normal(o.source)));
  }
  p.inf_overflows = o.overflow != Overflow::Inf;
  return p;
}

/// Exact value of an IEEE binary16 bit pattern.
double half_value(std::uint16_t h) {
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  double v = 0;
  if (e == 0x1F) {
    v = m != 0 ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(m, -24);
  } else {
    v = std::ldexp(m + 1024, e - 25);
  }
  return std::copysign(v, (h & 0x8000) != 0 ? -1.0 : 1.0);
}

double bf16_value(std::uint16_t b) {
  return static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16));
}

}  // namespace kernel_detail

namespace {

using kernel_detail::bf16_value;
using kernel_detail::half_value;

template <typename Out>
Result<std::size_t> check_sizes(const Format& f, std::size_t n_in, std::size_t n_out) {
  if (n_out < n_in)
    return make_error("cast to '" + f.name() + "': output holds " + std::to_string(n_out) + " codes for " +
                      std::to_string(n_in) + " inputs");
  if (f.bits() > static_cast<int>(8 * sizeof(Out)))
    return make_error("cast to '" + f.name() + "': " + std::to_string(f.bits()) + "-bit codes do not fit " +
                      std::to_string(8 * sizeof(Out)) + "-bit outputs");
  return n_in;
}

}  // namespace

std::string CastKernel::unsupported_reason(const Format& f) {
  const FormatSpec& s = f.spec();
  if (s.kind == FormatKind::Codebook)
    return "codebook formats are cast by a search of their value table, which the SIMD cast does not do";
  if (s.sub_exponent_bits > 0) {
    // The second reading of field 0 must continue the grid up to the first reading's smallest normal, so
    // that codes stay consecutive in value across the two readings (MX-SAFE: 2^-3 * 1.75 then 2^-2).
    const int sub_top = (1 << s.sub_exponent_bits) - 1 - s.sub_bias;  // exponent of its largest binade
    if (s.kind != FormatKind::Float || !s.subnormals || sub_top + 1 != min_normal_exponent(s) ||
        s.sub_exponent_bits + s.sub_mantissa_bits != s.mantissa_bits)
      return "its exponent field 0 is read again as a second format that does not continue the first one's grid";
  }
  if (f.bits() > 16) return std::to_string(f.bits()) + "-bit codes; the SIMD cast writes codes of at most 16 bits";
  return {};
}

Result<CastKernel> CastKernel::make(const Format& f, const CastOptions& options) {
  if (const std::string why = unsupported_reason(f); !why.empty())
    return make_error("SIMD cast to format '" + f.name() + "': " + why);
  auto resolved = resolve_options(f, options);
  if (!resolved) return resolved.error();
  auto params = std::make_shared<const CastParams>(kernel_detail::build_cast_params(f, *resolved));
  return CastKernel(f, *resolved, std::move(params));
}

CastKernel::CastKernel(Format f, CastOptions o, std::shared_ptr<const kernel_detail::CastParams> p)
    : format_(std::move(f)), options_(o), params_(std::move(p)) {
  kernel_detail::ElementFake fake{kernel_detail::element_fast_rne(format_, options_, *params_)};
  if (fake.fast.on && !std::isnan(fake.fast.overflow_pos) && !std::isnan(fake.fast.overflow_neg))
    fake_ = std::make_shared<const kernel_detail::ElementFake>(fake);
}

bool CastKernel::fake_scaled(std::span<const float> in, float factor, std::span<float> out) const {
  if (fake_ == nullptr || out.size() < in.size()) return false;
  return kernel_detail::element_fake_dispatch(*fake_, in.data(), in.size(), factor, out.data());
}

template <typename In, typename Out>
Result<std::size_t> CastKernel::run_simd(InputKind input, std::span<const In> in, std::span<Out> out,
                                         const KernelRun& run) const {
  auto checked = check_sizes<Out>(format_, in.size(), out.size());
  if (!checked) return checked;
  const std::uint64_t key = splitmix64(run.seed);
  kernel_detail::parallel_ranges(in.size(), run.threads, [&](std::size_t begin, std::size_t end) {
    kernel_detail::CastCall call;
    call.input = input;
    call.in = in.data() + begin;
    call.out = out.data() + begin;
    call.out16 = sizeof(Out) == 2;
    call.n = end - begin;
    call.seed_key = key;
    call.first_index = run.first_index + begin;
    kernel_detail::cast_dispatch(*params_, call);
  });
  return in.size();
}

template <typename In, typename Out>
Result<std::size_t> CastKernel::run_reference(InputKind input, std::span<const In> in, std::span<Out> out,
                                              const KernelRun& run) const {
  auto checked = check_sizes<Out>(format_, in.size(), out.size());
  if (!checked) return checked;
  const bool stochastic = options_.rounding == Rounding::Stochastic;
  auto loop = [&](std::size_t begin, std::size_t end, auto value_of) {
    for (std::size_t i = begin; i < end; ++i) {
      const std::uint32_t random = stochastic ? stochastic_bits(run.seed, run.first_index + i) : 0;
      out[i] = static_cast<Out>(cast(format_, value_of(in[i]), options_, random).code);
    }
  };
  kernel_detail::parallel_ranges(in.size(), run.threads, [&](std::size_t begin, std::size_t end) {
    if constexpr (sizeof(In) == 4) {
      loop(begin, end, [](In x) { return static_cast<double>(x); });
    } else if (input == InputKind::BF16) {
      loop(begin, end, [](In x) { return bf16_value(x); });
    } else {
      loop(begin, end, [](In x) { return half_value(x); });
    }
  });
  return in.size();
}

Result<std::size_t> CastKernel::cast_f32(std::span<const float> in, std::span<std::uint8_t> out,
                                         const KernelRun& run) const {
  return run_simd(InputKind::F32, in, out, run);
}
Result<std::size_t> CastKernel::cast_f32(std::span<const float> in, std::span<std::uint16_t> out,
                                         const KernelRun& run) const {
  return run_simd(InputKind::F32, in, out, run);
}
Result<std::size_t> CastKernel::cast_bf16(std::span<const std::uint16_t> in, std::span<std::uint8_t> out,
                                          const KernelRun& run) const {
  return run_simd(InputKind::BF16, in, out, run);
}
Result<std::size_t> CastKernel::cast_bf16(std::span<const std::uint16_t> in, std::span<std::uint16_t> out,
                                          const KernelRun& run) const {
  return run_simd(InputKind::BF16, in, out, run);
}
Result<std::size_t> CastKernel::cast_f16(std::span<const std::uint16_t> in, std::span<std::uint8_t> out,
                                         const KernelRun& run) const {
  return run_simd(InputKind::F16, in, out, run);
}
Result<std::size_t> CastKernel::cast_f16(std::span<const std::uint16_t> in, std::span<std::uint16_t> out,
                                         const KernelRun& run) const {
  return run_simd(InputKind::F16, in, out, run);
}

Result<std::size_t> CastKernel::reference_f32(std::span<const float> in, std::span<std::uint8_t> out,
                                              const KernelRun& run) const {
  return run_reference(InputKind::F32, in, out, run);
}
Result<std::size_t> CastKernel::reference_f32(std::span<const float> in, std::span<std::uint16_t> out,
                                              const KernelRun& run) const {
  return run_reference(InputKind::F32, in, out, run);
}
Result<std::size_t> CastKernel::reference_bf16(std::span<const std::uint16_t> in, std::span<std::uint8_t> out,
                                               const KernelRun& run) const {
  return run_reference(InputKind::BF16, in, out, run);
}
Result<std::size_t> CastKernel::reference_bf16(std::span<const std::uint16_t> in, std::span<std::uint16_t> out,
                                               const KernelRun& run) const {
  return run_reference(InputKind::BF16, in, out, run);
}
Result<std::size_t> CastKernel::reference_f16(std::span<const std::uint16_t> in, std::span<std::uint8_t> out,
                                              const KernelRun& run) const {
  return run_reference(InputKind::F16, in, out, run);
}
Result<std::size_t> CastKernel::reference_f16(std::span<const std::uint16_t> in, std::span<std::uint16_t> out,
                                              const KernelRun& run) const {
  return run_reference(InputKind::F16, in, out, run);
}

}  // namespace mxlab
