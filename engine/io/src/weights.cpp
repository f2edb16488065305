// Weight files: tfjs weight manifests, safetensors (single files and sharded indexes), GGUF, GNU
// Backgammon .wd and capture folders, listed from their headers and read one tensor at a time.
#include "mxlab/io/weights.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <set>

// g++ 12 warns of uninitialized std::function members inside <regex>'s own automaton at -O2 with the
// sanitizers (a false positive in the library's code, not in ours): silenced for this header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <re2/re2.h>
#pragma GCC diagnostic pop

#include "binary.hpp"
#include "mxlab/io/json_limits.hpp"

namespace mxlab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

/// Most dimensions a weight may have; real weights have at most 5.
constexpr std::size_t kMaxRank = 16;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

std::string sq(std::string_view s) { return "'" + std::string(s) + "'"; }

// Size of a regular file, or why it is not one.
Result<std::uint64_t> regular_file_size(const std::string& path, const std::string& label) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return make_error(label + " '" + path + "': cannot open: " + std::error_code(errno, std::generic_category()).message());
  if (S_ISDIR(st.st_mode)) return make_error(label + " '" + path + "': is a directory, not a file");
  if (!S_ISREG(st.st_mode)) return make_error(label + " '" + path + "': is not a regular file");
  return static_cast<std::uint64_t>(st.st_size);
}

// Reads n bytes at offset; fewer bytes than asked is an error (the file changed since it was opened).
std::optional<std::string> read_at(std::FILE* f, std::uint64_t offset, char* dest, std::size_t n) {
  if (offset > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max()) ||
      ::fseeko(f, static_cast<off_t>(offset), SEEK_SET) != 0)
    return "cannot seek to byte " + std::to_string(offset);
  const std::size_t got = std::fread(dest, 1, n, f);
  if (got < n) {
    if (std::ferror(f)) return "cannot read: " + std::error_code(errno, std::generic_category()).message();
    return "the file ends after " + std::to_string(offset + got) + " bytes, it was longer when opened";
  }
  return std::nullopt;
}

// Product of a shape, with the element count times the item size; nullopt on overflow of 64 bits.
std::optional<std::uint64_t> checked_elements(std::span<const std::int64_t> shape) {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) return std::nullopt;
    const auto u = static_cast<std::uint64_t>(d);
    if (u != 0 && n > std::numeric_limits<std::uint64_t>::max() / u) return std::nullopt;
    n *= u;
  }
  return n;
}

// A JSON array of non-negative integers (a shape); the problem as text otherwise.
std::optional<std::string> json_shape(const json& v, std::vector<std::int64_t>& out) {
  if (!v.is_array()) return "'shape' is " + json_kind(v) + ", expected an array of integers";
  if (v.size() > kMaxRank)
    return "'shape' has " + std::to_string(v.size()) + " dimensions, more than " + std::to_string(kMaxRank);
  out.clear();
  for (std::size_t i = 0; i < v.size(); ++i) {
    const json& d = v[i];
    if (d.is_number_unsigned()) {
      const auto u = d.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        return "dimension " + std::to_string(i + 1) + " of 'shape' (" + std::to_string(u) + ") is too large";
      out.push_back(static_cast<std::int64_t>(u));
    } else if (d.is_number_integer()) {
      return "dimension " + std::to_string(i + 1) + " of 'shape' is negative (" + std::to_string(d.get<std::int64_t>()) + ")";
    } else {
      return "dimension " + std::to_string(i + 1) + " of 'shape' is " + json_kind(d) +
             ", expected a non-negative integer";
    }
  }
  return std::nullopt;
}

