// Checks block quantization against hand-worked OCP MX v1.0 section 6.3 examples, seed 003 (MXSF) and
// seed 004 (NVFP4 packing and scale layout), computed from the definitions.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "mxlab/core/random.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/quantize/analysis.hpp"
#include "mxlab/quantize/pack.hpp"
#include "mxlab/quantize/quantize.hpp"

using namespace mxlab;

namespace {
BlockFormat bf(const char* spec) {
  auto f = parse_block_format(spec);
  REQUIRE(f.ok());
  return *f;
}
QuantizedTensor qz(const BlockFormat& f, const std::vector<double>& x, std::vector<std::int64_t> shape = {}) {
  if (shape.empty()) shape = {static_cast<std::int64_t>(x.size())};
  auto q = quantize(f, x, shape);
  REQUIRE(q.ok());
  return *q;
}
}  // namespace

TEST_CASE("MXFP8 E4M3: shared exponent floor(log2 amax) - 8, elements RNE, saturating", "[quantize]") {
  const auto f = bf("mxfp8_e4m3");
  const auto q = qz(f, {300.0, 1.0, -0.3, 500.0});
  REQUIRE(q.scale_codes.size() == 1);
  CHECK(q.shared_exponents[0] == 0);   // floor(log2 500) = 8, minus emax 8
  CHECK(q.scale_codes[0] == 127);      // E8M0 2^0
  CHECK(q.values[0] == 288.0);         // 300 between 288 and 320 at step 32
  CHECK(q.values[1] == 1.0);
  CHECK(q.values[2] == -0.3125);       // -0.3 at step 2^-5 * ... : 0.3 = 1.2 * 2^-2, step 2^-5 -> 0.3125
  CHECK(q.values[3] == 448.0);         // clamped to max (OCP: saturation)
  CHECK((q.flags[3] & QuantizedTensor::kOverflow) != 0);
}

TEST_CASE("MXFP4 and MXINT8 scales follow the element's emax", "[quantize]") {
  const auto q4 = qz(bf("mxfp4"), {1.0, 0.3, -0.1, 0.0});
  CHECK(q4.shared_exponents[0] == -2);  // floor(log2 1) - 2
  CHECK(q4.values[0] == 1.0);           // 4 * 2^-2
  CHECK(q4.values[1] == 0.25);          // 1.2 -> 1.0 (E2M1) * 2^-2
  CHECK(q4.values[2] == -0.125);        // 0.4 -> 0.5 * 2^-2
  const auto q8 = qz(bf("mxint8"), {1.5, 0.01, -1.999});
  CHECK(q8.shared_exponents[0] == 0);
  CHECK(q8.values[0] == 1.5);
  CHECK(q8.values[1] == 1.0 / 64);       // 0.64 steps -> 1 step
  CHECK(q8.values[2] == -127.0 / 64);    // -127.936 steps saturates at -127 (symmetric)
}

TEST_CASE("scale rules differ exactly where their definitions say", "[quantize]") {
  const Format* e4m3 = find_catalogue_format("e4m3");
  QuantOptions o;
  o.element.overflow = Overflow::Saturate;
  auto x_of = [&](ScaleRule r, double amax) {
    o.rule = r;
    return scale_exponent(*e4m3, amax, o);
  };
  CHECK(x_of(ScaleRule::Floor, 500) == 0);
  CHECK(x_of(ScaleRule::Ceil, 500) == 1);
  CHECK(x_of(ScaleRule::RCeil, 500) == 1);
  CHECK(x_of(ScaleRule::Even, 500) == 1);   // 500 -> 512 at 3 mantissa bits
  CHECK(x_of(ScaleRule::MidMax, 500) == 1);
  CHECK(x_of(ScaleRule::Floor, 460) == 0);
  CHECK(x_of(ScaleRule::MidMax, 460) == 0);  // 460 rounds to 448: no overflow
  CHECK(x_of(ScaleRule::RCeil, 460) == 1);   // 460 > 448
  CHECK(x_of(ScaleRule::RCeil, 448) == 0);
  CHECK(x_of(ScaleRule::Ceil, 256) == 0);    // exact power of two
  CHECK(x_of(ScaleRule::MidMax, 464) == 0);  // the tie rounds to even 448
  CHECK(x_of(ScaleRule::MidMax, 464.5) == 1);
}

