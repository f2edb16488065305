// The engine entry points against the scalar reference (mxlab::quantize, mxlab::analyze, mxlab::pack):
// whichever engine ops picks, codes, scales, values and every metric are the reference's, bit for bit, on
// every compiled SIMD target, for any thread count and chunk size.
#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "mxlab/core/random.hpp"
#include "mxlab/kernels/simd_target.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/io/mapped.hpp"
#include "mxlab/io/npy.hpp"
#include "mxlab/ops/inspect.hpp"
#include "mxlab/ops/ops.hpp"
#include "mxlab/ops/packed_file.hpp"
#include "mxlab/ops/requests.hpp"
#include "mxlab/quantize/analysis.hpp"
#include "mxlab/quantize/pack.hpp"

namespace mxlab {
namespace {

/// Values that reach every corner of a block quantizer: magnitudes over many binades (gaps of 0 to 40 within a
/// block), exact zeros of both signs, float32 subnormals, powers of two, blocks of equal values, and (unless
/// finite_only) NaN and +-Inf.
std::vector<float> corner_input(std::uint64_t seed, std::size_t n, bool finite_only) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t r = splitmix64(seed * 0x9E3779B97F4A7C15ULL + i);
    const int kind = static_cast<int>(r % 64);
    const double m = 1.0 + static_cast<double>((r >> 8) & 0xFFFFFF) / 16777216.0;
    const int e = static_cast<int>((r >> 40) % 48) - 24;
    double v = std::ldexp(m, e);
    if (kind == 0) v = 0.0;
    if (kind == 1) v = -0.0;
    if (kind == 2) v = std::ldexp(m, -140);                  // float32 subnormal
    if (kind == 3) v = std::ldexp(1.0, e);                   // power of two
    if (kind == 4 && i > 0) v = static_cast<double>(x[i - 1]);  // a repeated value
    if (!finite_only && kind == 5) v = std::numeric_limits<double>::quiet_NaN();
    if (!finite_only && kind == 6) v = std::numeric_limits<double>::infinity();
    if ((r >> 63) != 0) v = -v;
    x[i] = static_cast<float>(v);
  }
  return x;
}

void check_stats(const ErrorStats& a, const ErrorStats& b, bool saturations, bool error_sum = true) {
  CHECK(a.count == b.count);
  CHECK(a.nonzero_inputs == b.nonzero_inputs);
  CHECK(a.underflows == b.underflows);
  if (saturations) CHECK(a.saturations == b.saturations);
  CHECK(a.nan_outputs == b.nan_outputs);
  CHECK(a.sse.parts().limbs == b.sse.parts().limbs);
  CHECK(a.sse.parts().exponent == b.sse.parts().exponent);
  CHECK(a.signal.parts().limbs == b.signal.parts().limbs);
  CHECK(std::bit_cast<std::uint64_t>(a.max_abs_error) == std::bit_cast<std::uint64_t>(b.max_abs_error));
  if (!error_sum) return;  // quantize's totals leave the error sum and the relative error out (ops.hpp)
  const auto ea = a.error_sum.parts(), eb = b.error_sum.parts();
  CHECK(ea.limbs == eb.limbs);
  CHECK(ea.negative == eb.negative);
  CHECK(std::bit_cast<std::uint64_t>(a.max_rel_error) == std::bit_cast<std::uint64_t>(b.max_rel_error));
}

/// An input as a tensor for ops, and the reference's analysis of it under f.
struct Reference {
  Tensor tensor;
  Analysis analysis;
  std::vector<double> values;  ///< the fake-quantized values
};
Reference reference_of(const BlockFormat& f, const std::vector<float>& xf, const std::vector<std::int64_t>& shape) {
  auto tensor = Tensor::from_f32(shape, xf);
  REQUIRE(tensor.ok());
  const std::vector<double> x(xf.begin(), xf.end());
  auto q = quantize(f, x, shape);
  REQUIRE(q.ok());
  Analysis a = analyze(f, x, *q);
  return {std::move(*tensor), std::move(a), std::move(q->values)};
}

/// Every entry point against the reference for one format and input.
void check_against_reference(const BlockFormat& f, const std::vector<float>& xf, const std::vector<std::int64_t>& shape,
                             unsigned threads, std::int64_t chunk) {
  INFO("format " << f.name << " rule " << to_string(f.options.rule) << " shape " << shape.front() << "x"
                 << shape.back() << " threads " << threads << " chunk " << chunk);
  auto tensor = Tensor::from_f32(shape, xf);
  REQUIRE(tensor.ok());
  const ops::TensorSource src = ops::TensorSource::of(*tensor);
  const std::vector<double> x(xf.begin(), xf.end());
  auto q = quantize(f, x, shape);
  if (!q.ok()) {
    // A combination no rule defines: ops reports the same refusal.
    CHECK_FALSE(ops::analyze({f}, src).ok());
    return;
  }
  const Analysis ref = analyze(f, x, *q);
  ops::Run run;
  run.threads = threads;
  run.chunk_elements = chunk;

  auto a = ops::analyze({f}, src, ops::AnalyzeOptions{true, false, {}}, run);
  REQUIRE(a.ok());
  const ops::FormatAnalysis& got = a->front();
  INFO("engine " << got.engine);
  const bool kernel = got.engine.rfind("simd:", 0) == 0;
  check_stats(got.total, ref.total, true);
  CHECK(got.gap_histogram == ref.gap_histogram);
  REQUIRE(got.by_gap.size() == ref.by_gap.size());
  for (const auto& [g, s] : ref.by_gap) {
    INFO("gap " << g);
    check_stats(got.by_gap.at(g), s, !kernel);  // the kernels leave saturations by gap out (ops.hpp)
  }
  CHECK(got.bits_per_element == ref.bits_per_element);

  // Fake quantization: the reference's values rounded to float32.
  std::vector<float> fake(xf.size(), -1.0F);
  ops::QuantizeSink sink;
  sink.fake = [&](std::size_t first, std::span<const float> v) -> std::optional<Error> {
    std::memcpy(fake.data() + first, v.data(), v.size() * sizeof(float));
    return std::nullopt;
  };
  auto fq = ops::quantize_fake(f, src, sink, run, true);
  REQUIRE(fq.ok());
  check_stats(fq->stats, ref.total, true, !fq->engine.starts_with("simd:"));
  std::size_t value_mismatches = 0;
  for (std::size_t i = 0; i < xf.size(); ++i) {
    const float want = static_cast<float>(q->values[i]);
    if (std::bit_cast<std::uint32_t>(fake[i]) != std::bit_cast<std::uint32_t>(want) &&
        !(std::isnan(fake[i]) && std::isnan(want)))
      ++value_mismatches;
  }
  CHECK(value_mismatches == 0);

  // In-memory fake quantization (GEMM operands): the same values.
  std::vector<float> direct(xf.size());
  auto dq = ops::fake_quantize(f, xf, shape, direct, run);
  REQUIRE(dq.ok());
  CHECK(std::memcmp(direct.data(), fake.data(), xf.size() * sizeof(float)) == 0);

  // Packed quantization: mxlab::pack of the reference, byte for byte; then back.
  ops::QuantizeResult packed_stats;
  auto packed = ops::quantize_packed(f, src, run, &packed_stats);
  REQUIRE(packed.ok());
  check_stats(packed_stats.stats, ref.total, true, !packed_stats.engine.starts_with("simd:"));
  const PackedTensor want = pack(f, *q);
  CHECK(packed->elements == want.elements);
  CHECK(packed->scales == want.scales);
  CHECK(packed->tensor_scale == want.tensor_scale);
  CHECK(packed->subtile_offsets == want.subtile_offsets);
  CHECK(packed->scale_grid == want.scale_grid);
  // Dequantization: the reference's unpack of the same packed form (which is quantize's values wherever a value is
  // a function of its code and scale).
  auto back = ops::dequantize(f, *packed, run);
  REQUIRE(back.ok());
  auto unpacked = unpack(f, want);
  REQUIRE(unpacked.ok());
  std::size_t dequant_mismatches = 0;
  for (std::size_t i = 0; i < xf.size(); ++i)
    if (std::bit_cast<std::uint64_t>((*back)[i]) != std::bit_cast<std::uint64_t>(unpacked->values[i]) &&
        !(std::isnan((*back)[i]) && std::isnan(unpacked->values[i])))
      ++dequant_mismatches;
  CHECK(dequant_mismatches == 0);
}

