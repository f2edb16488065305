// Checks .npy I/O against bytes written by hand from the NumPy format spec (numpy.lib.format, NEP 1) and IEEE 754.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include "io_test_support.hpp"
#include "mxlab/core/atomic_file.hpp"
#include "mxlab/io/npy.hpp"

using namespace mxlab;
using mxlab::test::bytes;
using mxlab::test::f16_value;
using mxlab::test::get_bytes;
using mxlab::test::put_bytes;
using mxlab::test::TempDir;

namespace {

// Magic string "\x93NUMPY" followed by major and minor version bytes (format spec, "Format Version 1.0").
std::string magic(int major) { return bytes({0x93, 'N', 'U', 'M', 'P', 'Y', major, 0}); }

// A version 1.0 file: magic, HEADER_LEN (uint16 little-endian), the dict text padded with spaces and a
// final '\n' to `total` bytes of preamble, then the data.
std::string npy_v1(const std::string& dict, std::size_t total, const std::string& data) {
  const std::size_t header_len = total - 10;
  std::string s = magic(1) + bytes({static_cast<int>(header_len & 0xFF), static_cast<int>(header_len >> 8)});
  s += dict;
  s += std::string(total - 1 - s.size(), ' ');
  s += '\n';
  return s + data;
}

std::string le32(std::uint32_t v) {
  return bytes({static_cast<int>(v & 0xFF), static_cast<int>((v >> 8) & 0xFF), static_cast<int>((v >> 16) & 0xFF),
                static_cast<int>(v >> 24)});
}

std::string be32(std::uint32_t v) {
  return bytes({static_cast<int>(v >> 24), static_cast<int>((v >> 16) & 0xFF), static_cast<int>((v >> 8) & 0xFF),
                static_cast<int>(v & 0xFF)});
}

}  // namespace

TEST_CASE("npy header bytes of a tiny float32 file match the spec", "[io][npy]") {
  TempDir dir;
  const std::string path = dir.file("a.npy");
  const std::vector<float> values = {1.0f, -2.0f};
  auto n = write_npy(path, values, {2});
  REQUIRE(n.ok());
  // Dict text is 57 bytes; 6 magic + 2 version + 2 length + 57 + 1 newline = 68, padded with spaces to the
  // next multiple of 64, 128: HEADER_LEN = 118 = 0x76. (NumPy's 20 spare growth spaces for the 1-digit
  // first dimension fall inside the same padding.) Data: 1.0f = 0x3F800000, -2.0f = 0xC0000000, little-endian.
  std::string expected = bytes({0x93, 'N', 'U', 'M', 'P', 'Y', 0x01, 0x00, 0x76, 0x00});
  expected += "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  expected += std::string(60, ' ');
  expected += "\n";
  expected += bytes({0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0xC0});
  CHECK(expected.size() == 136);
  CHECK(get_bytes(path) == expected);
  CHECK(*n == 136);
}

