// Reading and writing NumPy .npy files (numpy.lib.format, versions 1.0 / 2.0 / 3.0).
#include "mxlab/io/npy.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <optional>

#include "binary.hpp"
#include "input_file.hpp"
#include "mxlab/core/atomic_file.hpp"

namespace mxlab {
namespace {

using io_detail::InputFile;

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicLen = 6;
constexpr std::size_t kAlign = 64;              // ARRAY_ALIGN in numpy.lib.format
constexpr std::size_t kGrowthDigits = 21;       // GROWTH_AXIS_MAX_DIGITS in numpy.lib.format
constexpr std::size_t kMaxHeaderLen = 1 << 20;  // far beyond any real header; guards corrupt lengths

// ---- The header: a Python dict literal with string keys, as numpy writes and ast.literal_eval reads.

struct PyValue {
  enum class Kind { Str, Bool, Int, IntTuple, None, Other } kind = Kind::Other;
  std::string text;  // Str: the string; Other: what it is ("a list", "a float", ...)
  bool flag = false;
  std::int64_t integer = 0;
  std::vector<std::int64_t> tuple;
};

class HeaderParser {
 public:
  explicit HeaderParser(std::string_view s) : s_(s) {}

  /// Parses the whole dict; on failure returns a problem description.
  std::optional<std::string> parse(std::map<std::string, PyValue>& out) {
    skip_ws();
    if (!eat('{')) return problem("expected '{'");
    skip_ws();
    while (!eat('}')) {
      std::string key;
      if (auto p = parse_string(key)) return p;
      skip_ws();
      if (!eat(':')) return problem("expected ':' after key '" + key + "'");
      skip_ws();
      PyValue v;
      if (auto p = parse_value(v)) return p;
      if (!out.emplace(key, std::move(v)).second) return problem("the key '" + key + "' appears twice");
      skip_ws();
      if (eat(',')) {
        skip_ws();
        continue;
      }
      skip_ws();
      if (!eat('}')) return problem("expected ',' or '}'");
      break;
    }
    skip_ws();
    if (pos_ != s_.size()) return problem("unexpected text after the dictionary");
    return std::nullopt;
  }

 private:
  std::optional<std::string> problem(const std::string& what) const {
    return what + " at offset " + std::to_string(pos_);
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool eat_word(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return false;
    const std::size_t end = pos_ + w.size();
    if (end < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_')) return false;
    pos_ = end;
    return true;
  }

  std::optional<std::string> parse_string(std::string& out) {
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) return problem("expected a quoted string");
    const char quote = s_[pos_++];
    const std::size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      if (s_[pos_] == '\\') return problem("escape sequences are not supported in header strings");
      ++pos_;
    }
    if (pos_ >= s_.size()) return problem("unterminated string");
    out = std::string(s_.substr(start, pos_ - start));
    ++pos_;
    return std::nullopt;
  }

  // A Python int, optionally with the 'L' suffix that Python 2 wrote.
  std::optional<std::string> parse_int(std::int64_t& out) {
    const std::size_t start = pos_;
    bool neg = false;
    if (eat('-')) neg = true;
    const std::size_t digits = pos_;
    std::uint64_t v = 0;
    bool overflow = false;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      const auto d = static_cast<std::uint64_t>(s_[pos_] - '0');
      if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10) overflow = true;
      v = v * 10 + d;
      ++pos_;
    }
    if (pos_ == digits) {
      pos_ = start;
      return problem("expected an integer");
    }
    eat('L');
    if (overflow || v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return problem("integer " + std::string(s_.substr(start, pos_ - start)) + " is too large");
    out = neg ? -static_cast<std::int64_t>(v) : static_cast<std::int64_t>(v);
    return std::nullopt;
  }