TEST_CASE("all-zero block, NaN block and Inf handling", "[quantize]") {
  const auto z = qz(bf("mxfp8_e4m3"), {0.0, -0.0, 0.0});
  CHECK(z.scale_codes[0] == 0);  // clamp of floor(log2 0): the smallest E8M0 scale 2^-127
  CHECK(z.values[0] == 0.0);
  CHECK(std::signbit(z.values[1]));
  auto one = bf("mxfp8_e4m3");
  one.options.zero_block = ZeroBlock::One;
  CHECK(qz(one, {0.0, 0.0}).scale_codes[0] == 127);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const auto n = qz(bf("mxfp8_e4m3"), {1.0, nan, 2.0});
  CHECK(n.scale_codes[0] == 0xFF);
  CHECK(std::isnan(n.values[0]));
  CHECK(std::isnan(n.values[2]));
  const auto i4 = qz(bf("mxfp8_e4m3"), {1.0, inf});  // E4M3 has no Inf: the block becomes NaN
  CHECK(i4.scale_codes[0] == 0xFF);
  const auto i5 = qz(bf("mxfp8_e5m2"), {1.0, -inf, 3.0});  // E5M2 keeps Inf; scale from finite values
  CHECK(i5.shared_exponents[0] == 1 - 15);
  CHECK(i5.values[1] == -inf);
  CHECK(i5.values[2] == 3.0);
  auto elementwise = bf("mxfp8_e4m3");
  elementwise.options.specials = SpecialsPolicy::Element;
  const auto e = qz(elementwise, {1.0, nan, 2.0});
  CHECK(e.scale_codes[0] != 0xFF);
  CHECK(e.values[0] == 1.0);
  CHECK(std::isnan(e.values[1]));
}

TEST_CASE("shapes that do not divide into tiles keep partial edge blocks", "[quantize]") {
  std::vector<double> x(3 * 40);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(i % 40) + 1;  // row amax 40
  const auto q = qz(bf("mxfp8_e4m3"), x, {3, 40});
  REQUIRE(q.block_grid == std::vector<std::int64_t>{3, 2});
  CHECK(q.block_amax[0] == 32);
  CHECK(q.block_amax[1] == 40);  // elements 33..40: a block of 8
  CHECK(q.shared_exponents[1] == floor_log2(40.0) - 8);
}

TEST_CASE("2-D tiles take the amax over the tile", "[quantize]") {
  std::vector<double> x(16 * 16, 0.5);
  x[9 * 16 + 3] = 100;  // tile (1, 0)
  const auto q = qz(bf("mxfp8_e4m3@8x8"), x, {16, 16});
  REQUIRE(q.block_grid == std::vector<std::int64_t>{2, 2});
  CHECK(q.block_amax[2] == 100);
  CHECK(q.block_amax[0] == 0.5);
  CHECK(q.shared_exponents[2] == 6 - 8);
}

TEST_CASE("NVFP4: FP32 tensor scale over UE4M3 block scales", "[quantize]") {
  std::vector<double> x(32, 0.0);
  for (int i = 0; i < 16; ++i) x[static_cast<std::size_t>(i)] = 2688.0 * (i + 1) / 16;  // block 0 amax 2688
  x[16] = 6.0;                                                                           // block 1 amax 6
  const auto q = qz(bf("nvfp4"), x);
  CHECK(q.tensor_scale == 1.0);       // 2688 / (448 * 6)
  CHECK(q.scale_values[0] == 448.0);  // 2688 / 6
  CHECK(q.scale_values[1] == 1.0);
  CHECK(q.values[15] == 2688.0);
  CHECK(q.values[16] == 6.0);
  CHECK(q.values[0] == 224.0);  // 168 / 448 = 0.375 lies between E2M1 0 and 0.5, nearer 0.5
}

TEST_CASE("NVFP4 scale rounding uses the exact quotient", "[quantize]") {
  // amax 12: g = RN_f32(12 / 2688) is not 12/2688; the block scale 12 / (6 g) rounds to UE4M3.
  std::vector<double> x(16, 0.0);
  x[0] = 12.0;
  x[1] = 1.0;
  const auto q = qz(bf("nvfp4"), x);
  const double g = static_cast<double>(static_cast<float>(12.0 / 2688.0));
  CHECK(q.tensor_scale == g);
  CHECK(q.scale_values[0] == 448.0);  // 12 / (6 g) is within 2^-20 of 448: rounds (and saturates) to 448
}

