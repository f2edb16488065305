// Checks the SIMD cast kernels against the scalar reference mxlab::cast (formats/cast.cpp), bit for bit, on
// every SIMD target compiled in and supported by this CPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "kernel_test_inputs.hpp"
#include "mxlab/kernels/cast_kernel.hpp"
#include "mxlab/kernels/simd_target.hpp"

using namespace mxlab;
using namespace mxlab::test;

namespace {

std::string hex(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

/// Stream position of element 0: the indices cross 2^32, so the high word of the random index changes
/// inside a vector.
constexpr std::uint64_t kFirstIndex = 0xFFFFFFFFULL - 1000;

/// One option combination: its kernel, random seed and reference codes.
struct Combo {
  CastOptions options;
  CastKernel kernel;
  std::uint64_t seed;
  std::vector<std::uint16_t> reference;
};

/// The element where got and want differ first, described for a failure message ("" when equal).
template <typename In>
std::string difference(const std::vector<In>& in, const std::vector<std::uint16_t>& got,
                       const std::vector<std::uint16_t>& want) {
  const long i = first_difference(got, want);
  if (i < 0) return {};
  const auto k = static_cast<std::size_t>(i);
  std::uint32_t bits = 0;
  if constexpr (sizeof(In) == 4) {
    bits = std::bit_cast<std::uint32_t>(in[k]);
  } else {
    bits = in[k];
  }
  return "input bits " + hex(bits) + " (element " + std::to_string(i) + "): simd " + hex(got[k]) + ", reference " +
         hex(want[k]);
}

/// Runs every combination's kernel on every target (uint16 codes, and uint8 codes for formats up to 8 bits)
/// and compares with the reference codes; one CHECK per combination, target and code width.
template <typename In, typename Cast>
void check_all_targets(const Format& f, const std::vector<Combo>& combos, const std::vector<In>& in, Cast cast_fn) {
  for (const SimdTarget& t : simd_targets()) {
    const ScopedSimdTarget forced(t);
    REQUIRE(active_simd_target() == t.name);
    for (const Combo& c : combos) {
      KernelRun run;
      run.seed = c.seed;
      run.first_index = kFirstIndex;
      run.threads = 2;
      std::vector<std::uint16_t> got(in.size());
      REQUIRE(cast_fn(c.kernel, std::span<const In>(in), std::span<std::uint16_t>(got), run).ok());
      const std::string wrong16 = difference(in, got, c.reference);
      INFO(describe(f, c.options) << " on " << t.name << ", uint16 codes: " << wrong16);
      CHECK(wrong16.empty());
      // uint8 stores: once per rounding mode and policy (the store does not depend on the subnormal mode).
      if (f.bits() > 8 || c.options.subnormals != SubnormalMode::Keep) continue;
      std::vector<std::uint8_t> narrow(in.size());
      REQUIRE(cast_fn(c.kernel, std::span<const In>(in), std::span<std::uint8_t>(narrow), run).ok());
      std::copy(narrow.begin(), narrow.end(), got.begin());
      const std::string wrong8 = difference(in, got, c.reference);
      INFO("uint8 codes: " << wrong8);
      CHECK(wrong8.empty());
    }
  }
}

/// Kernels and reference codes of every option combination for these inputs.
template <typename In, typename ToDouble>
std::vector<Combo> make_combos(const Format& f, SourceType source, const std::vector<In>& in, std::uint64_t& seed,
                               ToDouble to_double) {
  std::vector<Combo> combos;
  // Random-bit widths change only the stochastic comparison, which does not depend on the input type.
  for (const CastOptions& o : option_grid(f, source, sizeof(In) == 4)) {
    auto kernel = CastKernel::make(f, o);
    REQUIRE(kernel.ok());
    ++seed;
    combos.push_back({o, *kernel, seed, reference_codes(f, o, in, seed, kFirstIndex, to_double)});
  }
  return combos;
}

void check_f32(const Format& f, const std::vector<float>& in, SourceType source, std::uint64_t seed) {
  const auto combos = make_combos(f, source, in, seed, [](float x) { return static_cast<double>(x); });
  check_all_targets(f, combos, in,
                    [](const CastKernel& k, auto a, auto b, const KernelRun& r) { return k.cast_f32(a, b, r); });
}

std::vector<const Format*> cast_formats(const std::vector<Format>& all) {
  std::vector<const Format*> out;
  for (const Format& f : all)
    if (CastKernel::supports(f)) out.push_back(&f);
  return out;
}

}  // namespace

TEST_CASE("the targets of this CPU are compiled and can be forced", "[kernels]") {
  const auto targets = simd_targets();
  REQUIRE(!targets.empty());
  std::vector<std::string> names;
  for (const auto& t : targets) names.push_back(t.name);
  INFO("targets: " << [&] {
    std::string s;
    for (const auto& n : names) s += n + " ";
    return s;
  }());
  // The fallback is always there; x86-64 CPUs with these instruction sets must get their target.
  CHECK((std::find(names.begin(), names.end(), "SCALAR") != names.end() ||
         std::find(names.begin(), names.end(), "EMU128") != names.end()));
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("sse4.2")) CHECK(std::find(names.begin(), names.end(), "SSE4") != names.end());
  if (__builtin_cpu_supports("avx2")) CHECK(std::find(names.begin(), names.end(), "AVX2") != names.end());
  if (__builtin_cpu_supports("avx512bw")) CHECK(std::find(names.begin(), names.end(), "AVX3") != names.end());
#endif
  CHECK(active_simd_target() == targets.front().name);
  for (const auto& t : targets) {
    const ScopedSimdTarget forced(t);
    CHECK(forced.forced());
    CHECK(active_simd_target() == t.name);
  }
  CHECK(active_simd_target() == targets.front().name);
}