std::string shape_text(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// ---- tfjs

// Checks a shard path from weightsManifest and resolves it inside the model's folder.
std::optional<std::string> check_shard_path(const std::string& p, const fs::path& dir, std::string& resolved) {
  if (p.empty()) return "an empty shard path";
  if (p.find('\0') != std::string::npos) return "a shard path with a NUL byte";
  if (p.front() == '/' || p.find('\\') != std::string::npos || p.find(':') != std::string::npos)
    return "the shard path " + sq(p) + " is not a plain relative path inside the model's folder";
  for (const auto& part : fs::path(p))
    if (part == ".." || part == ".")
      return "the shard path " + sq(p) + " leaves or walks around the model's folder ('" + part.string() + "')";
  const fs::path full = dir / p;
  std::error_code ec;
  const fs::path real = fs::canonical(full, ec);
  if (ec) return "the shard " + sq(p) + " cannot be opened (" + full.string() + ": " + ec.message() + ")";
  const fs::path real_dir = fs::canonical(dir, ec);
  if (ec) return "the model's folder cannot be resolved: " + ec.message();
  // Symbolic links must not lead out of the folder either.
  auto rel = real.lexically_relative(real_dir);
  if (rel.empty() || *rel.begin() == "..")
    return "the shard " + sq(p) + " resolves to " + real.string() + ", outside the model's folder";
  resolved = full.string();
  return std::nullopt;
}

struct TfjsDtype {
  WeightStorage storage = WeightStorage::Other;
  std::uint64_t item = 4;
  std::string text;
};

std::optional<std::string> tfjs_dtype(const json& w, TfjsDtype& out) {
  auto it = w.find("dtype");
  if (it == w.end()) return "lacks 'dtype'";
  if (!it->is_string()) return "'dtype' is " + json_kind(*it) + ", expected a string";
  const auto& dtype = it->get_ref<const std::string&>();
  if (dtype == "string") return "has dtype 'string' (variable-length strings are not supported in weight files)";
  std::uint64_t item = 0;
  WeightStorage storage = WeightStorage::Other;
  if (dtype == "float32") {
    item = 4, storage = WeightStorage::F32;
  } else if (dtype == "int32") {
    item = 4, storage = WeightStorage::I32;
  } else if (dtype == "bool") {
    item = 1;
  } else if (dtype == "complex64") {
    item = 8;
  } else {
    return "has the unknown dtype " + sq(dtype) + " (tfjs dtypes: float32, int32, bool, complex64, string)";
  }
  out.text = dtype;
  auto q = w.find("quantization");
  if (q != w.end() && !q->is_null()) {
    if (!q->is_object()) return "'quantization' is " + json_kind(*q) + ", expected an object";
    auto qd = q->find("dtype");
    if (qd == q->end() || !qd->is_string()) return "'quantization' lacks a string 'dtype'";
    const auto& qt = qd->get_ref<const std::string&>();
    if (qt == "float16") {
      item = 2;
      storage = dtype == "float32" ? WeightStorage::F16 : WeightStorage::Other;
      out.text = "float16 of " + dtype;
    } else if (qt == "uint8" || qt == "uint16") {
      // Affine codes q * scale + min, computed by tfjs in JavaScript doubles and rounded to float32:
      // listed, but not read as exact values.
      item = qt == "uint8" ? 1 : 2;
      storage = WeightStorage::Other;
      out.text = qt + " affine of " + dtype;
    } else {
      return "has the unknown quantization dtype " + sq(qt) + " (tfjs: float16, uint8, uint16)";
    }
  }
  out.item = item;
  out.storage = storage;
  return std::nullopt;
}

std::string strip_input_name(std::string s) {
  if (!s.empty() && s.front() == '^') s.erase(0, 1);
  const auto colon = s.rfind(':');
  if (colon != std::string::npos && colon + 1 < s.size() &&
      std::all_of(s.begin() + static_cast<std::ptrdiff_t>(colon) + 1, s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    s.erase(colon);
  return s;
}

// The layout a consuming op gives its weight operand `input_index`.
WeightLayout layout_from_op(const std::string& op, std::size_t input_index, const json& node) {
  if (input_index != 1) return WeightLayout::Other;
  if (op == "Conv2D" || op == "_FusedConv2D") return WeightLayout::ConvHWIO;
  if (op == "DepthwiseConv2dNative" || op == "FusedDepthwiseConv2dNative") return WeightLayout::DepthwiseHWCM;
  if (op == "Conv2DBackpropInput") return WeightLayout::ConvTransposeHWOI;
  if (op == "MatMul" || op == "_FusedMatMul") {
    bool transpose_b = false;
    if (auto a = node.find("attr"); a != node.end() && a->is_object())
      if (auto t = a->find("transpose_b"); t != a->end() && t->is_object())
        if (auto b = t->find("b"); b != t->end() && b->is_boolean()) transpose_b = b->get<bool>();
    return transpose_b ? WeightLayout::DenseOI : WeightLayout::DenseIO;
  }
  return WeightLayout::Other;
}

std::size_t layout_rank(WeightLayout layout) {
  switch (layout) {
    case WeightLayout::DenseIO:
    case WeightLayout::DenseOI:
    case WeightLayout::TokensHidden: return 2;
    case WeightLayout::ConvHWIO:
    case WeightLayout::DepthwiseHWCM:
    case WeightLayout::ConvOIHW:
    case WeightLayout::ConvTransposeHWOI: return 4;
    case WeightLayout::Other: return 0;
  }
  return 0;
}

// Keras names (layers models, and graph models without a node list): ".../kernel", ".../depthwise_kernel".
WeightLayout layout_from_name(const std::string& name, std::size_t rank) {
  auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with("depthwise_kernel") && rank == 4) return WeightLayout::DepthwiseHWCM;
  if (ends_with("kernel") && rank == 4) return WeightLayout::ConvHWIO;
  if (ends_with("kernel") && rank == 2) return WeightLayout::DenseIO;
  return WeightLayout::Other;
}

// ---- safetensors

struct StDtype {
  const char* name;
  WeightStorage storage;
  std::uint64_t item;
};

// The safetensors dtypes with whole-byte elements (safetensors/src/tensor.rs, Dtype).
constexpr StDtype kStDtypes[] = {
    {"F64", WeightStorage::F64, 8},      {"F32", WeightStorage::F32, 4},     {"F16", WeightStorage::F16, 2},
    {"BF16", WeightStorage::BF16, 2},    {"I64", WeightStorage::Other, 8},   {"I32", WeightStorage::I32, 4},
    {"I16", WeightStorage::Other, 2},    {"I8", WeightStorage::Other, 1},    {"U64", WeightStorage::Other, 8},
    {"U32", WeightStorage::Other, 4},    {"U16", WeightStorage::Other, 2},   {"U8", WeightStorage::Other, 1},
    {"BOOL", WeightStorage::Other, 1},   {"F8_E4M3", WeightStorage::Other, 1}, {"F8_E5M2", WeightStorage::Other, 1},
    {"F8_E8M0", WeightStorage::Other, 1},
};

// ---- capture folders

/// The manifest's file name in a capture folder, and the value of its "format" key.
constexpr const char* kCaptureManifest = "capture.json";
constexpr const char* kCaptureFormat = "mxlab-capture";
/// mxlab.torch.capture builds a folder NAME as ".NAME.HEX.partial" beside it and renames it when it is complete.
constexpr const char* kCapturePartial = ".partial";

/// A capture folder's path made absolute, without a trailing separator (so filename() is its name).
fs::path capture_folder(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(fs::path(path), ec).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p;
}

/// Notes on the temporaries of unfinished captures of the folder (".NAME.HEX.partial" beside it), in name order.
std::vector<std::string> unfinished_captures(const fs::path& folder) {
  const std::string prefix = "." + folder.filename().string() + ".";
  std::vector<std::string> found;
  std::error_code ec;
  for (fs::directory_iterator it(folder.parent_path(), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > prefix.size() + std::string_view(kCapturePartial).size() && name.starts_with(prefix) &&
        name.ends_with(kCapturePartial))
      found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> notes;
  for (const auto& name : found)
    notes.push_back("'" + name + "' beside " + sq(folder.filename().string()) +
                    " is a capture that did not finish (its process stopped while capturing): not read; delete it");
  return notes;
}
/// Keys of the manifest and of each tensor (others are refused: a misspelt key is a mistake, not an extension).
constexpr std::string_view kCaptureTopKeys[] = {"format", "version", "producer", "seed", "tensors"};
constexpr std::string_view kCaptureTensorKeys[] = {"name",   "file",  "shape",        "dtype",        "layout",
                                                    "layer",  "module", "role",        "site",         "index",
                                                    "step",   "source_shape", "source_dtype", "hidden_axis", "rows_of",
                                                    "sample"};

// ---- gnubg

constexpr float kGnubgMagic = 472.3782f;  // WEIGHTS_MAGIC_BINARY in gnubg's eval.h
constexpr float kGnubgVersion = 1.0f;     // WEIGHTS_VERSION_BINARY of the weights Debian ships
// Order of the nets in gnubg.wd (eval.c, EvalInitialise: contact, race, crashed, then the pruning nets).
constexpr const char* kGnubgNets[] = {"contact", "race", "crashed", "prune_contact", "prune_crashed", "prune_race"};
// A net's header: int cInput, cHidden, cOutput, fDynamic (nTrained); float betaHidden, betaOutput.
constexpr std::uint64_t kGnubgNetHeader = 24;
// Largest layer width accepted (the shipped nets have at most 250 inputs).
constexpr std::uint64_t kGnubgMaxWidth = 1U << 20;

float le_float(const unsigned char* p) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(io_detail::load_uint(p, 4, true)));
}
std::int32_t le_int(const unsigned char* p) {
  return std::bit_cast<std::int32_t>(static_cast<std::uint32_t>(io_detail::load_uint(p, 4, true)));
}

bool has_suffix(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string_view weight_file_kind_name(WeightFileKind kind) {
  switch (kind) {
    case WeightFileKind::Tfjs: return "tfjs";
    case WeightFileKind::Safetensors: return "safetensors";
    case WeightFileKind::Gnubg: return "gnubg";
    case WeightFileKind::Gguf: return "gguf";
    case WeightFileKind::Capture: return "capture";
  }
  return "?";
}

std::string_view weight_layout_name(WeightLayout layout) {
  switch (layout) {
    case WeightLayout::Other: return "other";
    case WeightLayout::ConvHWIO: return "conv HWIO";
    case WeightLayout::DepthwiseHWCM: return "depthwise HWCM";
    case WeightLayout::DenseIO: return "dense IO";
    case WeightLayout::DenseOI: return "dense OI";
    case WeightLayout::ConvOIHW: return "conv OIHW";
    case WeightLayout::ConvTransposeHWOI: return "conv-transpose HWOI";
    case WeightLayout::TokensHidden: return "tokens x hidden";
  }
  return "?";
}

Result<ReductionAxes> reduction_axes(std::span<const std::int64_t> shape, WeightLayout layout) {
  const std::size_t rank = layout_rank(layout);
  if (rank == 0)
    return make_error("weight of shape " + shape_text(shape) +
                      ": its layout is not known (not used as a dense or convolution kernel), so it has no reduction axis");
  if (shape.size() != rank)
    return make_error("weight of shape " + shape_text(shape) + ": a " + std::string(weight_layout_name(layout)) +
                      " kernel has " + std::to_string(rank) + " dimensions");
  switch (layout) {
    case WeightLayout::ConvHWIO: return ReductionAxes{{2}, "I"};
    case WeightLayout::DepthwiseHWCM: return ReductionAxes{{0, 1}, "HxW"};
    case WeightLayout::DenseIO: return ReductionAxes{{0}, "I"};
    case WeightLayout::DenseOI: return ReductionAxes{{1}, "I"};
    case WeightLayout::ConvOIHW: return ReductionAxes{{1}, "I"};
    case WeightLayout::ConvTransposeHWOI: return ReductionAxes{{3}, "I"};
    case WeightLayout::TokensHidden: return ReductionAxes{{1}, "hidden"};
    case WeightLayout::Other: break;
  }
  return make_error("weight of shape " + shape_text(shape) + ": unknown layout");
}

bool WeightInfo::readable() const {
  return storage == WeightStorage::F32 || storage == WeightStorage::F16 || storage == WeightStorage::BF16 ||
         storage == WeightStorage::F64;
}

Error WeightFile::fail(std::string_view problem) const { return make_error(label_ + " '" + path_ + "': " + std::string(problem)); }

// An opened file: the reader's WeightFile so far, the file's size and an open handle.
struct WeightFile::Begun {
  WeightFile file;
  std::uint64_t size = 0;
  FilePtr handle;
};

Result<WeightFile::Begun> WeightFile::begin(WeightFileKind kind, const std::string& path) {
  Begun b;
  b.file.kind_ = kind;
  b.file.path_ = path;
  b.file.label_ = std::string(weight_file_kind_name(kind));
  auto size = regular_file_size(path, b.file.label_);
  if (!size) return size.error();
  b.size = *size;
  b.handle.reset(std::fopen(path.c_str(), "rb"));
  if (!b.handle) return b.file.fail("cannot open: " + std::error_code(errno, std::generic_category()).message());
  return b;
}

Result<WeightFile> WeightFile::open(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec) || fs::path(path).filename() == kCaptureManifest) return open_capture(path);
  if (has_suffix(path, ".safetensors.index.json")) return open_safetensors_index(path);
  if (has_suffix(path, ".json")) {
    // An index under another name: a JSON object whose first key is "weight_map" or "metadata" then "weight_map".
    auto size = regular_file_size(path, "weights");
    if (size && *size <= kMaxJsonBytes) {
      std::string text(static_cast<std::size_t>(*size), '\0');
      FilePtr f(std::fopen(path.c_str(), "rb"));
      if (f && !read_at(f.get(), 0, text.data(), text.size()) && text.find("\"weight_map\"") != std::string::npos &&
          text.find("\"weightsManifest\"") == std::string::npos)
        return open_safetensors_index(path);
    }
    return open_tfjs(path);
  }
  if (has_suffix(path, ".safetensors")) return open_safetensors(path);
  if (has_suffix(path, ".gguf")) return open_gguf(path);
  if (has_suffix(path, ".wd")) return open_gnubg(path);
  // Unknown name: a safetensors header is a little-endian length followed by '{'.
  auto size = regular_file_size(path, "weights");
  if (!size) return size.error();
  FilePtr f(std::fopen(path.c_str(), "rb"));
  unsigned char head[9] = {};
  if (f && *size >= 9 && std::fread(head, 1, 9, f.get()) == 9) {
    const std::uint64_t n = io_detail::load_uint(head, 8, true);
    if (head[8] == '{' && n <= *size - 8) return open_safetensors(path);
    if (std::memcmp(head, "GGUF", 4) == 0) return open_gguf(path);
  }
  return make_error("weights '" + path +
                    "': unknown kind of weight file (expected a tfjs model.json, a .safetensors file or its "
                    "model.safetensors.index.json, a .gguf file, a gnubg .wd file or a capture folder)");
}