  // Skips a bracketed Python literal (list, dict, tuple of non-integers), minding strings.
  std::optional<std::string> skip_nested() {
    int depth = 0;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == '\'' || c == '"') {
        std::string ignored;
        if (auto p = parse_string(ignored)) return p;
        continue;
      }
      if (c == '[' || c == '(' || c == '{') ++depth;
      if (c == ']' || c == ')' || c == '}') --depth;
      ++pos_;
      if (depth == 0) return std::nullopt;
    }
    return problem("unbalanced brackets");
  }

  std::optional<std::string> parse_value(PyValue& v) {
    if (pos_ >= s_.size()) return problem("expected a value");
    const char c = s_[pos_];
    if (c == '\'' || c == '"') {
      v.kind = PyValue::Kind::Str;
      return parse_string(v.text);
    }
    if (eat_word("True")) {
      v.kind = PyValue::Kind::Bool;
      v.flag = true;
      return std::nullopt;
    }
    if (eat_word("False")) {
      v.kind = PyValue::Kind::Bool;
      v.flag = false;
      return std::nullopt;
    }
    if (eat_word("None")) {
      v.kind = PyValue::Kind::None;
      return std::nullopt;
    }
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
      v.kind = PyValue::Kind::Int;
      return parse_int(v.integer);
    }
    if (c == '(') return parse_tuple(v);
    if (c == '[' || c == '{') {
      v.kind = PyValue::Kind::Other;
      v.text = c == '[' ? "a list" : "a dictionary";
      return skip_nested();
    }
    return problem("unexpected character '" + std::string(1, c) + "'");
  }

  // "()", "(3,)", "(3, 4)", "(3, 4,)"; "(3)" is the int 3 in Python, not a tuple. A tuple with other
  // elements ("(1.5,)", "('a',)") is skipped and reported as such.
  std::optional<std::string> parse_tuple(PyValue& v) {
    const std::size_t start = pos_;
    ++pos_;
    skip_ws();
    v.kind = PyValue::Kind::IntTuple;
    bool trailing_comma = false;
    bool ints = true;
    while (!eat(')')) {
      if (pos_ >= s_.size() || (s_[pos_] != '-' && !std::isdigit(static_cast<unsigned char>(s_[pos_])))) {
        ints = false;
        break;
      }
      std::int64_t x = 0;
      if (auto p = parse_int(x)) return p;
      v.tuple.push_back(x);
      skip_ws();
      trailing_comma = eat(',');
      skip_ws();
      if (!trailing_comma) {
        if (!eat(')')) ints = false;
        break;
      }
    }
    if (!ints) {
      pos_ = start;
      v.kind = PyValue::Kind::Other;
      v.text = "a tuple of non-integers";
      v.tuple.clear();
      return skip_nested();
    }
    if (v.tuple.size() == 1 && !trailing_comma) {
      v.kind = PyValue::Kind::Int;
      v.integer = v.tuple[0];
      v.tuple.clear();
    }
    return std::nullopt;
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

std::string kind_name(const PyValue& v) {
  switch (v.kind) {
    case PyValue::Kind::Str:
      return "a string";
    case PyValue::Kind::Bool:
      return "a bool";
    case PyValue::Kind::Int:
      return "an int";
    case PyValue::Kind::IntTuple:
      return "a tuple";
    case PyValue::Kind::None:
      return "None";
    case PyValue::Kind::Other:
      return v.text;
  }
  return "?";
}

// ---- dtype descriptors.

struct Descr {
  DType dtype = DType::F32;
  std::size_t itemsize = 4;
  bool little = true;
};

Result<Descr> parse_descr(const InputFile& in, const std::string& descr, const NpyReadOptions& options) {
  std::string_view s = descr;
  bool little = io_detail::kHostLittle;
  char order = '=';
  if (!s.empty() && (s[0] == '<' || s[0] == '>' || s[0] == '=' || s[0] == '|')) {
    order = s[0];
    s.remove_prefix(1);
  }
  if (order == '<') little = true;
  if (order == '>') little = false;
  Descr d;
  d.little = little;
  if (s == "f2") {
    d.dtype = DType::F16;
    d.itemsize = 2;
  } else if (s == "f4") {
    d.dtype = DType::F32;
    d.itemsize = 4;
  } else if (s == "f8") {
    d.dtype = DType::F64;
    d.itemsize = 8;
  } else if ((s == "u2" || s == "V2") && options.u2_as_bf16) {
    d.dtype = DType::BF16;
    d.itemsize = 2;
  } else if (s == "u2" || s == "V2") {
    return in.fail("dtype '" + descr +
                   "' holds 16-bit integers or raw bytes, not floats; to read them as bfloat16 bit patterns, say so "
                   "(mxlab: --bf16; an experiment input: bf16 = true)");
  } else {
    return in.fail("unsupported dtype '" + descr +
                   "'; readable dtypes are float16 'f2', float32 'f4', float64 "
                   "'f8' (either byte order) and bfloat16 bits stored as 'u2'");
  }
  return d;
}

// ---- Reading.

Result<NpyHeader> read_header(InputFile& in) {
  unsigned char pre[8];
  auto got = in.read(pre, sizeof pre);
  if (!got) return got.error();
  if (*got < kMagicLen || std::memcmp(pre, kMagic, kMagicLen) != 0)
    return in.fail("not an npy file (it does not start with the magic string \\x93NUMPY)");
  if (*got < sizeof pre) return in.fail("truncated: the file ends inside the format version");
  NpyHeader h;
  h.major = pre[6];
  h.minor = pre[7];
  if (!((h.major == 1 || h.major == 2 || h.major == 3) && h.minor == 0))
    return in.fail("unsupported npy format version " + std::to_string(h.major) + "." + std::to_string(h.minor) +
                   " (known: 1.0, 2.0, 3.0)");
  const std::size_t len_bytes = h.major == 1 ? 2 : 4;
  unsigned char lenbuf[4];
  got = in.read(lenbuf, len_bytes);
  if (!got) return got.error();
  if (*got < len_bytes) return in.fail("truncated: the file ends inside the header length");
  const auto header_len = static_cast<std::size_t>(io_detail::load_uint(lenbuf, len_bytes, true));
  if (header_len > kMaxHeaderLen)
    return in.fail("header length " + std::to_string(header_len) + " is implausibly large (corrupt file?)");
  std::string text(header_len, '\0');
  got = in.read(text.data(), header_len);
  if (!got) return got.error();
  if (*got < header_len)
    return in.fail("truncated: the header should be " + std::to_string(header_len) + " bytes, the file ends after " +
                   std::to_string(*got));
  h.data_offset = kMagicLen + 2 + len_bytes + header_len;

  std::map<std::string, PyValue> dict;
  if (auto p = HeaderParser(text).parse(dict)) {
    std::string shown = text.substr(0, 200);
    while (!shown.empty() && (shown.back() == ' ' || shown.back() == '\n')) shown.pop_back();
    return in.fail("cannot parse the header dictionary (" + *p + "): " + shown);
  }
  for (const char* key : {"descr", "fortran_order", "shape"})
    if (dict.find(key) == dict.end()) return in.fail(std::string("the header lacks the key '") + key + "'");
  for (const auto& [key, value] : dict)
    if (key != "descr" && key != "fortran_order" && key != "shape")
      return in.fail("the header has an unexpected key '" + key + "' (expected only descr, fortran_order, shape)");
  const PyValue& descr = dict["descr"];
  if (descr.kind == PyValue::Kind::Other && descr.text == "a list")
    return in.fail("structured dtypes (a list 'descr') are not supported; save a plain float array");
  if (descr.kind != PyValue::Kind::Str) return in.fail("'descr' is " + kind_name(descr) + ", expected a string");
  const PyValue& fortran = dict["fortran_order"];
  if (fortran.kind != PyValue::Kind::Bool)
    return in.fail("'fortran_order' is " + kind_name(fortran) + ", expected True or False");
  const PyValue& shape = dict["shape"];
  if (shape.kind != PyValue::Kind::IntTuple)
    return in.fail("'shape' is " + kind_name(shape) + ", expected a tuple of integers");
  h.descr = descr.text;
  h.fortran_order = fortran.flag;
  h.shape = shape.tuple;
  return h;
}

std::string tuple_text(std::span<const std::int64_t> shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

template <typename Word>
void swap_words(Word* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    Word w = p[i];
    auto* b = reinterpret_cast<unsigned char*>(&w);
    std::reverse(b, b + sizeof(Word));
    p[i] = w;
  }
}

// Reads n elements whose bytes have the layout of T (a float or unsigned word), fixes their byte order
// and checks that nothing follows them.
template <typename T>
Result<std::vector<T>> read_elements(InputFile& in, std::size_t n, bool little, const NpyHeader& h) {
  const std::size_t bytes = n * sizeof(T);
  auto truncated = [&](std::uint64_t have) {
    return in.fail("truncated: shape " + tuple_text(h.shape) + " of '" + h.descr + "' needs " + std::to_string(bytes) +
                   " bytes of data, the file has " + std::to_string(have));
  };
  std::vector<T> v;
  try {
    if (auto rem = in.remaining()) {
      // Known size: checked before allocating, so a corrupt shape cannot request absurd memory.
      if (*rem < bytes) return truncated(*rem);
      v.resize(n);
      auto got = in.read(v.data(), bytes);
      if (!got) return got.error();
      if (*got < bytes) return truncated(*got);
    } else {
      // Compressed: the size is unknown until read, so memory grows with the data actually present.
      constexpr std::size_t kChunk = (std::size_t{16} << 20) / sizeof(T);
      while (v.size() < n) {
        const std::size_t old = v.size();
        const std::size_t m = std::min(kChunk, n - old);
        v.resize(old + m);
        auto got = in.read(v.data() + old, m * sizeof(T));
        if (!got) return got.error();
        if (*got < m * sizeof(T)) return truncated(old * sizeof(T) + *got);
      }
    }
  } catch (const std::bad_alloc&) {
    return in.fail("not enough memory for " + std::to_string(n) + " elements");
  }
  auto extra = in.skip_rest();
  if (!extra) return extra.error();
  if (*extra > 0)
    return in.fail(std::to_string(*extra) + " bytes follow the array data (shape " + tuple_text(h.shape) + " of '" +
                   h.descr + "' needs " + std::to_string(bytes) + " bytes)");
  if (little != io_detail::kHostLittle) {
    if constexpr (sizeof(T) == 2) swap_words(reinterpret_cast<std::uint16_t*>(v.data()), n);
    if constexpr (sizeof(T) == 4) swap_words(reinterpret_cast<std::uint32_t*>(v.data()), n);
    if constexpr (sizeof(T) == 8) swap_words(reinterpret_cast<std::uint64_t*>(v.data()), n);
  }
  return v;
}

Result<Tensor> read_tensor(InputFile& in, const NpyReadOptions& options) {
  auto h = read_header(in);
  if (!h) return h.error();
  if (h->fortran_order)
    return in.fail(
        "fortran_order is True (column-major data), which is not supported; save a C-order array, "
        "e.g. numpy.save(path, numpy.ascontiguousarray(a))");
  auto d = parse_descr(in, h->descr, options);
  if (!d) return d.error();
  auto n = shape_elements(h->shape, "npy '" + in.name() + "'");
  if (!n) return n.error();
  if (*n > std::numeric_limits<std::size_t>::max() / d->itemsize)
    return in.fail("shape " + tuple_text(h->shape) + " is too large");
  const std::uint64_t file_bytes = in.remaining() ? *in.remaining() : in.stored_size() * io_detail::kDeflateMaxRatio;
  if (auto others = io_detail::empty_shape_excess(h->shape, d->itemsize, file_bytes))
    return in.fail("shape " + tuple_text(h->shape) + " has no elements but dimensions that multiply to " +
                   std::to_string(others) + ", far more than a file of this size could hold (corrupt shape?)");
  std::vector<std::int64_t> shape = h->shape;
  switch (d->dtype) {
    case DType::F32: {
      auto v = read_elements<float>(in, *n, d->little, *h);
      if (!v) return v.error();
      return Tensor::from_f32(std::move(shape), std::move(*v), DType::F32);
    }
    case DType::F64: {
      auto v = read_elements<double>(in, *n, d->little, *h);
      if (!v) return v.error();
      auto t = Tensor::from_f64(std::move(shape), std::move(*v));
      if (!t) return in.fail(t.error().message);
      return t;
    }
    case DType::F16:
    case DType::BF16: {
      auto v = read_elements<std::uint16_t>(in, *n, d->little, *h);
      if (!v) return v.error();
      std::vector<float> f;
      try {
        f.resize(*n);
      } catch (const std::bad_alloc&) {
        return in.fail("not enough memory for " + std::to_string(*n) + " elements");
      }
      const bool half = d->dtype == DType::F16;
      for (std::size_t i = 0; i < *n; ++i)
        f[i] = half ? io_detail::f16_to_float((*v)[i]) : io_detail::bf16_to_float((*v)[i]);
      return Tensor::from_f32(std::move(shape), std::move(f), d->dtype);
    }
  }
  return in.fail("internal error: unhandled dtype");
}

Result<NpyBytes> read_bytes_array(InputFile& in) {
  auto h = read_header(in);
  if (!h) return h.error();
  if (h->descr != "|u1" && h->descr != "<u1" && h->descr != ">u1")
    return in.fail("expected uint8 data ('|u1'), found '" + h->descr + "'");
  if (h->fortran_order) return in.fail("fortran_order is True (column-major data), which is not supported");
  auto n = shape_elements(h->shape, "npy '" + in.name() + "'");
  if (!n) return n.error();
  const std::uint64_t file_bytes = in.remaining() ? *in.remaining() : in.stored_size() * io_detail::kDeflateMaxRatio;
  if (auto others = io_detail::empty_shape_excess(h->shape, 1, file_bytes))
    return in.fail("shape " + tuple_text(h->shape) + " has no elements but dimensions that multiply to " +
                   std::to_string(others) + ", far more than a file of this size could hold (corrupt shape?)");
  auto v = read_elements<std::uint8_t>(in, *n, true, *h);
  if (!v) return v.error();
  return NpyBytes{h->shape, std::move(*v)};
}

// ---- Writing.

template <typename T>
Result<std::size_t> write_array(const std::string& path, std::string_view descr, std::span<const T> values,
                                const std::vector<std::int64_t>& shape) {
  auto n = shape_elements(shape, "npy '" + path + "'");
  if (!n) return n.error();
  if (*n != values.size())
    return make_error("npy '" + path + "': shape " + tuple_text(shape) + " has " + std::to_string(*n) +
                      " elements, but " + std::to_string(values.size()) + " values were given");
  auto f = AtomicFile::create(path, "npy");
  if (!f) return f.error();
  f->write(npy_header(descr, shape));
  if constexpr (sizeof(T) == 1) {
    f->write(values.data(), values.size());
  } else if (io_detail::kHostLittle) {
    f->write(values.data(), values.size() * sizeof(T));
  } else {
    // Big-endian host: the file is little-endian; convert in chunks.
    std::vector<unsigned char> buf;
    constexpr std::size_t kChunk = 1 << 14;
    for (std::size_t i = 0; i < values.size(); i += kChunk) {
      const std::size_t m = std::min(kChunk, values.size() - i);
      buf.resize(m * sizeof(T));
      for (std::size_t j = 0; j < m; ++j) {
        const auto* src = reinterpret_cast<const unsigned char*>(&values[i + j]);
        std::reverse_copy(src, src + sizeof(T), buf.data() + j * sizeof(T));
      }
      if (!f->write(buf.data(), buf.size())) break;
    }
  }
  return f->commit();
}

}  // namespace

