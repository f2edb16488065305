// IDX, digits CSV and plain-text readers for the registered training data.
#include "mxlab/io/training_data.hpp"

#include "mxlab/io/datasets.hpp"

#include <algorithm>
#include <cctype>
#include <limits>
#include <new>
#include <string_view>

#include "binary.hpp"
#include "input_file.hpp"

namespace mxlab {
namespace {

using io_detail::InputFile;

// Margin over the deflate bound for tiny files.
constexpr std::uint64_t kMargin = 1 << 16;
// Texts larger than this are not books.
constexpr std::uint64_t kMaxTextBytes = std::uint64_t{256} << 20;

// Most bytes the file can yield: its size if plain, the deflate bound if compressed.
std::uint64_t byte_bound(const InputFile& in) {
  if (auto rem = in.remaining()) return *rem;
  const std::uint64_t size = in.stored_size();
  if (size > (std::numeric_limits<std::uint64_t>::max() - kMargin) / io_detail::kDeflateMaxRatio)
    return std::numeric_limits<std::uint64_t>::max();
  return size * io_detail::kDeflateMaxRatio + kMargin;
}

// Reads everything left, refusing more than `limit` bytes.
Result<std::string> read_bounded(InputFile& in, std::uint64_t limit, std::string_view what) {
  std::string out;
  char buf[1 << 16];
  try {
    for (;;) {
      auto r = in.read(buf, sizeof buf);
      if (!r) return r.error();
      if (*r == 0) break;
      if (out.size() + *r > limit)
        return in.fail(std::string(what) + " longer than " + std::to_string(limit) + " bytes");
      out.append(buf, *r);
    }
  } catch (const std::bad_alloc&) {
    return in.fail("not enough memory to hold the file");
  }
  return out;
}

}  // namespace

Result<IdxArray> read_idx_gz(const std::string& path) {
  auto in = InputFile::open(path, "idx");
  if (!in) return in.error();
  const std::uint64_t bound = byte_bound(*in);
  unsigned char magic[4];
  auto got = in->read(magic, 4);
  if (!got) return got.error();
  if (*got < 4) return in->fail("truncated: the file ends inside the 4-byte magic number");
  if (magic[0] != 0 || magic[1] != 0) return in->fail("not an IDX file (the magic number does not start with two zero bytes)");
  const int type = magic[2];
  const std::size_t rank = magic[3];
  switch (type) {
    case 0x08: break;
    case 0x09: return in->fail("IDX element type 0x09 (int8) is not supported; only unsigned bytes (0x08) are");
    case 0x0B: return in->fail("IDX element type 0x0B (int16) is not supported; only unsigned bytes (0x08) are");
    case 0x0C: return in->fail("IDX element type 0x0C (int32) is not supported; only unsigned bytes (0x08) are");
    case 0x0D: return in->fail("IDX element type 0x0D (float32) is not supported; only unsigned bytes (0x08) are");
    case 0x0E: return in->fail("IDX element type 0x0E (float64) is not supported; only unsigned bytes (0x08) are");
    default: return in->fail("unknown IDX element type 0x" + std::string(1, "0123456789ABCDEF"[type >> 4]) +
                              std::string(1, "0123456789ABCDEF"[type & 15]));
  }
  if (rank == 0 || rank > 8) return in->fail("IDX rank " + std::to_string(rank) + " is not between 1 and 8");
  IdxArray a;
  std::uint64_t n = 1;
  for (std::size_t i = 0; i < rank; ++i) {
    unsigned char d[4];
    got = in->read(d, 4);
    if (!got) return got.error();
    if (*got < 4) return in->fail("truncated: the file ends inside dimension " + std::to_string(i + 1));
    const std::uint64_t dim = (std::uint64_t{d[0]} << 24) | (std::uint64_t{d[1]} << 16) | (std::uint64_t{d[2]} << 8) | d[3];
    a.shape.push_back(static_cast<std::int64_t>(dim));
    // Every dimension is below 2^32 and there are at most 8, but the product can still overflow.
    if (dim != 0 && n > std::numeric_limits<std::uint64_t>::max() / dim)
      return in->fail("the dimensions' product overflows 64 bits");
    n *= dim;
  }
  if (n > bound)
    return in->fail("the dimensions ask for " + std::to_string(n) + " bytes, more than a file of this size can hold (" +
                    std::to_string(bound) + ")");
  // Memory grows with the data actually present (16 MiB at a time), never beyond the bound above.
  constexpr std::size_t kChunk = std::size_t{16} << 20;
  try {
    while (a.data.size() < n) {
      const std::size_t old = a.data.size();
      const auto m = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, n - old));
      a.data.resize(old + m);
      auto r = in->read(a.data.data() + old, m);
      if (!r) return r.error();
      if (*r < m)
        return in->fail("truncated: the dimensions ask for " + std::to_string(n) + " bytes of data, the file has " +
                        std::to_string(old + *r));
    }
  } catch (const std::bad_alloc&) {
    return in->fail("not enough memory for " + std::to_string(n) + " bytes");
  }
  auto extra = in->skip_rest();
  if (!extra) return extra.error();
  if (*extra > 0) return in->fail(std::to_string(*extra) + " bytes follow the data the dimensions describe");
  return a;
}