TEST_CASE("4over6: a candidate with an infinite error loses to a finite one", "[quantize]") {
  {
    // amax / 4 overflows E5M2 to Inf under scale overflow inf: that candidate's values are NaN or Inf.
    BlockFormat f = bf("e2m1:e5m2_t16");
    f.options.rule = ScaleRule::FourOverSix;
    f.options.scale.overflow = Overflow::Inf;
    std::vector<double> x(16, 1000.0);
    x[0] = 344064.0;  // 6 * 57344: map-to-6 gives the largest scale, map-to-4 86016, beyond E5M2
    const auto q = qz(f, x);
    CHECK(q.scale_values[0] == 57344.0);
    CHECK(q.values[0] == 344064.0);
  }
  {
    // E3M4 elements (max 15.5, with Inf) under overflow inf: map-to-max rounds the scale 16.43 / 15.5 = 1.06
    // down to 1, and 16.43 overflows to Inf; map-to-2/3 takes scale 1.625 and stays finite.
    BlockFormat f = bf("e3m4:e4m3_t16");
    f.options.element.overflow = Overflow::Inf;
    std::vector<double> x(16, 0.5);
    x[0] = 16.43;
    CHECK(std::isinf(qz(f, x).values[0]));  // rule amax
    f.options.rule = ScaleRule::FourOverSix;
    const auto q = qz(f, x);
    CHECK(q.scale_values[0] == 1.625);
    CHECK(std::isfinite(q.values[0]));
  }
}

TEST_CASE("sign-magnitude integers need a symmetric element", "[quantize][pack]") {
  BlockFormat f = bf("int8:e8m0_t32");  // -128 has no sign-magnitude code
  f.options.int_encoding = IntEncoding::SignMagnitude;
  const std::vector<double> x(32, -1000.0);
  auto q = quantize(f, x, {32});
  REQUIRE_FALSE(q.ok());
  CHECK(q.error().message.find("symmetric") != std::string::npos);
  f = bf("mxint8");  // symmetric: -128 unused
  f.options.int_encoding = IntEncoding::SignMagnitude;
  CHECK(quantize(f, x, {32}).ok());
  f = bf("uint8:e8m0_t32");  // unsigned: the encoding does not apply
  f.options.int_encoding = IntEncoding::SignMagnitude;
  CHECK(quantize(f, x, {32}).ok());
}

TEST_CASE("pack, unpack and dequantize every element code at several scales", "[quantize][pack]") {
  for (const char* spec : {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4", "mxint8", "mxsf",
                           "boost_e2m5", "nvfp4"}) {
    INFO(spec);
    const auto f = bf(spec);
    for (NibbleOrder order : {NibbleOrder::LowFirst, NibbleOrder::HighFirst}) {
      for (IntEncoding enc : {IntEncoding::TwosComplement, IntEncoding::SignMagnitude}) {
        BlockFormat g = f;
        g.options.nibble_order = order;
        g.options.int_encoding = enc;
        QuantizedTensor q;
        const std::uint32_t n = static_cast<std::uint32_t>(g.element.code_count());
        std::vector<std::uint32_t> codes;
        for (std::uint32_t c = 0; c < n; ++c) {
          const CodeClass k = g.element.classify(c);
          if (k != CodeClass::Nan && k != CodeClass::Unused) codes.push_back(c);
        }
        const std::int64_t k = g.block_elements();
        // One block per scale in the range; every block holds every code (padded with code 0).
        const std::vector<double> scales = g.layout.tensor_scale ? std::vector<double>{1, 0.5, 448, 0.001953125}
                                                                 : std::vector<double>{std::ldexp(1.0, -127), 1, 1024,
                                                                                       std::ldexp(1.0, 127)};
        const std::int64_t blocks_per_scale = (static_cast<std::int64_t>(codes.size()) + k - 1) / k;
        const std::int64_t cols = blocks_per_scale * k;
        q.shape = {static_cast<std::int64_t>(scales.size()), cols};
        q.block_grid = {static_cast<std::int64_t>(scales.size()), blocks_per_scale};
        for (double s : scales) {
          for (std::int64_t j = 0; j < cols; ++j)
            q.codes.push_back(j < static_cast<std::int64_t>(codes.size()) ? codes[static_cast<std::size_t>(j)] : 0);
          for (std::int64_t b = 0; b < blocks_per_scale; ++b) {
            q.scale_codes.push_back(cast(*g.layout.scale, s, CastOptions{}).code);
            q.scale_values.push_back(g.layout.scale->decode(q.scale_codes.back()));
          }
        }
        if (g.layout.tensor_scale) {
          q.has_tensor_scale = true;
          q.tensor_scale_code = cast(*g.layout.tensor_scale, 0.75, CastOptions{}).code;
          q.tensor_scale = 0.75;
        }
        const auto p = pack(g, q);
        CHECK(p.elements.size() == (q.codes.size() * static_cast<std::size_t>(g.element.bits()) + 7) / 8);
        auto u = unpack(g, p);
        REQUIRE(u.ok());
        CHECK(u->codes == q.codes);
        CHECK(u->scale_codes == q.scale_codes);
        for (std::size_t i = 0; i < q.codes.size(); ++i) {
          const std::size_t b = i / static_cast<std::size_t>(k);
          const double expect = g.element.decode(q.codes[i]) * q.scale_values[b] * q.tensor_scale;
          if (u->values[i] != expect) {
            FAIL_CHECK("code " << q.codes[i] << " scale " << q.scale_values[b] << ": " << u->values[i]);
            break;
          }
        }
      }
    }
  }
}

