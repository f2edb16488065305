// Checks the SIMD block kernels against the scalar reference mxlab::quantize (and mxlab::pack, mxlab::dequantize,
// mxlab::analyze), bit for bit, on every SIMD target compiled in and supported by this CPU, with 1 and 3 threads.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "mxlab/core/random.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/kernels/block_kernel.hpp"
#include "mxlab/kernels/simd_target.hpp"
#include "mxlab/quantize/analysis.hpp"
#include "mxlab/quantize/pack.hpp"
#include "mxlab/quantize/quantize.hpp"

using namespace mxlab;

namespace {

const std::vector<Rounding> kRoundings = {Rounding::NearestEven, Rounding::NearestAway, Rounding::NearestZero,
                                          Rounding::TowardZero,  Rounding::Up,          Rounding::Down,
                                          Rounding::Odd,         Rounding::Stochastic};
const std::vector<ScaleRule> kRules = {ScaleRule::Floor, ScaleRule::Ceil, ScaleRule::RCeil, ScaleRule::Even,
                                       ScaleRule::MidMax};
const std::vector<Overflow> kOverflows = {Overflow::Saturate, Overflow::Inf, Overflow::Nan};
const std::vector<std::string> kFormats = {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4",
                                           "mxint8",     "mxint4",     "mxint2",     "boost_e2m5", "mxsf",
                                           "mxfp4@16"};

double normal(Rng& rng) {
  const double u1 = 1.0 - rng.uniform();
  const double u2 = rng.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

/// Rows of 100 elements (three blocks of 32 and a ragged one of 4), each row from one distribution: normal,
/// "blockexp" (runs of 8 with a random exponent over the whole float32 range: clamped scales and quotients
/// below the FP32 normal range), huge and tiny values mixed in one block, FP32 subnormals only, zeros,
/// blocks holding NaN and/or Inf, short multiples of a block's power of two: element grid points and
/// exact midpoints between them (rounding ties for every element format), some moved by one float32 ulp,
/// and powers of two with values just below them.
std::vector<float> make_input(std::uint64_t seed, std::int64_t rows, std::int64_t cols) {
  Rng rng(seed);
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  const float inf = std::numeric_limits<float>::infinity();
  for (std::int64_t r = 0; r < rows; ++r) {
    int e = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto i = static_cast<std::size_t>(r * cols + c);
      double v = normal(rng);
      switch (r % 10) {
        case 0: break;
        case 1:
          if (c % 8 == 0) e = static_cast<int>(rng.next_u32() % 300) - 170;
          v = std::ldexp(v, e);
          break;
        case 2: v = std::ldexp(v, (c % 3 == 0) ? 100 : -150 + static_cast<int>(rng.next_u32() % 40)); break;
        case 3: v = std::ldexp(static_cast<double>(rng.next_u32() % (1U << 23)), -149) * (v < 0 ? -1 : 1); break;
        case 4: v = (c % 5 == 0) ? 0.0 : std::ldexp(v, -130); break;
        case 5: v = (c < 40) ? (c % 2 ? -0.0 : 0.0) : v * 1e30; break;
        case 6:
          if (c == 3) v = std::numeric_limits<double>::quiet_NaN();
          if (c == 40) v = -inf;
          if (c == 70) v = inf;
          if (c == 71) v = std::numeric_limits<double>::quiet_NaN();
          break;
        case 7: v = std::ldexp(v, 120 + static_cast<int>(rng.next_u32() % 8)); break;
        case 9: {
          // Powers of two and values just below them (within 2^-11 relative: where a float32 log2 may round
          // up to the next integer), over a few binades.
          if (c % 16 == 0) e = static_cast<int>(rng.next_u32() % 24) - 12;
          const std::uint32_t ulps = rng.next_u32() % 8 < 6 ? rng.next_u32() % 4 : rng.next_u32() % 4096;
          const double below = std::ldexp(static_cast<double>(ulps), -24);
          v = std::ldexp((c % 4 == 0) ? 1.0 : 1.0 - below, e + static_cast<int>(c % 5)) * (v < 0 ? -1 : 1);
          break;
        }
        case 8: {
          if (c % 32 == 0) e = static_cast<int>(rng.next_u32() % 41) - 20;
          const auto n = static_cast<double>(rng.next_u32() % 1024);
          v = std::ldexp(v < 0 ? -n : n, e - 9);
          const std::uint32_t nudge = rng.next_u32() % 8;
          if (nudge == 0) v = std::nextafter(static_cast<float>(v), std::numeric_limits<float>::infinity());
          if (nudge == 1) v = std::nextafter(static_cast<float>(v), -std::numeric_limits<float>::infinity());
          break;
        }
      }
      x[i] = static_cast<float>(v);  // beyond float32: +-inf, as an input may be
    }
  }
  return x;
}

std::string describe(const BlockFormat& f) {
  const QuantOptions& o = f.options;
  return f.name + " rule " + std::string(to_string(o.rule)) + " rounding " +
         std::to_string(static_cast<int>(o.element.rounding)) + " overflow " +
         std::to_string(static_cast<int>(o.element.overflow)) + " zero-block " + std::string(to_string(o.zero_block)) +
         " specials " + std::string(to_string(o.specials)) + " clamp " + std::string(to_string(o.clamp));
}

bool same_float(float a, double want) {
  const auto w = static_cast<float>(want);
  if (std::isnan(w)) return std::isnan(a);
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(w);
}

/// First index where the float outputs differ from the reference's doubles rounded to float32, or -1.
long first_value_difference(const std::vector<float>& got, const std::vector<double>& want) {
  for (std::size_t i = 0; i < want.size(); ++i)
    if (!same_float(got[i], want[i])) return static_cast<long>(i);
  return -1;
}

bool exact_equal(const ExactSum& a, const ExactSum& b) {
  ExactSum d = a;
  d.subtract(b);
  return d.is_zero();
}

/// fn(run) on every SIMD target compiled in and supported here, with 1 and 3 threads.
template <class Fn>
void on_every_target(Fn&& fn) {
  for (const SimdTarget& t : simd_targets()) {
    const ScopedSimdTarget forced(t);
    REQUIRE(forced.forced());
    for (unsigned threads : {1U, 3U}) {
      INFO("target " << t.name << ", " << threads << " threads");
      fn(BlockRun{threads});
    }
  }
}

/// Runs every kernel of f on x on every target and with 1 and 3 threads against the reference.
void check_format(const BlockFormat& f, const BlockInput& x, const std::vector<std::int64_t>& shape) {
  INFO(describe(f));
  std::vector<double> xd(x.size);
  for (std::size_t i = 0; i < x.size; ++i) xd[i] = x.value(i);
  auto q = quantize(f, xd, shape);
  REQUIRE(q.ok());
  const PackedTensor packed = pack(f, *q);
  const Analysis analysis = analyze(f, xd, *q);
  const ErrorStats& want = analysis.total;
  const std::vector<double> deq = dequantize(f, *q);
  REQUIRE(BlockKernel::unsupported_reason(f) == "");
  auto k = BlockKernel::make(f);
  REQUIRE(k.ok());
  on_every_target([&](const BlockRun& run) {
    std::vector<float> fake(x.size, -1.0F);
    BlockMetrics m;
    REQUIRE(k->fake_quantize(x, shape, fake, run, &m).ok());
    const long d = first_value_difference(fake, q->values);
    INFO("first fake-quant difference at " << d << (d >= 0 ? " input " + std::to_string(xd[static_cast<std::size_t>(d)]) : ""));
    CHECK(d < 0);

    BlockMetrics mp;
    auto p = k->quantize_packed(x, shape, run, &mp);
    REQUIRE(p.ok());
    CHECK(p->elements == packed.elements);
    CHECK(p->scales == packed.scales);
    CHECK(p->tensor_scale == packed.tensor_scale);
    CHECK(p->subtile_offsets == packed.subtile_offsets);

    // Without the metrics (the kernels' loops differ), the same outputs.
    std::vector<float> fake_only(x.size, -1.0F);
    REQUIRE(k->fake_quantize(x, shape, fake_only, run).ok());
    CHECK(first_value_difference(fake_only, q->values) < 0);
    auto p_only = k->quantize_packed(x, shape, run);
    REQUIRE(p_only.ok());
    CHECK(p_only->elements == packed.elements);
    CHECK(p_only->scales == packed.scales);

    std::vector<float> back(x.size, -1.0F);
    REQUIRE(k->dequantize(p->elements, p->scales, shape, back, run, q->tensor_scale, p->subtile_offsets).ok());
    CHECK(first_value_difference(back, deq) < 0);

    std::vector<float> amax(static_cast<std::size_t>(k->block_count(shape)), -1.0F);
    REQUIRE(k->block_amax(x, shape, amax, run).ok());
    CHECK(first_value_difference(amax, q->block_amax) < 0);

    for (const BlockMetrics* got : {&m, &mp}) {
      CHECK(got->count == want.count);
      CHECK(got->nonzero_inputs == want.nonzero_inputs);
      CHECK(got->underflows == want.underflows);
      CHECK(got->saturations == want.saturations);
      CHECK(got->nan_outputs == want.nan_outputs);
      CHECK(exact_equal(got->sse, want.sse));
      CHECK(exact_equal(got->signal, want.signal));
      CHECK(exact_equal(got->error_sum, want.error_sum));
      CHECK(got->max_abs_error == want.max_abs_error);
      CHECK(got->max_rel_error == want.max_rel_error);
    }
  });
}

BlockFormat parse(const std::string& name) {
  auto f = parse_block_format(name);
  REQUIRE(f.ok());
  return *f;
}

/// The reference's own verdict on an option set: combinations it rejects (Inf overflow into a format
/// without Inf) are skipped.
bool reference_accepts(const BlockFormat& f) {
  const std::vector<double> one = {1.0};
  return quantize(f, one, {1}).ok();
}

const std::vector<std::int64_t> kShape = {30, 100};

}  // namespace