Result<NpyHeader> read_npy_header(const std::string& path) {
  auto in = InputFile::open(path, "npy");
  if (!in) return in.error();
  return read_header(*in);
}

Result<Tensor> read_npy(const std::string& path, const NpyReadOptions& options) {
  auto in = InputFile::open(path, "npy");
  if (!in) return in.error();
  return read_tensor(*in, options);
}

Result<Tensor> parse_npy(std::string_view bytes, std::string_view name, const NpyReadOptions& options) {
  InputFile in = InputFile::from_memory(bytes, std::string(name), "npy");
  return read_tensor(in, options);
}

Result<NpyBytes> read_npy_u8(const std::string& path) {
  auto in = InputFile::open(path, "npy");
  if (!in) return in.error();
  return read_bytes_array(*in);
}

Result<NpyBytes> parse_npy_u8(std::string_view bytes, std::string_view name) {
  InputFile in = InputFile::from_memory(bytes, std::string(name), "npy");
  return read_bytes_array(in);
}

std::string npy_header(std::string_view descr, std::span<const std::int64_t> shape) {
  // numpy.lib.format._write_array_header: repr of the dict with sorted keys, then the growth spaces.
  std::string dict =
      "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': " + tuple_text(shape) + ", }";
  if (!shape.empty()) {
    const std::size_t digits = std::to_string(shape[0]).size();
    if (digits < kGrowthDigits) dict.append(kGrowthDigits - digits, ' ');
  }
  // _wrap_header: pad with spaces, then '\n', so that magic + version + length field + header is a
  // multiple of 64; padlen is 64 (not 0) when the unpadded size already is one. Version 1.0 stores the
  // length as uint16, 2.0 as uint32.
  auto wrap = [&](int major) {
    const std::size_t len_bytes = major == 1 ? 2 : 4;
    const std::size_t hlen = dict.size() + 1;
    const std::size_t padlen = kAlign - ((kMagicLen + 2 + len_bytes + hlen) % kAlign);
    const std::size_t total_len = hlen + padlen;
    std::string out(kMagic, kMagicLen);
    out += static_cast<char>(major);
    out += '\0';
    unsigned char len[4];
    io_detail::store_le(len, total_len, len_bytes);
    out.append(reinterpret_cast<const char*>(len), len_bytes);
    out += dict;
    out.append(padlen, ' ');
    out += '\n';
    return std::make_pair(total_len, out);
  };
  auto v1 = wrap(1);
  if (v1.first <= 0xFFFF) return v1.second;
  return wrap(2).second;
}