Result<WeightFile> WeightFile::open_tfjs(const std::string& path) {
  auto begun = begin(WeightFileKind::Tfjs, path);
  if (!begun) return begun.error();
  auto& [wf, size, file] = *begun;
  if (size > kMaxJsonBytes)
    return wf.fail("model.json has " + std::to_string(size) + " bytes, more than the limit of " +
                   std::to_string(kMaxJsonBytes));
  std::string text(static_cast<std::size_t>(size), '\0');
  if (auto p = read_at(file.get(), 0, text.data(), text.size())) return wf.fail(*p);
  file.reset();
  auto doc = parse_json_limited(text, wf.label_ + " '" + path + "'");
  if (!doc) return doc.error();
  text.clear();
  text.shrink_to_fit();
  if (!doc->is_object()) return wf.fail("the top level is " + json_kind(*doc) + ", expected an object");
  auto manifest = doc->find("weightsManifest");
  if (manifest == doc->end()) return wf.fail("there is no 'weightsManifest' (not a tfjs model.json)");
  if (!manifest->is_array()) return wf.fail("'weightsManifest' is " + json_kind(*manifest) + ", expected an array");

  // Consumers of each constant in a graph model: the first op that takes it as an input.
  std::map<std::string, std::pair<const json*, std::size_t>> consumer;
  if (auto topo = doc->find("modelTopology"); topo != doc->end() && topo->is_object())
    if (auto nodes = topo->find("node"); nodes != topo->end() && nodes->is_array())
      for (const json& node : *nodes) {
        if (!node.is_object()) continue;
        auto inputs = node.find("input");
        auto op = node.find("op");
        if (inputs == node.end() || !inputs->is_array() || op == node.end() || !op->is_string()) continue;
        for (std::size_t k = 0; k < inputs->size(); ++k)
          if ((*inputs)[k].is_string())
            consumer.emplace(strip_input_name((*inputs)[k].get<std::string>()), std::make_pair(&node, k));
      }

  const fs::path dir = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  std::set<std::string> names;
  for (std::size_t g = 0; g < manifest->size(); ++g) {
    const json& group = (*manifest)[g];
    const std::string where = "weightsManifest[" + std::to_string(g) + "]";
    if (!group.is_object()) return wf.fail(where + " is " + json_kind(group) + ", expected an object");
    auto paths = group.find("paths");
    auto weights = group.find("weights");
    if (paths == group.end() || !paths->is_array()) return wf.fail(where + " lacks a 'paths' array");
    if (weights == group.end() || !weights->is_array()) return wf.fail(where + " lacks a 'weights' array");
    std::vector<Shard> shards;
    std::uint64_t total = 0;
    for (std::size_t s = 0; s < paths->size(); ++s) {
      const json& p = (*paths)[s];
      if (!p.is_string())
        return wf.fail(where + ".paths[" + std::to_string(s) + "] is " + json_kind(p) + ", expected a string");
      std::string resolved;
      if (auto problem = check_shard_path(p.get<std::string>(), dir, resolved)) return wf.fail(where + ": " + *problem);
      auto shard_size = regular_file_size(resolved, "tfjs shard");
      if (!shard_size) return wf.fail(where + ": " + shard_size.error().message);
      shards.push_back({resolved, *shard_size});
      total += *shard_size;
    }
    std::uint64_t offset = 0;
    for (std::size_t i = 0; i < weights->size(); ++i) {
      const json& w = (*weights)[i];
      std::string at = where + ".weights[" + std::to_string(i) + "]";
      if (!w.is_object()) return wf.fail(at + " is " + json_kind(w) + ", expected an object");
      auto name = w.find("name");
      if (name == w.end() || !name->is_string() || name->get_ref<const std::string&>().empty())
        return wf.fail(at + " lacks a non-empty string 'name'");
      WeightInfo info;
      info.name = name->get<std::string>();
      at += " (" + sq(info.name) + ")";
      if (!names.insert(info.name).second) return wf.fail(at + ": the name appears twice in the manifest");
      auto shape = w.find("shape");
      if (shape == w.end()) return wf.fail(at + " lacks 'shape'");
      if (auto p = json_shape(*shape, info.shape)) return wf.fail(at + ": " + *p);
      TfjsDtype dt;
      if (auto p = tfjs_dtype(w, dt)) return wf.fail(at + " " + *p);
      auto n = checked_elements(info.shape);
      if (!n || *n > std::numeric_limits<std::uint64_t>::max() / dt.item)
        return wf.fail(at + ": shape " + shape_text(info.shape) + " has more elements than 64 bits can count");
      info.elements = *n;
      info.byte_size = *n * dt.item;
      if (auto others = io_detail::empty_shape_excess(info.shape, dt.item, total))
        return wf.fail(at + ": shape " + shape_text(info.shape) + " has no elements but dimensions that multiply to " +
                       std::to_string(others) + ", far more than the shards could hold (corrupt shape?)");
      info.dtype = dt.text;
      info.storage = dt.storage;
      if (info.byte_size > total - std::min(total, offset))
        return wf.fail(at + ": shape " + shape_text(info.shape) + " of " + dt.text + " needs " +
                       std::to_string(info.byte_size) + " bytes at offset " + std::to_string(offset) +
                       ", but the group's shards hold " + std::to_string(total) + " bytes in all (truncated data?)");
      if (auto c = consumer.find(info.name); c != consumer.end()) {
        const json& node = *c->second.first;
        info.op = node["op"].get<std::string>();
        const WeightLayout l = layout_from_op(info.op, c->second.second, node);
        if (layout_rank(l) == info.shape.size()) info.layout = l;
      } else {
        info.layout = layout_from_name(info.name, info.shape.size());
      }
      wf.locations_.push_back({wf.sources_.size(), offset});
      wf.weights_.push_back(std::move(info));
      offset += wf.weights_.back().byte_size;
    }
    if (offset != total)
      return wf.fail(where + ": the weights need " + std::to_string(offset) + " bytes, the shards hold " +
                     std::to_string(total) + " (" + std::to_string(total - offset) + " bytes belong to no weight)");
    wf.sources_.push_back(std::move(shards));
  }
  return wf;
}