TEST_CASE("FP4 nibble order: PyTorch low-first vs seed 004 high-first", "[quantize][pack]") {
  const std::vector<std::uint32_t> codes = {0x1, 0x2, 0xF, 0x0};
  CHECK(pack_codes(codes, 4, NibbleOrder::LowFirst) == std::vector<std::uint8_t>{0x21, 0x0F});
  CHECK(pack_codes(codes, 4, NibbleOrder::HighFirst) == std::vector<std::uint8_t>{0x12, 0xF0});  // (hi << 4) | lo
  const std::vector<std::uint32_t> six = {0x3F, 0x00, 0x2A, 0x15};
  const auto bytes = pack_codes(six, 6, NibbleOrder::LowFirst);
  CHECK(bytes.size() == 3);
  CHECK(unpack_codes(bytes, 4, 6, NibbleOrder::LowFirst) == six);
  CHECK(unpack_codes(pack_codes(six, 6, NibbleOrder::HighFirst), 4, 6, NibbleOrder::HighFirst) == six);
}

TEST_CASE("MXINT sign-magnitude encoding", "[quantize][pack]") {
  CHECK(to_sign_magnitude(0x81, 8) == 0xFF);  // -127
  CHECK(to_sign_magnitude(0xFF, 8) == 0x81);  // -1
  CHECK(to_sign_magnitude(0x7F, 8) == 0x7F);
  for (std::uint32_t c = 0; c < 256; ++c)
    if (c != 0x80) CHECK(from_sign_magnitude(to_sign_magnitude(c, 8), 8) == c);
}

TEST_CASE("NVFP4 scale swizzle equals seed 004's index map", "[quantize][pack]") {
  // Seed 004's vectorised formulation: rows of a 128-row block in the order s + r (s = 0..31, r = 0, 32, 64, 96),
  // block by block, column groups of 4 in between, columns fastest.
  for (auto [h, w] : std::vector<std::pair<std::int64_t, std::int64_t>>{{128, 4}, {256, 8}, {128, 12}, {300, 7}, {64, 4}, {1, 1}}) {
    INFO(h << "x" << w);
    std::vector<std::uint8_t> x(static_cast<std::size_t>(h * w));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::uint8_t>(i * 7 + 3);
    std::vector<std::int64_t> rows_in_block;
    for (std::int64_t s = 0; s < 32; ++s)
      for (std::int64_t r = 0; r < 128; r += 32) rows_in_block.push_back(s + r);
    std::vector<std::uint8_t> expect;
    for (std::int64_t B = 0; B < (h + 127) / 128; ++B)
      for (std::int64_t G = 0; G < (w + 3) / 4; ++G)
        for (std::int64_t rib : rows_in_block)
          for (std::int64_t c = 0; c < 4; ++c) {
            const std::int64_t row = B * 128 + rib, col = G * 4 + c;
            if (row < h && col < w) expect.push_back(x[static_cast<std::size_t>(row * w + col)]);
          }
    CHECK(swizzle_scales_128x4(x, h, w, false) == expect);
    const auto padded = swizzle_scales_128x4(x, h, w, true);
    CHECK(padded.size() == static_cast<std::size_t>(((h + 127) / 128) * 128 * ((w + 3) / 4) * 4));
  }
}