Result<std::size_t> write_npy(const std::string& path, std::span<const float> values,
                              const std::vector<std::int64_t>& shape) {
  return write_array(path, "<f4", values, shape);
}

Result<std::size_t> write_npy(const std::string& path, std::span<const double> values,
                              const std::vector<std::int64_t>& shape) {
  return write_array(path, "<f8", values, shape);
}

Result<std::size_t> write_npy(const std::string& path, std::span<const std::uint8_t> values,
                              const std::vector<std::int64_t>& shape) {
  return write_array(path, "|u1", values, shape);
}

Result<std::size_t> write_npy(const std::string& path, std::span<const std::uint16_t> values,
                              const std::vector<std::int64_t>& shape) {
  return write_array(path, "<u2", values, shape);
}

Result<std::size_t> write_npy(const std::string& path, std::span<const std::int32_t> values,
                              const std::vector<std::int64_t>& shape) {
  return write_array(path, "<i4", values, shape);
}

Result<std::size_t> write_npy(const std::string& path, const Tensor& tensor) {
  if (tensor.dtype() == DType::F64) return write_npy(path, std::span<const double>(tensor.f64_data()), tensor.shape());
  return write_npy(path, std::span<const float>(tensor.data()), tensor.shape());
}

}  // namespace mxlab