TEST_CASE("block kernels: every format and rounding mode under the floor rule", "[kernels][block]") {
  const auto x = make_input(11, kShape[0], kShape[1]);
  // Rows of whole blocks (the kernels' contiguous-block loop) as well as ragged ones, rows of whole vectors of
  // every target whose last block is shorter (144 = 4 blocks of 32 and one of 16), and rows shorter than a
  // vector (tiles of lanes rows and the rows after them; 3 is shorter than SSE4's 4 lanes).
  const std::vector<std::int64_t> whole = {27, 128};
  const auto xw = make_input(19, whole[0], whole[1]);
  const std::vector<std::int64_t> vectors = {9, 144};
  const auto xv = make_input(21, vectors[0], vectors[1]);
  const std::vector<std::int64_t> short9 = {53, 9}, short3 = {23, 3};
  // Their first 32 rows without NaN, Inf or scales below 2^-127 (make_input's rows of kinds 1, 3, 4 and 6 become
  // their previous row times 2^-3), so that whole tiles of them take the short-row pass; the rows after them
  // keep every kind.
  const auto short_input = [](std::uint64_t seed, const std::vector<std::int64_t>& shape) {
    auto v = make_input(seed, shape[0], shape[1]);
    for (std::int64_t r = 1; r < std::min<std::int64_t>(32, shape[0]); ++r)
      if (r % 10 == 1 || r % 10 == 3 || r % 10 == 4 || r % 10 == 6)
        for (std::int64_t c = 0; c < shape[1]; ++c)
          v[static_cast<std::size_t>(r * shape[1] + c)] = v[static_cast<std::size_t>((r - 1) * shape[1] + c)] * 0.125F;
    return v;
  };
  const auto xs9 = short_input(22, short9);
  const auto xs3 = short_input(23, short3);
  for (const auto& name : kFormats) {
    for (Rounding r : kRoundings) {
      BlockFormat f = parse(name);
      f.options.element.rounding = r;
      f.options.seed = 1234567;
      check_format(f, x, kShape);
      check_format(f, xw, whole);
      check_format(f, xv, vectors);
      check_format(f, xs9, short9);
      check_format(f, xs3, short3);
    }
    // The contiguous-block loop stores 4-bit codes straight into the packed output, in either nibble order.
    BlockFormat f = parse(name);
    f.options.nibble_order = NibbleOrder::HighFirst;
    check_format(f, xw, whole);
    check_format(f, make_input(20, 3, 4096), {3, 4096});
  }
}

/// The inputs as codes of a 16-bit float format (nearest-even; beyond its range they become +-Inf).
std::vector<std::uint16_t> to_16bit(const std::vector<float>& x, const char* format) {
  auto fmt = parse_format(format);
  REQUIRE(fmt.ok());
  CastOptions o;
  o.overflow = Overflow::Inf;
  std::vector<std::uint16_t> bits(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) bits[i] = static_cast<std::uint16_t>(cast(*fmt, x[i], o).code);
  return bits;
}

TEST_CASE("block kernels: elements without mantissa bits round ties to the even code", "[kernels][block]") {
  // E2M0 holds 0, 1, 2, 4: under the block scale 2 (amax 8), 6 / 2 = 3 lies halfway between 2 (code 2, even)
  // and 4 (code 3); 3 / 2 = 1.5 between 1 and 2 (code 2). Every format of the floor rule, with the whole
  // kernel path: as check_format, against the reference.
  for (const char* name : {"e2m0:e8m0_t32", "e3m0ieee:e8m0_t32"}) {
    const BlockFormat f = parse(name);
    std::vector<float> x(64, 0.5F);
    x[0] = 8.0F, x[1] = 6.0F, x[2] = 3.0F, x[3] = -6.0F, x[32] = 12.0F, x[33] = -12.0F, x[34] = 3.0F;
    check_format(f, BlockInput(std::span<const float>(x)), {2, 32});
  }
}

TEST_CASE("block kernels: bfloat16 and float16 inputs", "[kernels][block]") {
  const auto x = make_input(18, kShape[0], kShape[1]);
  // Values scaled into float16's range first, so that its subnormals and normals are both reached.
  std::vector<float> small(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) small[i] = std::ldexp(x[i], -std::max(0, std::ilogb(x[i]) / 8));
  const auto bf16 = to_16bit(x, "bfloat16");
  const auto bf16_whole = to_16bit(make_input(20, 27, 128), "bfloat16");
  const auto f16 = to_16bit(small, "float16");
  for (const auto& name : kFormats) {
    for (Rounding r : {Rounding::NearestEven, Rounding::Up, Rounding::Stochastic}) {
      BlockFormat f = parse(name);
      f.options.element.rounding = r;
      f.options.seed = 77;
      INFO("bfloat16 input");
      check_format(f, BlockInput::bf16(bf16), kShape);
      check_format(f, BlockInput::bf16(bf16_whole), {27, 128});  // rows of whole blocks
      INFO("float16 input");
      check_format(f, BlockInput::f16(f16), kShape);
    }
  }
}

/// Inputs for float block scales (rule amax) under a tensor scale over max_scale * 6 (E2M1) or another element
/// maximum: element 0 is the tensor's amax, anchor * 2^k, so that g = 2^k when anchor = max_scale * max_elem
/// (a pow2_g input) and an arbitrary float otherwise. Rows: normal values; blocks built from a scale value s0
/// (amax = max_elem * s0 * g, so the block scale is s0) and elements v * s0 * g for element grid points and
/// midpoints v (exact ties), some moved by one float32 ulp; blocks far below the tensor's amax (zero block
/// scales); NaN and Inf; zeros.
std::vector<float> make_float_scale_input(std::uint64_t seed, std::int64_t rows, std::int64_t cols, bool pow2_g,
                                          double max_elem, double max_scale, const Format& scale) {
  Rng rng(seed);
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  const int k = static_cast<int>(rng.next_u32() % 9) - 4;
  const double anchor = pow2_g ? max_scale * max_elem : max_elem * max_scale * (1 + rng.uniform());
  const double g = pow2_g ? std::ldexp(1.0, k) : 1.0;  // pow2_g: the tensor scale; otherwise unused below
  const std::vector<double> grid = {0,    0.25, 0.5, 0.75, 1,   1.25, 1.5, 1.75, 2,
                                    2.25, 2.5,  3,   3.5,  4,   4.5,  5,   5.5,  6};
  double s0 = 1;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto i = static_cast<std::size_t>(r * cols + c);
      double v = normal(rng);
      switch (r % 5) {
        case 0: v = std::ldexp(v, k); break;
        case 1: {
          if (c % 16 == 0) {
            // A positive scale value below the largest, found by a random code.
            do {
              s0 = scale.decode(static_cast<std::uint32_t>(rng.next_u32() % scale.code_count()));
            } while (!(s0 > 0) || !std::isfinite(s0) || s0 >= max_scale);
            v = max_elem * s0 * g;
            break;
          }
          const double m = grid[rng.next_u32() % grid.size()] * max_elem / 6;
          v = (rng.next_u32() % 2 ? -m : m) * s0 * g;
          const std::uint32_t nudge = rng.next_u32() % 6;
          if (nudge == 0) v = std::nextafter(static_cast<float>(v), std::numeric_limits<float>::infinity());
          if (nudge == 1) v = std::nextafter(static_cast<float>(v), -std::numeric_limits<float>::infinity());
          break;
        }
        case 2: v = std::ldexp(v, k - 12 - static_cast<int>(c / 16) * 2); break;
        case 3:
          v = std::ldexp(v, k);
          if (c == 5) v = std::numeric_limits<double>::quiet_NaN();
          if (c == 37) v = -std::numeric_limits<double>::infinity();
          break;
        case 4: v = (c % 3 == 0) ? 0.0 : (c % 3 == 1 ? -0.0 : std::ldexp(v, k)); break;
      }
      x[i] = static_cast<float>(v);
    }
  }
  x[0] = static_cast<float>(pow2_g ? anchor * g : anchor);
  return x;
}