TEST_CASE("unsupported formats and bad calls are reported", "[kernels]") {
  for (const char* name : {"float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "bfloat16", "float16", "float4_e2m1fn",
                           "mxint8", "int8", "uint4", "ue4m3", "float8_mxsf"}) {
    INFO(name);
    CHECK(CastKernel::supports(*find_catalogue_format(name)));
  }
  for (const char* name : {"float32", "nf4", "e2m1_codebook"}) {
    const Format& f = *find_catalogue_format(name);
    INFO(name);
    CHECK_FALSE(CastKernel::supports(f));
    const auto k = CastKernel::make(f, CastOptions{});
    REQUIRE_FALSE(k.ok());
    CHECK(k.error().message.find(f.name()) != std::string::npos);
  }
  CastOptions inf_policy;
  inf_policy.overflow = Overflow::Inf;
  CHECK_FALSE(CastKernel::make(*find_catalogue_format("e4m3"), inf_policy).ok());  // E4M3 has no infinity
  CastOptions zero_bits;
  zero_bits.rounding = Rounding::Stochastic;
  zero_bits.random_bits = 0;
  CHECK_FALSE(CastKernel::make(*find_catalogue_format("e4m3"), zero_bits).ok());

  const auto e4m3 = CastKernel::make(*find_catalogue_format("e4m3"), CastOptions{});
  const auto fp16 = CastKernel::make(*find_catalogue_format("float16"), CastOptions{});
  REQUIRE(e4m3.ok());
  REQUIRE(fp16.ok());
  std::vector<float> in(100, 1.0f);
  std::vector<std::uint8_t> short_out(99);
  std::vector<std::uint8_t> out8(100);
  std::vector<std::uint16_t> out16(100);
  CHECK_FALSE(e4m3->cast_f32(in, short_out).ok());
  CHECK_FALSE(e4m3->reference_f32(in, short_out).ok());
  CHECK_FALSE(fp16->cast_f32(in, out8).ok());  // 16-bit codes do not fit uint8
  REQUIRE(fp16->cast_f32(in, out16).ok());
  CHECK(out16[0] == 0x3C00);
  REQUIRE(e4m3->cast_f32(in, out8).ok());
  CHECK(out8[99] == 0x38);
  CHECK(e4m3->options().overflow == Overflow::Saturate);  // Default resolved
}