BlockFormat parse(const std::string& s) {
  auto f = parse_block_format(s);
  REQUIRE(f.ok());
  return *f;
}

/// A block format, or a plain element cast (no scale) of an element format's name.
BlockFormat parse_any(const std::string& s) {
  if (auto f = parse_block_format(s)) return *f;
  auto element = parse_format(s);
  REQUIRE(element.ok());
  BlockFormat f;
  f.name = s;
  f.element = *element;
  return f;
}

/// A FakeQuantizer against the reference's values and totals, with 1 and 3 threads, and ops::fake_quantize against
/// the FakeQuantizer; `kernel`: whether the block or cast kernels must have run.
void check_fake_quantizer(const ops::FakeQuantizer& fq, const std::vector<float>& xf,
                          const std::vector<std::int64_t>& shape, const QuantizedTensor& q, const Analysis& ref,
                          bool kernel) {
  for (unsigned threads : {1U, 3U}) {
    std::vector<float> out(xf.size(), -1.0F);
    ops::QuantizeResult r;
    ops::Run run;
    run.threads = threads;
    REQUIRE(fq.run(xf, shape, out, run, &r).ok());
    CHECK(r.engine.starts_with("simd:") == kernel);
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < xf.size(); ++i)
      if (std::bit_cast<std::uint32_t>(out[i]) != std::bit_cast<std::uint32_t>(static_cast<float>(q.values[i])))
        ++mismatches;
    CHECK(mismatches == 0);
    check_stats(r.stats, ref.total, true);
    std::vector<float> direct(xf.size());
    REQUIRE(ops::fake_quantize(fq.format(), xf, shape, direct, run).ok());
    CHECK(std::memcmp(direct.data(), out.data(), out.size() * sizeof(float)) == 0);
  }
}

/// A format under a NaN/Inf policy and an element rounding mode.
struct FormatCase {
  const char* name;
  SpecialsPolicy specials;
  Rounding rounding;
  bool kernel = true;  ///< whether ops runs it on the kernels
  BlockFormat format(std::uint64_t seed) const {
    BlockFormat f = parse(name);
    f.options.specials = specials;
    f.options.element.rounding = rounding;
    f.options.seed = seed;
    return f;
  }
};

const std::vector<std::int64_t> kShape = {7, 200};  // rows that end in a partial block of 32 and of 16

TEST_CASE("ops: every catalogue block format and scale rule equals the reference", "[ops]") {
  const auto x = corner_input(1, 7 * 200, false);
  const auto xf = corner_input(2, 7 * 200, true);
  for (const auto& target : simd_targets()) {
    const ScopedSimdTarget forced(target);
    INFO("target " << target.name);
    for (const auto& name : block_format_names()) {
      const BlockFormat base = parse(name);
      check_against_reference(base, x, kShape, 3, 256);
      check_against_reference(base, xf, kShape, 1, 0);
      for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Ceil, ScaleRule::RCeil, ScaleRule::Even, ScaleRule::MidMax}) {
        BlockFormat f = base;
        f.options.rule = rule;
        check_against_reference(f, xf, kShape, 2, 512);
      }
    }
  }
}

TEST_CASE("ops: every peer profile equals the reference", "[ops]") {
  const auto x = corner_input(3, 7 * 200, false);
  const auto xf = corner_input(4, 7 * 200, true);
  int covered = 0;
  for (const auto& profile : profile_names()) {
    for (const char* name : {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp4", "mxint8", "nvfp4", "mxsf"}) {
      auto f = apply_profile(parse(name), profile);
      if (!f.ok()) continue;
      INFO("profile " << profile);
      check_against_reference(*f, x, kShape, 2, 300);
      check_against_reference(*f, xf, kShape, 1, 0);
      ++covered;
    }
  }
  CHECK(covered >= 20);
}

TEST_CASE("ops: microxcaling's NaN blocks of a shared exponent above 127 and its underflowed quotients", "[ops]") {
  // Blocks holding FLT_MAX (MXINT8: fl32(log2) reads 128) and negative subnormals beside large values, on every
  // target: the kernels equal the reference.
  std::vector<float> x = corner_input(12, 7 * 200, true);
  for (std::size_t i = 0; i < x.size(); i += 97) x[i] = (i % 2 != 0) ? -FLT_MAX : FLT_MAX;
  for (std::size_t i = 5; i < x.size(); i += 13) x[i] = -std::ldexp(1.0F, -130 - static_cast<int>(i % 19));
  x[50] = std::numeric_limits<float>::quiet_NaN();
  x[777] = -std::numeric_limits<float>::infinity();
  for (const auto& target : simd_targets()) {
    const ScopedSimdTarget forced(target);
    INFO("target " << target.name);
    for (const char* name : {"mxint8", "mxfp8_e4m3", "mxfp4"}) {
      auto f = apply_profile(parse(name), "microxcaling");
      REQUIRE(f.ok());
      check_against_reference(*f, x, kShape, 2, 256);
      // Its NaN values are PyTorch's 2 ** NaN, 0xFFFFFFFF, from every fake-quant entry point.
      std::vector<float> direct(x.size());
      REQUIRE(ops::fake_quantize(*f, x, kShape, direct).ok());
      std::vector<float> streamed(x.size());
      auto tensor = Tensor::from_f32(kShape, x);
      REQUIRE(tensor.ok());
      ops::QuantizeSink sink;
      sink.fake = [&](std::size_t first, std::span<const float> v) -> std::optional<Error> {
        std::memcpy(streamed.data() + first, v.data(), v.size() * sizeof(float));
        return std::nullopt;
      };
      REQUIRE(ops::quantize_fake(*f, ops::TensorSource::of(*tensor), sink).ok());
      std::size_t nans = 0, other_bits = 0;
      for (const auto* v : {&direct, &streamed})
        for (float y : *v)
          if (std::isnan(y)) {
            ++nans;
            if (std::bit_cast<std::uint32_t>(y) != 0xFFFFFFFFU) ++other_bits;
          }
      CHECK(other_bits == 0);
      CHECK(nans > 0);
    }
  }
}

TEST_CASE("ops: formats the kernels refuse run on the reference with the same results", "[ops]") {
  const auto x = corner_input(5, 16 * 64, false);
  for (const char* name : {"mxsf@8x8", "e2m1:e8m0_c0", "int8:float32_t16_t16", "e4m3:float32_tensor"}) {
    auto f = parse_block_format(name);
    if (!f.ok()) continue;
    INFO(name);
    CHECK(ops::engine_for(*f).rfind("reference", 0) == 0);
    check_against_reference(*f, x, {16, 64}, 2, 256);
  }
}

TEST_CASE("ops: formats without a scale run on the cast kernels with the reference's values and totals", "[ops]") {
  // 20,000 values: the cast runs in chunks of 8,192 (two whole and a partial one), whose stochastic rounding
  // takes each element's own random word.
  const auto xf = corner_input(9, 20000, false);
  const std::vector<double> x(xf.begin(), xf.end());
  const std::vector<std::int64_t> shape = {static_cast<std::int64_t>(x.size())};
  for (const auto& target : simd_targets()) {
    const ScopedSimdTarget forced(target);
    for (const char* name : {"e4m3", "e5m2", "e2m1", "e3m2", "int8", "bfloat16", "float16"}) {
      for (const Rounding rounding : {Rounding::NearestEven, Rounding::Stochastic, Rounding::TowardZero}) {
        for (const Overflow overflow : {Overflow::Default, Overflow::Saturate}) {
          auto element = parse_format(name);
          REQUIRE(element.ok());
          BlockFormat f;  // no scale: a plain elementwise cast of the whole tensor (the training recipes' FP8)
          f.name = name;
          f.element = *element;
          f.options.element.rounding = rounding;
          f.options.element.overflow = overflow;
          f.options.seed = 11;
          INFO("target " << target.name << " format " << name << " rounding " << to_string(rounding));
          auto q = quantize(f, x, shape);
          REQUIRE(q.ok());
          check_fake_quantizer(ops::FakeQuantizer(f), xf, shape, *q, analyze(f, x, *q), true);
        }
      }
    }
  }
}

TEST_CASE("ops: an element cast under a tensor scale equals the cast of the scaled tensor times the inverse", "[ops]") {
  // run_scaled against run() of fl32(x * scale) times fl32(1 / scale), bit for bit, with the amax of x (NaN
  // ignored) and the count of scaled magnitudes above the limit written out; chunk and thread boundaries fall
  // inside the tensor (20,000 values, chunks of 8,192; 1 and 3 threads).
  const auto xf = corner_input(21, 20000, false);
  for (const auto& target : simd_targets()) {
    const ScopedSimdTarget forced(target);
    for (const char* name : {"e4m3", "e5m2", "e3m2", "int8"}) {
      for (const Rounding rounding : {Rounding::NearestEven, Rounding::Stochastic}) {
        auto element = parse_format(name);
        REQUIRE(element.ok());
        BlockFormat f;
        f.name = name;
        f.element = *element;
        f.options.element.rounding = rounding;
        f.options.element.overflow = Overflow::Saturate;
        f.options.seed = 5;
        const ops::FakeQuantizer fq(f);
        REQUIRE(fq.scaled_native(false));
        CHECK(fq.scaled_native(true) == (rounding != Rounding::Stochastic));
        for (const float scale : {1.0F, 3.0F * 1024.0F, 0.0078125F}) {
          const float inverse = 1.0F / scale, limit = static_cast<float>(element->max_finite());
          std::vector<float> scaled(xf.size()), expect(xf.size());
          float amax = 0.0F;
          std::int64_t above = 0;
          for (std::size_t i = 0; i < xf.size(); ++i) {
            scaled[i] = xf[i] * scale;
            amax = std::fmax(amax, std::fabs(xf[i]));
            above += std::fabs(scaled[i]) > limit ? 1 : 0;
          }
          REQUIRE(fq.run(scaled, {static_cast<std::int64_t>(xf.size())}, expect).ok());
          for (float& v : expect) v *= inverse;
          for (const unsigned threads : {1U, 3U}) {
            INFO(target.name << " " << name << " " << to_string(rounding) << " scale " << scale << " threads " << threads);
            std::vector<float> out(xf.size(), -1.0F);
            ops::Run run;
            run.threads = threads;
            auto st = fq.run_scaled(xf, scale, inverse, limit, out, run);
            REQUIRE(st.ok());
            CHECK(std::bit_cast<std::uint32_t>(st->amax) == std::bit_cast<std::uint32_t>(amax));
            CHECK(st->above == above);
            CHECK(above > 0);
            CHECK(std::memcmp(out.data(), expect.data(), out.size() * sizeof(float)) == 0);
          }
        }
      }
    }
  }
  BlockFormat mx = parse("mxfp8_e4m3");
  const ops::FakeQuantizer blocks(mx);
  CHECK_FALSE(blocks.scaled_native(false));
  std::vector<float> out(xf.size());
  auto refused = blocks.run_scaled(xf, 1.0F, 1.0F, 448.0F, out);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("not an element cast") != std::string::npos);
}