TEST_CASE("block kernels: float block scales and NVFP4's two levels", "[kernels][block]") {
  const std::vector<std::int64_t> shape = {20, 96};
  for (const char* name : {"nvfp4", "e2m1:e4m3_float32_t16", "e2m1:e4m3_t16", "e4m3:ue4m3_float32_t32",
                           "int8:e4m3_bfloat16_t32", "e3m2:e4m3_float32_t16"}) {
    const BlockFormat base = parse(name);
    const double max_scale = base.layout.scale->max_finite();
    const double max_elem = base.element.max_finite();
    for (bool pow2_g : {true, false}) {
      const auto x = make_float_scale_input(pow2_g ? 31 : 32, shape[0], shape[1], pow2_g, max_elem, max_scale,
                                            *base.layout.scale);
      for (Rounding r : kRoundings) {
        BlockFormat f = base;
        f.options.element.rounding = r;
        f.options.seed = 4242;
        INFO(name << (pow2_g ? ", g a power of two" : ", g any float"));
        check_format(f, x, shape);
      }
    }
    for (ZeroBlock z : {ZeroBlock::One, ZeroBlock::Smallest}) {
      BlockFormat f = base;
      f.options.zero_block = z;
      f.options.min_block_scale = z == ZeroBlock::Smallest ? 0.0 : 0.015625;
      check_format(f, make_float_scale_input(33, shape[0], shape[1], true, max_elem, max_scale, *base.layout.scale),
                   shape);
    }
    // Rows shorter than a block (a first convolution's 9 taps): one block a row, its last vector partial; an
    // all-zero row and a row a billionth of the others (a zero block scale: zeros of the elements' signs), NaN and
    // Inf.
    for (const std::int64_t cols : {9, 5, 15, 1}) {
      auto x = make_float_scale_input(40 + static_cast<std::uint64_t>(cols), 40, cols, false, max_elem, max_scale,
                                      *base.layout.scale);
      for (std::int64_t j = 0; j < cols; ++j) {
        x[static_cast<std::size_t>(3 * cols + j)] = j % 2 == 0 ? -0.0F : 0.0F;
        x[static_cast<std::size_t>(5 * cols + j)] *= 1e-9F;
      }
      // Inf in a row, a row all Inf and NaN in the last row (the block statistics of a partial vector, which must
      // not read past the tensor's end).
      x[static_cast<std::size_t>(9 * cols)] = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = 0; j < cols; ++j) x[static_cast<std::size_t>(11 * cols + j)] = std::numeric_limits<float>::infinity();
      x[x.size() - 1] = std::numeric_limits<float>::quiet_NaN();
      INFO(name << ", rows of " << cols);
      check_format(base, x, {40, cols});
    }
  }
  // Ragged rows (odd lengths: packed nibbles through the bit writer) and an all-zero tensor (g = 1).
  check_format(parse("nvfp4"), make_input(34, 6, 45), {6, 45});
  check_format(parse("nvfp4"), make_input(35, kShape[0], kShape[1]), kShape);
  check_format(parse("nvfp4"), std::vector<float>(64, 0.0F), {4, 16});
}

TEST_CASE("block kernels: every scale rule, clamp site and zero-block rule", "[kernels][block]") {
  const auto x = make_input(12, kShape[0], kShape[1]);
  for (const auto& name : kFormats) {
    for (ScaleRule rule : kRules) {
      for (ClampSite clamp : {ClampSite::Exponent, ClampSite::Amax}) {
        BlockFormat f = parse(name);
        f.options.rule = rule;
        f.options.clamp = clamp;
        f.options.zero_block = rule == ScaleRule::Floor ? ZeroBlock::MinNormal : ZeroBlock::One;
        check_format(f, x, kShape);
      }
    }
  }
}

TEST_CASE("block kernels: overflow and NaN/Inf policies", "[kernels][block]") {
  const auto x = make_input(13, kShape[0], kShape[1]);
  for (const auto& name : kFormats) {
    for (Overflow ov : kOverflows) {
      for (SpecialsPolicy sp : {SpecialsPolicy::BlockNan, SpecialsPolicy::BlockNanAny, SpecialsPolicy::Element}) {
        BlockFormat f = parse(name);
        f.options.element.overflow = ov;
        f.options.specials = sp;
        f.options.rule = ScaleRule::Ceil;  // ceil makes amax overflow the element range under rounding up
        f.options.element.rounding = Rounding::Up;
        if (!reference_accepts(f)) continue;
        check_format(f, x, kShape);
      }
    }
  }
}

TEST_CASE("block kernels: packing orders, integer encodings, flush-output, shapes", "[kernels][block]") {
  for (const auto& name : kFormats) {
    for (NibbleOrder order : {NibbleOrder::LowFirst, NibbleOrder::HighFirst}) {
      BlockFormat f = parse(name);
      f.options.nibble_order = order;
      f.options.int_encoding = IntEncoding::SignMagnitude;
      f.options.element.subnormals = SubnormalMode::FlushOutput;
      // Ragged everywhere: rows shorter than a block, one long row, and a tensor whose thread parts do not
      // start on byte boundaries of the packed stream.
      check_format(f, make_input(14, 5, 7), {5, 7});
      check_format(f, make_input(15, 1, 1001), {1001});
      check_format(f, make_input(16, 600, 61), {600, 61});
    }
  }
}

TEST_CASE("block kernels: rows ending in a partial block, under nearest-even and rule floor", "[kernels][block]") {
  // The contiguous-block loop walks such rows block by block; the partial block is whole vectors (rows of 144 and
  // 48 on every target) or ends in a partial vector (rows of 9, 40 and 100), and the rows hold NaN, Inf, zeros,
  // subnormals and scales below 2^-127 (make_input), and two rows are all zeros.
  for (const auto& name : kFormats) {
    const BlockFormat f = parse(name);
    for (const std::int64_t cols : {144, 48, 9, 40, 5, 3}) {
      auto x = make_input(31 + static_cast<std::uint64_t>(cols), 20, cols);
      // All-zero rows: +0 (row 3) and zeros of both signs (row 4).
      for (std::int64_t j = 0; j < cols; ++j) {
        x[static_cast<std::size_t>(3 * cols + j)] = 0.0F;
        x[static_cast<std::size_t>(4 * cols + j)] = j % 2 == 0 ? -0.0F : 0.0F;
      }
      check_format(f, x, {20, cols});
      const auto bits = to_16bit(x, "bfloat16");
      check_format(f, BlockInput::bf16(bits), {20, cols});
      // The largest magnitude of each row's last block in its last element (the last vector's last lane).
      for (std::int64_t r = 0; r < 20; ++r) x[static_cast<std::size_t>(r * cols + cols - 1)] *= 1024.0F;
      check_format(f, x, {20, cols});
    }
  }
}

TEST_CASE("block kernels: every grid point and midpoint of integer and MX-SAFE elements", "[kernels][block]") {
  // The nearest-even fast path rounds an integer element at its one quantum, and MX-SAFE's at the quantum of
  // its reading (the second one below 2^-2, codes consecutive across the split). Rows of 32 whose first
  // element fixes the block scale at 2^s hold every multiple of a quarter of the finest quantum from zero to
  // 2^(emax + 1) times 2^s (grid points and ties of every binade, and overflows), each also moved by one
  // float32 ulp either way, with both signs.
  for (const char* name : {"mxint8", "mxint4", "mxint2", "mxsf"}) {
    const BlockFormat f = parse(name);
    CHECK(BlockKernel::make(f)->columns_native());
    const double step = f.element.decode(1) / 4;
    const double top = std::ldexp(1.0, f.element.emax() + 1);
    for (const int s : {0, -9, 13}) {
      std::vector<float> values;
      for (double v = 0; v < top; v += step)
        for (const double sign : {1.0, -1.0}) {
          const auto x = static_cast<float>(sign * std::ldexp(v, s));
          values.push_back(x);
          values.push_back(std::nextafter(x, std::numeric_limits<float>::infinity()));
          values.push_back(std::nextafter(x, -std::numeric_limits<float>::infinity()));
        }
      std::vector<float> x;
      for (std::size_t i = 0; i < values.size(); ++i) {
        if (x.size() % 32 == 0) x.push_back(static_cast<float>(std::ldexp(f.element.max_finite(), s)));
        x.push_back(values[i]);
      }
      while (x.size() % 32 != 0) x.push_back(0.0F);
      INFO("scale 2^" << s);
      check_format(f, x, {static_cast<std::int64_t>(x.size() / 32), 32});
    }
  }
}