TEST_CASE("npy header bytes for 0-d, 2-d and 64-byte-boundary shapes", "[io][npy]") {
  TempDir dir;
  SECTION("0-d float64: shape (), no growth spaces") {
    const std::string path = dir.file("s.npy");
    const std::vector<double> v = {0.5};
    REQUIRE(write_npy(path, v, std::vector<std::int64_t>{}).ok());
    // 10 + 55 + 1 = 66 -> 128: 62 spaces. 0.5 = 0x3FE0000000000000.
    std::string expected = magic(1) + bytes({0x76, 0x00});
    expected += "{'descr': '<f8', 'fortran_order': False, 'shape': (), }" + std::string(62, ' ') + "\n";
    expected += bytes({0, 0, 0, 0, 0, 0, 0xE0, 0x3F});
    CHECK(get_bytes(path) == expected);
  }
  SECTION("uint8 2x3") {
    const std::string path = dir.file("u.npy");
    const std::vector<std::uint8_t> v = {0, 1, 2, 253, 254, 255};
    REQUIRE(write_npy(path, v, {2, 3}).ok());
    // 10 + 59 + 1 = 70 -> 128: 58 spaces. '|': byte order not applicable to one-byte items.
    std::string expected = magic(1) + bytes({0x76, 0x00});
    expected += "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }" + std::string(58, ' ') + "\n";
    expected += bytes({0, 1, 2, 253, 254, 255});
    CHECK(get_bytes(path) == expected);
  }
  SECTION("uint16 and int32 little-endian") {
    const std::vector<std::uint16_t> u = {0x0102, 0xFFFE};
    REQUIRE(write_npy(dir.file("u2.npy"), u, {2}).ok());
    CHECK(get_bytes(dir.file("u2.npy")) ==
          npy_v1("{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", 128, bytes({0x02, 0x01, 0xFE, 0xFF})));
    const std::vector<std::int32_t> i = {-2, 0x01020304};
    REQUIRE(write_npy(dir.file("i4.npy"), i, {1, 2}).ok());
    CHECK(get_bytes(dir.file("i4.npy")) == npy_v1("{'descr': '<i4', 'fortran_order': False, 'shape': (1, 2), }", 128,
                                                  bytes({0xFE, 0xFF, 0xFF, 0xFF, 0x04, 0x03, 0x02, 0x01})));
  }
  SECTION("unpadded size already a multiple of 64: NumPy pads a full 64 bytes") {
    // numpy.lib.format._wrap_header: padlen = 64 - ((10 + hlen) % 64), which is 64 (not 0) here.
    // Dict 97 bytes + 20 growth spaces (first dimension "1") = 117; 10 + 117 + 1 = 128 -> 64 more
    // spaces, preamble 192 bytes, HEADER_LEN = 182 = 0xB6.
    std::vector<std::int64_t> shape(13, 1);
    shape.push_back(100);
    const std::string h = npy_header("<f4", shape);
    std::string expected = magic(1) + bytes({0xB6, 0x00});
    expected += "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 100), }";
    expected += std::string(20 + 64, ' ') + "\n";
    CHECK(h == expected);
    CHECK(h.size() == 192);
  }
  SECTION("headers beyond 65535 bytes use version 2.0 with a 4-byte length") {
    std::vector<std::int64_t> shape(20000, 1);  // "1, " per dimension: about 60000 bytes of dict text
    shape.push_back(7);
    shape.insert(shape.end(), 2000, 1);
    const std::string h = npy_header("<f4", shape);
    REQUIRE(h.size() % 64 == 0);
    CHECK(h.substr(0, 8) == magic(2));
    const std::size_t len = static_cast<unsigned char>(h[8]) | (static_cast<unsigned char>(h[9]) << 8) |
                            (static_cast<std::size_t>(static_cast<unsigned char>(h[10])) << 16);
    CHECK(h[11] == 0);
    CHECK(len == h.size() - 12);
    CHECK(h.back() == '\n');
    auto t = parse_npy(h + std::string(4 * 7, '\0'), "v2");
    REQUIRE(t.ok());
    CHECK(t->size() == 7);
  }
}