Result<ImageSet> read_idx_images(const std::string& images_path, const std::string& labels_path) {
  auto images = read_idx_gz(images_path);
  if (!images) return images.error();
  if (images->shape.size() != 3)
    return make_error("idx '" + images_path + "': images have rank " + std::to_string(images->shape.size()) +
                      ", expected 3 (count, rows, columns)");
  auto labels = read_idx_gz(labels_path);
  if (!labels) return labels.error();
  if (labels->shape.size() != 1)
    return make_error("idx '" + labels_path + "': labels have rank " + std::to_string(labels->shape.size()) + ", expected 1");
  if (labels->shape[0] != images->shape[0])
    return make_error("idx '" + labels_path + "': " + std::to_string(labels->shape[0]) + " labels for " +
                      std::to_string(images->shape[0]) + " images in '" + images_path + "'");
  for (std::size_t i = 0; i < labels->data.size(); ++i)
    if (labels->data[i] > 9)
      return make_error("idx '" + labels_path + "': label " + std::to_string(i) + " is " +
                        std::to_string(labels->data[i]) + ", expected 0..9");
  ImageSet s;
  s.count = images->shape[0];
  s.rows = images->shape[1];
  s.cols = images->shape[2];
  s.max_value = 255;
  s.pixels = std::move(images->data);
  s.labels = std::move(labels->data);
  return s;
}

