// Checks SHA-256 against the FIPS 180-4 / NIST example digests, the data registry's entries, and the
// training-data readers against files built from the IDX description (yann.lecun.com/exdb/mnist), the
// scikit-learn digits CSV layout and Project Gutenberg's header and footer lines.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "io_test_support.hpp"
#include "mxlab/io/datasets.hpp"
#include "mxlab/io/sha256.hpp"
#include "mxlab/io/training_data.hpp"

using namespace mxlab;
using mxlab::test::gzip_stored;
using mxlab::test::put_bytes;
using mxlab::test::TempDir;

namespace {

// An IDX header: two zero bytes, the type, the rank, then big-endian uint32 dimensions.
std::string idx_header(int type, const std::vector<std::uint32_t>& dims) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (std::uint32_t d : dims)
    for (int k = 3; k >= 0; --k) s += static_cast<char>((d >> (8 * k)) & 0xFF);
  return s;
}

}  // namespace

TEST_CASE("sha256 matches the FIPS 180-4 example digests", "[io][sha256]") {
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  CHECK(sha256_hex(million) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Any split into pieces gives the same digest (block boundaries at 55, 56, 63, 64, 65 bytes).
  for (std::size_t cut : {1, 55, 56, 63, 64, 65, 1000}) {
    Sha256 h;
    h.update(million.substr(0, cut));
    h.update(million.substr(cut, 999));
    h.update(million.substr(cut + 999));
    INFO(cut);
    CHECK(h.hex_digest() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }
  TempDir dir;
  put_bytes(dir.file("abc"), "abc");
  CHECK(*sha256_file(dir.file("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK_THAT(sha256_file(dir.file("none")).error().message, Catch::Contains("cannot open"));
}

TEST_CASE("the data registry: unique names, complete entries, digests in hex", "[io][datasets]") {
  std::set<std::string_view> names;
  for (const DataSource& s : data_sources()) {
    INFO(s.name);
    CHECK(names.insert(s.name).second);
    CHECK_FALSE(s.what.empty());
    CHECK_FALSE(s.package.empty());
    CHECK_FALSE(s.license.empty());
    REQUIRE_FALSE(s.files.empty());
    auto hex64 = [](std::string_view h) {
      return h.size() == 64 && h.find_first_not_of("0123456789abcdef") == std::string_view::npos;
    };
    if (s.kind == PackageKind::Npm) {
      CHECK(s.package.find('@', 1) != std::string_view::npos);  // NAME@VERSION, pinned
      CHECK(hex64(s.package_sha256));
      for (const auto& f : s.files) CHECK(f.package_path.substr(0, 8) == "package/");
    } else {
      CHECK(s.package_sha256.empty());
      for (const auto& f : s.files) CHECK(f.package_path.substr(0, 1) == "/");
    }
    std::set<std::string_view> files;
    for (const auto& f : s.files) {
      CHECK(files.insert(f.file).second);
      CHECK(hex64(f.sha256));
      CHECK(f.file.find('/') == std::string_view::npos);
    }
  }
  for (const char* n : {"fashion-mnist", "digits", "texts", "gnubg", "mobilefacenet", "faceres-deep", "posenet",
                        "efficientpose", "movenet-lightning"})
    CHECK(find_data_source(n).ok());
  auto unknown = find_data_source("imagenet");
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.error().message, Catch::Contains("unknown data set 'imagenet'") && Catch::Contains("fashion-mnist"));
}

TEST_CASE("data_file gives the path of an installed file or says how to fetch it", "[io][datasets]") {
  TempDir dir;
  const std::string root = dir.file("data");
  auto missing = data_file("digits", "digits.csv.gz", root);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error().message, Catch::Contains("run `mxlab data fetch digits --dir " + root + "`"));
  std::filesystem::create_directories(root + "/digits");
  put_bytes(root + "/digits/digits.csv.gz", "x");
  auto present = data_file("digits", "digits.csv.gz", root);
  REQUIRE(present.ok());
  CHECK(*present == root + "/digits/digits.csv.gz");
  CHECK_THAT(data_file("digits", "other.csv", root).error().message, Catch::Contains("has no file 'other.csv'"));
  CHECK_THAT(data_file("nope", "x", root).error().message, Catch::Contains("unknown data set 'nope'"));
  const auto status = data_status(**find_data_source("digits"), root);
  REQUIRE(status.size() == 1);
  CHECK(status[0].present);
  CHECK(status[0].size == 1);

  SECTION("MXLAB_DATA_DIR sets the default folder") {
    ::setenv("MXLAB_DATA_DIR", root.c_str(), 1);
    CHECK(default_data_dir() == root);
    CHECK(data_file("digits", "digits.csv.gz").ok());
    std::filesystem::remove(root + "/digits/digits.csv.gz");
    CHECK_THAT(data_file("digits", "digits.csv.gz").error().message,
               Catch::Contains("searched " + root + "/, from MXLAB_DATA_DIR") &&
                   Catch::EndsWith("run `mxlab data fetch digits`"));
    ::unsetenv("MXLAB_DATA_DIR");
  }
  SECTION("without MXLAB_DATA_DIR the default is one per-user folder, whatever the current directory") {
    const char* old_home = std::getenv("HOME");
    const char* old_xdg = std::getenv("XDG_DATA_HOME");
    const std::string home = old_home ? old_home : "", xdg = old_xdg ? old_xdg : "";
    ::unsetenv("MXLAB_DATA_DIR");
    ::setenv("HOME", "/home/someone", 1);
    ::unsetenv("XDG_DATA_HOME");
    CHECK(default_data_dir() == "/home/someone/.local/share/mxlab");
    ::setenv("XDG_DATA_HOME", "/xdg/data", 1);
    CHECK(default_data_dir() == "/xdg/data/mxlab");
    ::setenv("XDG_DATA_HOME", "relative", 1);  // the XDG rule: a relative path is ignored
    CHECK(default_data_dir() == "/home/someone/.local/share/mxlab");
    ::setenv("XDG_DATA_HOME", root.c_str(), 1);
    std::filesystem::remove(root + "/digits/digits.csv.gz");
    CHECK_THAT(data_file("digits", "digits.csv.gz").error().message,
               Catch::Contains("searched " + root + "/mxlab/, the per-user default; MXLAB_DATA_DIR names another folder"));
    if (old_home) ::setenv("HOME", home.c_str(), 1);
    else ::unsetenv("HOME");
    if (old_xdg) ::setenv("XDG_DATA_HOME", xdg.c_str(), 1);
    else ::unsetenv("XDG_DATA_HOME");
  }
  SECTION("fetching an unknown name installs nothing") {
    FetchOptions o;
    o.dir = root;
    auto r = fetch_data({"digits", "nope"}, o);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("unknown data set 'nope'"));
  }
}

TEST_CASE("IDX files of unsigned bytes, plain and gzip", "[io][datasets][idx]") {
  TempDir dir;
  std::string images = idx_header(0x08, {3, 2, 2});
  for (int i = 0; i < 12; ++i) images += static_cast<char>(i * 20);
  const std::string labels = idx_header(0x08, {3}) + std::string{0, 9, 4};
  put_bytes(dir.file("img.gz"), gzip_stored(images));
  put_bytes(dir.file("lab"), labels);
  auto a = read_idx_gz(dir.file("img.gz"));
  REQUIRE(a.ok());
  CHECK(a->shape == std::vector<std::int64_t>{3, 2, 2});
  REQUIRE(a->data.size() == 12);
  CHECK(a->data[11] == 220);
  auto s = read_idx_images(dir.file("img.gz"), dir.file("lab"));
  REQUIRE(s.ok());
  CHECK(s->count == 3);
  CHECK(s->rows == 2);
  CHECK(s->cols == 2);
  CHECK(s->labels == std::vector<std::uint8_t>{0, 9, 4});

  struct Case {
    const char* name;
    std::string content;
    const char* problem;
  };
  const std::vector<Case> cases = {
      {"magic", std::string("\x01\x00\x08\x01", 4), "not an IDX file"},
      {"short", std::string("\x00\x00", 2), "ends inside the 4-byte magic number"},
      {"float", idx_header(0x0D, {1}) + std::string(4, '\0'), "0x0D (float32) is not supported"},
      {"type", idx_header(0x42, {1}), "unknown IDX element type 0x42"},
      {"rank", idx_header(0x08, {}), "rank 0 is not between 1 and 8"},
      {"dims", idx_header(0x08, {2, 2}).substr(0, 6), "ends inside dimension 1"},
      {"truncated", idx_header(0x08, {4}) + "ab", "ask for 4 bytes of data, the file has 2"},
      {"trailing", idx_header(0x08, {1}) + "ab", "1 bytes follow the data"},
      {"beyond.gz", gzip_stored(idx_header(0x08, {0xFFFFFFFF, 0xFFFFFFFF})), "more than a file of this size can hold"},
      {"overflow", idx_header(0x08, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}), "overflows 64 bits"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    put_bytes(dir.file(c.name), c.content);
    auto r = read_idx_gz(dir.file(c.name));
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::StartsWith("idx '" + dir.file(c.name) + "': "));
    CHECK_THAT(r.error().message, Catch::Contains(c.problem));
  }
  put_bytes(dir.file("badlab"), idx_header(0x08, {3}) + std::string{0, 10, 4});
  CHECK_THAT(read_idx_images(dir.file("img.gz"), dir.file("badlab")).error().message,
             Catch::Contains("label 1 is 10, expected 0..9"));
  put_bytes(dir.file("fewlab"), idx_header(0x08, {2}) + std::string{0, 1});
  CHECK_THAT(read_idx_images(dir.file("img.gz"), dir.file("fewlab")).error().message,
             Catch::Contains("2 labels for 3 images"));
}

TEST_CASE("digits CSV: 64 pixels 0..16 and a label per line", "[io][datasets][digits]") {
  TempDir dir;
  std::string line1, line2;
  for (int i = 0; i < 64; ++i) line1 += std::to_string(i % 17) + ",";
  for (int i = 0; i < 64; ++i) line2 += std::to_string(16 - i % 17) + ",";
  put_bytes(dir.file("d.csv.gz"), gzip_stored(line1 + "3\n" + line2 + "9\n"));
  auto s = read_digits_csv_gz(dir.file("d.csv.gz"));
  REQUIRE(s.ok());
  CHECK(s->count == 2);
  CHECK(s->rows == 8);
  CHECK(s->max_value == 16);
  CHECK(s->labels == std::vector<std::uint8_t>{3, 9});
  REQUIRE(s->pixels.size() == 128);
  CHECK(s->pixels[16] == 16);
  CHECK(s->pixels[64] == 16);

  const std::vector<std::pair<std::string, const char*>> bad = {
      {line1 + "10\n", "10 is outside 0..9"},
      {"17," + line1.substr(2) + "1\n", "17 is outside 0..16"},
      {line1 + "\n", "field 65: '' is not an integer"},
      {line1.substr(0, line1.size() - 1) + "\n", "has 64 fields, expected 65"},
      {line1 + "1,2\n", "more than 65 fields"},
      {"a," + line1.substr(2) + "1\n", "field 1: 'a' is not an integer"},
      {"", "no images"},
  };
  for (const auto& [text, problem] : bad) {
    INFO(problem);
    put_bytes(dir.file("bad.csv.gz"), gzip_stored(text));
    auto r = read_digits_csv_gz(dir.file("bad.csv.gz"));
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::StartsWith("digits '" + dir.file("bad.csv.gz") + "': "));
    CHECK_THAT(r.error().message, Catch::Contains(problem));
  }
}