TEST_CASE("block kernels: blocks down columns are the transposed tensor's blocks", "[kernels][block]") {
  // fake_quantize_columns(x) against the reference's quantization of x^T, transposed back. x^T's rows are
  // make_input's (every distribution, NaN/Inf blocks, scales below 2^-127), so x's columns are; rows of 100
  // (panels of 32 and a last one of 4), 32 and 7 (one partial panel); column counts below, at and above every
  // target's lanes (the last vector of columns overlapping the one before it, or one partial vector).
  const auto check = [](const BlockFormat& f, std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
    INFO(describe(f) << ", " << rows << " x " << cols);
    std::vector<float> xt = make_input(seed, cols, rows);  // x^T: cols x rows
    // All-zero blocks down the first column (+0) and, where there is one, the third (zeros of both signs); the
    // fourth a billionth of its values (a float block scale under a tensor scale rounds to zero there: zeros of
    // the elements' signs).
    for (std::int64_t i = 0; i < rows; ++i) {
      xt[static_cast<std::size_t>(i)] = 0.0F;
      if (cols > 2) xt[static_cast<std::size_t>(2 * rows + i)] = i % 3 == 0 ? -0.0F : 0.0F;
      if (cols > 3) xt[static_cast<std::size_t>(3 * rows + i)] *= 1e-9F;
    }
    std::vector<float> x(xt.size());
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j)
        x[static_cast<std::size_t>(i * cols + j)] = xt[static_cast<std::size_t>(j * rows + i)];
    const std::vector<double> xtd(xt.begin(), xt.end());
    auto q = quantize(f, xtd, {cols, rows});
    REQUIRE(q.ok());
    std::vector<double> want(x.size());
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j)
        want[static_cast<std::size_t>(i * cols + j)] = q->values[static_cast<std::size_t>(j * rows + i)];
    auto k = BlockKernel::make(f);
    REQUIRE(k.ok());
    on_every_target([&](const BlockRun& run) {
      std::vector<float> out(x.size(), -1.0F);
      REQUIRE(k->fake_quantize_columns(x, rows, cols, out, run).ok());
      const long d = first_value_difference(out, want);
      INFO("first difference at " << d);
      CHECK(d < 0);
    });
  };
  std::uint64_t seed = 700;
  for (const auto& name : kFormats) {
    const BlockFormat f = parse(name);
    CHECK(BlockKernel::make(f)->columns_native());
    for (const std::int64_t rows : {100, 32, 7})
      for (const std::int64_t cols : {100, 30, 17, 9, 8, 5, 1}) check(f, rows, cols, ++seed);
  }
  // Formats on the transposed copy: other rules, rounding modes, float scales, subtiles, a whole-axis block.
  for (const char* name : {"mxfp8_e4m3", "mxfp4"})
    for (const ScaleRule rule : kRules)
      for (const Rounding rounding : {Rounding::NearestEven, Rounding::TowardZero, Rounding::Stochastic}) {
        BlockFormat f = parse(name);
        f.options.rule = rule;
        f.options.element.rounding = rounding;
        CHECK(BlockKernel::make(f)->columns_native() == (rule == ScaleRule::Floor && rounding == Rounding::NearestEven));
        check(f, 100, 17, ++seed);
      }
  // Float block scales on their own column kernel (fast_float_columns): NVFP4's tensor scale, one-level scales,
  // zero blocks under rule one; rule 4over6 on the transposed copy.
  for (const char* name : {"nvfp4", "e2m1:e4m3_t16", "e4m3:ue4m3_float32_t32", "e3m2:e4m3_float32_t16"})
    for (const bool rule_one : {false, true}) {
      BlockFormat f = parse(name);
      if (rule_one) f.options.zero_block = ZeroBlock::One;
      CHECK(BlockKernel::make(f)->columns_native());
      for (const std::int64_t rows : {100, 32, 7})
        for (const std::int64_t cols : {100, 30, 17, 9, 8, 5, 1}) check(f, rows, cols, ++seed);
    }
  BlockFormat four_over_six = parse("nvfp4");
  four_over_six.options.rule = ScaleRule::FourOverSix;
  CHECK_FALSE(BlockKernel::make(four_over_six)->columns_native());
  check(four_over_six, 100, 17, ++seed);
  for (const char* name : {"e4m3:e8m0_t32s4", "e4m3:e8m0_t0", "int8:e8m0_t32"}) {
    const BlockFormat f = parse(name);
    check(f, 100, 17, ++seed);
    check(f, 40, 9, ++seed);
  }
  auto k = BlockKernel::make(parse("mxfp8_e4m3"));
  REQUIRE(k.ok());
  std::vector<float> x(12, 1.0F), out(11);
  CHECK_FALSE(k->fake_quantize_columns(x, 3, 4, out).ok());  // output too short
  CHECK_FALSE(k->fake_quantize_columns(x, 5, 4, x).ok());    // shape does not match
  CHECK(k->fake_quantize_columns(std::span<const float>(), 0, 4, out).ok());
}

TEST_CASE("block kernels: a whole-axis block and an empty tensor", "[kernels][block]") {
  BlockFormat f = parse("e4m3:e8m0_t0");
  check_format(f, make_input(17, 16, 100), {16, 100});
  auto k = BlockKernel::make(parse("mxfp4"));
  REQUIRE(k.ok());
  std::vector<float> none;
  CHECK(k->fake_quantize(none, {0, 32}, none).ok());
  std::vector<float> x(10, 1.0F), out(9);
  CHECK_FALSE(k->fake_quantize(x, {10}, out).ok());  // output too short
  CHECK_FALSE(k->fake_quantize(x, {3, 4}, x).ok());  // shape does not match
}

TEST_CASE("block kernels: rule 4over6 with the exact squared-error comparison", "[kernels][block]") {
  const std::vector<std::int64_t> shape = {20, 96};
  std::size_t n = 0;
  for (const char* name : {"nvfp4", "e2m1:e4m3_t16", "e4m3:ue4m3_float32_t32", "e3m2:e4m3_float32_t16"}) {
    const BlockFormat base = parse(name);
    const double max_scale = base.layout.scale->max_finite();
    const double max_elem = base.element.max_finite();
    for (bool pow2_g : {true, false}) {
      const auto x = make_float_scale_input(pow2_g ? 36 : 37, shape[0], shape[1], pow2_g, max_elem, max_scale,
                                            *base.layout.scale);
      for (Rounding r : {Rounding::NearestEven, Rounding::NearestAway, Rounding::TowardZero, Rounding::Stochastic}) {
        BlockFormat f = base;
        f.options.rule = ScaleRule::FourOverSix;
        f.options.element.rounding = r;
        f.options.seed = 77;
        f.options.zero_block = n % 2 ? ZeroBlock::One : ZeroBlock::Smallest;
        f.options.min_block_scale = n % 3 == 2 ? 0.015625 : 0.0;
        ++n;
        INFO(name << (pow2_g ? ", g a power of two" : ", g any float"));
        check_format(f, x, shape);
      }
    }
    BlockFormat f = base;
    f.options.rule = ScaleRule::FourOverSix;
    check_format(f, make_input(38, kShape[0], kShape[1]), kShape);
  }
}

TEST_CASE("block kernels: values rounded past the float32 range become infinities", "[kernels][block]") {
  // Inputs at the top of float32 whose scale times the element rounded up is 2^128 or more: the reference's
  // double rounds to +-inf in float32, which the kernels' double-to-float32 stores must give on every target
  // (the portable targets' conversions saturate to the largest float32 instead). Blocks of one element (rows
  // of 1) and rows of 57 with one such value among small ones.
  const float top = std::numeric_limits<float>::max();
  const std::vector<float> values = {top, -top, std::nextafter(top, 0.0F), 0x1.8p127F, 0x1.f8p127F, 0x1p127F,
                                     -0x1.e8p127F, 0x1.fffffcp126F};
  std::vector<float> column;
  std::vector<float> rows(57 * values.size(), 0.25F);
  for (std::size_t i = 0; i < values.size(); ++i) {
    column.push_back(values[i]);
    rows[i * 57 + (i * 7) % 57] = values[i];
  }
  const auto n = static_cast<std::int64_t>(values.size());
  std::size_t infinities = 0;
  for (const char* name : {"mxfp6_e2m3", "mxfp4", "mxfp8_e4m3", "mxint8", "nvfp4", "e3m2:e4m3_float32_t16"}) {
    for (ScaleRule rule : {ScaleRule::FourOverSix, ScaleRule::Ceil, ScaleRule::Floor}) {
      for (Rounding r : {Rounding::Up, Rounding::NearestAway, Rounding::NearestEven}) {
        for (Overflow ov : {Overflow::Saturate, Overflow::Inf}) {
          BlockFormat f = parse(name);
          f.options.rule = rule;
          f.options.element.rounding = r;
          f.options.element.overflow = ov;
          if (!reference_accepts(f) || !BlockKernel::supports(f)) continue;
          check_format(f, column, {n, 1});
          check_format(f, rows, {n, 57});
          const auto q = quantize(f, std::vector<double>(column.begin(), column.end()), {n, 1});
          REQUIRE(q.ok());
          for (double v : q->values) infinities += std::isinf(static_cast<float>(v)) && std::isfinite(v) ? 1 : 0;
        }
      }
    }
  }
  // The case is exercised: finite reference values past float32's range, counted exactly (the reference's
  // arithmetic, the same on every machine).
  CHECK(infinities == 81);
}

TEST_CASE("block kernels: every peer profile with power-of-two scales", "[kernels][block]") {
  const auto x = make_input(18, kShape[0], kShape[1]);
  const std::vector<std::int64_t> whole = {30, 128};
  const auto xw = make_input(19, whole[0], whole[1]);
  int covered = 0;
  for (const auto& profile : profile_names()) {
    for (const auto& name : kFormats) {
      auto f = apply_profile(parse(name), profile);
      if (!f.ok() || f->options.rule == ScaleRule::Amax || f->options.rule == ScaleRule::FourOverSix) continue;
      INFO("profile " << profile);
      check_format(*f, x, kShape);
      check_format(*f, xw, whole);
      ++covered;
    }
  }
  CHECK(covered >= 40);  // microxcaling (2), torchao (4), transformer-engine, modelopt-mxfp8/-mxfp4, ocp
}

/// x with NaN and Inf replaced by zeros (a NaN anywhere makes every block NaN under tensor-nan).
std::vector<float> finite_only(std::vector<float> x) {
  for (float& v : x)
    if (!std::isfinite(v)) v = 0.0F;
  return x;
}