Result<ImageSet> read_digits_csv_gz(const std::string& path) {
  auto in = InputFile::open(path, "digits");
  if (!in) return in.error();
  auto text = read_bounded(*in, std::min(byte_bound(*in), kMaxTextBytes), "text");
  if (!text) return text.error();
  ImageSet s;
  s.rows = 8;
  s.cols = 8;
  s.max_value = 16;
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos < text->size()) {
    std::size_t end = text->find('\n', pos);
    if (end == std::string::npos) end = text->size();
    std::string_view line(text->data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    std::size_t field = 0;
    std::size_t i = 0;
    while (true) {
      std::size_t j = line.find(',', i);
      if (j == std::string_view::npos) j = line.size();
      const std::string_view f = line.substr(i, j - i);
      const int limit = field < 64 ? 16 : 9;
      int v = 0;
      if (f.empty() || f.size() > 2 || !std::all_of(f.begin(), f.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return in->fail("line " + std::to_string(line_no) + ", field " + std::to_string(field + 1) + ": '" +
                        std::string(f.substr(0, 20)) + "' is not an integer 0.." + std::to_string(limit));
      for (char c : f) v = v * 10 + (c - '0');
      if (v > limit)
        return in->fail("line " + std::to_string(line_no) + ", field " + std::to_string(field + 1) + ": " +
                        std::to_string(v) + " is outside 0.." + std::to_string(limit));
      if (field < 64)
        s.pixels.push_back(static_cast<std::uint8_t>(v));
      else if (field == 64)
        s.labels.push_back(static_cast<std::uint8_t>(v));
      ++field;
      if (j == line.size()) break;
      i = j + 1;
      if (field > 64) {
        field = 66;
        break;
      }
    }
    if (field != 65)
      return in->fail("line " + std::to_string(line_no) + " has " + (field > 65 ? "more than 65" : std::to_string(field)) +
                      " fields, expected 65 (64 pixels and a label)");
    ++s.count;
  }
  if (s.count == 0) return in->fail("no images");
  return s;
}

Result<std::string> read_text(const std::string& path) {
  auto in = InputFile::open(path, "text");
  if (!in) return in.error();
  auto raw = read_bounded(*in, std::min(byte_bound(*in), kMaxTextBytes), "text");
  if (!raw) return raw.error();
  std::string text;
  text.reserve(raw->size());
  std::string_view s = *raw;
  if (s.substr(0, 3) == "\xEF\xBB\xBF") s.remove_prefix(3);
  for (std::size_t i = 0; i < s.size(); ++i)
    if (!(s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n')) text += s[i];
  raw->clear();

  // Lines of the Gutenberg frame.
  auto starts = [](std::string_view line, std::string_view prefix) {
    if (line.size() < prefix.size()) return false;
    for (std::size_t i = 0; i < prefix.size(); ++i)
      if (std::toupper(static_cast<unsigned char>(line[i])) != std::toupper(static_cast<unsigned char>(prefix[i])))
        return false;
    return true;
  };
  std::size_t body_begin = 0, body_end = text.size();
  bool have_start = false;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    std::string_view trimmed = line;
    while (!trimmed.empty() && (trimmed.front() == ' ' || trimmed.front() == '\t')) trimmed.remove_prefix(1);
    if (!have_start && starts(trimmed, "*** START OF")) {
      body_begin = std::min(end + 1, text.size());
      have_start = true;
    } else if (starts(trimmed, "*** END OF") || starts(trimmed, "End of the Project Gutenberg") ||
               starts(trimmed, "End of Project Gutenberg")) {
      body_end = pos;
      break;
    }
    pos = end + 1;
  }
  if (body_end < body_begin) body_end = body_begin;
  std::string_view body(text.data() + body_begin, body_end - body_begin);
  // Blank lines around the body.
  while (!body.empty() && (body.front() == '\n' || body.front() == ' ' || body.front() == '\t')) {
    const std::size_t nl = body.find('\n');
    if (nl == std::string_view::npos || body.substr(0, nl).find_first_not_of(" \t") != std::string_view::npos) break;
    body.remove_prefix(nl + 1);
  }
  while (!body.empty() && (body.back() == '\n' || body.back() == ' ' || body.back() == '\t')) body.remove_suffix(1);
  return std::string(body) + (body.empty() ? "" : "\n");
}

Result<ImageSet> load_image_set(const std::string& name, const std::string& split, const std::string& dir) {
  if (split != "train" && split != "test") return make_error("data set '" + name + "': split '" + split + "': expected train or test");
  if (name == "fashion-mnist") {
    const std::string prefix = split == "train" ? "train" : "t10k";
    auto images = data_file(name, prefix + "-images-idx3-ubyte.gz", dir);
    if (!images) return images.error();
    auto labels = data_file(name, prefix + "-labels-idx1-ubyte.gz", dir);
    if (!labels) return labels.error();
    return read_idx_images(*images, *labels);
  }
  if (name == "digits") {
    auto file = data_file(name, "digits.csv.gz", dir);
    if (!file) return file.error();
    auto all = read_digits_csv_gz(*file);
    if (!all) return all.error();
    constexpr std::int64_t kTest = 297;
    const std::int64_t px = all->rows * all->cols, first = split == "train" ? 0 : all->count - kTest;
    ImageSet s = *all;
    s.count = split == "train" ? all->count - kTest : kTest;
    s.pixels.assign(all->pixels.begin() + first * px, all->pixels.begin() + (first + s.count) * px);
    s.labels.assign(all->labels.begin() + first, all->labels.begin() + first + s.count);
    return s;
  }
  return make_error("data set '" + name + "': not an image data set (expected fashion-mnist or digits)");
}

}  // namespace mxlab