Result<WeightFile> WeightFile::open_safetensors(const std::string& path) {
  auto begun = begin(WeightFileKind::Safetensors, path);
  if (!begun) return begun.error();
  auto& [wf, size, f] = *begun;
  if (size < 8) return wf.fail("truncated: " + std::to_string(size) + " bytes, fewer than the 8-byte header length");
  unsigned char lenbuf[8];
  if (auto p = read_at(f.get(), 0, reinterpret_cast<char*>(lenbuf), 8)) return wf.fail(*p);
  const std::uint64_t header_len = io_detail::load_uint(lenbuf, 8, true);
  if (header_len > size - 8)
    return wf.fail("the header length " + std::to_string(header_len) + " is beyond the file (" + std::to_string(size) +
                   " bytes)");
  if (header_len > kMaxJsonBytes)
    return wf.fail("the header length " + std::to_string(header_len) + " is more than the limit of " +
                   std::to_string(kMaxJsonBytes) + " bytes");
  std::string text(static_cast<std::size_t>(header_len), '\0');
  if (auto p = read_at(f.get(), 8, text.data(), text.size())) return wf.fail(*p);
  f.reset();
  if (text.empty() || text.front() != '{') return wf.fail("the header does not start with '{'");
  auto doc = parse_json_limited(text, wf.label_ + " '" + path + "'");
  if (!doc) return doc.error();
  if (!doc->is_object()) return wf.fail("the header is " + json_kind(*doc) + ", expected an object");
  const std::uint64_t data_size = size - 8 - header_len;

  struct Entry {
    WeightInfo info;
    std::uint64_t begin = 0, end = 0;
  };
  std::vector<Entry> entries;
  for (const auto& [key, value] : doc->items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return wf.fail("'__metadata__' is " + json_kind(value) + ", expected an object");
      for (const auto& [mk, mv] : value.items())
        if (!mv.is_string())
          return wf.fail("'__metadata__' entry " + sq(mk) + " is " + json_kind(mv) + ", expected a string");
      continue;
    }
    const std::string at = "tensor " + sq(key);
    if (!value.is_object()) return wf.fail(at + " is " + json_kind(value) + ", expected an object");
    for (const auto& [k, v] : value.items())
      if (k != "dtype" && k != "shape" && k != "data_offsets")
        return wf.fail(at + " has the unexpected key " + sq(k) + " (expected dtype, shape, data_offsets)");
    auto dtype = value.find("dtype");
    auto shape = value.find("shape");
    auto offsets = value.find("data_offsets");
    if (dtype == value.end() || !dtype->is_string()) return wf.fail(at + " lacks a string 'dtype'");
    if (shape == value.end()) return wf.fail(at + " lacks 'shape'");
    if (offsets == value.end()) return wf.fail(at + " lacks 'data_offsets'");
    Entry e;
    e.info.name = key;
    if (auto p = json_shape(*shape, e.info.shape)) return wf.fail(at + ": " + *p);
    const auto& dt = dtype->get_ref<const std::string&>();
    const StDtype* st = nullptr;
    for (const auto& d : kStDtypes)
      if (dt == d.name) st = &d;
    if (st == nullptr)
      return wf.fail(at + " has the unsupported dtype " + sq(dt) +
                     " (known: F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL F8_E4M3 F8_E5M2 F8_E8M0)");
    if (!offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned())
      return wf.fail(at + ": 'data_offsets' must be two non-negative integers [begin, end]");
    e.begin = (*offsets)[0].get<std::uint64_t>();
    e.end = (*offsets)[1].get<std::uint64_t>();
    if (e.begin > e.end)
      return wf.fail(at + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] end before they begin");
    if (e.end > data_size)
      return wf.fail(at + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                     "] point outside the data (" + std::to_string(data_size) + " bytes after the header)");
    auto n = checked_elements(e.info.shape);
    if (!n || *n > std::numeric_limits<std::uint64_t>::max() / st->item)
      return wf.fail(at + ": shape " + shape_text(e.info.shape) + " has more elements than 64 bits can count");
    e.info.elements = *n;
    e.info.byte_size = *n * st->item;
    if (auto others = io_detail::empty_shape_excess(e.info.shape, st->item, data_size))
      return wf.fail(at + ": shape " + shape_text(e.info.shape) + " has no elements but dimensions that multiply to " +
                     std::to_string(others) + ", far more than the file could hold (corrupt shape?)");
    if (e.info.byte_size != e.end - e.begin)
      return wf.fail(at + ": shape " + shape_text(e.info.shape) + " of " + dt + " needs " +
                     std::to_string(e.info.byte_size) + " bytes, data_offsets [" + std::to_string(e.begin) + ", " +
                     std::to_string(e.end) + "] span " + std::to_string(e.end - e.begin));
    e.info.dtype = dt;
    e.info.storage = st->storage;
    // Without a graph, the rank says how the tensor is used; PyTorch layouts are the common case.
    if (e.info.shape.size() == 2) e.info.layout = WeightLayout::DenseOI;
    if (e.info.shape.size() == 4) e.info.layout = WeightLayout::ConvOIHW;
    entries.push_back(std::move(e));
  }
  // The data must be covered exactly: no overlaps, no holes, nothing after the last tensor
  // (as the safetensors library requires).
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t pos = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.begin < pos)
      return wf.fail("tensors " + sq(entries[i - 1].info.name) + " and " + sq(e.info.name) +
                     " overlap (data_offsets [" + std::to_string(entries[i - 1].begin) + ", " +
                     std::to_string(entries[i - 1].end) + "] and [" + std::to_string(e.begin) + ", " +
                     std::to_string(e.end) + "])");
    if (e.begin > pos)
      return wf.fail("data bytes " + std::to_string(pos) + " to " + std::to_string(e.begin) + " belong to no tensor");
    pos = e.end;
  }
  if (pos != data_size)
    return wf.fail(std::to_string(data_size - pos) + " bytes after the last tensor belong to no tensor (data ends at " +
                   std::to_string(pos) + " of " + std::to_string(data_size) + ")");
  wf.sources_.push_back({Shard{path, size}});
  for (auto& e : entries) {
    wf.locations_.push_back({0, 8 + header_len + e.begin});
    wf.weights_.push_back(std::move(e.info));
  }
  return wf;
}