TEST_CASE("block kernels: the NVFP4 peers' float32 arithmetic", "[kernels][block]") {
  const std::vector<std::int64_t> shape = {20, 96};
  const BlockFormat base = parse("nvfp4");
  const double max_scale = base.layout.scale->max_finite();
  const double max_elem = base.element.max_finite();
  std::size_t n = 0;
  for (const char* profile : {"transformer-engine-nvfp4", "transformer-engine-nvfp4-4over6-mae",
                              "transformer-engine-nvfp4-4over6-mse", "modelopt"}) {
    auto pf = apply_profile(base, profile);
    REQUIRE(pf.ok());
    INFO("profile " << profile);
    for (bool pow2_g : {true, false}) {
      const auto x = finite_only(make_float_scale_input(pow2_g ? 39 : 40, shape[0], shape[1], pow2_g, max_elem,
                                                        max_scale, *base.layout.scale));
      check_format(*pf, x, shape);
      // The same arithmetic under options the profile leaves at their defaults.
      BlockFormat f = *pf;
      f.options.element.rounding = n % 2 ? Rounding::Stochastic : Rounding::NearestAway;
      f.options.nearest_arith = n % 2 ? NearestArith::Exact : NearestArith::Float32AddHalf;
      f.options.zero_sign = n % 3 == 0 ? ZeroSign::ZeroMinus : ZeroSign::MinusZeroPlus;
      f.options.specials = std::vector<SpecialsPolicy>{SpecialsPolicy::BlockNan, SpecialsPolicy::IgnoreNan,
                                                       SpecialsPolicy::TensorNan, SpecialsPolicy::Element}[n % 4];
      f.options.seed = 90 + n;
      ++n;
      check_format(f, x, shape);
    }
    // Elements at the float32 products m * fl32(s * S_dec) of the midpoints m of the E2M1 grid and a few ulp
    // around them: the peer's float32 quotient decides each rounding there. The block's largest element stays,
    // so the scales are those of the base tensor.
    {
      auto x = finite_only(
          make_float_scale_input(43, shape[0], shape[1], false, max_elem, max_scale, *base.layout.scale));
      std::vector<double> xd(x.begin(), x.end());
      auto q = quantize(*pf, xd, shape);
      REQUIRE(q.ok());
      Rng rng(44);
      const double mids[] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
      for (std::size_t b = 0; b < x.size() / 16; ++b) {
        const double sd = q->scale_values[b];
        if (!(sd > 0) || !std::isfinite(sd)) continue;
        const auto d = static_cast<float>(sd) * static_cast<float>(q->tensor_scale);
        for (std::size_t i = b * 16; i < b * 16 + 16; ++i) {
          if (std::fabs(x[i]) == static_cast<float>(q->block_amax[b])) continue;
          float v = static_cast<float>(mids[rng.next_u32() % 7]) * d;
          for (std::uint32_t k = rng.next_u32() % 5; k > 0; --k)
            v = std::nextafter(v, (rng.next_u32() % 2) ? 0.0F : std::numeric_limits<float>::infinity());
          if (v < static_cast<float>(q->block_amax[b])) x[i] = (rng.next_u32() % 2) ? -v : v;
        }
      }
      check_format(*pf, x, shape);
    }
    // Block amaxes whose float32 scale quotient (amax * fl32(S_enc * fl32(1 / 6)) or amax / fl32(6 * S_dec))
    // lands at a midpoint of the E4M3 scale grid or a few float32 ulp around it: the order of the peer's float32
    // operations decides the scale there. The tensor amax stays in block 0.
    {
      auto x = finite_only(
          make_float_scale_input(49, shape[0], shape[1], false, max_elem, max_scale, *base.layout.scale));
      float tensor_amax = 0;
      for (float v : x) tensor_amax = std::max(tensor_amax, std::fabs(v));
      auto t = nvfp4_peer_tensor(*pf, false, false, tensor_amax);
      REQUIRE(t.ok());
      const bool te = pf->options.nvfp4_arith == Nvfp4Arith::Te;
      const float te_factor = t->s_enc * (1.0F / 6.0F);
      const float mo_divisor = 6.0F * t->s_dec;
      Rng rng(50);
      for (std::size_t b = 1; b < x.size() / 16; ++b) {
        const int e = static_cast<int>(rng.next_u32() % 12) - 6;
        const double mid = std::ldexp(1.0 + (2.0 * (rng.next_u32() % 8) + 1) / 16, e);  // E4M3 midpoint
        auto a = static_cast<float>(te ? mid / te_factor : mid * mo_divisor);
        for (std::uint32_t k = rng.next_u32() % 4; k > 0; --k)
          a = std::nextafter(a, (rng.next_u32() % 2) ? 0.0F : std::numeric_limits<float>::infinity());
        if (!(a < tensor_amax)) continue;
        x[b * 16] = (rng.next_u32() % 2) ? -a : a;
        for (std::size_t i = b * 16 + 1; i < b * 16 + 16; ++i) x[i] = std::fmin(std::fabs(x[i]), a) * (i % 2 ? 1 : -1);
      }
      check_format(*pf, x, shape);
    }
    // NaN and Inf rows (under tensor-nan every block is NaN), ragged rows, an all-zero tensor.
    check_format(*pf, make_input(41, kShape[0], kShape[1]), kShape);
    check_format(*pf, std::vector<float>(64, 0.0F), {4, 16});
    BlockFormat f = *pf;
    f.options.specials = SpecialsPolicy::BlockNanAny;
    check_format(f, make_input(42, kShape[0], kShape[1]), kShape);
  }
}

TEST_CASE("block kernels: the peers' arithmetic options one by one and combined", "[kernels][block]") {
  const auto x = make_input(20, kShape[0], kShape[1]);
  const std::vector<SpecialsPolicy> policies = {
      SpecialsPolicy::BlockNan,    SpecialsPolicy::Element,      SpecialsPolicy::BlockNanAny,
      SpecialsPolicy::IgnoreNan,   SpecialsPolicy::TorchaoFloor, SpecialsPolicy::TorchaoRceil,
      SpecialsPolicy::TensorNan,   SpecialsPolicy::NanSmallest};
  // Codebooks too: the profiles cover MX and NVFP4 formats only, but the options apply to any element.
  const std::vector<std::string> formats = {"mxfp8_e4m3", "mxfp6_e2m3",   "mxfp4",
                                            "mxint8",     "mxsf",         "nf4:e8m0_t32",
                                            "e2m1_codebook:e8m0_t32"};
  std::size_t n = 0;
  for (const auto& name : formats) {
    for (SpecialsPolicy sp : policies) {
      for (InputPrecision in : {InputPrecision::Exact, InputPrecision::Float32}) {
        // The other options rotate with the loop counter, so that every value of each meets every policy.
        BlockFormat f = parse(name);
        QuantOptions& o = f.options;
        o.specials = sp;
        o.input = in;
        o.rule = kRules[n % kRules.size()];
        o.amax_log2 = std::vector<AmaxLog2>{AmaxLog2::Exact, AmaxLog2::Field, AmaxLog2::Float32}[n % 3];
        if (o.rule == ScaleRule::RCeil && (n / 3) % 2 == 0)
          o.rceil_quotient = (n / 6) % 2 ? RceilQuotient::F32Div : RceilQuotient::F32MulRcp;
        o.code0_multiplier = std::vector<Code0Multiplier>{Code0Multiplier::Exact, Code0Multiplier::One,
                                                          Code0Multiplier::MinNormal}[(n / 2) % 3];
        o.amax_subnormal = std::vector<AmaxSubnormal>{AmaxSubnormal::Keep, AmaxSubnormal::Flush,
                                                      AmaxSubnormal::FlushPositive}[(n / 5) % 3];
        o.zero_sign = std::vector<ZeroSign>{ZeroSign::Keep, ZeroSign::MinusZeroPlus, ZeroSign::ZeroMinus}[(n / 7) % 3];
        o.zero_block = std::vector<ZeroBlock>{ZeroBlock::Smallest, ZeroBlock::One, ZeroBlock::MinNormal}[(n / 11) % 3];
        o.element.rounding = kRoundings[n % kRoundings.size()];
        if (in == InputPrecision::Float32 && n % 2 == 0) {
          o.nearest_arith = NearestArith::Float32AddHalf;
          o.element.rounding = n % 4 == 0 ? Rounding::NearestAway : Rounding::NearestEven;
        }
        o.seed = 5 + n;
        ++n;
        if (!reference_accepts(f)) {
          // Combinations no rule defines are refused by the kernel too.
          CHECK_FALSE(BlockKernel::supports(f));
          continue;
        }
        check_format(f, x, kShape);
        if (sp == SpecialsPolicy::TensorNan) check_format(f, finite_only(x), kShape);  // not every block NaN
      }
    }
  }
}

