// Checks the SIMD decode kernels against the scalar Format::decode (formats/format.cpp) rounded to float32,
// bit for bit, for every code of every format, on every SIMD target of this CPU.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_inputs.hpp"
#include "mxlab/kernels/cast_kernel.hpp"
#include "mxlab/kernels/simd_target.hpp"

using namespace mxlab;
using namespace mxlab::test;

namespace {

/// float32 bits of the reference value of a code (exact: the supported formats' values are float32s).
std::uint32_t reference_bits(const Format& f, std::uint32_t code) {
  return std::bit_cast<std::uint32_t>(static_cast<float>(f.decode(code)));
}

}  // namespace

TEST_CASE("decode support follows float32's range", "[kernels]") {
  for (const char* name : {"float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "bfloat16", "float16", "float4_e2m1fn",
                           "mxint8", "int8", "uint4", "nf4", "float8_mxsf", "e2m1_codebook"}) {
    INFO(name);
    CHECK(DecodeKernel::supports(*find_catalogue_format(name)));
  }
  for (const char* text : {"float32", "e8m7b200", "e11m4ieee", "codebook:-0.1,0.1"}) {
    auto f = parse_format(text);
    REQUIRE(f.ok());
    INFO(text);
    CHECK_FALSE(DecodeKernel::supports(*f));
    const auto k = DecodeKernel::make(*f);
    REQUIRE_FALSE(k.ok());
    CHECK(k.error().message.find(f->name()) != std::string::npos);
  }
  const auto k = DecodeKernel::make(*find_catalogue_format("e4m3"));
  REQUIRE(k.ok());
  std::vector<std::uint8_t> codes(10, 0x38);
  std::vector<float> short_out(9);
  CHECK_FALSE(k->decode(codes, short_out).ok());
}

TEST_CASE("decode of every code matches Format::decode on every target", "[kernels]") {
  const auto formats = formats_to_check();
  for (const Format& f : formats) {
    if (!DecodeKernel::supports(f)) continue;
    const auto kernel = DecodeKernel::make(f);
    REQUIRE(kernel.ok());
    const auto n = static_cast<std::uint32_t>(f.code_count());
    // Every code, then every code again with junk above the format's width (which decode ignores).
    std::vector<std::uint16_t> codes16;
    std::vector<std::uint32_t> expect;
    for (std::uint32_t c = 0; c < n; ++c) {
      codes16.push_back(static_cast<std::uint16_t>(c));
      expect.push_back(reference_bits(f, c));
    }
    if (f.bits() < 16) {
      for (std::uint32_t c = 0; c < n; ++c) {
        codes16.push_back(static_cast<std::uint16_t>(c | (0xB6D5U << f.bits())));
        expect.push_back(reference_bits(f, c));
      }
    }
    std::vector<std::uint8_t> codes8;
    if (f.bits() <= 8)
      for (std::uint16_t c : codes16) codes8.push_back(static_cast<std::uint8_t>(c));
    for (const SimdTarget& t : simd_targets()) {
      const ScopedSimdTarget forced(t);
      std::vector<float> out(codes16.size());
      REQUIRE(kernel->decode(codes16, out).ok());
      std::size_t bad = 0;
      std::uint32_t first_bad = 0;
      for (std::size_t i = 0; i < out.size(); ++i) {
        if (std::bit_cast<std::uint32_t>(out[i]) == expect[i]) continue;
        if (bad++ == 0) first_bad = codes16[i];
      }
      if (!codes8.empty()) {
        std::vector<float> out8(codes8.size());
        REQUIRE(kernel->decode(codes8, out8).ok());
        for (std::size_t i = 0; i < out8.size(); ++i) {
          if (std::bit_cast<std::uint32_t>(out8[i]) == expect[i]) continue;
          if (bad++ == 0) first_bad = codes8[i];
        }
      }
      INFO(f.name() << " on " << t.name << ": first wrong code " << first_bad);
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("decode with threads equals decode without", "[kernels]") {
  const Format& f = *find_catalogue_format("bfloat16");
  const auto kernel = DecodeKernel::make(f);
  REQUIRE(kernel.ok());
  std::vector<std::uint16_t> codes(1 << 20);
  Rng rng(4);
  for (auto& c : codes) c = static_cast<std::uint16_t>(rng.next_u32());
  std::vector<float> one(codes.size());
  std::vector<float> many(codes.size());
  REQUIRE(kernel->decode(codes, one).ok());
  KernelRun run;
  run.threads = 3;
  REQUIRE(kernel->decode(codes, many, run).ok());
  CHECK(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)) == 0);
}