/// Tensors for the gathered-row paths: corner values with and without NaN/Inf, an all-zero tensor with zeros of
/// both signs, values near the float32 maximum and float32 subnormals only.
std::vector<std::vector<float>> gathered_inputs(std::size_t n) {
  std::vector<std::vector<float>> xs = {corner_input(21, n, false), corner_input(22, n, true)};
  std::vector<float> zeros(n), huge(n), tiny(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t r = splitmix64(23 + i);
    const float sign = (r & 1) != 0 ? -1.0F : 1.0F;
    zeros[i] = (r & 2) != 0 ? -0.0F : 0.0F;
    huge[i] = sign * std::ldexp(1.0F + static_cast<float>((r >> 8) & 0xFFFF) / 65536.0F, 100 + static_cast<int>((r >> 32) % 28));
    tiny[i] = sign * std::ldexp(static_cast<float>((r >> 8) & 0xFFFFF), -149 - 20 + static_cast<int>((r >> 40) % 16));
  }
  xs.push_back(zeros);
  xs.push_back(huge);
  xs.push_back(tiny);
  return xs;
}

TEST_CASE("ops: per-tensor scales and 2-D tiles run on the block kernel over gathered rows with the reference's results",
          "[ops]") {
  // Stochastic rounding keys on element positions, which gathered tiles move: the reference runs 2-D tiles then.
  const std::vector<FormatCase> cases = {
      {"e4m3:float32", SpecialsPolicy::BlockNan, Rounding::NearestEven, true},
      {"e5m2:float32", SpecialsPolicy::BlockNan, Rounding::NearestEven, true},
      {"e4m3:float32", SpecialsPolicy::Element, Rounding::NearestEven, true},
      {"e5m2:float32", SpecialsPolicy::Element, Rounding::TowardZero, true},
      {"e4m3:float32", SpecialsPolicy::BlockNan, Rounding::Stochastic, true},
      {"int8:float32", SpecialsPolicy::BlockNan, Rounding::NearestEven, true},
      {"e2m1:e4m3_float32", SpecialsPolicy::BlockNan, Rounding::NearestEven, true},
      {"mxfp8_e4m3@32x32", SpecialsPolicy::BlockNan, Rounding::NearestEven, true},
      {"mxfp8_e5m2@32x32", SpecialsPolicy::Element, Rounding::NearestEven, true},
      {"mxfp4@8x16", SpecialsPolicy::BlockNan, Rounding::NearestAway, true},
      {"int8:float32_t16_t16", SpecialsPolicy::BlockNan, Rounding::NearestEven, true},
      {"e2m1:e4m3_float32_t16_t16", SpecialsPolicy::BlockNan, Rounding::NearestEven, true},
      {"e4m3:e8m0_t0_t8", SpecialsPolicy::BlockNan, Rounding::NearestEven, true},
      {"mxfp8_e4m3@32x32", SpecialsPolicy::BlockNan, Rounding::Stochastic, false},
      // The paper's tiles on the tile kernel (BlockKernel::fake_quantize_tiles, without metrics: ops::fake_quantize
      // in check_fake_quantizer), each grid's fast path.
      {"mxfp8_e4m3@8x8", SpecialsPolicy::BlockNan, Rounding::NearestEven, true},
      {"mxint8@8x8", SpecialsPolicy::BlockNan, Rounding::NearestEven, true},
      {"mxsf@8x8", SpecialsPolicy::BlockNan, Rounding::NearestEven, true},
  };
  // Partial tiles in both directions, leading matrices, a 1-D tensor, whole tiles only, a single element, fewer
  // columns than a vector's lanes.
  const std::vector<std::vector<std::int64_t>> shapes = {{70, 45}, {3, 40, 33}, {1000}, {64, 64}, {1, 1}, {21, 7}};
  for (const auto& target : simd_targets()) {
    const ScopedSimdTarget forced(target);
    for (const FormatCase& c : cases) {
      const BlockFormat f = c.format(5);
      const ops::FakeQuantizer fq(f);
      for (const auto& shape : shapes) {
        std::int64_t n = 1;
        for (auto d : shape) n *= d;
        int input = 0;
        for (const auto& xf : gathered_inputs(static_cast<std::size_t>(n))) {
          INFO("target " << target.name << " format " << c.name << " specials " << to_string(c.specials)
                         << " rounding " << to_string(c.rounding) << " shape " << shape.front() << "x" << shape.back()
                         << " rank " << shape.size() << " input " << input++);
          const std::vector<double> x(xf.begin(), xf.end());
          auto q = quantize(f, x, shape);
          REQUIRE(q.ok());
          check_fake_quantizer(fq, xf, shape, *q, analyze(f, x, *q), c.kernel);
        }
      }
    }
  }
}