TEST_CASE("block kernels: subtiles with shared microexponents", "[kernels][block]") {
  const auto x = make_input(22, kShape[0], kShape[1]);
  const std::vector<std::string> formats = {"mxint8:e8m0_t16s2", "e4m3:e8m0_t32s4", "e2m1:e8m0_t32s8",
                                            "int4:e8m0_t16s16", "e3m2:e8m0_t8s2"};
  std::size_t n = 0;
  for (const auto& name : formats) {
    for (int bits : {1, 2, 3}) {
      for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Ceil, ScaleRule::RCeil}) {
        BlockFormat f = parse(name);
        f.layout.subtile_bits = bits;
        f.options.rule = rule;
        f.options.element.rounding = kRoundings[n % kRoundings.size()];
        f.options.input = n % 4 == 3 ? InputPrecision::Float32 : InputPrecision::Exact;
        f.options.clamp = n % 3 == 1 ? ClampSite::Amax : ClampSite::Exponent;
        f.options.seed = 40 + n;
        ++n;
        INFO("subtile bits " << bits);
        check_format(f, x, kShape);
        check_format(f, make_input(23, 5, 7), {5, 7});
      }
    }
  }
}

TEST_CASE("block kernels: codebook elements (NF4) with power-of-two and float scales", "[kernels][block]") {
  const auto x = make_input(45, kShape[0], kShape[1]);
  std::size_t n = 0;
  for (const char* name : {"nf4:e8m0_t32", "e2m1_codebook:e8m0_t32", "nf4:ue4m3_t16", "e2m1_codebook:e4m3_float32_t16",
                           "nf4:e4m3_float32_t16", "nf4:e4m3_t64"}) {
    const BlockFormat base = parse(name);
    INFO(name << ": " << BlockKernel::unsupported_reason(base));
    REQUIRE(BlockKernel::supports(base));
    // Blocks of 32 led by 2^e (amax 2^e: scale 2^(e - emax)), the rest the codebook's values and midpoints
    // times 2^e, rounded to float32, some moved by an ulp: exact values and ties of the table cast.
    const std::vector<std::int64_t> whole = {30, 128};
    std::vector<float> ties(static_cast<std::size_t>(whole[0] * whole[1]));
    {
      Rng rng(47);
      const auto table = base.element.sorted_values();
      int e = 0;
      for (std::size_t i = 0; i < ties.size(); ++i) {
        if (i % 32 == 0) e = static_cast<int>(rng.next_u32() % 40) - 20;
        const std::size_t k = 1 + rng.next_u32() % (table.size() - 1);
        const double m = rng.next_u32() % 2 ? table[k].value : (table[k - 1].value + table[k].value) * 0.5;
        auto v = static_cast<float>(std::ldexp(m, e));
        const std::uint32_t nudge = rng.next_u32() % 4;
        if (nudge == 0) v = std::nextafter(v, std::numeric_limits<float>::infinity());
        if (nudge == 1) v = std::nextafter(v, -std::numeric_limits<float>::infinity());
        ties[i] = (i % 32 == 0) ? std::ldexp(1.0F, e) * static_cast<float>(base.element.max_finite()) : v;
      }
    }
    for (Rounding r : kRoundings) {
      BlockFormat f = base;
      f.options.element.rounding = r;
      f.options.seed = 60 + n;
      if (f.options.rule != ScaleRule::Amax) f.options.rule = n % 2 ? ScaleRule::Ceil : ScaleRule::Floor;
      f.options.specials = n % 3 == 0 ? SpecialsPolicy::Element : SpecialsPolicy::BlockNan;
      ++n;
      check_format(f, x, kShape);
      if (f.options.rule == ScaleRule::Floor) check_format(f, ties, whole);
      if (f.options.rule == ScaleRule::Amax) {
        // Quotients at the codebook's values and midpoints times the block scales, and an ulp around them.
        const double max_scale = f.layout.scale->max_finite();
        const auto xf = make_float_scale_input(46, 20, 96, true, f.element.max_finite(), max_scale, *f.layout.scale);
        check_format(f, xf, {20, 96});
      }
    }
  }
}

TEST_CASE("block kernels: N:M sparsity before quantization", "[kernels][block]") {
  const auto x = make_input(48, kShape[0], kShape[1]);
  std::size_t n = 0;
  for (const char* name : {"e4m3:e8m0_t32n2m4", "e2m1:e8m0_t32n2m4", "int8:e8m0_t32n1m3", "e2m1:e4m3_float32_t16n2m4",
                           "nf4:e8m0_t32n3m8"}) {
    for (Rounding r : {Rounding::NearestEven, Rounding::Stochastic, Rounding::TowardZero}) {
      BlockFormat f = parse(name);
      f.options.element.rounding = r;
      f.options.seed = 80 + n;
      ++n;
      check_format(f, x, kShape);
      const auto bits = to_16bit(x, "bfloat16");
      check_format(f, BlockInput::bf16(bits), kShape);
    }
  }
  // A peer profile's arithmetic on a pruned tensor.
  BlockFormat f = parse("e4m3:e8m0_t32n2m4");
  f.options.input = InputPrecision::Float32;
  f.options.specials = SpecialsPolicy::IgnoreNan;
  check_format(f, x, kShape);
}

TEST_CASE("block kernels: float block scales wider than 8 bits or with infinities", "[kernels][block]") {
  const auto x = make_input(50, kShape[0], kShape[1]);
  const auto bf16 = to_16bit(x, "bfloat16");
  const std::vector<std::int64_t> shape = {20, 96};
  std::size_t n = 0;
  for (const char* name : {"e4m3:float32_t128", "e4m3:bf16_t32", "int8:float32_t32", "int8:float16_t64",
                           "nf4:float32_t64", "e2m1:e5m2_t16", "int4:float16_t128", "e5m2:e5m2_t32",
                           "e2m1:bf16_float32_t16", "int8:float32_float32_t32", "e3m4:float32_t32",
                           "mxsf_element:float16_t32"}) {
    const BlockFormat base = parse(name);
    INFO(name << ": " << BlockKernel::unsupported_reason(base));
    REQUIRE(BlockKernel::supports(base));
    const bool codebook = base.element.kind() == FormatKind::Codebook;
    const auto xf = make_float_scale_input(51 + n, shape[0], shape[1], n % 2 == 0, base.element.max_finite(),
                                           base.layout.scale->max_finite(), *base.layout.scale);
    for (int variant = 0; variant < 6; ++variant) {
      // The options rotate with the counter: every rounding mode, element and scale overflow policy, NaN/Inf
      // policy, zero-block rule and both float rules meet each format.
      BlockFormat f = base;
      QuantOptions& o = f.options;
      o.element.rounding = kRoundings[n % kRoundings.size()];
      if (!codebook) o.element.overflow = kOverflows[(n / 2) % kOverflows.size()];
      o.scale.overflow = kOverflows[(n / 3) % kOverflows.size()];
      o.specials = std::vector<SpecialsPolicy>{SpecialsPolicy::BlockNan, SpecialsPolicy::Element,
                                               SpecialsPolicy::BlockNanAny}[(n / 5) % 3];
      o.zero_block = n % 2 ? ZeroBlock::One : ZeroBlock::Smallest;
      o.min_block_scale = n % 7 == 3 ? 0.015625 : 0.0;
      if (!codebook && variant % 2 == 1) o.rule = ScaleRule::FourOverSix;
      o.seed = 500 + n;
      ++n;
      if (!reference_accepts(f)) {
        CHECK_FALSE(BlockKernel::supports(f));
        continue;
      }
      check_format(f, x, kShape);
      check_format(f, xf, shape);
      if (variant == 0) check_format(f, BlockInput::bf16(bf16), kShape);
    }
  }
}

TEST_CASE("block kernels: power-of-two scales stored in wide float formats", "[kernels][block]") {
  const auto x = make_input(60, kShape[0], kShape[1]);
  std::size_t n = 0;
  for (const char* name : {"e4m3:float32_t32", "mxint8:bf16_t32", "e2m1:float16_t32", "e5m2:float32_t16"}) {
    for (ScaleRule rule : kRules) {
      BlockFormat f = parse(name);
      f.options.rule = rule;
      f.options.element.rounding = kRoundings[n % kRoundings.size()];
      f.options.input = n % 3 == 2 && f.layout.tiles[0].subtile == 0 ? InputPrecision::Float32 : InputPrecision::Exact;
      f.options.seed = 600 + n;
      ++n;
      if (!reference_accepts(f)) continue;
      INFO(name << ": " << BlockKernel::unsupported_reason(f));
      REQUIRE(BlockKernel::supports(f));
      check_format(f, x, kShape);
    }
  }
}

/// A tensor of two blocks of 32 in a two-level format with tensor scale maximum 1, whose tensor scale is g and
/// whose second block has scale s: block 0 holds the tensor amax T (g = the rounding of T / max), block 1 its
/// amax a (s = the rounding of a / (max g)) and elements +-xw and their float32 neighbours. None when no float32
/// amax near max s g rounds to s (float32 amaxes and scales have the same precision).
std::optional<std::vector<float>> window_tensor(const BlockFormat& f, double s, double g, float xw) {
  const double emax = f.element.max_finite();
  // Float32 neighbours of max g and max s g that round to g and s.
  auto find = [](double start, double want, const std::function<double(float)>& result) {
    auto v = static_cast<float>(start);
    for (int i = 0; i < 8 && result(v) != want; ++i)
      v = std::nextafter(v, result(v) < want ? std::numeric_limits<float>::infinity() : 0.0F);
    return result(v) == want ? std::optional<float>(v) : std::nullopt;
  };
  const auto T = find(emax * g, g, [&](float t) { return choose_tensor_scale(f, t)->value; });
  auto so = resolve_options(*f.layout.scale, f.options.scale);
  REQUIRE(so.ok());
  const auto a = find(emax * s * g, s,
                      [&](float v) { return f.layout.scale->decode(float_block_scale_code(f, *so, v, emax, g)); });
  if (!T || !a) return std::nullopt;
  std::vector<float> v(64);
  v[0] = *T;
  v[32] = *a;
  for (std::size_t i = 33; i < 64; ++i) {
    float e = xw;
    if (i % 4 == 1) e = std::nextafter(xw, 0.0F);
    if (i % 4 == 2) e = std::nextafter(xw, std::numeric_limits<float>::infinity());
    v[i] = i % 2 ? e : -e;
  }
  for (std::size_t i = 1; i < 32; ++i) v[i] = static_cast<float>(i) * *T / 64;
  return v;
}