Result<WeightFile> WeightFile::open_safetensors_index(const std::string& path) {
  auto begun = begin(WeightFileKind::Safetensors, path);
  if (!begun) return begun.error();
  auto& [wf, size, f] = *begun;
  wf.label_ = "safetensors index";
  if (size > kMaxJsonBytes)
    return wf.fail("the index is " + std::to_string(size) + " bytes, more than the limit of " + std::to_string(kMaxJsonBytes));
  std::string text(static_cast<std::size_t>(size), '\0');
  if (auto p = read_at(f.get(), 0, text.data(), text.size())) return wf.fail(*p);
  f.reset();
  auto doc = parse_json_limited(text, wf.label_ + " '" + path + "'");
  if (!doc) return doc.error();
  if (!doc->is_object()) return wf.fail("the index is " + json_kind(*doc) + ", expected an object");
  for (const auto& [key, value] : doc->items())
    if (key != "metadata" && key != "weight_map")
      return wf.fail("unexpected key " + sq(key) + " (expected metadata, weight_map)");
  auto map = doc->find("weight_map");
  if (map == doc->end() || !map->is_object()) return wf.fail("lacks the object 'weight_map' (tensor name -> shard file)");
  // Shard file -> the tensors the map puts there.
  std::map<std::string, std::set<std::string>> shards;
  for (const auto& [name, shard] : map->items()) {
    if (!shard.is_string()) return wf.fail("weight_map entry " + sq(name) + " is " + json_kind(shard) + ", expected a shard file name");
    shards[shard.get<std::string>()].insert(name);
  }
  const fs::path dir = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  for (const auto& [shard, names] : shards) {
    std::string resolved;
    if (auto p = check_shard_path(shard, dir, resolved)) return wf.fail(*p);
    auto part = open_safetensors(resolved);
    if (!part) return wf.fail("shard " + sq(shard) + ": " + part.error().message);
    std::set<std::string> found;
    for (std::size_t i = 0; i < part->weights_.size(); ++i) {
      if (!names.count(part->weights_[i].name)) continue;  // a tensor the map does not list is not the model's
      found.insert(part->weights_[i].name);
      wf.weights_.push_back(part->weights_[i]);
      wf.locations_.push_back({wf.sources_.size(), part->locations_[i].offset});
    }
    for (const auto& name : names)
      if (!found.count(name)) return wf.fail("tensor " + sq(name) + " is not in its shard " + sq(shard));
    wf.sources_.push_back(part->sources_.front());
  }
  return wf;
}

Result<WeightFile> WeightFile::open_capture(const std::string& path) {
  std::error_code ec;
  const bool folder = fs::is_directory(path, ec);
  const fs::path manifest = folder ? fs::path(path) / kCaptureManifest : fs::path(path);
  if (folder && !fs::exists(manifest, ec)) {
    const std::string name = capture_folder(path).filename().string();
    if (name.starts_with(".") && name.ends_with(kCapturePartial))
      return make_error("weights '" + path + "': the temporary folder of a capture that did not finish (its process "
                        "stopped before writing " + kCaptureManifest + "); delete it and capture again");
    return make_error("weights '" + path + "': a folder without " + kCaptureManifest +
                      ", so not a capture folder (name a weight file itself, or a folder mxlab.torch.capture wrote)");
  }
  auto begun = begin(WeightFileKind::Capture, manifest.string());
  if (!begun) return begun.error();
  auto& [wf, size, f] = *begun;
  if (size > kMaxJsonBytes)
    return wf.fail("the manifest is " + std::to_string(size) + " bytes, more than the limit of " + std::to_string(kMaxJsonBytes));
  std::string text(static_cast<std::size_t>(size), '\0');
  if (auto p = read_at(f.get(), 0, text.data(), text.size())) return wf.fail(*p);
  f.reset();
  auto doc = parse_json_limited(text, wf.label_ + " '" + wf.path_ + "'");
  if (!doc) return doc.error();
  if (!doc->is_object()) return wf.fail("the manifest is " + json_kind(*doc) + ", expected an object");
  auto known = [](std::span<const std::string_view> keys, const std::string& k) {
    return std::find(keys.begin(), keys.end(), k) != keys.end();
  };
  for (const auto& [key, value] : doc->items())
    if (!known(kCaptureTopKeys, key))
      return wf.fail("unexpected key " + sq(key) + " (expected format, version, producer, seed, tensors)");
  auto format = doc->find("format");
  if (format == doc->end() || !format->is_string() || format->get_ref<const std::string&>() != kCaptureFormat)
    return wf.fail(std::string("'format' is not \"") + kCaptureFormat + "\" (not a capture manifest)");
  auto version = doc->find("version");
  if (version == doc->end() || !version->is_number_unsigned() || version->get<std::uint64_t>() != 1)
    return wf.fail("'version' is not 1 (the only version this reader knows)");
  auto tensors = doc->find("tensors");
  if (tensors == doc->end() || !tensors->is_array()) return wf.fail("lacks the array 'tensors'");
  const fs::path dir = manifest.parent_path().empty() ? fs::path(".") : manifest.parent_path();
  std::set<std::string> names, files;
  for (std::size_t i = 0; i < tensors->size(); ++i) {
    const json& t = (*tensors)[i];
    std::string at = "tensors[" + std::to_string(i) + "]";
    if (!t.is_object()) return wf.fail(at + " is " + json_kind(t) + ", expected an object");
    for (const auto& [key, value] : t.items())
      if (!known(kCaptureTensorKeys, key)) return wf.fail(at + " has the unexpected key " + sq(key));
    auto text_of = [&](const char* key, bool required, std::string& out) -> std::optional<std::string> {
      auto v = t.find(key);
      if (v == t.end()) return required ? std::optional<std::string>(std::string("lacks '") + key + "'") : std::nullopt;
      if (!v->is_string() || v->get_ref<const std::string&>().empty())
        return "'" + std::string(key) + "' is " + json_kind(*v) + ", expected a non-empty string";
      out = v->get<std::string>();
      return std::nullopt;
    };
    WeightInfo info;
    if (auto p = text_of("name", true, info.name)) return wf.fail(at + " " + *p);
    at += " (" + sq(info.name) + ")";
    if (!names.insert(info.name).second) return wf.fail(at + ": the name appears twice in the manifest");
    std::string file, dtype, layout, role, site, layer;
    for (auto [key, out] : {std::pair<const char*, std::string*>{"file", &file}, {"dtype", &dtype}, {"layout", &layout},
                            {"layer", &layer}, {"role", &role}, {"site", &site}})
      if (auto p = text_of(key, true, *out)) return wf.fail(at + " " + *p);
    std::string ignored;
    if (auto p = text_of("module", false, info.op)) return wf.fail(at + " " + *p);
    for (const char* key : {"source_dtype", "sample"})
      if (auto p = text_of(key, false, ignored)) return wf.fail(at + " " + *p);
    if (dtype != "float32") return wf.fail(at + " has the dtype " + sq(dtype) + " (capture tensors are float32)");
    if (layout != "tokens x hidden")
      return wf.fail(at + " has the unknown layout " + sq(layout) + " (capture tensors are \"tokens x hidden\")");
    if (role != "activation" && role != "gradient")
      return wf.fail(at + " has the role " + sq(role) + " (expected activation or gradient)");
    if (site != "input" && site != "output") return wf.fail(at + " has the site " + sq(site) + " (expected input or output)");
    for (const char* key : {"step", "index", "hidden_axis", "rows_of"})
      if (auto v = t.find(key); v != t.end() && !v->is_number_integer())
        return wf.fail(at + ": '" + key + "' is " + json_kind(*v) + ", expected an integer");
    if (auto v = t.find("step"); v == t.end() || !v->is_number_unsigned())
      return wf.fail(at + " lacks a non-negative integer 'step'");
    auto shape = t.find("shape");
    if (shape == t.end()) return wf.fail(at + " lacks 'shape'");
    if (auto p = json_shape(*shape, info.shape)) return wf.fail(at + ": " + *p);
    if (info.shape.size() != 2)
      return wf.fail(at + ": shape " + shape_text(info.shape) + " has " + std::to_string(info.shape.size()) +
                     " dimensions; a capture tensor is [tokens, hidden]");
    if (auto v = t.find("source_shape"); v != t.end()) {
      std::vector<std::int64_t> source;
      if (auto p = json_shape(*v, source)) return wf.fail(at + ": source_" + *p);
    }
    auto n = checked_elements(info.shape);
    if (!n || *n > std::numeric_limits<std::uint64_t>::max() / 4)
      return wf.fail(at + ": shape " + shape_text(info.shape) + " has more elements than 64 bits can count");
    std::string resolved;
    if (auto p = check_shard_path(file, dir, resolved)) return wf.fail(at + ": " + *p);
    if (!files.insert(fs::path(resolved).lexically_normal().string()).second)
      return wf.fail(at + ": the file " + sq(file) + " is named by another tensor too");
    auto file_size = regular_file_size(resolved, "capture tensor");
    if (!file_size) return wf.fail(at + ": " + file_size.error().message);
    info.elements = *n;
    info.byte_size = *n * 4;
    if (*file_size != info.byte_size)
      return wf.fail(at + ": the file " + sq(file) + " holds " + std::to_string(*file_size) + " bytes; shape " +
                     shape_text(info.shape) + " of float32 needs " + std::to_string(info.byte_size));
    info.dtype = "float32";
    info.storage = WeightStorage::F32;
    info.layout = WeightLayout::TokensHidden;
    wf.locations_.push_back({wf.sources_.size(), 0});
    wf.sources_.push_back({Shard{resolved, *file_size}});
    wf.weights_.push_back(std::move(info));
  }
  wf.notes_ = unfinished_captures(capture_folder(dir.string()));
  return wf;
}