TEST_CASE("ops: quantization down columns equals the reference's quantization of the transpose", "[ops]") {
  // FakeQuantizer::run_columns(x) against mxlab::quantize(x^T) transposed back (and the format's NaN bits):
  // the block kernel down columns, element casts and per-tensor scales as the tensor lies, and the transposed
  // copy (stochastic rounding, whose random words follow x^T's element positions; 2-D tiles; the reference).
  const std::vector<FormatCase> cases = {
      {"mxfp8_e4m3", SpecialsPolicy::BlockNan, Rounding::NearestEven},
      {"mxfp8_e5m2", SpecialsPolicy::Element, Rounding::NearestEven},
      {"mxfp4", SpecialsPolicy::BlockNan, Rounding::NearestEven},
      {"mxfp4", SpecialsPolicy::BlockNan, Rounding::Stochastic},
      {"mxint8", SpecialsPolicy::BlockNan, Rounding::NearestEven},
      {"nvfp4", SpecialsPolicy::BlockNan, Rounding::NearestEven},
      {"e4m3", SpecialsPolicy::BlockNan, Rounding::NearestEven},
      {"e5m2", SpecialsPolicy::BlockNan, Rounding::Stochastic},
      {"e4m3:float32", SpecialsPolicy::BlockNan, Rounding::NearestEven},
      {"e4m3:float32", SpecialsPolicy::BlockNan, Rounding::Stochastic},
      {"mxfp8_e4m3@32x32", SpecialsPolicy::BlockNan, Rounding::NearestEven},
      {"mxfp4@8x16", SpecialsPolicy::BlockNan, Rounding::NearestEven},
      {"e4m3:e8m0_c0", SpecialsPolicy::BlockNan, Rounding::NearestEven},
  };
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {{70, 45}, {64, 9}, {33, 3}, {1, 20}, {0, 5}};
  for (const auto& target : simd_targets()) {
    const ScopedSimdTarget forced(target);
    for (const FormatCase& c : cases) {
      BlockFormat f;
      if (std::string(c.name).find(':') == std::string::npos && !parse_block_format(c.name)) {
        // A plain element cast (no scale), as training's element recipes build it.
        auto element = parse_format(c.name);
        REQUIRE(element.ok());
        f.name = c.name;
        f.element = *element;
        f.options.element.rounding = c.rounding;
        f.options.seed = 9;
      } else {
        f = c.format(9);
      }
      const ops::FakeQuantizer fq(f);
      for (const auto& [rows, cols] : shapes) {
        int input = 0;
        for (const auto& xf : gathered_inputs(static_cast<std::size_t>(rows * cols))) {
          INFO("target " << target.name << " format " << c.name << " specials " << to_string(c.specials)
                         << " rounding " << to_string(c.rounding) << " shape " << rows << "x" << cols << " input "
                         << input++);
          std::vector<double> xt(xf.size());
          for (std::int64_t i = 0; i < rows; ++i)
            for (std::int64_t j = 0; j < cols; ++j)
              xt[static_cast<std::size_t>(j * rows + i)] = xf[static_cast<std::size_t>(i * cols + j)];
          auto q = quantize(f, xt, {cols, rows});
          REQUIRE(q.ok());
          // The reference's values; NaN outputs carry the format's NaN bits (FakeQuantizer::run on x^T's).
          const std::vector<float> xtf(xt.begin(), xt.end());
          std::vector<float> run_t(xf.size());
          REQUIRE(fq.run(xtf, {cols, rows}, run_t).ok());
          std::vector<float> got(xf.size(), -1.0F);
          REQUIRE(fq.run_columns(xf, rows, cols, got).ok());
          std::size_t differ = 0;
          for (std::int64_t i = 0; i < rows; ++i)
            for (std::int64_t j = 0; j < cols; ++j) {
              const auto t = static_cast<std::size_t>(j * rows + i);
              const float g = got[static_cast<std::size_t>(i * cols + j)];
              const auto w = static_cast<float>(q->values[t]);
              const bool same = std::isnan(w) ? std::bit_cast<std::uint32_t>(g) == std::bit_cast<std::uint32_t>(run_t[t])
                                              : std::bit_cast<std::uint32_t>(g) == std::bit_cast<std::uint32_t>(w);
              differ += same ? 0 : 1;
            }
          CHECK(differ == 0);
        }
      }
    }
  }
  const ops::FakeQuantizer fq(parse("mxfp4"));
  std::vector<float> x(12, 1.0F), out(11);
  CHECK_FALSE(fq.run_columns(x, 3, 4, out).ok());  // output too short
  CHECK_FALSE(fq.run_columns(x, 5, 4, x).ok());    // shape does not match
}

TEST_CASE("ops: quantization along rows and down columns in one pass equals the two calls", "[ops]") {
  // run_rows_and_columns goes a chunk of whole column blocks at a time where both formats allow (several chunks
  // and a last partial block here), else makes the two calls (tensor scales, stochastic rounding, whole-axis
  // blocks).
  const std::vector<std::pair<const char*, const char*>> pairs = {
      {"mxfp8_e4m3", "mxfp8_e4m3"}, {"mxfp8_e5m2", "mxfp8_e5m2"}, {"mxfp4", "mxfp8_e4m3"}, {"mxint8", "mxfp6_e3m2"},
      {"mxfp8_e4m3", "nvfp4"},      {"nvfp4", "mxfp4"},           {"mxfp8_e4m3", "e4m3:e8m0_t0"},
      // The same per-tensor scale or element cast both ways: one quantization and a copy (same_values).
      {"e4m3:float32", "e4m3:float32"}, {"e4m3", "e4m3"}, {"e4m3:float32", "e5m2:float32"}};
  // 1000 x 100: four chunks of 320 rows, enough values for three threads.
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {{1000, 100}, {300, 1568}, {70, 9}};
  for (const auto& target : simd_targets()) {
    const ScopedSimdTarget forced(target);
    for (const auto& [rows_name, columns_name] : pairs)
      for (const bool stochastic : {false, true}) {
        BlockFormat fr = parse_any(rows_name), fc = parse_any(columns_name);
        if (stochastic) fc.options.element.rounding = Rounding::Stochastic;
        const ops::FakeQuantizer rows_q(fr), columns_q(fc);
        for (const auto& [rows, cols] : shapes) {
          INFO("target " << target.name << " rows " << rows_name << " columns " << columns_name << " stochastic "
                         << stochastic << " shape " << rows << "x" << cols);
          const auto xf = corner_input(31, static_cast<std::size_t>(rows * cols), false);
          std::vector<float> want_r(xf.size()), want_c(xf.size()), got_r(xf.size(), -1.0F), got_c(xf.size(), -1.0F);
          REQUIRE(rows_q.run(xf, {rows, cols}, want_r).ok());
          REQUIRE(columns_q.run_columns(xf, rows, cols, want_c).ok());
          // One thread, and three (each taking a range of chunks).
          for (const unsigned threads : {1U, 3U}) {
            INFO("threads " << threads);
            ops::Run run;
            run.threads = threads;
            std::fill(got_r.begin(), got_r.end(), -1.0F);
            std::fill(got_c.begin(), got_c.end(), -1.0F);
            REQUIRE(rows_q.run_rows_and_columns(xf, rows, cols, got_r, columns_q, got_c, run).ok());
            CHECK(std::memcmp(got_r.data(), want_r.data(), xf.size() * sizeof(float)) == 0);
            CHECK(std::memcmp(got_c.data(), want_c.data(), xf.size() * sizeof(float)) == 0);
          }
        }
      }
  }
}

/// The same double, or both NaN.
bool same_double(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b) || (std::isnan(a) && std::isnan(b)); }