TEST_CASE("npy round trips keep every value exactly", "[io][npy]") {
  TempDir dir;
  SECTION("float32 including signed zeros, subnormals, extremes, infinities, NaN") {
    const std::vector<float> v = {0.0f,
                                  -0.0f,
                                  1.0f,
                                  -1.5f,
                                  std::numeric_limits<float>::denorm_min(),
                                  -std::numeric_limits<float>::min(),
                                  std::numeric_limits<float>::max(),
                                  std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity(),
                                  std::bit_cast<float>(0x7FC01234U),
                                  0.1f,
                                  3.0e-39f};
    REQUIRE(write_npy(dir.file("f.npy"), v, {3, 4}).ok());
    auto t = read_npy(dir.file("f.npy"));
    REQUIRE(t.ok());
    CHECK(t->dtype() == DType::F32);
    CHECK(t->shape() == std::vector<std::int64_t>{3, 4});
    REQUIRE(t->size() == v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
      CHECK(std::bit_cast<std::uint32_t>(t->data()[i]) == std::bit_cast<std::uint32_t>(v[i]));
    CHECK(t->f64_data().empty());
  }
  SECTION("float64 keeps the doubles; float32 view is their rounding") {
    const std::vector<double> v = {0.1, 1.0 + 0x1.0p-40, 1e300, -1e-310, -0.0, 3.0};
    REQUIRE(write_npy(dir.file("d.npy"), v, {6}).ok());
    auto t = read_npy(dir.file("d.npy"));
    REQUIRE(t.ok());
    CHECK(t->dtype() == DType::F64);
    REQUIRE(t->f64_data().size() == v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      CHECK(std::bit_cast<std::uint64_t>(t->f64_data()[i]) == std::bit_cast<std::uint64_t>(v[i]));
      CHECK(std::bit_cast<std::uint64_t>(t->exact(i)) == std::bit_cast<std::uint64_t>(v[i]));
      CHECK(std::bit_cast<std::uint32_t>(t->data()[i]) == std::bit_cast<std::uint32_t>(static_cast<float>(v[i])));
    }
    CHECK(t->data()[2] == std::numeric_limits<float>::infinity());  // 1e300 is beyond float32
    CHECK_FALSE(t->f32_is_exact());
  }
  SECTION("bfloat16 bits as uint16, all 65536 codes") {
    std::vector<std::uint16_t> codes(65536);
    for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint16_t>(i);
    REQUIRE(write_npy(dir.file("b.npy"), codes, {256, 256}).ok());
    auto t = read_npy(dir.file("b.npy"), NpyReadOptions{.u2_as_bf16 = true});
    REQUIRE(t.ok());
    CHECK(t->dtype() == DType::BF16);
    // bfloat16 is by definition the upper 16 bits of a binary32.
    for (std::size_t i = 0; i < codes.size(); ++i)
      REQUIRE(std::bit_cast<std::uint32_t>(t->data()[i]) == static_cast<std::uint32_t>(i) << 16);
  }
  SECTION("tensor writes: F16/BF16/F32 as '<f4', F64 as '<f8'") {
    auto h = Tensor::from_f32({2}, {0.5f, -65504.0f}, DType::F16);
    REQUIRE(h.ok());
    REQUIRE(write_npy(dir.file("h.npy"), *h).ok());
    auto hb = read_npy_header(dir.file("h.npy"));
    REQUIRE(hb.ok());
    CHECK(hb->descr == "<f4");
    auto back = read_npy(dir.file("h.npy"));
    REQUIRE(back.ok());
    CHECK(back->data() == h->data());
    auto d = Tensor::from_f64({1, 2}, {0.1, 0.2});
    REQUIRE(d.ok());
    REQUIRE(write_npy(dir.file("d.npy"), *d).ok());
    auto db = read_npy(dir.file("d.npy"));
    REQUIRE(db.ok());
    CHECK(db->f64_data() == d->f64_data());
    CHECK(db->shape() == d->shape());
  }
  SECTION("empty arrays") {
    const std::vector<float> none;
    REQUIRE(write_npy(dir.file("e.npy"), none, {0, 5}).ok());
    auto t = read_npy(dir.file("e.npy"));
    REQUIRE(t.ok());
    CHECK(t->size() == 0);
    CHECK(t->shape() == std::vector<std::int64_t>{0, 5});
  }
}

TEST_CASE("npy float16 files decode every code as IEEE 754 binary16, both byte orders", "[io][npy]") {
  std::string le_data, be_data;
  for (int i = 0; i < 65536; ++i) {
    le_data += bytes({i & 0xFF, i >> 8});
    be_data += bytes({i >> 8, i & 0xFF});
  }
  // Dict 61 bytes; 10 + 61 + 1 = 72 -> 128.
  auto le = parse_npy(npy_v1("{'descr': '<f2', 'fortran_order': False, 'shape': (65536,), }", 128, le_data), "le");
  auto be = parse_npy(npy_v1("{'descr': '>f2', 'fortran_order': False, 'shape': (65536,), }", 128, be_data), "be");
  REQUIRE(le.ok());
  REQUIRE(be.ok());
  CHECK(le->dtype() == DType::F16);
  for (int i = 0; i < 65536; ++i) {
    const double want = f16_value(static_cast<std::uint16_t>(i));
    const float got = le->data()[static_cast<std::size_t>(i)];
    if (std::isnan(want)) {
      REQUIRE(std::isnan(got));
      REQUIRE(std::signbit(got) == (i >= 0x8000));
    } else {
      REQUIRE(std::bit_cast<std::uint64_t>(static_cast<double>(got)) == std::bit_cast<std::uint64_t>(want));
    }
    REQUIRE(std::bit_cast<std::uint32_t>(be->data()[static_cast<std::size_t>(i)]) == std::bit_cast<std::uint32_t>(got));
  }
}

TEST_CASE("npy big-endian float32, float64 and bfloat16 files", "[io][npy]") {
  // Big-endian: most significant byte first. 1.0f = 3F800000, -2.0f = C0000000, 1.0 = 3FF0000000000000,
  // -0.375 = BFD8000000000000, bfloat16 0x4049 = 3.140625.
  auto f4 = parse_npy(
      npy_v1("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 128, be32(0x3F800000) + be32(0xC0000000)),
      "f4");
  REQUIRE(f4.ok());
  CHECK(f4->data() == std::vector<float>{1.0f, -2.0f});
  auto f8 = parse_npy(npy_v1("{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }", 128,
                             bytes({0x3F, 0xF0, 0, 0, 0, 0, 0, 0, 0xBF, 0xD8, 0, 0, 0, 0, 0, 0})),
                      "f8");
  REQUIRE(f8.ok());
  CHECK(f8->f64_data() == std::vector<double>{1.0, -0.375});
  auto bf = parse_npy(npy_v1("{'descr': '>u2', 'fortran_order': False, 'shape': (1,), }", 128, bytes({0x40, 0x49})),
                      "bf", NpyReadOptions{.u2_as_bf16 = true});
  REQUIRE(bf.ok());
  CHECK(bf->dtype() == DType::BF16);
  CHECK(bf->data()[0] == 3.140625f);
  // ml_dtypes.bfloat16 arrays are saved with descr '<V2'.
  auto v2 = parse_npy(npy_v1("{'descr': '<V2', 'fortran_order': False, 'shape': (1,), }", 128, bytes({0x49, 0x40})),
                      "v2", NpyReadOptions{.u2_as_bf16 = true});
  REQUIRE(v2.ok());
  CHECK(v2->data()[0] == 3.140625f);
}

TEST_CASE("npy headers as other writers produce them", "[io][npy]") {
  const std::string one = le32(0x3F800000);
  SECTION("version 2.0 and 3.0: 4-byte header length") {
    for (int major : {2, 3}) {
      // 12-byte prefix; dict 57 bytes; 12 + 57 + 1 = 70 -> 128: HEADER_LEN 116 = 0x74.
      std::string s = magic(major) + bytes({0x74, 0, 0, 0});
      s += "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }";
      s += std::string(128 - 1 - s.size(), ' ') + "\n" + one;
      auto t = parse_npy(s, "v" + std::to_string(major));
      REQUIRE(t.ok());
      CHECK(t->data() == std::vector<float>{1.0f});
    }
  }
  SECTION("Python 2 'L' suffixes, double quotes, other key order, no trailing comma, 16-byte alignment") {
    const std::string dict = "{\"shape\": (1L, 1L), 'fortran_order': False, 'descr': '<f4'}";
    std::string s = magic(1);
    const std::size_t total = 80;  // older NumPy aligned to 16 bytes
    s += bytes({static_cast<int>(total - 10), 0}) + dict;
    s += std::string(total - 1 - s.size(), ' ') + "\n" + one;
    auto t = parse_npy(s, "py2");
    REQUIRE(t.ok());
    CHECK(t->shape() == std::vector<std::int64_t>{1, 1});
  }
  SECTION("'=', '|' and no byte-order character mean the host's order") {
    // `one` holds little-endian bytes, so this applies to little-endian hosts.
    if (std::endian::native != std::endian::little) return;
    for (const char* descr : {"=f4", "|f4", "f4"}) {
      INFO(descr);
      auto t = parse_npy(
          npy_v1(std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (1,), }", 128, one),
          "native");
      REQUIRE(t.ok());
      CHECK(t->data()[0] == 1.0f);
    }
  }
  SECTION("read_npy_header reports what the header says") {
    TempDir dir;
    put_bytes(dir.file("h.npy"),
              npy_v1("{'descr': '>f8', 'fortran_order': True, 'shape': (2, 3), }", 128, std::string(48, '\0')));
    auto h = read_npy_header(dir.file("h.npy"));
    REQUIRE(h.ok());
    CHECK(h->descr == ">f8");
    CHECK(h->fortran_order);
    CHECK(h->shape == std::vector<std::int64_t>{2, 3});
    CHECK(h->data_offset == 128);
    CHECK(h->major == 1);
  }
}

TEST_CASE("npy.gz files are decompressed", "[io][npy][gzip]") {
  TempDir dir;
  const std::vector<float> v = {1.0f, 2.0f, 3.0f};
  REQUIRE(write_npy(dir.file("a.npy"), v, {3}).ok());
  const std::string raw = get_bytes(dir.file("a.npy"));
  put_bytes(dir.file("a.npy.gz"), test::gzip_stored(raw));
  auto t = read_npy(dir.file("a.npy.gz"));
  REQUIRE(t.ok());
  CHECK(t->data() == v);
  // A larger file spanning several stored blocks.
  std::vector<float> big(40000);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.25f;
  REQUIRE(write_npy(dir.file("big.npy"), big, {200, 200}).ok());
  put_bytes(dir.file("big.npy.gz"), test::gzip_stored(get_bytes(dir.file("big.npy"))));
  auto b = read_npy(dir.file("big.npy.gz"));
  REQUIRE(b.ok());
  CHECK(b->data() == big);
  // Truncated compressed stream.
  const std::string gz = test::gzip_stored(raw);
  put_bytes(dir.file("cut.npy.gz"), gz.substr(0, gz.size() - 20));
  auto cut = read_npy(dir.file("cut.npy.gz"));
  REQUIRE_FALSE(cut.ok());
  CHECK_THAT(cut.error().message, Catch::StartsWith("npy '" + dir.file("cut.npy.gz") + "': "));
}

TEST_CASE("npy read errors name the file and the problem", "[io][npy][errors]") {
  TempDir dir;
  const std::string f4_1 = le32(0x3F800000);
  const std::string ok_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }";
  struct Case {
    const char* name;
    std::string content;
    const char* problem;
  };
  const std::vector<Case> cases = {
      {"empty.npy", "", "not an npy file"},
      {"text.npy", "hello world, this is text", "not an npy file"},
      {"short.npy", magic(1).substr(0, 7), "ends inside the format version"},
      {"version.npy", magic(4) + bytes({0x76, 0}) + std::string(118, ' '), "unsupported npy format version 4.0"},
      {"nolen.npy", magic(1) + bytes({0x76}), "ends inside the header length"},
      {"cuthead.npy", magic(1) + bytes({0x76, 0}) + ok_dict, "the header should be 118 bytes"},
      {"notdict.npy", npy_v1("['descr', '<f4']", 128, f4_1), "cannot parse the header dictionary"},
      {"syntax.npy", npy_v1("{'descr' '<f4', 'fortran_order': False, 'shape': (1,), }", 128, f4_1),
       "expected ':' after key 'descr'"},
      {"nokey.npy", npy_v1("{'descr': '<f4', 'shape': (1,), }", 128, f4_1), "lacks the key 'fortran_order'"},
      {"extrakey.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1, }", 128, f4_1),
       "unexpected key 'x'"},
      {"descrint.npy", npy_v1("{'descr': 4, 'fortran_order': False, 'shape': (1,), }", 128, f4_1),
       "'descr' is an int, expected a string"},
      {"struct.npy", npy_v1("{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (1,), }", 128, f4_1),
       "structured dtypes"},
      {"fortbool.npy", npy_v1("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,), }", 128, f4_1),
       "'fortran_order' is an int"},
      {"fortran.npy", npy_v1("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 128, std::string(16, '\0')),
       "fortran_order is True"},
      {"shapeint.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1), }", 128, f4_1),
       "'shape' is an int, expected a tuple"},
      {"shapefloat.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1.5,), }", 128, f4_1),
       "'shape' is a tuple of non-integers"},
      {"negdim.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", 128, f4_1),
       "dimension 1 is negative"},
      {"huge.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 128, f4_1),
       "too large"},
      {"int.npy", npy_v1("{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }", 128, f4_1),
       "unsupported dtype '<i4'"},
      {"u2.npy", npy_v1("{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", 128, f4_1),
       "bfloat16 bit patterns, say so (mxlab: --bf16"},
      {"trunc.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 128, f4_1 + f4_1),
       "truncated: shape (3,) of '<f4' needs 12 bytes of data, the file has 8"},
      {"trail.npy", npy_v1(ok_dict, 128, f4_1 + "xyz"), "3 bytes follow the array data"},
      {"bigshape.npy", npy_v1("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000, 1000000000), }", 128, ""),
       "truncated"},
      // Regression: a zero dimension beside huge ones has no elements, but reached quantization with 2-D
      // tiles (per-block buffers over the shape) and escaped as std::bad_alloc.
      {"zerohuge.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 9223372036854775807), }", 128, ""),
       "has no elements but dimensions that multiply to 9223372036854775807"},
      {"hugezero.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 0), }", 128, ""),
       "has no elements but dimensions"},
      {"dupkey.npy", npy_v1("{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", 128, f4_1),
       "the key 'descr' appears twice"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    const std::string path = dir.file(c.name);
    put_bytes(path, c.content);
    Result<Tensor> t = Tensor();
    CHECK_NOTHROW(t = read_npy(path));
    REQUIRE_FALSE(t.ok());
    CHECK_THAT(t.error().message, Catch::StartsWith("npy '" + path + "': "));
    CHECK_THAT(t.error().message, Catch::Contains(c.problem));
  }
  SECTION("zero-element arrays with dimensions the file could hold are read") {
    const std::string path = dir.file("empty.npy");
    put_bytes(path, npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 1000), }", 128, ""));
    auto t = read_npy(path);
    REQUIRE(t.ok());
    CHECK(t->size() == 0);
    CHECK(t->shape() == std::vector<std::int64_t>{0, 1000});
  }
  SECTION("missing file and directories") {
    auto m = read_npy(dir.file("missing.npy"));
    REQUIRE_FALSE(m.ok());
    CHECK(m.error().message == "npy '" + dir.file("missing.npy") + "': cannot open: No such file or directory");
    std::filesystem::create_directory(dir.file("d.npy"));
    auto d = read_npy(dir.file("d.npy"));
    REQUIRE_FALSE(d.ok());
    CHECK_THAT(d.error().message, Catch::Contains("is a directory"));
  }
}