namespace {

/// A ggml tensor type: its name, elements per block and bytes per block (ggml.c's type_traits).
struct GgmlType {
  std::uint32_t id;
  const char* name;
  std::uint64_t block, bytes;
  WeightStorage storage;
};
constexpr GgmlType kGgmlTypes[] = {
    {0, "F32", 1, 4, WeightStorage::F32},       {1, "F16", 1, 2, WeightStorage::F16},
    {2, "Q4_0", 32, 18, WeightStorage::Other},  {3, "Q4_1", 32, 20, WeightStorage::Other},
    {6, "Q5_0", 32, 22, WeightStorage::Other},  {7, "Q5_1", 32, 24, WeightStorage::Other},
    {8, "Q8_0", 32, 34, WeightStorage::Other},  {9, "Q8_1", 32, 36, WeightStorage::Other},
    {10, "Q2_K", 256, 84, WeightStorage::Other}, {11, "Q3_K", 256, 110, WeightStorage::Other},
    {12, "Q4_K", 256, 144, WeightStorage::Other}, {13, "Q5_K", 256, 176, WeightStorage::Other},
    {14, "Q6_K", 256, 210, WeightStorage::Other}, {15, "Q8_K", 256, 292, WeightStorage::Other},
    {16, "IQ2_XXS", 256, 66, WeightStorage::Other}, {17, "IQ2_XS", 256, 74, WeightStorage::Other},
    {18, "IQ3_XXS", 256, 98, WeightStorage::Other}, {19, "IQ1_S", 256, 50, WeightStorage::Other},
    {20, "IQ4_NL", 32, 18, WeightStorage::Other}, {21, "IQ3_S", 256, 110, WeightStorage::Other},
    {22, "IQ2_S", 256, 82, WeightStorage::Other}, {23, "IQ4_XS", 256, 136, WeightStorage::Other},
    {24, "I8", 1, 1, WeightStorage::Other},     {25, "I16", 1, 2, WeightStorage::Other},
    {26, "I32", 1, 4, WeightStorage::I32},      {27, "I64", 1, 8, WeightStorage::Other},
    {28, "F64", 1, 8, WeightStorage::F64},      {29, "IQ1_M", 256, 56, WeightStorage::Other},
    {30, "BF16", 1, 2, WeightStorage::BF16},
};

/// Reads GGUF's little-endian header fields from a buffer, every read checked against its end.
struct GgufCursor {
  GgufCursor(const unsigned char* data, std::uint64_t bytes) : p(data), size(bytes) {}
  const unsigned char* p;
  std::uint64_t size, at = 0;
  std::optional<std::string> error;
  bool take(std::uint64_t n) {
    if (error) return false;
    if (n > size - at) {
      error = "the header ends at byte " + std::to_string(size) + " inside a field of " + std::to_string(n) + " bytes at " +
              std::to_string(at) + " (truncated or corrupt)";
      return false;
    }
    at += n;
    return true;
  }
  std::uint64_t uint(std::size_t n) { return take(n) ? io_detail::load_uint(p + at - n, n, true) : 0; }
  std::string string() {
    const std::uint64_t n = uint(8);
    if (!take(n)) return {};
    return std::string(reinterpret_cast<const char*>(p + at - n), static_cast<std::size_t>(n));
  }
  /// Skips a metadata value of this type (arrays of arrays included, to a bounded depth).
  void skip(std::uint32_t type, int depth = 0) {
    static constexpr std::uint64_t kSizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type > 12) {
      if (!error) error = "a metadata value of unknown type " + std::to_string(type) + " at byte " + std::to_string(at);
      return;
    }
    if (type == 8) {
      string();
    } else if (type == 9) {
      const auto inner = static_cast<std::uint32_t>(uint(4));
      const std::uint64_t count = uint(8);
      if (depth > 4) {
        if (!error) error = "metadata arrays nested more than 4 deep";
        return;
      }
      if (inner != 8 && inner != 9 && inner <= 12) {
        if (count > (size - at) / kSizes[inner]) {
          if (!error) error = "a metadata array of " + std::to_string(count) + " values at byte " + std::to_string(at) +
                              " reaches past the header";
          return;
        }
        take(count * kSizes[inner]);
        return;
      }
      for (std::uint64_t i = 0; i < count && !error; ++i) skip(inner, depth + 1);
    } else {
      take(kSizes[type]);
    }
  }
};

}  // namespace