TEST_CASE("ops: block_detail equals the whole tensor's reference quantization, block by block", "[ops]") {
  // 1-D blocks (cut at the row's end), 2-D tiles cut at both edges, subtiles, a per-tensor scale, 3-D tensors: the
  // block alone; NVFP4's tensor scale and stochastic rounding: the whole tensor. Inputs with NaN, infinities,
  // signed zeros and subnormals.
  BlockFormat stochastic = parse("mxfp4");
  stochastic.options.element.rounding = Rounding::Stochastic;
  stochastic.options.seed = 3;
  const std::vector<BlockFormat> formats = {parse("mxfp8_e4m3"), parse("mxfp4"),           parse("mxint8"),
                                            parse("nvfp4"),      parse("e4m3:float32"),    parse("mxfp8_e4m3@16x16"),
                                            parse("e4m3:e8m0_t16s4_t16s4"), parse("mxsf"), stochastic};
  const std::vector<std::vector<std::int64_t>> shapes = {{5, 70}, {3, 9, 40}, {40, 50}};
  for (const auto& f : formats)
    for (const auto& shape : shapes) {
      std::int64_t n = 1;
      for (const auto e : shape) n *= e;
      const auto xf = corner_input(17, static_cast<std::size_t>(n), false);
      auto tensor = Tensor::from_f32(shape, xf);
      REQUIRE(tensor.ok());
      const std::vector<double> x(xf.begin(), xf.end());
      auto q = quantize(f, x, shape);
      REQUIRE(q.ok());
      const std::vector<std::int64_t> of = BlockIndexer(shape, f.layout).block_of_all();
      const std::int64_t blocks = BlockIndexer(shape, f.layout).block_count();
      for (const std::int64_t b : {std::int64_t{0}, blocks / 2, blocks - 1}) {
        INFO("format " << f.name << " rounding " << to_string(f.options.element.rounding) << " shape rank "
                       << shape.size() << " of " << n << " block " << b << " of " << blocks);
        auto d = ops::block_detail(f, ops::TensorSource::of(*tensor), b);
        REQUIRE(d.ok());
        const auto bi = static_cast<std::size_t>(b);
        CHECK(d->blocks == blocks);
        CHECK(d->scale_code == q->scale_codes[bi]);
        CHECK(same_double(d->scale, q->scale_values[bi]));
        CHECK(same_double(d->amax, q->block_amax[bi]));
        CHECK(d->tensor_scale_code == q->tensor_scale_code);
        CHECK(same_double(d->tensor_scale, q->tensor_scale));
        if (q->shared_exponents[bi] != QuantizedTensor::kNoExponent) CHECK(d->shared_exponent == q->shared_exponents[bi]);
        std::vector<std::int64_t> want;
        for (std::size_t i = 0; i < of.size(); ++i)
          if (of[i] == b) want.push_back(static_cast<std::int64_t>(i));
        REQUIRE(d->elements.size() == want.size());
        std::size_t mismatches = 0;
        for (std::size_t k = 0; k < want.size(); ++k) {
          const ops::BlockElement& e = d->elements[k];
          const auto i = static_cast<std::size_t>(want[k]);
          mismatches += e.index != want[k] || e.code != q->codes[i] || !same_double(e.q, q->values[i]) ||
                        e.saturated != ((q->flags[i] & QuantizedTensor::kOverflow) != 0) || !same_double(e.x, x[i]);
        }
        CHECK(mismatches == 0);
      }
    }
}

TEST_CASE("ops: quantizers give the same values both ways only when positionless with one format and options",
          "[ops]") {
  const auto q = [](const char* text, Overflow overflow = Overflow::Default) {
    BlockFormat f = parse_any(text);
    f.options.element.overflow = overflow;
    return ops::FakeQuantizer(f);
  };
  CHECK(q("e4m3:float32").positionless());
  CHECK(q("e4m3").positionless());
  CHECK_FALSE(q("mxfp8_e4m3").positionless());
  CHECK_FALSE(q("e4m3:float32_t16_t16").positionless());
  CHECK(q("e4m3:float32").same_values(q("e4m3:float32")));
  CHECK(q("e5m2").same_values(q("e5m2")));
  CHECK_FALSE(q("e4m3:float32").same_values(q("e5m2:float32")));
  CHECK_FALSE(q("e4m3:float32").same_values(q("e4m3:float32", Overflow::Saturate)));
  CHECK_FALSE(q("mxfp8_e4m3").same_values(q("mxfp8_e4m3")));
}

TEST_CASE("ops: analysis of per-tensor scales and 2-D tiles runs on the kernel over gathered rows", "[ops]") {
  // Without gaps or per-block rows; two-level formats over tiles of several shapes and stochastic 2-D tiles
  // stay on the reference.
  const std::vector<FormatCase> cases = {
      {"e4m3:float32", SpecialsPolicy::BlockNan, Rounding::NearestEven},
      {"e5m2:float32", SpecialsPolicy::Element, Rounding::TowardZero},
      {"int8:float32", SpecialsPolicy::BlockNan, Rounding::NearestEven},
      {"e2m1:e4m3_float32", SpecialsPolicy::BlockNan, Rounding::NearestEven},
      {"e4m3:float32", SpecialsPolicy::BlockNan, Rounding::Stochastic},
      {"mxfp8_e4m3@32x32", SpecialsPolicy::BlockNan, Rounding::NearestEven},
      {"mxfp8_e5m2@32x32", SpecialsPolicy::Element, Rounding::NearestEven},
      {"mxfp4@8x16", SpecialsPolicy::BlockNan, Rounding::NearestAway},
      {"int8:float32_t16_t16", SpecialsPolicy::BlockNan, Rounding::NearestEven},
      {"e2m1:e4m3_float32_t16_t16", SpecialsPolicy::BlockNan, Rounding::NearestEven},
      {"mxfp8_e4m3@32x32", SpecialsPolicy::BlockNan, Rounding::Stochastic},
  };
  const std::vector<std::vector<std::int64_t>> shapes = {{70, 45}, {3, 40, 33}, {1000}, {64, 64}, {1, 1}};
  for (const FormatCase& c : cases) {
    const BlockFormat f = c.format(5);
    for (const auto& shape : shapes) {
      std::int64_t n = 1;
      for (auto d : shape) n *= d;
      int input = 0;
      for (const auto& xf : gathered_inputs(static_cast<std::size_t>(n))) {
        INFO("format " << c.name << " specials " << to_string(c.specials) << " rounding " << to_string(c.rounding)
                       << " shape " << shape.front() << "x" << shape.back() << " rank " << shape.size() << " input "
                       << input++);
        const Reference ref = reference_of(f, xf, shape);
        const Analysis& want = ref.analysis;
        ops::Run run;
        run.threads = 3;
        auto got = ops::analyze({f}, ops::TensorSource::of(ref.tensor), {}, run);
        REQUIRE(got.ok());
        const ops::FormatAnalysis& a = got->front();
        const bool reference = c.rounding == Rounding::Stochastic && f.layout.tiles.size() == 2;
        // Tiles of 16 x 16 over the last two axes (a missing one has extent 1): whole and partial ones.
        const std::int64_t rows = shape.size() >= 2 ? shape[shape.size() - 2] : 1, cols = shape.back();
        const int kinds = ((rows >= 16 ? 1 : 0) + (rows % 16 != 0 ? 1 : 0)) * ((cols >= 16 ? 1 : 0) + (cols % 16 != 0 ? 1 : 0));
        const bool several_shapes = f.layout.tiles.size() == 2 && f.layout.tensor_scale && kinds > 1;
        INFO("engine " << a.engine);
        CHECK((a.engine.rfind("simd", 0) == 0) == !(reference || several_shapes));
        check_stats(a.total, want.total, true);
        CHECK(a.bits_per_element == want.bits_per_element);
        // quantize_fake, file to file's entry point: the gathered rows too (stochastic 2-D tiles excepted).
        std::vector<float> values(xf.size(), -1.0F);
        ops::QuantizeSink sink;
        sink.fake = [&](std::size_t first, std::span<const float> v) -> std::optional<Error> {
          std::copy(v.begin(), v.end(), values.begin() + static_cast<std::ptrdiff_t>(first));
          return std::nullopt;
        };
        auto fake = ops::quantize_fake(f, ops::TensorSource::of(ref.tensor), sink, run, true);
        REQUIRE(fake.ok());
        CHECK((fake->engine.rfind("simd", 0) == 0) == !reference);
        check_stats(fake->stats, want.total, true, false);
        long first = -1;
        for (std::size_t k = 0; k < values.size() && first < 0; ++k) {
          const auto w = static_cast<float>(ref.values[k]);
          if (!(std::isnan(w) ? std::isnan(values[k]) : std::bit_cast<std::uint32_t>(w) == std::bit_cast<std::uint32_t>(values[k])))
            first = static_cast<long>(k);
        }
        INFO("first value difference at " << first);
        CHECK(first < 0);
      }
    }
  }
}