TEST_CASE("npy uint8 arrays (packed codes) are checked against the file before reading", "[io][npy][errors]") {
  const std::vector<std::int64_t> five = {5};
  auto ok = parse_npy_u8(npy_header("|u1", five) + bytes({1, 2, 3, 4, 255}), "codes.npy");
  REQUIRE(ok.ok());
  CHECK(ok->shape == five);
  CHECK(ok->data == std::vector<std::uint8_t>{1, 2, 3, 4, 255});
  auto wrong_dtype = parse_npy_u8(npy_header("<f4", five) + std::string(20, '\0'), "codes.npy");
  REQUIRE_FALSE(wrong_dtype.ok());
  CHECK_THAT(wrong_dtype.error().message, Catch::Contains("expected uint8 data ('|u1'), found '<f4'"));
  const std::vector<std::int64_t> huge = {std::int64_t{1} << 40};
  auto truncated = parse_npy_u8(npy_header("|u1", huge) + "ab", "codes.npy");
  REQUIRE_FALSE(truncated.ok());
  CHECK_THAT(truncated.error().message, Catch::Contains("truncated"));
  const std::vector<std::int64_t> zero_beside_huge = {0, std::int64_t{1} << 50};
  auto empty = parse_npy_u8(npy_header("|u1", zero_beside_huge), "codes.npy");
  REQUIRE_FALSE(empty.ok());
  CHECK_THAT(empty.error().message, Catch::Contains("no elements"));
}