Result<WeightFile> WeightFile::open_gguf(const std::string& path) {
  auto begun = begin(WeightFileKind::Gguf, path);
  if (!begun) return begun.error();
  auto& [wf, size, f] = *begun;
  // The header (metadata and tensor infos) is read into memory, at most this much.
  constexpr std::uint64_t kMaxHeader = std::uint64_t{256} << 20;
  const std::uint64_t n = std::min(size, kMaxHeader);
  std::string head;
  try {
    head.resize(static_cast<std::size_t>(n));
  } catch (const std::bad_alloc&) {
    return wf.fail("not enough memory for the header");
  }
  if (auto p = read_at(f.get(), 0, head.data(), head.size())) return wf.fail(*p);
  f.reset();
  GgufCursor c(reinterpret_cast<const unsigned char*>(head.data()), n);
  if (n < 24 || std::memcmp(head.data(), "GGUF", 4) != 0) return wf.fail("does not start with the magic 'GGUF'");
  c.take(4);
  const auto version = static_cast<std::uint32_t>(c.uint(4));
  if (version != 2 && version != 3)
    return wf.fail("GGUF version " + std::to_string(version) + " (versions 2 and 3 are read)");
  const std::uint64_t tensors = c.uint(8), kvs = c.uint(8);
  // Each tensor info takes at least 24 bytes, each key-value pair 12.
  if (tensors > size / 24 || kvs > size / 12)
    return wf.fail(std::to_string(tensors) + " tensors and " + std::to_string(kvs) + " metadata entries cannot fit in " +
                   std::to_string(size) + " bytes");
  std::uint64_t alignment = 32;
  for (std::uint64_t i = 0; i < kvs && !c.error; ++i) {
    const std::string key = c.string();
    const auto type = static_cast<std::uint32_t>(c.uint(4));
    if (key == "general.alignment" && type == 4 && !c.error) {
      alignment = c.uint(4);
      if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 65536)
        return wf.fail("general.alignment " + std::to_string(alignment) + " is not a power of two up to 65536");
      continue;
    }
    c.skip(type);
  }
  if (c.error) return wf.fail("metadata: " + *c.error);
  struct Entry {
    WeightInfo info;
    std::uint64_t offset = 0;
  };
  std::vector<Entry> entries;
  std::set<std::string> names;
  for (std::uint64_t i = 0; i < tensors; ++i) {
    Entry e;
    e.info.name = c.string();
    const auto dims = static_cast<std::uint32_t>(c.uint(4));
    if (c.error) break;
    const std::string at = "tensor " + sq(e.info.name);
    if (dims > kMaxRank) return wf.fail(at + " has " + std::to_string(dims) + " dimensions, more than " + std::to_string(kMaxRank));
    e.info.shape.resize(dims);
    for (std::uint32_t d = 0; d < dims; ++d) {  // ne[0] is the contiguous axis: the row-major shape reverses them
      const std::uint64_t v = c.uint(8);
      if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        return wf.fail(at + " has the dimension " + std::to_string(v) + ", beyond 63 bits");
      e.info.shape[dims - 1 - d] = static_cast<std::int64_t>(v);
    }
    const auto type = static_cast<std::uint32_t>(c.uint(4));
    e.offset = c.uint(8);
    if (c.error) break;
    if (!names.insert(e.info.name).second) return wf.fail(at + " appears twice");
    const GgmlType* g = nullptr;
    for (const auto& t : kGgmlTypes)
      if (t.id == type) g = &t;
    auto count = checked_elements(e.info.shape);
    if (!count) return wf.fail(at + ": shape " + shape_text(e.info.shape) + " has more elements than 64 bits can count");
    e.info.elements = *count;
    e.info.dtype = g != nullptr ? g->name : "ggml type " + std::to_string(type);
    e.info.storage = g != nullptr ? g->storage : WeightStorage::Other;
    if (g != nullptr) {
      const std::uint64_t row = e.info.shape.empty() ? 1 : static_cast<std::uint64_t>(e.info.shape.back());
      if (row % g->block != 0)
        return wf.fail(at + " of " + g->name + " has rows of " + std::to_string(row) + " elements, not whole blocks of " +
                       std::to_string(g->block));
      if (*count / g->block > std::numeric_limits<std::uint64_t>::max() / g->bytes)
        return wf.fail(at + ": shape " + shape_text(e.info.shape) + " is too large");
      e.info.byte_size = *count / g->block * g->bytes;
    }
    if (e.info.shape.size() == 2) e.info.layout = WeightLayout::DenseOI;  // ggml's mul_mat: [out, in], in contiguous
    if (e.info.shape.size() == 4) e.info.layout = WeightLayout::ConvOIHW;
    if (e.offset % alignment != 0)
      return wf.fail(at + " starts at data offset " + std::to_string(e.offset) + ", not a multiple of the alignment " +
                     std::to_string(alignment));
    entries.push_back(std::move(e));
  }
  if (c.error) return wf.fail("tensor infos: " + *c.error);
  const std::uint64_t data = (c.at + alignment - 1) / alignment * alignment;
  if (data > size && !entries.empty()) return wf.fail("the data section would start at " + std::to_string(data) + ", past the end");
  const std::uint64_t data_size = size - std::min(size, data);
  // Tensors of known types must lie inside the data and not overlap.
  std::vector<const Entry*> order;
  for (const auto& e : entries) {
    if (e.info.dtype.rfind("ggml type", 0) == 0) continue;
    if (e.offset > data_size || e.info.byte_size > data_size - e.offset)
      return wf.fail("tensor " + sq(e.info.name) + ": bytes [" + std::to_string(e.offset) + ", " +
                     std::to_string(e.offset + e.info.byte_size) + ") of the data lie outside it (" + std::to_string(data_size) +
                     " bytes)");
    order.push_back(&e);
  }
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < order.size(); ++i)
    if (order[i]->offset < order[i - 1]->offset + order[i - 1]->info.byte_size)
      return wf.fail("tensors " + sq(order[i - 1]->info.name) + " and " + sq(order[i]->info.name) + " overlap");
  wf.sources_.push_back({Shard{path, size}});
  for (auto& e : entries) {
    wf.locations_.push_back({0, data + e.offset});
    wf.weights_.push_back(std::move(e.info));
  }
  return wf;
}

Result<WeightFile> WeightFile::open_gnubg(const std::string& path) {
  auto begun = begin(WeightFileKind::Gnubg, path);
  if (!begun) return begun.error();
  auto& [wf, size, f] = *begun;
  unsigned char head[kGnubgNetHeader];
  if (size < 8) return wf.fail("truncated: " + std::to_string(size) + " bytes, fewer than the 8-byte header");
  if (auto p = read_at(f.get(), 0, reinterpret_cast<char*>(head), 8)) return wf.fail(*p);
  if (le_float(head) != kGnubgMagic) return wf.fail("not a gnubg weights file (the first float is not 472.3782)");
  if (le_float(head + 4) != kGnubgVersion)
    return wf.fail("weights version " + std::to_string(le_float(head + 4)) + " is not the supported version 1.0");
  std::uint64_t pos = 8;
  std::size_t net = 0;
  while (pos < size) {
    const std::string name = net < std::size(kGnubgNets) ? kGnubgNets[net] : "net" + std::to_string(net);
    const std::string at = "net " + std::to_string(net) + " (" + name + ") at byte " + std::to_string(pos);
    if (size - pos < kGnubgNetHeader)
      return wf.fail(at + ": truncated, " + std::to_string(size - pos) + " bytes left, a net header needs 24");
    if (auto p = read_at(f.get(), pos, reinterpret_cast<char*>(head), kGnubgNetHeader)) return wf.fail(*p);
    const std::int32_t c_in = le_int(head), c_hidden = le_int(head + 4), c_out = le_int(head + 8),
                       trained = le_int(head + 12);
    const float beta_hidden = le_float(head + 16), beta_out = le_float(head + 20);
    for (auto [what, c] : {std::pair<const char*, std::int32_t>{"cInput", c_in}, {"cHidden", c_hidden}, {"cOutput", c_out}})
      if (c < 1 || static_cast<std::uint64_t>(c) > kGnubgMaxWidth)
        return wf.fail(at + ": " + what + " = " + std::to_string(c) + " is not between 1 and " +
                       std::to_string(kGnubgMaxWidth));
    if (trained < 0) return wf.fail(at + ": the training count is negative (" + std::to_string(trained) + ")");
    if (!(beta_hidden > 0.0f) || !(beta_out > 0.0f) || !std::isfinite(beta_hidden) || !std::isfinite(beta_out))
      return wf.fail(at + ": the sigmoid betas are not positive finite numbers");
    pos += kGnubgNetHeader;
    const auto in = static_cast<std::int64_t>(c_in), hid = static_cast<std::int64_t>(c_hidden),
               out = static_cast<std::int64_t>(c_out);
    const std::pair<std::string, std::vector<std::int64_t>> parts[] = {
        {"hidden_weights", {in, hid}}, {"output_weights", {out, hid}}, {"hidden_thresholds", {hid}}, {"output_thresholds", {out}}};
    for (const auto& [part, shape] : parts) {
      WeightInfo info;
      info.name = name + "/" + part;
      info.shape = shape;
      info.elements = *checked_elements(shape);  // at most 2^40: cannot overflow
      info.byte_size = info.elements * 4;
      info.dtype = "float32";
      info.storage = WeightStorage::F32;
      if (part == "hidden_weights") info.layout = WeightLayout::DenseIO;  // arHiddenWeight[i * cHidden + j]
      if (part == "output_weights") info.layout = WeightLayout::DenseOI;  // arOutputWeight[i * cHidden + j], i an output
      if (info.byte_size > size - pos)
        return wf.fail(at + ": " + info.name + " " + shape_text(shape) + " needs " + std::to_string(info.byte_size) +
                       " bytes, " + std::to_string(size - pos) + " are left (truncated data)");
      wf.locations_.push_back({0, pos});
      pos += info.byte_size;
      wf.weights_.push_back(std::move(info));
    }
    ++net;
  }
  if (net == 0) return wf.fail("the file holds no nets");
  wf.sources_.push_back({Shard{path, size}});
  return wf;
}

Result<std::size_t> WeightFile::find(std::string_view name) const {
  for (std::size_t i = 0; i < weights_.size(); ++i)
    if (weights_[i].name == name) return i;
  return fail("there is no tensor named " + sq(name));
}