TEST_CASE("FP32 to codes: specials and every grid point and midpoint with neighbours and random patterns",
          "[kernels]") {
  const auto formats = formats_to_check();
  std::uint64_t seed = 1;
  for (const Format* f : cast_formats(formats)) {
    std::vector<float> in = special_inputs();
    const auto grid = grid_inputs(*f, f->bits() > 8 ? 251 : 1);
    in.insert(in.end(), grid.begin(), grid.end());
    const auto random = random_inputs(*f, 3000, 3000, seed);
    in.insert(in.end(), random.begin(), random.end());
    check_f32(*f, in, SourceType::F32, ++seed);
  }
}

TEST_CASE("FP32 inputs with other source types' flush thresholds", "[kernels]") {
  for (const char* name : {"float8_e4m3fn", "float8_e5m2", "bfloat16", "float16", "float8_e8m0fnu", "mxint8"}) {
    const Format& f = *find_catalogue_format(name);
    std::vector<float> in = special_inputs();
    const auto random = random_inputs(f, 2000, 2000, 99);
    in.insert(in.end(), random.begin(), random.end());
    for (const float x : {0x1p-14f, 0x1p-126f, 0x1p-20f})
      for (const float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, 1.0f)}) in.insert(in.end(), {y, -y});
    for (SourceType source : {SourceType::F64, SourceType::F16, SourceType::BF16}) check_f32(f, in, source, 7);
  }
}

namespace {

/// Every BF16 and every FP16 bit pattern through the kernels of these formats, for every option combination.
void check_16bit_inputs(const std::vector<const Format*>& formats) {
  std::vector<std::uint16_t> in(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) in[i] = static_cast<std::uint16_t>(i);
  // The input values come from the formats module's own decoding of the 16-bit catalogue formats.
  std::vector<double> bf16_value(65536);
  std::vector<double> f16_value(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) {
    bf16_value[i] = find_catalogue_format("bfloat16")->decode(i);
    f16_value[i] = find_catalogue_format("float16")->decode(i);
  }
  std::uint64_t seed = 100;
  for (const Format* f : formats) {
    const auto bf16 = make_combos(*f, SourceType::BF16, in, seed, [&](std::uint16_t h) { return bf16_value[h]; });
    check_all_targets(*f, bf16, in,
                      [](const CastKernel& k, auto a, auto b, const KernelRun& r) { return k.cast_bf16(a, b, r); });
    const auto f16 = make_combos(*f, SourceType::F16, in, seed, [&](std::uint16_t h) { return f16_value[h]; });
    check_all_targets(*f, f16, in,
                      [](const CastKernel& k, auto a, auto b, const KernelRun& r) { return k.cast_f16(a, b, r); });
  }
}

}  // namespace

TEST_CASE("BF16 and FP16 inputs: all 65536 bit patterns to catalogue formats", "[kernels]") {
  std::vector<const Format*> formats;
  for (const Format& f : catalogue_formats())
    if (CastKernel::supports(f)) formats.push_back(&f);
  check_16bit_inputs(formats);
}

TEST_CASE("BF16 and FP16 inputs: all 65536 bit patterns to generic formats", "[kernels][exhaustive]") {
  const auto all = formats_to_check();
  std::vector<const Format*> formats;
  for (const Format& f : all)
    if (CastKernel::supports(f) && find_catalogue_format(f.name()) == nullptr) formats.push_back(&f);
  check_16bit_inputs(formats);
}

