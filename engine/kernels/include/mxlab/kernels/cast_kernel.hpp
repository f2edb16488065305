// SIMD casts of float32, bfloat16 and float16 arrays to format codes, and decoding of codes to float32.
// Highway kernels with run-time dispatch (simd_target.hpp) and optional threads, bit-identical to the
// scalar reference mxlab::cast (formats/cast.hpp, docs/casting.md) and Format::decode.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/format.hpp"

namespace mxlab {

namespace kernel_detail {
struct CastParams;
struct DecodeParams;
struct ElementFake;
enum class InputKind : std::uint8_t;
}  // namespace kernel_detail

/// How one kernel call splits its work and numbers its elements. Results never depend on `threads` or on
/// the SIMD target.
struct KernelRun {
  unsigned threads = 1;  ///< worker threads; 0 = all hardware threads
  /// Stochastic rounding: element i uses the random word stochastic_bits(seed, first_index + i)
  /// (core/random.hpp), as the reference's cast_all does.
  std::uint64_t seed = 0;
  std::uint64_t first_index = 0;
};

/// A cast to one format with one set of options, reduced once to the numbers the SIMD code takes.
/// Supported: Float formats (also the MX-SAFE element, whose re-read exponent field 0 continues the grid)
/// and Integer formats, up to 16 bits, every rounding mode, overflow policy, subnormal mode and source type. Codes of formats up to 8 bits can be
/// written as uint8_t or uint16_t, wider ones as uint16_t.
class CastKernel {
 public:
  /// Why the SIMD cast cannot handle this format, or an empty string when it can.
  static std::string unsupported_reason(const Format& f);
  static bool supports(const Format& f) { return unsupported_reason(f).empty(); }

  /// Resolves the options (resolve_options) and builds the kernel. Errors name the format and the reason.
  static Result<CastKernel> make(const Format& f, const CastOptions& options);

  const Format& format() const { return format_; }
  /// The resolved options (Overflow::Default replaced by the format's policy).
  const CastOptions& options() const { return options_; }

  /// out[i] = cast(format, in[i], options, random_i).code for i < in.size(). Returns in.size(), or an error
  /// when out is shorter than in or a uint8_t output cannot hold the codes.
  Result<std::size_t> cast_f32(std::span<const float> in, std::span<std::uint8_t> out, const KernelRun& run = {}) const;
  Result<std::size_t> cast_f32(std::span<const float> in, std::span<std::uint16_t> out,
                               const KernelRun& run = {}) const;
  /// As cast_f32, for bfloat16 inputs given as their bit patterns.
  Result<std::size_t> cast_bf16(std::span<const std::uint16_t> in, std::span<std::uint8_t> out,
                                const KernelRun& run = {}) const;
  Result<std::size_t> cast_bf16(std::span<const std::uint16_t> in, std::span<std::uint16_t> out,
                                const KernelRun& run = {}) const;
  /// As cast_f32, for IEEE binary16 inputs given as their bit patterns.
  Result<std::size_t> cast_f16(std::span<const std::uint16_t> in, std::span<std::uint8_t> out,
                               const KernelRun& run = {}) const;
  Result<std::size_t> cast_f16(std::span<const std::uint16_t> in, std::span<std::uint16_t> out,
                               const KernelRun& run = {}) const;

  /// Whether fake_scaled has a fast path: nearest-even casts of signed formats whose overflow value is a
  /// number (the block kernels' one float32 addition per element, BlockParams::FastRne).
  bool has_fake_scaled() const { return fake_ != nullptr; }
  /// out[i] = fl32(value * factor), value the float32 value of cast_f32(in)[i] (decoded as DecodeKernel does),
  /// for i < in.size() on one thread: true, or false when an input is NaN or Inf, the floating-point
  /// environment is not the default one, or !has_fake_scaled() (out then unspecified: the caller casts and
  /// decodes). out holds at least in.size() values.
  bool fake_scaled(std::span<const float> in, float factor, std::span<float> out) const;
  /// The same contract computed by a plain loop over the scalar reference mxlab::cast (no SIMD), for
  /// speed comparisons and verification.
  Result<std::size_t> reference_f32(std::span<const float> in, std::span<std::uint8_t> out,
                                    const KernelRun& run = {}) const;
  Result<std::size_t> reference_f32(std::span<const float> in, std::span<std::uint16_t> out,
                                    const KernelRun& run = {}) const;
  Result<std::size_t> reference_bf16(std::span<const std::uint16_t> in, std::span<std::uint8_t> out,
                                     const KernelRun& run = {}) const;
  Result<std::size_t> reference_bf16(std::span<const std::uint16_t> in, std::span<std::uint16_t> out,
                                     const KernelRun& run = {}) const;
  Result<std::size_t> reference_f16(std::span<const std::uint16_t> in, std::span<std::uint8_t> out,
                                    const KernelRun& run = {}) const;
  Result<std::size_t> reference_f16(std::span<const std::uint16_t> in, std::span<std::uint16_t> out,
                                    const KernelRun& run = {}) const;

 private:
  CastKernel(Format f, CastOptions o, std::shared_ptr<const kernel_detail::CastParams> p);
  template <typename In, typename Out>
  Result<std::size_t> run_simd(kernel_detail::InputKind input, std::span<const In> in, std::span<Out> out,
                               const KernelRun& run) const;
  template <typename In, typename Out>
  Result<std::size_t> run_reference(kernel_detail::InputKind input, std::span<const In> in, std::span<Out> out,
                                    const KernelRun& run) const;

  Format format_;
  CastOptions options_;
  std::shared_ptr<const kernel_detail::CastParams> params_;
  std::shared_ptr<const kernel_detail::ElementFake> fake_;  ///< the fast path of fake_scaled, when there is one
};

/// Decoding of codes to float32: (float)Format::decode(code), NaN codes as the quiet NaN with the code's
/// sign. Supported for formats up to 16 bits whose every value is a float32 (Float and Integer formats
/// with their exponent range inside float32's, and codebooks and MX-SAFE whose values are float32s).
/// Code bits above the format's width are ignored.
class DecodeKernel {
 public:
  /// Why codes of this format cannot be decoded to float32 exactly, or an empty string when they can.
  static std::string unsupported_reason(const Format& f);
  static bool supports(const Format& f) { return unsupported_reason(f).empty(); }

  static Result<DecodeKernel> make(const Format& f);

  const Format& format() const { return format_; }

  /// out[i] = value of codes[i]. Returns codes.size(), or an error when out is shorter than codes.
  Result<std::size_t> decode(std::span<const std::uint8_t> codes, std::span<float> out,
                             const KernelRun& run = {}) const;
  Result<std::size_t> decode(std::span<const std::uint16_t> codes, std::span<float> out,
                             const KernelRun& run = {}) const;

 private:
  DecodeKernel(Format f, std::shared_ptr<const kernel_detail::DecodeParams> p,
               std::shared_ptr<const std::vector<std::uint32_t>> table);
  template <typename In>
  Result<std::size_t> run(std::span<const In> codes, std::span<float> out, const KernelRun& run) const;

  Format format_;
  std::shared_ptr<const kernel_detail::DecodeParams> params_;
  std::shared_ptr<const std::vector<std::uint32_t>> table_;  // float32 bits per code, for table formats
};

}  // namespace mxlab