TEST_CASE("ops: blocks along another axis equal the reference's, and an axis outside the tensor is an error", "[ops]") {
  const std::vector<std::int64_t> shape = {3, 40, 5, 6};
  const auto xf = corner_input(8, 3 * 40 * 5 * 6, false);
  for (int axis : {1, -3, 0, 2}) {
    for (const char* name : {"mxfp8_e4m3", "mxint8", "nvfp4"}) {
      BlockFormat f = parse(name);
      f.layout.axis = axis;
      INFO(name << " axis " << axis);
      const Reference ref = reference_of(f, xf, shape);
      auto a = ops::analyze({f}, ops::TensorSource::of(ref.tensor), ops::AnalyzeOptions{true, false, {}});
      REQUIRE(a.ok());
      CHECK(a->front().engine.rfind("simd:", 0) == 0);
      check_stats(a->front().total, ref.analysis.total, true);
      CHECK(a->front().gap_histogram == ref.analysis.gap_histogram);
    }
  }
  BlockFormat f = parse("mxfp4");
  f.layout.axis = 4;
  auto tensor = Tensor::from_f32(shape, xf);
  REQUIRE(tensor.ok());
  auto a = ops::analyze({f}, ops::TensorSource::of(*tensor));
  REQUIRE_FALSE(a.ok());
  CHECK(a.error().message.find("outside the tensor's 4 axes") != std::string::npos);
}

TEST_CASE("ops: block_axes_last moves and flattens the reduction axes", "[ops]") {
  // An HWIO depthwise kernel 2x3x4x1: blocks along H x W give one row of 6 per channel.
  std::vector<float> v(24);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  auto t = Tensor::from_f32({2, 3, 4, 1}, v);
  REQUIRE(t.ok());
  auto m = ops::block_axes_last(ops::TensorSource::of(*t), {0, 1});
  REQUIRE(m.ok());
  CHECK(m->shape() == std::vector<std::int64_t>{4, 6});
  // Row c holds element (h, w, c, 0) = h*12 + w*4 + c in (h, w) order.
  for (std::int64_t c = 0; c < 4; ++c)
    for (std::int64_t hw = 0; hw < 6; ++hw)
      CHECK(m->value(static_cast<std::size_t>(c * 6 + hw)) == static_cast<double>((hw / 3) * 12 + (hw % 3) * 4 + c));
  CHECK_FALSE(ops::block_axes_last(ops::TensorSource::of(*t), {4}).ok());
  CHECK_FALSE(ops::block_axes_last(ops::TensorSource::of(*t), {1, -3}).ok());
}

TEST_CASE("ops: a cancelled run stops with the cancellation message", "[ops]") {
  auto t = Tensor::from_f32({4096}, corner_input(6, 4096, true));
  REQUIRE(t.ok());
  std::atomic<bool> stop{true};
  ops::Run run;
  run.reporter.cancel = &stop;
  auto a = ops::analyze({parse("mxfp4")}, ops::TensorSource::of(*t), {}, run);
  REQUIRE_FALSE(a.ok());
  CHECK(a.error().message == ops::kCancelled);
}

TEST_CASE("ops: progress reaches the element count", "[ops]") {
  auto t = Tensor::from_f32({8192}, corner_input(7, 8192, true));
  REQUIRE(t.ok());
  ops::Run run;
  run.chunk_elements = 1000;
  std::int64_t last = 0, reports = 0;
  run.reporter.on_progress = [&](const Progress& p) {
    CHECK(p.done > last);
    CHECK(p.total == 8192);
    last = p.done;
    ++reports;
  };
  auto a = ops::analyze({parse("mxfp8_e4m3")}, ops::TensorSource::of(*t), {}, run);
  REQUIRE(a.ok());
  CHECK(last == 8192);
  CHECK(reports >= 8);
}

TEST_CASE("ops: several formats read the input in one pass and equal each format alone", "[ops]") {
  // Block sizes 32, 16, 128 and 200 (whole rows) over rows of 200: the joint chunks end where every format's
  // blocks start; a refused format (2-D tiles), blocks along the first axis and N:M sparsity run on their own.
  const std::vector<std::string> names = {"mxfp4", "nvfp4", "mxfp8_e4m3", "mxint8", "mxsf", "e4m3:float32_t128",
                                          "e2m1:e8m0_t200", "mxsf@8x8", "mxfp4_axis0", "mxfp4_2:4"};
  std::vector<BlockFormat> formats;
  for (const auto& name : names) {
    auto f = parse_block_format(name == "mxfp4_axis0" ? std::string("mxfp4") : name == "mxfp4_2:4" ? std::string("mxfp4") : name);
    REQUIRE(f.ok());
    if (name == "mxfp4_axis0") f->layout.axis = 0;
    if (name == "mxfp4_2:4") {
      f->layout.sparse_n = 2;
      f->layout.sparse_m = 4;
    }
    formats.push_back(*f);
  }
  const std::vector<std::int64_t> shape = {48, 200};
  auto t = Tensor::from_f32(shape, corner_input(11, 48 * 200, true));
  REQUIRE(t.ok());
  const auto src = ops::TensorSource::of(*t);
  for (const std::int64_t chunk : {std::int64_t{0}, std::int64_t{1}, std::int64_t{333}, std::int64_t{4096}}) {
    for (const bool gaps : {false, true}) {
      INFO("chunk " << chunk << " gaps " << gaps);
      ops::Run run;
      run.threads = 2;
      run.chunk_elements = chunk;
      std::int64_t last = 0;
      bool monotonic = true;
      run.reporter.on_progress = [&](const Progress& p) {
        if (p.stage.find(", ") != std::string::npos) {  // the joint pass reports once per chunk, in order
          monotonic = monotonic && p.done > last;
          last = p.done;
        }
      };
      auto all = ops::analyze(formats, src, ops::AnalyzeOptions{gaps, false, {}}, run);
      REQUIRE(all.ok());
      REQUIRE(all->size() == formats.size());
      CHECK(monotonic);
      CHECK(last == 48 * 200);
      for (std::size_t i = 0; i < formats.size(); ++i) {
        INFO(names[i]);
        ops::Run alone_run;
        alone_run.threads = 1;
        auto alone = ops::analyze({formats[i]}, src, ops::AnalyzeOptions{gaps, false, {}}, alone_run);
        REQUIRE(alone.ok());
        const ops::FormatAnalysis& a = (*all)[i];
        const ops::FormatAnalysis& b = alone->front();
        CHECK(a.format.name == b.format.name);
        CHECK(a.engine == b.engine);
        check_stats(a.total, b.total, true);
        CHECK(a.gap_histogram == b.gap_histogram);
        REQUIRE(a.by_gap.size() == b.by_gap.size());
        for (const auto& [g, s] : b.by_gap) check_stats(a.by_gap.at(g), s, true);
      }
    }
  }
}

namespace {

/// The packed quantizations of two sources of the same values are the same bytes.
void check_same_packed(const BlockFormat& f, const ops::TensorSource& a, const ops::TensorSource& b, const ops::Run& run) {
  auto pa = ops::quantize_packed(f, a, run);
  auto pb = ops::quantize_packed(f, b, run);
  REQUIRE(pa.ok());
  REQUIRE(pb.ok());
  CHECK(pa->elements == pb->elements);
  CHECK(pa->scales == pb->scales);
  CHECK(pa->tensor_scale == pb->tensor_scale);
  CHECK(pa->subtile_offsets == pb->subtile_offsets);
}

}  // namespace

TEST_CASE("ops: a mapped file gives the same results as the tensor in memory, tensor scales found chunk by chunk",
          "[ops]") {
  const std::vector<std::int64_t> shape = {48, 200};
  std::vector<float> x = corner_input(13, 48 * 200, true);
  x[4321] = 1e30F;  // the tensor amax in a late chunk
  const auto path = (std::filesystem::temp_directory_path() / "mxlab_test_ops_mapped.npy").string();
  REQUIRE(write_npy(path, std::span<const float>(x), shape).ok());
  auto mapped = MappedTensor::open_npy(path);
  REQUIRE(mapped.ok());
  const auto file = ops::TensorSource::of(std::move(*mapped));
  auto t = Tensor::from_f32(shape, x);
  REQUIRE(t.ok());
  const auto memory = ops::TensorSource::of(*t);
  std::vector<BlockFormat> formats;
  for (const char* name : {"nvfp4", "e4m3:float32_t128", "mxfp4"}) formats.push_back(parse(name));
  auto te = apply_profile(parse("nvfp4"), "transformer-engine-nvfp4");
  REQUIRE(te.ok());
  formats.push_back(*te);
  ops::Run run;
  run.chunk_elements = 1000;
  auto a = ops::analyze(formats, file, ops::AnalyzeOptions{true, false, {}}, run);
  auto b = ops::analyze(formats, memory, ops::AnalyzeOptions{true, false, {}}, run);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  for (std::size_t i = 0; i < formats.size(); ++i) {
    INFO(formats[i].name);
    check_stats((*a)[i].total, (*b)[i].total, true);
    CHECK((*a)[i].gap_histogram == (*b)[i].gap_histogram);
  }
  for (const BlockFormat& f : formats) {
    INFO(f.name);
    check_same_packed(f, file, memory, run);
  }
  std::filesystem::remove(path);
}