TEST_CASE("block kernels: element quotients inside the reference's adjustment window", "[kernels][block]") {
  // B * S * G = 2^m + sign: factorizations of 2^m +- 1 into an odd numerator B of an int8 midpoint (B / 2) or
  // value and two factors of at most 24 bits.
  struct Case {
    int m, sign;
    double B, S, G;
    int k;  ///< -1: the midpoint B / 2; 0: the value B
  };
  const Case cases[] = {{52, -1, 159, 2143835, 13212083, -1},
                        {54, -1, 189, 14971449, 6366403, -1},
                        {54, 1, 109, 16005665, 10325701, -1},
                        {54, 1, 109, 16005665, 10325701, 0}};
  std::size_t n = 0;
  for (const Case& c : cases) {
    for (Rounding r : kRoundings) {
      BlockFormat f = parse("int8:float32_float32_t32");
      f.options.tensor_scale_max = 1;
      f.options.element.rounding = r;
      f.options.seed = 700 + n++;
      // s = S 2^-24, g = G 2^-24, x = 2^(m - 48 + k): x / (s g) = B 2^k / (1 + sign 2^-m), within 2^-51
      // relative of the int8 value or midpoint B 2^k, on the side opposite to sign.
      const auto window = window_tensor(f, std::ldexp(c.S, -24), std::ldexp(c.G, -24),
                                        static_cast<float>(std::ldexp(1.0, c.m - 48 + c.k)));
      REQUIRE(window.has_value());
      const std::vector<float>& x = *window;
      const std::int64_t product =
          static_cast<std::int64_t>(c.B) * static_cast<std::int64_t>(c.S) * static_cast<std::int64_t>(c.G);
      REQUIRE(product == (std::int64_t{1} << c.m) + c.sign);
      // The case reaches the window: the double quotient lies within 4 ulp of B * 2^k.
      const double q = std::ldexp(1.0, c.m - 48 + c.k) / (std::ldexp(c.S, -24) * std::ldexp(c.G, -24));
      REQUIRE(std::fabs(q - std::ldexp(c.B, c.k)) <= 4 * std::ldexp(std::numeric_limits<double>::epsilon(), 6));
      auto qt = quantize(f, std::vector<double>(x.begin(), x.end()), {2, 32});
      REQUIRE(qt.ok());
      REQUIRE(qt->scale_values[1] == std::ldexp(c.S, -24));
      REQUIRE(qt->tensor_scale == std::ldexp(c.G, -24));
      check_format(f, x, {2, 32});
    }
  }
}

TEST_CASE("block kernels: unsigned integer elements", "[kernels][block]") {
  // Negative inputs take the format's code for them (0, or NaN under overflow nan where there is one).
  const auto x = make_input(65, kShape[0], kShape[1]);
  std::size_t n = 0;
  for (const char* name : {"uint8:e8m0_t32", "uint4:e8m0_t16", "uint8:e4m3_t32", "uint4:float32_t64",
                           "uint8:bf16_t32"}) {
    for (int variant = 0; variant < 6; ++variant) {
      BlockFormat f = parse(name);
      QuantOptions& o = f.options;
      o.element.rounding = kRoundings[n % kRoundings.size()];
      o.specials = variant % 3 == 1 ? SpecialsPolicy::Element : SpecialsPolicy::BlockNan;
      if (o.rule != ScaleRule::Amax) {
        o.rule = kRules[n % kRules.size()];
        if (variant % 3 == 2) o.input = InputPrecision::Float32;
      } else if (variant % 2 == 1) {
        o.rule = ScaleRule::FourOverSix;
      }
      o.seed = 800 + n;
      ++n;
      if (!reference_accepts(f)) continue;
      INFO(name << ": " << BlockKernel::unsupported_reason(f));
      REQUIRE(BlockKernel::supports(f));
      check_format(f, x, kShape);
    }
  }
}

TEST_CASE("block kernels: float block scales under the float32 input rounding", "[kernels][block]") {
  // InputPrecision::Float32 without the NVFP4 arithmetic: elements cast from fl32(x / (s g)), with the options
  // on float32 scaled values (add-half rounding, zero sign).
  const auto x = make_input(70, kShape[0], kShape[1]);
  const std::vector<std::int64_t> shape = {20, 96};
  std::size_t n = 0;
  for (const char* name : {"nvfp4", "e4m3:float32_t128", "int8:e4m3_float32_t32", "e2m1:e4m3_t16",
                           "mxsf_element:bf16_t32", "e5m2:e5m2_t32"}) {
    const BlockFormat base = parse(name);
    const auto xf = make_float_scale_input(71 + n, shape[0], shape[1], n % 2 == 0, base.element.max_finite(),
                                           base.layout.scale->max_finite(), *base.layout.scale);
    for (int variant = 0; variant < 6; ++variant) {
      BlockFormat f = base;
      QuantOptions& o = f.options;
      o.input = InputPrecision::Float32;
      o.element.rounding = kRoundings[n % kRoundings.size()];
      if (variant % 3 == 1) {
        o.nearest_arith = NearestArith::Float32AddHalf;
        o.element.rounding = n % 2 ? Rounding::NearestAway : Rounding::NearestEven;
      }
      o.zero_sign = std::vector<ZeroSign>{ZeroSign::Keep, ZeroSign::MinusZeroPlus, ZeroSign::ZeroMinus}[(n / 2) % 3];
      o.specials = std::vector<SpecialsPolicy>{SpecialsPolicy::BlockNan, SpecialsPolicy::Element,
                                               SpecialsPolicy::BlockNanAny}[(n / 5) % 3];
      o.scale.overflow = n % 4 == 3 ? Overflow::Inf : Overflow::Default;
      if (variant % 2 == 1) o.rule = ScaleRule::FourOverSix;
      o.seed = 900 + n;
      ++n;
      if (!reference_accepts(f)) continue;
      INFO(name << ": " << BlockKernel::unsupported_reason(f));
      REQUIRE(BlockKernel::supports(f));
      check_format(f, x, kShape);
      check_format(f, xf, shape);
    }
  }
}

TEST_CASE("block kernels: float32 input rounding of quotients at float32 midpoints", "[kernels][block]") {
  // int8:float32_float32_t32 under InputPrecision::Float32, s = S 2^-24, g = G 2^-24 and elements
  // x = X 2^(1 + mu), where X 2^49 = M S G - delta: x / (s g) = (M - delta / (S G)) 2^mu lies within 2^-45 of
  // a float32 ulp from the float32 midpoint M 2^mu = b + t ulp(b) / 2 next to an int8 rounding boundary b = b2 / 2.
  // The exact quotient rounds to b or to its float32 neighbour by the sign of delta, and the int8 casts of the two
  // differ; the double quotient is the midpoint itself, where rounding it to float32 picks the even neighbour.
  // The constants come from factoring delta M^-1 mod 2^49 into two 24-bit integers.
  struct Case {
    int b2, t, delta;
    std::uint64_t S, G, X;
  };
  const Case cases[] = {{11, 1, -3, 6503969, 14200413, 3784707},    {15, -1, 1, 9922067, 13741029, 7618558},
                        {31, -1, 3, 15298127, 13583859, 11999226},  {31, 1, -3, 13329033, 15590613, 11999238},
                        {33, 1, -3, 15592861, 14613985, 7003394},   {61, -1, 1, 8590849, 11998719, 5855998},
                        {71, -1, 3, 9633133, 8995537, 2864990},     {77, -1, -3, 11565397, 8336375, 3456994},
                        {81, 1, 3, 13611919, 16654925, 8551006},    {83, -1, 1, 14022941, 6385355, 3460767},
                        {117, -1, 1, 16137187, 11476533, 10090078}, {121, -1, 1, 16623961, 7205143, 6748894}};
  const Format* f32 = find_catalogue_format("float32");
  REQUIRE(f32 != nullptr);
  CastOptions rne_inf;
  rne_inf.overflow = Overflow::Inf;
  std::size_t n = 0, double_rounding = 0, reached = 0;
  for (const Case& c : cases) {
    const double b = c.b2 / 2.0;
    const int eb = floor_log2(b);
    const auto M = static_cast<std::uint64_t>(static_cast<std::int64_t>(std::ldexp(b, 24 - eb)) + c.t);
    __extension__ typedef unsigned __int128 u128;  // 73-bit products
    REQUIRE(static_cast<u128>(M) * c.S * c.G - static_cast<u128>(static_cast<std::int64_t>(c.delta)) ==
            static_cast<u128>(c.X) << 49);
    const double s = std::ldexp(static_cast<double>(c.S), -24);
    const double g = std::ldexp(static_cast<double>(c.G), -24);
    const auto xw = static_cast<float>(std::ldexp(static_cast<double>(c.X), 1 + eb - 24));
    // The reference's float32 quotient against the double quotient rounded to float32.
    const auto exact = static_cast<float>(f32->decode(cast_quotient(*f32, xw, s * g, rne_inf).code));
    if (exact != static_cast<float>(static_cast<double>(xw) / (s * g))) ++double_rounding;
    for (Rounding r : {Rounding::NearestEven, Rounding::NearestAway, Rounding::TowardZero}) {
      BlockFormat f = parse("int8:float32_float32_t32");
      f.options.tensor_scale_max = 1;
      f.options.input = InputPrecision::Float32;
      f.options.element.rounding = r;
      f.options.zero_sign = n++ % 2 ? ZeroSign::ZeroMinus : ZeroSign::Keep;
      // The product s g is what counts: the factors are swapped or moved by powers of two until a float32
      // block amax gives the scale.
      std::optional<std::vector<float>> x;
      for (int k = 0; k < 8 && !x; ++k) {
        const double sk = std::ldexp(k % 2 ? g : s, k / 2);
        x = window_tensor(f, sk, s * g / sk, xw);
      }
      if (!x) continue;
      ++reached;
      check_format(f, *x, {2, 32});
    }
  }
  CHECK(reached >= 24);
  CHECK(double_rounding >= 4);  // the cases reach inputs where rounding the double quotient is wrong
}

