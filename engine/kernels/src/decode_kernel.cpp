// DecodeKernel: which formats decode exactly to float32, their DecodeParams, and threading of calls.
#include <algorithm>
#include <bit>
#include <cmath>

#include "grid_params.hpp"
#include "kernel_params.hpp"
#include "mxlab/kernels/cast_kernel.hpp"
#include "parallel.hpp"

namespace mxlab {
namespace {

using kernel_detail::DecodeKind;
using kernel_detail::DecodeParams;

/// float32's smallest step (its smallest subnormal) and the exponent of its top binade.
constexpr int kF32MinExponent = -149;
constexpr int kF32MaxExponent = 127;

using kernel_detail::low_bits;

}  // namespace

std::string DecodeKernel::unsupported_reason(const Format& f) {
  const FormatSpec& s = f.spec();
  if (f.bits() > 16) return std::to_string(f.bits()) + "-bit codes; the SIMD decode reads codes of at most 16 bits";
  if (f.uses_table()) {
    for (std::uint32_t c = 0; c < f.code_count(); ++c) {
      const double v = f.decode(c);
      if (!std::isnan(v) && static_cast<double>(static_cast<float>(v)) != v)
        return "value " + g17(v) + " (code " + std::to_string(c) + ") is not a float32";
    }
    return {};
  }
  if (s.kind == FormatKind::Float) {
    const int step_exponent = min_normal_exponent(s) - s.mantissa_bits;
    if (step_exponent < kF32MinExponent)
      return "its smallest step 2^" + std::to_string(step_exponent) + " lies below float32's 2^-149";
    if (f.emax() > kF32MaxExponent)
      return "its largest binade 2^" + std::to_string(f.emax()) + " lies above float32's 2^127";
    return {};
  }
  // Integer: k * 2^-frac_bits.
  if (-s.frac_bits < kF32MinExponent)
    return "its step 2^" + std::to_string(-s.frac_bits) + " lies below float32's 2^-149";
  const double largest = std::max(f.max_finite(), -f.lowest());
  if (largest > 0 && floor_log2(largest) > kF32MaxExponent)
    return "its largest magnitude " + g17(largest) + " lies above float32's range";
  return {};
}

Result<DecodeKernel> DecodeKernel::make(const Format& f) {
  if (const std::string why = unsupported_reason(f); !why.empty())
    return make_error("SIMD decode of format '" + f.name() + "': " + why);
  const FormatSpec& s = f.spec();
  auto p = std::make_shared<DecodeParams>();
  std::shared_ptr<std::vector<std::uint32_t>> table;
  p->code_mask = low_bits(f.bits());
  if (f.uses_table()) {
    p->kind = DecodeKind::Table;
    table = std::make_shared<std::vector<std::uint32_t>>(f.code_count());
    for (std::uint32_t c = 0; c < f.code_count(); ++c)
      (*table)[c] = std::bit_cast<std::uint32_t>(static_cast<float>(f.decode(c)));
    p->table = table->data();
  } else if (s.kind == FormatKind::Float) {
    const int em = s.exponent_bits + s.mantissa_bits;
    p->kind = DecodeKind::Float;
    p->sign_shift = em;
    p->sign_mask = s.is_signed ? 1 : 0;
    p->mantissa_bits = s.mantissa_bits;
    p->exponent_mask = low_bits(s.exponent_bits);
    p->bias = s.bias;
    p->subnormals = s.subnormals;
    p->ieee_specials = s.specials == Specials::Ieee;
    if (s.specials == Specials::AllOnesNan) {  // the all-ones exponent and mantissa, either sign
      p->has_nan_codes = true;
      p->nan_code_mask = low_bits(em);
      p->nan_code = low_bits(em);
    } else if (s.specials == Specials::NegZeroNan) {  // the negative-zero code
      p->has_nan_codes = true;
      p->nan_code_mask = low_bits(f.bits());
      p->nan_code = std::uint32_t{1} << em;
    }
  } else {
    p->kind = DecodeKind::Integer;
    p->int_bits = s.int_bits;
    p->int_signed = s.is_signed;
    p->frac_bits = s.frac_bits;
  }
  return DecodeKernel(f, std::move(p), std::move(table));
}

DecodeKernel::DecodeKernel(Format f, std::shared_ptr<const kernel_detail::DecodeParams> p,
                           std::shared_ptr<const std::vector<std::uint32_t>> table)
    : format_(std::move(f)), params_(std::move(p)), table_(std::move(table)) {}

template <typename In>
Result<std::size_t> DecodeKernel::run(std::span<const In> codes, std::span<float> out, const KernelRun& run) const {
  if (out.size() < codes.size())
    return make_error("decode of '" + format_.name() + "': output holds " + std::to_string(out.size()) +
                      " values for " + std::to_string(codes.size()) + " codes");
  kernel_detail::parallel_ranges(codes.size(), run.threads, [&](std::size_t begin, std::size_t end) {
    kernel_detail::DecodeCall call;
    call.in = codes.data() + begin;
    call.in16 = sizeof(In) == 2;
    call.out = out.data() + begin;
    call.n = end - begin;
    kernel_detail::decode_dispatch(*params_, call);
  });
  return codes.size();
}

Result<std::size_t> DecodeKernel::decode(std::span<const std::uint8_t> codes, std::span<float> out,
                                         const KernelRun& r) const {
  return run(codes, out, r);
}

Result<std::size_t> DecodeKernel::decode(std::span<const std::uint16_t> codes, std::span<float> out,
                                         const KernelRun& r) const {
  return run(codes, out, r);
}

}  // namespace mxlab