TEST_CASE("outputs replace only regular files: devices and symbolic links are refused", "[io][npy][errors]") {
  TempDir dir;
  const std::vector<float> v = {1.0f};
  for (const char* device : {"/dev/null", "/dev/full"}) {
    INFO(device);
    auto r = write_npy(device, v, {1});
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("is a device"));
  }
  put_bytes(dir.file("target.npy"), "old");
  std::filesystem::create_symlink(dir.file("target.npy"), dir.file("link.npy"));
  auto r = write_npy(dir.file("link.npy"), v, {1});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains("is a symbolic link"));
  CHECK(std::filesystem::is_symlink(dir.file("link.npy")));
  CHECK(get_bytes(dir.file("target.npy")) == "old");
  CHECK(dir.entries() == std::vector<std::string>{"link.npy", "target.npy"});
}

TEST_CASE("SIGINT or SIGTERM during a write removes the temporary file", "[io][npy][errors]") {
  for (int sig : {SIGINT, SIGTERM}) {
    INFO("signal " << sig);
    TempDir dir;
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // The child holds a half-written output when the signal arrives, as an interrupted command would (the
      // test runner's own handler is taken away first, as a command line program has none).
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      auto f = AtomicFile::create(dir.file("out.npy"), "npy");
      if (!f || !f->write("half-written")) ::_exit(3);
      ::raise(sig);
      ::_exit(4);  // not reached: the signal ends the process
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == sig);
    CHECK(dir.entries().empty());
  }
}