TEST_CASE("the scalar reference loop equals mxlab::cast element by element", "[kernels]") {
  const Format& f = *find_catalogue_format("e4m3");
  CastOptions o;
  o.rounding = Rounding::Stochastic;
  const auto kernel = CastKernel::make(f, o);
  REQUIRE(kernel.ok());
  const auto in = random_inputs(f, 5000, 50000, 3);
  const auto ref = reference_codes(f, kernel->options(), in, 17, 40, [](float x) { return static_cast<double>(x); });
  std::vector<std::uint8_t> out(in.size());
  KernelRun run;
  run.seed = 17;
  run.first_index = 40;
  run.threads = 2;
  REQUIRE(kernel->reference_f32(in, out, run).ok());
  CHECK(std::equal(out.begin(), out.end(), ref.begin()));
  std::vector<std::uint16_t> h(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<std::uint16_t>(i);
  std::vector<std::uint16_t> via_loop(h.size());
  REQUIRE(kernel->reference_f16(h, via_loop, run).ok());
  CHECK(via_loop == reference_codes(f, kernel->options(), h, 17, 40,
                                    [](std::uint16_t x) { return find_catalogue_format("float16")->decode(x); }));
  REQUIRE(kernel->reference_bf16(h, via_loop, run).ok());
  CHECK(via_loop == reference_codes(f, kernel->options(), h, 17, 40,
                                    [](std::uint16_t x) { return find_catalogue_format("bfloat16")->decode(x); }));
}

TEST_CASE("results do not depend on threads or call splits or array tails", "[kernels]") {
  const Format& f = *find_catalogue_format("e4m3");
  CastOptions o;
  o.rounding = Rounding::Stochastic;
  const auto kernel = CastKernel::make(f, o);
  REQUIRE(kernel.ok());
  const auto in = random_inputs(f, 100003, 300007, 11);
  KernelRun run;
  run.seed = 5;
  run.first_index = 123456789;
  std::vector<std::uint8_t> one(in.size());
  REQUIRE(kernel->cast_f32(in, one, run).ok());
  for (unsigned threads : {2U, 3U, 7U, 0U}) {
    KernelRun r = run;
    r.threads = threads;
    std::vector<std::uint8_t> many(in.size(), 0xAA);
    REQUIRE(kernel->cast_f32(in, many, r).ok());
    INFO("threads " << threads);
    CHECK(many == one);
  }
  // Two calls over the halves, the second numbering its elements from where the first stopped.
  const std::size_t half = 77777;
  std::vector<std::uint8_t> split(in.size());
  REQUIRE(
      kernel->cast_f32(std::span<const float>(in).first(half), std::span<std::uint8_t>(split).first(half), run).ok());
  KernelRun second = run;
  second.first_index += half;
  REQUIRE(
      kernel->cast_f32(std::span<const float>(in).subspan(half), std::span<std::uint8_t>(split).subspan(half), second)
          .ok());
  CHECK(split == one);

  // Every length up to a few vectors of the widest target: tails are computed, nothing past n is written.
  const auto ref = reference_codes(f, kernel->options(), in, run.seed, run.first_index,
                                   [](float x) { return static_cast<double>(x); });
  for (const SimdTarget& t : simd_targets()) {
    const ScopedSimdTarget forced(t);
    for (std::size_t n = 0; n <= 70; ++n) {
      std::vector<std::uint8_t> out(n + 8, 0xEE);
      REQUIRE(kernel->cast_f32(std::span<const float>(in).first(n), std::span<std::uint8_t>(out).first(n), run).ok());
      INFO(t.name << " n " << n);
      CHECK(std::equal(out.begin(), out.begin() + static_cast<long>(n), ref.begin()));
      CHECK(std::all_of(out.begin() + static_cast<long>(n), out.end(), [](std::uint8_t c) { return c == 0xEE; }));
    }
  }
}

TEST_CASE("FP32 to codes: every 16-bit grid gap and many random patterns", "[kernels][exhaustive]") {
  const auto formats = formats_to_check();
  std::uint64_t seed = 1000;
  for (const Format* f : cast_formats(formats)) {
    std::vector<float> in = grid_inputs(*f, 1, f->bits() > 8);
    const auto random = random_inputs(*f, 30000, 30000, seed);
    in.insert(in.end(), random.begin(), random.end());
    check_f32(*f, in, SourceType::F32, ++seed);
  }
}

TEST_CASE("fake values under a factor: the fast path equals the cast, its decoding and one product", "[kernels]") {
  // fake_scaled(in, factor)[i] against fl32(decode(cast(in[i])) * factor) from the scalar reference, bit for
  // bit, on every target: every format and nearest-even option set the fast path takes (grid points, their
  // midpoints and neighbours, random patterns; factors a power of two and not), calls of every length mod the
  // lanes, and the inputs it must refuse (NaN, Inf).
  const auto formats = formats_to_check();
  std::uint64_t seed = 900;
  int covered = 0;
  for (const Format* f : cast_formats(formats)) {
    std::vector<float> in = grid_inputs(*f, f->bits() > 8 ? 251 : 1);
    const auto random = random_inputs(*f, 2000, 2000, ++seed);
    in.insert(in.end(), random.begin(), random.end());
    std::erase_if(in, [](float v) { return !std::isfinite(v); });
    for (CastOptions o : option_grid(*f, SourceType::F32, false)) {
      if (o.rounding != Rounding::NearestEven) continue;
      const auto kernel = CastKernel::make(*f, o);
      REQUIRE(kernel.ok());
      if (!kernel->has_fake_scaled()) continue;
      ++covered;
      const auto codes = reference_codes(*f, kernel->options(), in, 0, 0, [](float x) { return static_cast<double>(x); });
      for (const float factor : {1.0F, 0.0078125F, 3.0e-3F, 149.33333F}) {
        std::vector<float> want(in.size());
        for (std::size_t i = 0; i < in.size(); ++i) want[i] = static_cast<float>(f->decode(codes[i])) * factor;
        for (const SimdTarget& t : simd_targets()) {
          const ScopedSimdTarget forced(t);
          INFO(describe(*f, kernel->options()) << " factor " << factor << " on " << t.name);
          std::vector<float> got(in.size(), -1.0F);
          REQUIRE(kernel->fake_scaled(in, factor, got));
          long d = -1;
          for (std::size_t i = 0; i < in.size() && d < 0; ++i)
            if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i])) d = static_cast<long>(i);
          INFO("first difference at " << d << (d >= 0 ? " input " + hex(std::bit_cast<std::uint32_t>(in[static_cast<std::size_t>(d)])) + " got " + std::to_string(got[static_cast<std::size_t>(d)]) + " want " + std::to_string(want[static_cast<std::size_t>(d)]) : ""));
          CHECK(d < 0);
          // Shorter calls: every tail length, from an offset.
          for (std::size_t n = 1; n <= 17; ++n) {
            std::vector<float> part(n, -1.0F);
            REQUIRE(kernel->fake_scaled(std::span<const float>(in).subspan(5, n), factor, part));
            CHECK(std::equal(part.begin(), part.end(), want.begin() + 5, [](float a, float b) {
              return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
            }));
          }
          // NaN or Inf anywhere: refused.
          for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
            std::vector<float> x(in.begin(), in.begin() + 21);
            x[19] = bad;
            std::vector<float> out(x.size());
            CHECK_FALSE(kernel->fake_scaled(x, factor, out));
          }
        }
      }
    }
  }
  // The fast path covers at least MX's elements (E4M3, E5M2, E2M1, E3M2, E2M3, MXINT8's) and MX-SAFE's; not
  // elements without mantissa bits, whose ties go to the even code rather than the even multiple (e3m0ieee).
  CHECK(covered >= 7);
  for (const char* name : {"e4m3", "e5m2", "e2m1", "mxint8"}) {
    INFO(name);
    CHECK(CastKernel::make(*find_catalogue_format(name), CastOptions{})->has_fake_scaled());
  }
  const auto e2m0 = parse_format("e2m0");
  REQUIRE(e2m0.ok());
  CHECK_FALSE(CastKernel::make(*e2m0, CastOptions{})->has_fake_scaled());
  CastOptions stochastic;
  stochastic.rounding = Rounding::Stochastic;
  CHECK_FALSE(CastKernel::make(*find_catalogue_format("e4m3"), stochastic)->has_fake_scaled());
  CastOptions nan_overflow;
  nan_overflow.overflow = Overflow::Nan;
  CHECK_FALSE(CastKernel::make(*find_catalogue_format("e4m3"), nan_overflow)->has_fake_scaled());
}