TEST_CASE("ops: a mapped float64 file gives the results of its float64 tensor in memory", "[ops]") {
  // The mapped file's kernels narrow the doubles a few blocks at a time per thread; the tensor in memory holds
  // their float32 roundings (Tensor::from_f64). Values float32 holds, and values it does not (the reference on
  // the doubles, read in place from the file).
  const std::vector<std::int64_t> shape = {40, 203};
  const std::vector<float> xf = corner_input(17, 40 * 203, true);
  for (const bool exact : {true, false}) {
    INFO((exact ? "float32 values" : "values float32 cannot hold"));
    std::vector<double> x(xf.begin(), xf.end());
    if (!exact) x[77] = 1.0 + 0x1p-40;
    const auto path = (std::filesystem::temp_directory_path() / "mxlab_test_ops_mapped_f64.npy").string();
    REQUIRE(write_npy(path, std::span<const double>(x), shape).ok());
    auto mapped = MappedTensor::open_npy(path);
    REQUIRE(mapped.ok());
    CHECK(mapped->dtype() == DType::F64);
    const auto file = ops::TensorSource::of(std::move(*mapped));
    auto t = Tensor::from_f64(shape, x);
    REQUIRE(t.ok());
    const auto memory = ops::TensorSource::of(*t);
    CHECK(file.float32_exact() == exact);
    ops::Run run;
    run.chunk_elements = 1000;
    run.threads = 2;
    for (const char* name : {"mxfp4", "nvfp4", "mxint8:e8m0_t16s2", "mxfp8_e4m3@16"}) {
      INFO(name);
      const BlockFormat f = parse(name);
      std::vector<float> fa(x.size(), -1.0F), fb(x.size(), -2.0F);
      auto sink_into = [](std::vector<float>& out) {
        ops::QuantizeSink sink;
        sink.fake = [&out](std::size_t first, std::span<const float> v) -> std::optional<Error> {
          std::copy(v.begin(), v.end(), out.begin() + static_cast<std::ptrdiff_t>(first));
          return std::nullopt;
        };
        return sink;
      };
      auto qa = ops::quantize_fake(f, file, sink_into(fa), run, true);
      auto qb = ops::quantize_fake(f, memory, sink_into(fb), run, true);
      REQUIRE(qa.ok());
      REQUIRE(qb.ok());
      CHECK(qa->engine == qb->engine);
      check_stats(qa->stats, qb->stats, true);
      CHECK(std::memcmp(fa.data(), fb.data(), fa.size() * sizeof(float)) == 0);
      check_same_packed(f, file, memory, run);
      auto aa = ops::analyze({f}, file, ops::AnalyzeOptions{true, false, {}}, run);
      auto ab = ops::analyze({f}, memory, ops::AnalyzeOptions{true, false, {}}, run);
      REQUIRE(aa.ok());
      REQUIRE(ab.ok());
      check_stats((*aa)[0].total, (*ab)[0].total, true);
      CHECK((*aa)[0].gap_histogram == (*ab)[0].gap_histogram);
    }
    std::filesystem::remove(path);
  }
}

TEST_CASE("ops: a channel axis the tensor does not have is an error", "[ops]") {
  auto t = Tensor::from_f32({64}, corner_input(8, 64, true));
  REQUIRE(t.ok());
  auto a = ops::analyze({parse("e2m1:e8m0_c9")}, ops::TensorSource::of(*t));
  REQUIRE_FALSE(a.ok());
  CHECK_THAT(a.error().message, Catch::Contains("channel axis 9 is outside the tensor's 1 axes"));
}

/// The files `mxlab quantize --packed` writes for a packed tensor, with the metadata's shape replaced by `shape_text`.
ops::PackedFileBytes packed_files(const BlockFormat& f, const PackedTensor& p, const std::string& shape_text) {
  auto files = ops::packed_file_bytes(f, p, ops::PackedScaleLayout::Blocks, "test");
  REQUIRE(files.ok());
  const auto at = files->json.find("\"shape\": [") + 10;
  files->json.replace(at, files->json.find(']', at) - at, shape_text);
  return *files;
}

TEST_CASE("ops: packed files read back, and hostile metadata is refused before anything is built", "[ops]") {
  const BlockFormat f = parse("mxfp4");
  auto t = Tensor::from_f32({3, 64}, corner_input(9, 192, true));
  REQUIRE(t.ok());
  auto p = ops::quantize_packed(f, ops::TensorSource::of(*t));
  REQUIRE(p.ok());
  auto back = ops::parse_packed(f, packed_files(f, *p, "3, 64"), "q");
  REQUIRE(back.ok());
  CHECK(back->tensor.elements == p->elements);
  CHECK(back->tensor.scales == p->scales);
  CHECK(back->tensor.shape == p->shape);
  struct Case {
    std::string shape;
    std::string message;
  };
  const Case cases[] = {
      {"-3, 64", "'q.json': \"shape\" holds a negative number"},
      {"3, 64, 999999999999", "'q.json': shape holds more elements than 'q.elements.npy' can"},
      {"0, 999999999999999999, 999999999999999999", "'q.json': shape is too large"},
      {"3, 1e9", "'q.json': \"shape\" holds a non-integer number, expected non-negative integers"},
      {"9999999999999999999999", "'q.json': \"shape\" holds a non-integer number, expected non-negative integers"},
      {"3, 1152921504606846976", "'q.json': \"shape\" holds a number too large for a tensor dimension"},
      {"6, 32", "'q.json': was not written for the block format mxfp4 (scale format or block grid differ)"},
  };
  for (const auto& c : cases) {
    INFO(c.shape);
    auto r = ops::parse_packed(f, packed_files(f, *p, c.shape), "q");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message == c.message);
  }
  auto files = packed_files(f, *p, "3, 64");
  files.scales.pop_back();
  auto short_scales = ops::parse_packed(f, files, "q");
  REQUIRE_FALSE(short_scales.ok());
  CHECK_THAT(short_scales.error().message, Catch::Contains("q.scales.npy"));
}