TEST_CASE("texts: Gutenberg header and footer removed, CRLF and byte order mark normalised", "[io][datasets][text]") {
  TempDir dir;
  const std::string gutenberg =
      "\xEF\xBB\xBFProject Gutenberg's Book\r\n\r\nTitle: Book\r\n\r\n"
      "*** START OF THIS PROJECT GUTENBERG EBOOK BOOK ***\r\n\r\n\r\n"
      "Chapter 1\r\n\r\nIt was a dark night.\r\n\r\n\r\n"
      "End of the Project Gutenberg EBook of Book\r\n\r\n*** END OF THIS PROJECT GUTENBERG EBOOK BOOK ***\r\nlicense\r\n";
  put_bytes(dir.file("g.txt"), gutenberg);
  auto t = read_text(dir.file("g.txt"));
  REQUIRE(t.ok());
  CHECK(*t == "Chapter 1\n\nIt was a dark night.\n");
  put_bytes(dir.file("plain.txt.gz"), gzip_stored("\n\n  A plain text.\nNo frame.\n\n"));
  CHECK(*read_text(dir.file("plain.txt.gz")) == "  A plain text.\nNo frame.\n");
  put_bytes(dir.file("empty.txt"), "");
  CHECK(*read_text(dir.file("empty.txt")) == "");
  CHECK_THAT(read_text(dir.file("none.txt")).error().message, Catch::Contains("cannot open"));
}