TEST_CASE("MXSF: every code at several shared exponents is exact and re-quantizes to itself", "[quantize][mxsf]") {
  const auto f = bf("mxsf");
  const Format& e = f.element;
  for (int se : {-20, -3, 0, 7, 100}) {
    for (std::uint32_t c = 0; c < 256; ++c) {
      const double v = e.decode(c);
      // A block whose amax is 1.96875 * 2^se (code 0x7F), so the shared exponent is se.
      const std::vector<double> x = {std::ldexp(v, se), std::ldexp(1.96875, se)};
      const auto q = qz(f, x);
      REQUIRE(q.shared_exponents[0] == se);
      const std::uint32_t expect = (v == 0 && std::signbit(v)) ? 0x80 : c;
      CHECK(q.codes[0] == expect);
      CHECK(q.values[0] == std::ldexp(v, se));
    }
    // Gap >= 3 uses the E3M2 reading (exponent field 00), gap <= 2 the E2M5 one.
    const auto q = qz(f, {std::ldexp(1.25, se - 3), std::ldexp(1.25, se - 2), std::ldexp(1.0, se)});
    CHECK(((q.codes[0] >> 5) & 3U) == 0);
    CHECK(((q.codes[1] >> 5) & 3U) == 1);
  }
}

TEST_CASE("N:M sparsity keeps the N largest magnitudes of every M", "[quantize]") {
  auto f = parse_block_format("e4m3:e8m0_t8n2m4");
  REQUIRE(f.ok());
  const auto q = qz(*f, {1.0, -3.0, 2.0, 0.5, 1.0, 1.0, 1.0, 1.0});
  CHECK(q.values == std::vector<double>{0.0, -3.0, 2.0, 0.0, 1.0, 1.0, 0.0, 0.0});
}

TEST_CASE("block format strings", "[quantize][parse]") {
  CHECK(bf("mxfp4@16").block_elements() == 16);
  CHECK(bf("mxsf@8x8").block_elements() == 64);
  CHECK(bf("mxfp8_e4m3").bits_per_element(1024) == 8.25);
  CHECK(bf("mxfp6_e3m2").bits_per_element(1024) == 6.25);
  CHECK(bf("mxfp4").bits_per_element(1024) == 4.25);
  CHECK(bf("nvfp4").bits_per_element(1 << 20) == 4.5 + 32.0 / (1 << 20));
  // What is stored: short final blocks and one-element blocks carry a whole scale each.
  CHECK(bf("mxfp8_e4m3").stored_bits_per_element({1024}) == 8.25);
  CHECK(bf("mxfp8_e4m3").stored_bits_per_element({3, 40}) == 8.0 + 6 * 8.0 / 120);  // rows of 32 + 8
  CHECK(bf("mxfp8_e4m3@1").stored_bits_per_element({10}) == 16.0);
  CHECK(bf("mxfp4").stored_bits_per_element({33}) == 4.0 + 2 * 8.0 / 33);
  CHECK(bf("nvfp4").stored_bits_per_element({4, 24}) == 4.0 + (8 * 8.0 + 32.0) / 96);
  auto tc = parse_block_format("e4m3:float32_t16_t16");
  REQUIRE(tc.ok());
  CHECK(tc->layout.tiles.size() == 2);
  CHECK(tc->options.rule == ScaleRule::Amax);
  auto nv = parse_block_format("e2m1:e4m3_float32_t16");
  REQUIRE(nv.ok());
  CHECK(nv->layout.tensor_scale.has_value());
  for (const char* bad : {"mxfp5", "mxfp4@", "mxfp4@8y8", "e2m1:", "e2m1:t32", "e2m1:e8m0_t32s5", "e2m1:nope_t32",
                          "uint4:float16_int8_t16", "e2m1:e8m0_t32n3m2"}) {
    INFO(bad);
    auto r = parse_block_format(bad);
    CHECK_FALSE(r.ok());
    if (!r.ok()) CHECK_THAT(r.error().message, Catch::Contains("block format '"));
  }
}