// Regression: analyze --per-block kept every block's exact sums until the end (7.5 GB for 1 M elements in
// small blocks). Streamed summaries must be the kept ones, block for block, with the same totals.
TEST_CASE("ops: per-block summaries streamed to a sink equal the kept ones", "[ops]") {
  auto t = Tensor::from_f32({24, 40}, corner_input(21, 960, false));
  REQUIRE(t.ok());
  const auto src = ops::TensorSource::of(*t);
  std::vector<BlockFormat> formats;
  for (const char* spec : {"mxfp4", "nvfp4", "e4m3:e8m0_t8_t8", "mxint8@7", "e4m3:float32_c0", "e4m3:float32"})
    formats.push_back(parse(spec));
  ops::AnalyzeOptions kept;
  kept.per_block = true;
  auto want = ops::analyze(formats, src, kept);
  REQUIRE(want.ok());
  std::vector<std::vector<ops::BlockSummary>> got(formats.size());
  std::vector<std::size_t> order;
  ops::AnalyzeOptions streamed;
  streamed.per_block = true;
  streamed.block_sink = [&](std::size_t f, std::size_t b, const ops::BlockSummary& s) -> std::optional<Error> {
    CHECK(b == got[f].size());  // block after block
    order.push_back(f);
    got[f].push_back(s);
    return std::nullopt;
  };
  auto totals = ops::analyze(formats, src, streamed);
  REQUIRE(totals.ok());
  CHECK(std::is_sorted(order.begin(), order.end()));  // format after format
  for (std::size_t f = 0; f < formats.size(); ++f) {
    INFO(formats[f].name);
    const auto& w = (*want)[f];
    CHECK((*totals)[f].blocks.empty());
    CHECK(static_cast<std::int64_t>(w.blocks.size()) == ops::block_count(formats[f], t->shape()));
    REQUIRE(got[f].size() == w.blocks.size());
    auto same_sum = [](const ExactSum& a, const ExactSum& b) {
      const auto pa = a.parts(), pb = b.parts();
      return pa.negative == pb.negative && pa.limbs == pb.limbs && pa.exponent == pb.exponent;
    };
    auto same = [&](const ErrorStats& a, const ErrorStats& b) {
      return a.count == b.count && a.nonzero_inputs == b.nonzero_inputs && a.underflows == b.underflows &&
             a.saturations == b.saturations && a.nan_outputs == b.nan_outputs && same_sum(a.sse, b.sse) &&
             same_sum(a.signal, b.signal) && same_sum(a.error_sum, b.error_sum) &&
             std::bit_cast<std::uint64_t>(a.max_abs_error) == std::bit_cast<std::uint64_t>(b.max_abs_error) &&
             std::bit_cast<std::uint64_t>(a.max_rel_error) == std::bit_cast<std::uint64_t>(b.max_rel_error);
    };
    for (std::size_t b = 0; b < got[f].size(); ++b) {
      CHECK(std::bit_cast<std::uint64_t>(got[f][b].amax) == std::bit_cast<std::uint64_t>(w.blocks[b].amax));
      CHECK(std::bit_cast<std::uint64_t>(got[f][b].scale) == std::bit_cast<std::uint64_t>(w.blocks[b].scale));
      CHECK(same(got[f][b].stats, w.blocks[b].stats));
    }
    CHECK(same((*totals)[f].total, w.total));
    CHECK((*totals)[f].bits_per_element == w.bits_per_element);
  }
  // A sink's error stops the analysis and is returned.
  streamed.block_sink = [](std::size_t, std::size_t b, const ops::BlockSummary&) -> std::optional<Error> {
    if (b == 3) return make_error("disk full");
    return std::nullopt;
  };
  auto stopped = ops::analyze(formats, src, streamed);
  REQUIRE_FALSE(stopped.ok());
  CHECK(stopped.error().message == "disk full");
}

// Regression: dequantize decoded every packed file with the default packing, so files written with
// --nibble-order high-first (62 of 64 values wrong) or --int-encoding sign-magnitude (35 of 64) came back
// wrong with no error. Every packing option the writer takes must read back bit for bit.
TEST_CASE("ops: every packing option of packed files reads back bit for bit with the format's defaults", "[ops]") {
  struct Packing {
    std::string spec;
    std::vector<std::int64_t> shape;
    std::vector<std::pair<std::string, std::string>> options;
    ops::PackedScaleLayout layout = ops::PackedScaleLayout::Blocks;
  };
  std::vector<Packing> packings;
  for (const char* spec : {"mxfp4", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp8_e4m3", "mxint8", "mxint4", "nvfp4",
                           "e4m3:e8m0_t16s4_t16s4", "int8:float32_t0"}) {
    const BlockFormat f = parse(spec);
    const bool one_d = f.layout.tiles.size() == 1;
    const bool subtiles = std::string(spec).find('s') != std::string::npos && f.layout.tiles.size() == 2;
    for (const char* nibble : {"low-first", "high-first"})
      for (const char* enc : {"twos-complement", "sign-magnitude"})
        for (const char* axis : {"-1", "0"})
          for (const char* sub : {"1", "3"}) {
            if ((!one_d && std::string(axis) == "0") || (!subtiles && std::string(sub) == "3")) continue;
            std::vector<std::pair<std::string, std::string>> o = {{"nibble-order", nibble}, {"int-encoding", enc}};
            if (one_d) o.emplace_back("block-axis", axis);
            if (subtiles) o.emplace_back("subtile-bits", sub);
            packings.push_back({spec, {40, 64}, o});
            if (f.layout.scale && f.layout.scale->bits() <= 8 && one_d)
              packings.push_back({spec, {130, 64}, o, ops::PackedScaleLayout::Cublas});
          }
  }
  std::size_t written = 0;
  for (const auto& k : packings) {
    std::string label = k.spec + (k.layout == ops::PackedScaleLayout::Cublas ? " cublas" : " blocks");
    for (const auto& [n, v] : k.options) label += " --" + n + " " + v;
    INFO(label);
    auto f = ops::block_format(k.spec, k.options, [](std::string_view n) { return std::string(n); });
    REQUIRE(f.ok());
    const std::size_t count = static_cast<std::size_t>(k.shape[0] * k.shape[1]);
    auto t = Tensor::from_f32(k.shape, corner_input(11, count, true));
    REQUIRE(t.ok());
    auto p = ops::quantize_packed(*f, ops::TensorSource::of(*t));
    if (!p && f->options.int_encoding == IntEncoding::SignMagnitude) {
      // Sign-magnitude needs a symmetric integer element (int8 has -128); the writer refuses the rest.
      CHECK_THAT(p.error().message, Catch::Contains("sign-magnitude"));
      continue;
    }
    REQUIRE(p.ok());
    ++written;
    auto want = ops::dequantize(*f, *p);
    REQUIRE(want.ok());
    auto files = ops::packed_file_bytes(*f, *p, k.layout, "test");
    REQUIRE(files.ok());
    // Read as `mxlab dequantize SPEC BASE` does: the spec alone, the packing from the metadata.
    auto back = ops::parse_packed(parse(k.spec), *files, "q");
    REQUIRE(back.ok());
    CHECK(ops::describe_packing(back->format) == ops::describe_packing(*f));
    CHECK(back->tensor.elements == p->elements);
    CHECK(back->tensor.scales == p->scales);
    auto got = ops::dequantize(back->format, back->tensor);
    REQUIRE(got.ok());
    REQUIRE(got->size() == want->size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < got->size(); ++i)
      differ += std::bit_cast<std::uint64_t>((*got)[i]) != std::bit_cast<std::uint64_t>((*want)[i]);
    CHECK(differ == 0);
  }
  CHECK(written >= 60);
}

TEST_CASE("ops: packed metadata that does not describe a layout mxlab writes is refused", "[ops]") {
  const BlockFormat f = parse("mxfp4");
  auto t = Tensor::from_f32({3, 64}, corner_input(9, 192, true));
  REQUIRE(t.ok());
  auto p = ops::quantize_packed(f, ops::TensorSource::of(*t));
  REQUIRE(p.ok());
  auto files = ops::packed_file_bytes(f, *p, ops::PackedScaleLayout::Blocks, "test");
  REQUIRE(files.ok());
  struct Case {
    std::string from, to, message;
  };
  const Case cases[] = {
      {"\"nibble_order\": \"low-first\"", "\"nibble_order\": \"middle-first\"", "\"nibble_order\": unknown nibble order"},
      {"\"int_encoding\": \"twos-complement\"", "\"int_encoding\": \"ones-complement\"", "\"int_encoding\": unknown integer encoding"},
      {"\"element_bits\": 4", "\"element_bits\": 5", "\"element_bits\" is 5, but float4_e2m1fn has 4 bits"},
      {"\"element_bits\": 4", "\"element_bits\": \"4\"", "\"element_bits\" is a string, expected an integer"},
      {"\"block_axis\": -1", "\"block_axis\": 7", "\"block_axis\" 7 is outside the tensor's 2 axes"},
      {"\"subtile_bits\": 1", "\"subtile_bits\": 0", "\"subtile_bits\" is 0, expected 1..8"},
      {"\"scale_layout\": \"block grid, row-major\"", "\"scale_layout\": \"column-major\"", "\"scale_layout\" is \"column-major\""},
      {"\"tensor_scale\": null", "\"tensor_scale\": \"float32\"", "(tensor scale float32, the format has none)"},
      {"\"format\"", "\"colour\": 1, \"format\"", "unknown key \"colour\""},
      {"\"format\"", "\"shape\": [3, 64], \"format\"", "appears twice"},
      {"{", "[", "invalid JSON"},
  };
  for (const auto& c : cases) {
    INFO(c.to);
    auto bad = *files;
    const auto at = bad.json.find(c.from);
    REQUIRE(at != std::string::npos);
    bad.json.replace(at, c.from.size(), c.to);
    auto r = ops::parse_packed(f, bad, "q");
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains(c.message));
    CHECK_THAT(r.error().message, Catch::StartsWith("'q.json'"));
  }
}

}  // namespace
}  // namespace mxlab