TEST_CASE("npy writes are atomic and reject inconsistent input", "[io][npy][errors]") {
  TempDir dir;
  const std::vector<float> v = {1.0f, 2.0f, 3.0f};
  SECTION("shape mismatch: nothing is written and an existing file is kept") {
    put_bytes(dir.file("keep.npy"), "old");
    auto r = write_npy(dir.file("keep.npy"), v, {2, 2});
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message ==
          "npy '" + dir.file("keep.npy") + "': shape (2, 2) has 4 elements, but 3 values were given");
    CHECK(get_bytes(dir.file("keep.npy")) == "old");
    CHECK(dir.entries() == std::vector<std::string>{"keep.npy"});
  }
  SECTION("negative dimension") {
    auto r = write_npy(dir.file("neg.npy"), v, {-3});
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("dimension 1 is negative"));
    CHECK(dir.entries().empty());
  }
  SECTION("missing directory") {
    auto r = write_npy(dir.file("no/such/dir/a.npy"), v, {3});
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("does not exist"));
    CHECK(dir.entries().empty());
  }
  SECTION("target is a directory") {
    std::filesystem::create_directory(dir.file("sub.npy"));
    auto r = write_npy(dir.file("sub.npy"), v, {3});
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("is a directory"));
    CHECK(dir.entries() == std::vector<std::string>{"sub.npy"});
  }
  SECTION("replacing an existing file leaves only the new file") {
    put_bytes(dir.file("a.npy"), "old contents");
    REQUIRE(write_npy(dir.file("a.npy"), v, {3}).ok());
    CHECK(dir.entries() == std::vector<std::string>{"a.npy"});
    auto t = read_npy(dir.file("a.npy"));
    REQUIRE(t.ok());
    CHECK(t->data() == v);
  }
  SECTION("an uncommitted AtomicFile never shows under its name and leaves no temporary file") {
    put_bytes(dir.file("b.npy"), "old");
    {
      auto f = AtomicFile::create(dir.file("b.npy"), "npy");
      REQUIRE(f.ok());
      CHECK(f->write("half-written"));
      CHECK(std::filesystem::exists(f->temp_path()));
      CHECK(get_bytes(dir.file("b.npy")) == "old");
      CHECK(dir.entries().size() == 2);
    }
    CHECK(dir.entries() == std::vector<std::string>{"b.npy"});
    CHECK(get_bytes(dir.file("b.npy")) == "old");
  }
  SECTION("a failed rename removes the temporary file") {
    auto f = AtomicFile::create(dir.file("c.npy"), "npy");
    REQUIRE(f.ok());
    f->write("data");
    std::filesystem::create_directory(dir.file("c.npy"));
    std::filesystem::create_directory(dir.file("c.npy/inner"));  // rename(2) cannot replace a non-empty directory
    auto r = f->commit();
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::StartsWith("npy '" + dir.file("c.npy") + "': cannot replace it"));
    CHECK(dir.entries() == std::vector<std::string>{"c.npy"});
  }
}