TEST_CASE("analysis: exact SSE, underflow, saturation and gap histogram", "[quantize][analysis]") {
  const auto f = bf("mxfp4");
  const std::vector<double> x = {6.0, 0.1, 7.0, 0.0, -1.0, 3.5};
  const auto q = qz(f, x);
  // X = floor(log2 7) - 2 = 0: 0.1 -> 0 (underflow), 7 -> 6 (saturation), 3.5 -> 4 (tie to even).
  const auto a = analyze(f, x, q);
  CHECK(a.total.underflows == 1);
  CHECK(a.total.saturations == 1);
  CHECK(a.total.nonzero_inputs == 5);
  ExactSum expect;  // errors: 0.1 (the double), 1, 0.5
  expect.add_square(0.1);
  expect.add(1.0);
  expect.add(0.25);
  ExactSum diff = a.total.sse;
  diff.subtract(expect);
  CHECK(diff.is_zero());
  CHECK(a.total.max_abs_error == 1.0);
  // S_e = floor(log2 7) = 2: gaps 6 -> 0, 7 -> 0, -1 -> 2, 3.5 -> 1, 0.1 -> 6.
  CHECK(a.gap_histogram == std::map<int, std::int64_t>{{0, 2}, {1, 1}, {2, 1}, {6, 1}});
  CHECK(a.by_gap.at(6).underflows == 1);
}

TEST_CASE("subtiles carry one-bit shared microexponents (MX9-style)", "[quantize]") {
  auto f = parse_block_format("mxint8:e8m0_t16s2");
  REQUIRE(f.ok());
  CHECK(f->bits_per_element(1024) == 9.0);  // 8 + 8/16 + 1/2
  std::vector<double> x(16, 0.0);
  x[0] = 1.9;
  x[1] = 1.0;
  x[2] = 0.305;
  x[3] = 0.2;
  const auto q = qz(*f, x);
  REQUIRE(q.subtile_offsets.size() == 8);
  CHECK(q.shared_exponents[0] == 0);
  CHECK(q.subtile_offsets[0] == 0);
  CHECK(q.subtile_offsets[1] == 1);       // subtile amax 0.305: exponent -2, limited to X - 1
  CHECK(q.values[2] == 39.0 / 128);       // 0.305 / 2^-1 = 0.61 -> 39.04 steps of 2^-6 -> 39
  CHECK(q.values[0] == 122.0 / 64);       // 1.9 * 64 = 121.6 -> 122
  const auto u = unpack(*f, pack(*f, q));
  REQUIRE(u.ok());
  CHECK(u->values == q.values);
  CHECK_FALSE(parse_block_format("e2m1:ue4m3_t16s2").ok());  // offsets need a power-of-two scale
}

TEST_CASE("per-channel scales on any axis and 1-D tiles on another axis", "[quantize]") {
  auto f = parse_block_format("int8:float32_c0");
  REQUIRE(f.ok());
  // 2 x 3: channel 0 amax 3, channel 1 amax 254.
  const auto q = qz(*f, {1.0, -3.0, 2.0, 254.0, 127.0, 0.5}, {2, 3});
  REQUIRE(q.block_grid == std::vector<std::int64_t>{2, 1});
  CHECK(q.scale_values[0] == static_cast<double>(3.0f / 127.0f));  // amax / 127 rounded to float32
  CHECK(q.scale_values[1] == 2.0);
  CHECK(q.values[3] == 254.0);
  CHECK(q.values[5] == 0.0);  // 0.25 steps -> 0 (tie to even)
  auto col = parse_block_format("mxfp8_e4m3@2");
  REQUIRE(col.ok());
  col->layout.axis = 0;
  const auto c = qz(*col, {1.0, 100.0, 2.0, 200.0}, {2, 2});
  REQUIRE(c.block_grid == std::vector<std::int64_t>{1, 2});
  CHECK(c.block_amax[0] == 2.0);
  CHECK(c.block_amax[1] == 200.0);
}