Result<std::string> WeightFile::read_bytes(const Location& loc, std::uint64_t n) const {
  std::string out;
  try {
    out.resize(static_cast<std::size_t>(n));
  } catch (const std::bad_alloc&) {
    return fail("not enough memory for " + std::to_string(n) + " bytes");
  }
  std::uint64_t start = 0;  // offset of the current shard in the concatenation
  std::uint64_t done = 0;
  for (const Shard& s : sources_[loc.source]) {
    if (done == n) break;
    const std::uint64_t want = loc.offset + done;
    if (want < start + s.size) {
      const std::uint64_t in_shard = want - start;
      const std::uint64_t m = std::min(n - done, s.size - in_shard);
      FilePtr f(std::fopen(s.path.c_str(), "rb"));
      if (!f)
        return make_error(label_ + " shard '" + s.path + "': cannot open: " +
                          std::error_code(errno, std::generic_category()).message());
      if (auto p = read_at(f.get(), in_shard, out.data() + done, static_cast<std::size_t>(m)))
        return make_error(label_ + " shard '" + s.path + "': " + *p);
      done += m;
    }
    start += s.size;
  }
  if (done != n) return fail("internal error: a tensor reaches past its shards");
  return out;
}

Result<Tensor> WeightFile::read(std::size_t index) const {
  if (index >= weights_.size()) return fail("there is no tensor number " + std::to_string(index));
  const WeightInfo& w = weights_[index];
  if (!w.readable())
    return fail("tensor " + sq(w.name) + " is stored as " + w.dtype +
                (w.storage == WeightStorage::I32 ? ", integer constants are not weights" : "") +
                "; readable tensors are stored as float32, float16, bfloat16 or float64");
  auto bytes = read_bytes(locations_[index], w.byte_size);
  if (!bytes) return bytes.error();
  const auto* p = reinterpret_cast<const unsigned char*>(bytes->data());
  const auto n = static_cast<std::size_t>(w.elements);
  try {
    if (w.storage == WeightStorage::F64) {
      std::vector<double> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = std::bit_cast<double>(io_detail::load_uint(p + 8 * i, 8, true));
      bytes->clear();
      bytes->shrink_to_fit();
      auto t = Tensor::from_f64(w.shape, std::move(v));
      if (!t) return fail("tensor " + sq(w.name) + ": " + t.error().message);
      return t;
    }
    std::vector<float> v(n);
    DType dtype = DType::F32;
    switch (w.storage) {
      case WeightStorage::F32:
        for (std::size_t i = 0; i < n; ++i)
          v[i] = std::bit_cast<float>(static_cast<std::uint32_t>(io_detail::load_uint(p + 4 * i, 4, true)));
        break;
      case WeightStorage::F16:
        dtype = DType::F16;
        for (std::size_t i = 0; i < n; ++i)
          v[i] = io_detail::f16_to_float(static_cast<std::uint16_t>(io_detail::load_uint(p + 2 * i, 2, true)));
        break;
      case WeightStorage::BF16:
        dtype = DType::BF16;
        for (std::size_t i = 0; i < n; ++i)
          v[i] = io_detail::bf16_to_float(static_cast<std::uint16_t>(io_detail::load_uint(p + 2 * i, 2, true)));
        break;
      default: return fail("internal error: unreadable storage");
    }
    auto t = Tensor::from_f32(w.shape, std::move(v), dtype);
    if (!t) return fail("tensor " + sq(w.name) + ": " + t.error().message);
    return t;
  } catch (const std::bad_alloc&) {
    return fail("not enough memory for the " + std::to_string(n) + " elements of tensor " + sq(w.name));
  }
}

Result<Tensor> WeightFile::read(std::string_view name) const {
  auto i = find(name);
  if (!i) return i.error();
  return read(*i);
}

// ---- Name patterns

namespace {

// Glob matching with backtracking over the last '*' (linear in practice, no recursion).
// Returns the length of the set expression at p (after '['), or 0 if it is unclosed.
std::size_t set_length(std::string_view g, std::size_t p) {
  std::size_t q = p;
  if (q < g.size() && g[q] == '!') ++q;
  if (q < g.size() && g[q] == ']') ++q;  // a leading ']' is a member
  while (q < g.size() && g[q] != ']') q += (g[q] == '\\' && q + 1 < g.size()) ? 2 : 1;
  return q < g.size() ? q - p + 1 : 0;
}

bool set_matches(std::string_view set, char c) {
  // set excludes the opening '[' and includes the closing ']'
  std::size_t q = 0;
  bool negate = false;
  if (q < set.size() && set[q] == '!') negate = true, ++q;
  bool found = false;
  bool first = true;
  while (q < set.size() && (set[q] != ']' || first)) {
    first = false;
    char lo = set[q];
    if (lo == '\\' && q + 1 < set.size()) lo = set[++q];
    ++q;
    char hi = lo;
    if (q + 1 < set.size() && set[q] == '-' && set[q + 1] != ']') {
      hi = set[q + 1];
      if (hi == '\\' && q + 2 < set.size()) hi = set[++q + 1];
      q += 2;
    }
    if (c >= lo && c <= hi) found = true;
  }
  return found != negate;
}

bool glob_match(std::string_view g, std::string_view s) {
  std::size_t gi = 0, si = 0;
  std::size_t star_g = std::string_view::npos, star_s = 0;
  while (si < s.size()) {
    if (gi < g.size()) {
      const char c = g[gi];
      if (c == '*') {
        star_g = ++gi;
        star_s = si;
        continue;
      }
      if (c == '?') {
        ++gi, ++si;
        continue;
      }
      if (c == '[') {
        const std::size_t len = set_length(g, gi + 1);
        if (set_matches(g.substr(gi + 1, len), s[si])) {
          gi += 1 + len, ++si;
          continue;
        }
      } else {
        const char lit = (c == '\\' && gi + 1 < g.size()) ? g[gi + 1] : c;
        if (lit == s[si]) {
          gi += (c == '\\' && gi + 1 < g.size()) ? 2 : 1;
          ++si;
          continue;
        }
      }
    }
    if (star_g == std::string_view::npos) return false;
    gi = star_g;
    si = ++star_s;
  }
  while (gi < g.size() && g[gi] == '*') ++gi;
  return gi == g.size();
}

}  // namespace

struct NamePattern::Regex {
  std::unique_ptr<re2::RE2> re;
};

Result<NamePattern> NamePattern::parse(std::string_view pattern) {
  NamePattern p;
  p.text_ = std::string(pattern);
  const std::string shown = pattern.size() > 60 ? std::string(pattern.substr(0, 60)) + "..." : p.text_;
  if (pattern.size() > kMaxPatternBytes)
    return make_error("name pattern '" + shown + "': longer than " + std::to_string(kMaxPatternBytes) + " characters");
  if (pattern.rfind("re:", 0) == 0) {
    p.is_regex_ = true;
    // RE2 matches in time linear in the name and never recurses on it; its errors come back as text
    // (logging off), and a pattern whose program would need more memory than the limit is refused.
    re2::RE2::Options o;
    o.set_log_errors(false);
    o.set_max_mem(kMaxPatternMemory);
    auto re = std::make_unique<re2::RE2>(re2::StringPiece(pattern.data() + 3, pattern.size() - 3), o);
    if (!re->ok()) {
      // RE2's message quotes the part of the pattern at fault, which may be most of it.
      const std::string why = re->error().size() > 80 ? re->error().substr(0, 80) + "..." : re->error();
      return make_error("name pattern '" + shown + "': invalid regular expression (" + why + ")");
    }
    p.regex_ = std::make_shared<const Regex>(Regex{std::move(re)});
    return p;
  }
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\') {
      if (i + 1 == pattern.size()) return make_error("name pattern '" + p.text_ + "': ends with a lone '\\'");
      ++i;
    } else if (pattern[i] == '[') {
      const std::size_t len = set_length(pattern, i + 1);
      if (len == 0) return make_error("name pattern '" + p.text_ + "': '[' at position " + std::to_string(i + 1) + " is not closed");
      i += len;
    }
  }
  p.glob_ = std::string(pattern);
  return p;
}

bool NamePattern::matches(std::string_view name) const {
  if (is_regex_) return re2::RE2::FullMatch(re2::StringPiece(name.data(), name.size()), *regex_->re);
  return glob_match(glob_, name);
}

std::vector<WeightInfo> select_weights(std::span<const WeightInfo> weights, const NamePattern& pattern) {
  std::vector<WeightInfo> out;
  for (const auto& w : weights)
    if (pattern.matches(w.name)) out.push_back(w);
  return out;
}

}  // namespace mxlab