TEST_CASE("block kernels: element formats of 9 to 16 bits", "[kernels][block]") {
  // Codes of more than 8 bits: bit-packed across byte boundaries in both orders, both integer encodings.
  const auto x = make_input(75, kShape[0], kShape[1]);
  std::size_t n = 0;
  for (const char* name : {"fp16:e8m0_t32", "bf16:e8m0_t16", "int12:e8m0_t32", "e5m3:e8m0_t32", "fp16:float32_t64",
                           "bf16:e4m3_float32_t16", "int16:bf16_t32", "e3m6:e8m0_t32s2"}) {
    for (int variant = 0; variant < 4; ++variant) {
      BlockFormat f = parse(name);
      QuantOptions& o = f.options;
      o.element.rounding = kRoundings[n % kRoundings.size()];
      o.nibble_order = variant % 2 ? NibbleOrder::HighFirst : NibbleOrder::LowFirst;
      o.int_encoding = variant / 2 ? IntEncoding::SignMagnitude : IntEncoding::TwosComplement;
      o.specials = variant == 3 ? SpecialsPolicy::Element : SpecialsPolicy::BlockNan;
      if (o.rule != ScaleRule::Amax) o.rule = kRules[n % kRules.size()];
      if (variant == 2 && f.layout.tiles[0].subtile == 0) o.input = InputPrecision::Float32;
      o.seed = 950 + n;
      ++n;
      if (!reference_accepts(f)) continue;
      INFO(name << ": " << BlockKernel::unsupported_reason(f));
      REQUIRE(BlockKernel::supports(f));
      check_format(f, x, kShape);
      check_format(f, make_input(76, 5, 7), {5, 7});
    }
  }
}

TEST_CASE("block kernels: float block scales under every NaN/Inf policy and zero-sign rule", "[kernels][block]") {
  // ignore-nan and tensor-nan (a NaN anywhere: every block NaN), the zero-sign rules on exact quotients, rule
  // 4over6; codebook elements too.
  const auto x = make_input(80, kShape[0], kShape[1]);
  const auto xf = finite_only(x);
  std::size_t n = 0;
  for (const char* name : {"nvfp4", "e4m3:float32_t128", "int8:bf16_t32", "e5m2:e5m2_t32", "fp16:e4m3_t16",
                           "e2m1_codebook:e4m3_float32_t16", "nf4:float32_t64", "e2m1_codebook:e8m0_t32"}) {
    for (SpecialsPolicy sp : {SpecialsPolicy::IgnoreNan, SpecialsPolicy::TensorNan, SpecialsPolicy::BlockNan}) {
      for (ZeroSign zs : {ZeroSign::Keep, ZeroSign::MinusZeroPlus, ZeroSign::ZeroMinus}) {
        BlockFormat f = parse(name);
        QuantOptions& o = f.options;
        o.specials = sp;
        o.zero_sign = zs;
        o.element.rounding = kRoundings[n % kRoundings.size()];
        if (n % 4 == 3) o.rule = ScaleRule::FourOverSix;
        const bool codebook = f.element.kind() == FormatKind::Codebook;
        if (n % 5 == 4 && !codebook) o.input = InputPrecision::Float32;
        o.seed = 990 + n;
        ++n;
        if (!reference_accepts(f)) continue;
        INFO(name << ": " << BlockKernel::unsupported_reason(f));
        REQUIRE(BlockKernel::supports(f));
        check_format(f, x, kShape);
        if (sp == SpecialsPolicy::TensorNan) check_format(f, xf, kShape);  // not every block NaN
      }
    }
  }
}

TEST_CASE("block kernels: codebooks under the NVFP4 arithmetic and subtiles", "[kernels][block]") {
  // The power-of-two peers' options on codebooks: "the peers' arithmetic options one by one and combined".
  const auto x = make_input(85, kShape[0], kShape[1]);
  // The NVFP4 peers' float32 arithmetic on a codebook (Transformer Engine's 4over6 metrics excepted).
  for (Nvfp4Arith arith : {Nvfp4Arith::Te, Nvfp4Arith::ModelOpt}) {
    BlockFormat f = parse("nf4:e4m3_float32_t16");
    f.options.nvfp4_arith = arith;
    f.options.specials = SpecialsPolicy::IgnoreNan;
    if (!reference_accepts(f)) continue;
    INFO(BlockKernel::unsupported_reason(f));
    REQUIRE(BlockKernel::supports(f));
    check_format(f, x, kShape);
  }
  std::size_t n = 0;
  for (const char* name : {"e2m1_codebook:e8m0_t32s2", "nf4:e8m0_t16s4"}) {
    for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Ceil, ScaleRule::RCeil}) {
      BlockFormat f = parse(name);
      f.options.rule = rule;
      f.options.element.rounding = kRoundings[n % kRoundings.size()];
      f.options.input = n % 2 ? InputPrecision::Float32 : InputPrecision::Exact;
      f.options.seed = 1000 + n;
      ++n;
      INFO(name << ": " << BlockKernel::unsupported_reason(f));
      REQUIRE(BlockKernel::supports(f));
      check_format(f, x, kShape);
    }
  }
  // The float32 input rounding and add-half rounding with float scales.
  for (Rounding r : {Rounding::NearestEven, Rounding::NearestAway, Rounding::Stochastic}) {
    BlockFormat f = parse("nf4:e4m3_float32_t16");
    f.options.input = InputPrecision::Float32;
    f.options.element.rounding = r;
    if (r != Rounding::Stochastic) f.options.nearest_arith = NearestArith::Float32AddHalf;
    f.options.seed = 1100;
    if (!reference_accepts(f)) continue;
    INFO(BlockKernel::unsupported_reason(f));
    REQUIRE(BlockKernel::supports(f));
    check_format(f, x, kShape);
  }
}

TEST_CASE("block kernels: unsupported options are reported, never computed", "[kernels][block]") {
  BlockFormat f46 = parse("fp32:e8m0_t32");  // elements of more than 16 bits
  CHECK_FALSE(BlockKernel::unsupported_reason(f46).empty());
  CHECK_FALSE(BlockKernel::unsupported_reason(parse("fp32:e8m0_t32")).empty());  // elements of more than 16 bits
  CHECK_FALSE(BlockKernel::unsupported_reason(parse("mxsf@8x8")).empty());  // 2-D tiles
  BlockFormat f = parse("nvfp4");
  f.options.amax_log2 = AmaxLog2::Field;  // a power-of-two reading under rule amax
  CHECK_FALSE(BlockKernel::supports(f));
  CHECK_FALSE(BlockKernel::make(f).ok());
  f = parse("mxfp4");
  f.options.rule = ScaleRule::MidMax;
  f.options.amax_log2 = AmaxLog2::Field;  // the reference rejects this combination
  CHECK_FALSE(BlockKernel::supports(f));
  CHECK(BlockKernel::supports(parse("mxfp8_e4m3")));
  CHECK(BlockKernel::supports(parse("mxint8:e8m0_t16s2")));
}

TEST_CASE("block kernels: every format x rounding x overflow x rule", "[kernels][block][slow]") {
  const auto x = make_input(21, kShape[0], kShape[1]);
  for (const auto& name : kFormats)
    for (Rounding r : kRoundings)
      for (Overflow ov : kOverflows)
        for (ScaleRule rule : kRules) {
          BlockFormat f = parse(name);
          f.options.element.rounding = r;
          f.options.element.overflow = ov;
          f.options.rule = rule;
          f.options.seed = 99;
          if (!reference_accepts(f)) continue;
          check_format(f, x, kShape);
        }
}
