// Named weight tensors in model files: tfjs weight manifests (model.json + binary shards),
// safetensors (one file, or shards named by a model.safetensors.index.json), GGUF (llama.cpp), GNU
// Backgammon's binary neural-net weights (.wd), and capture folders (activations and gradients of a model,
// tokens x hidden, written by mxlab.torch.capture; capture.json and one raw float32 file per tensor). Opening a file reads and checks
// only its header; the listing (name, shape, dtype, byte size, layout) comes from the header alone,
// so a caller can select tensors by name and read just those.
//
// Every reader checks the header against the file before it allocates for the data: byte sizes,
// offsets and shard lengths must add up exactly, shapes must not overflow, JSON headers are bounded
// (size, nesting, value count; duplicate keys rejected), and shard paths must name files inside the
// model's folder. Errors name the file and the problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/io/tensor.hpp"

namespace mxlab {

/// The kinds of weight file.
enum class WeightFileKind : std::uint8_t {
  Tfjs,         ///< tfjs model.json with weightsManifest (graph or layers model)
  Safetensors,  ///< safetensors: 8-byte header length, JSON header, data
  Gnubg,        ///< GNU Backgammon binary weights (gnubg.wd)
  Gguf,         ///< GGUF (llama.cpp): F32, F16 and BF16 tensors are read, quantized ggml types listed
  Capture,      ///< a capture folder: capture.json naming raw float32 tensors [tokens, hidden]
};

/// "tfjs", "safetensors", "gnubg", "gguf", "capture".
std::string_view weight_file_kind_name(WeightFileKind kind);

/// How the axes of a weight map to the inputs and outputs of the layer that uses it.
enum class WeightLayout : std::uint8_t {
  Other,              ///< not the matrix operand of a dense or convolution layer (bias, scale, constant), or unknown
  ConvHWIO,           ///< convolution kernel [H, W, I, O] (tfjs, Keras)
  DepthwiseHWCM,      ///< depthwise convolution kernel [H, W, C, M] (tfjs, Keras): each channel its own filter
  DenseIO,            ///< dense kernel [I, O] (tfjs, Keras; gnubg hidden weights)
  DenseOI,            ///< dense kernel [O, I] (tfjs MatMul with transpose_b; PyTorch Linear; gnubg output weights)
  ConvOIHW,           ///< convolution weight [O, I, H, W] (PyTorch)
  ConvTransposeHWOI,  ///< transposed-convolution kernel [H, W, O, I] (tfjs Conv2DBackpropInput)
  TokensHidden,       ///< an activation or gradient [tokens, hidden] (capture folders): a GEMM sums along hidden
};

/// "other", "conv HWIO", "depthwise HWCM", "dense IO", "dense OI", "conv OIHW", "conv-transpose HWOI",
/// "tokens x hidden".
std::string_view weight_layout_name(WeightLayout layout);

/// The axes a layer sums over for one output (the reduction or "K" dimension), and their name.
struct ReductionAxes {
  std::vector<std::size_t> axes;  ///< in increasing order, contiguous
  std::string name;               ///< "I" for dense and convolution kernels, "HxW" for depthwise kernels, "hidden" for activations
};

/// The reduction axes of a weight of this shape and layout: the input-channel axis I of dense and
/// convolution kernels, the window axes H and W of depthwise kernels, the hidden axis (the last) of captured
/// activations and gradients. An error if the layout is
/// Other or the shape does not have the layout's rank.
Result<ReductionAxes> reduction_axes(std::span<const std::int64_t> shape, WeightLayout layout);

/// Element types a weight can be stored as.
enum class WeightStorage : std::uint8_t {
  F32,    ///< float32, read exactly
  F16,    ///< float16 (tfjs "quantization": {"dtype": "float16"}, safetensors F16), read exactly
  BF16,   ///< bfloat16, read exactly
  F64,    ///< float64, read exactly (Tensor keeps the doubles)
  I32,    ///< int32: listed, not read (graph constants such as shapes and axes, not weights)
  Other,  ///< anything else (tfjs uint8/uint16 affine quantization, bool; safetensors integer and 8-bit float types): listed, not read
};

/// One tensor of a weight file, as its header describes it.
struct WeightInfo {
  std::string name;
  std::vector<std::int64_t> shape;
  std::string dtype;               ///< the element type as the file spells it ("float32", "float16 of float32", "int32", "BF16")
  WeightStorage storage = WeightStorage::F32;
  std::uint64_t elements = 0;      ///< product of the shape
  std::uint64_t byte_size = 0;     ///< bytes the tensor occupies in the file
  WeightLayout layout = WeightLayout::Other;
  std::string op;                  ///< the operation that uses the tensor (tfjs graph models), or the module a captured tensor came from ("Linear"); "" otherwise

  /// Whether WeightFile::read returns it (F32, F16, BF16, F64 storage).
  bool readable() const;
};

/// An opened weight file: its header, checked against the file. Reads tensors on demand.
class WeightFile {
 public:
  /// Opens a weight file, choosing the reader by name and content: "*.safetensors.index.json" (or a JSON
  /// file with a "weight_map") is a sharded safetensors index, other "*.json" a tfjs manifest,
  /// "*.safetensors" (or a file whose first 8 bytes are a plausible header length followed by '{')
  /// is safetensors, "*.gguf" (or a file starting with "GGUF") is GGUF, "*.wd" is gnubg, a folder or a
  /// file named capture.json is a capture folder.
  static Result<WeightFile> open(const std::string& path);
  /// Opens a tfjs model.json. Shards named by weightsManifest[g].paths are concatenated in order
  /// and the group's weights are packed back to back in them (little-endian).
  static Result<WeightFile> open_tfjs(const std::string& path);
  /// Opens a safetensors file.
  static Result<WeightFile> open_safetensors(const std::string& path);
  /// Opens a sharded safetensors model by its index (model.safetensors.index.json: "weight_map" from tensor
  /// name to shard file in the index's folder). Each shard is opened and checked as open_safetensors does;
  /// every tensor of the map must be in its shard. Tensors are listed shard by shard (shards in name order),
  /// in each shard's file order.
  static Result<WeightFile> open_safetensors_index(const std::string& path);
  /// Opens a GGUF file (version 2 or 3, little-endian): the metadata is checked and skipped, every tensor
  /// listed with its shape in row-major order (GGUF's ne[0], the contiguous axis, last); F32, F16 and BF16
  /// tensors are read, the quantized ggml types listed with their byte sizes.
  static Result<WeightFile> open_gguf(const std::string& path);
  /// Opens a GNU Backgammon binary weights file (magic 472.3782, version 1.0, then nets).
  static Result<WeightFile> open_gnubg(const std::string& path);
  /// Opens a capture folder (the folder, or its capture.json): the manifest names each tensor, its file in the
  /// folder (raw little-endian float32, C order), its shape [tokens, hidden] and layout "tokens x hidden", and
  /// what it is (layer, module, role activation or gradient, site input or output, step). Every file must
  /// exist inside the folder and hold exactly its shape's bytes (docs/experiments.md, "Capture folders").
  /// The hidden temporaries of captures that did not finish (".NAME.HEX.partial" beside the folder, left by a
  /// process killed while capturing) are not read; notes() names them.
  static Result<WeightFile> open_capture(const std::string& path);

  WeightFileKind kind() const { return kind_; }
  const std::string& path() const { return path_; }
  /// Every tensor of the file in file order.
  const std::vector<WeightInfo>& weights() const { return weights_; }
  /// What the reader left aside without failing (a capture folder's unfinished temporaries), one line each.
  const std::vector<std::string>& notes() const { return notes_; }
  /// Index of the tensor with this name, or an error naming the file and the name.
  Result<std::size_t> find(std::string_view name) const;
  /// Reads tensor `index` (see WeightInfo::readable; others give an error naming their dtype).
  Result<Tensor> read(std::size_t index) const;
  /// Reads the tensor with this name.
  Result<Tensor> read(std::string_view name) const;

 private:
  struct Shard {
    std::string path;
    std::uint64_t size = 0;
  };
  struct Location {
    std::size_t source = 0;   ///< index into sources_
    std::uint64_t offset = 0; ///< byte offset in the concatenation of that source's shards
  };

  struct Begun;
  WeightFile() = default;
  /// Starts a reader: names the file's kind and checks that the path is a readable regular file.
  static Result<Begun> begin(WeightFileKind kind, const std::string& path);
  Error fail(std::string_view problem) const;
  Result<std::string> read_bytes(const Location& loc, std::uint64_t n) const;

  WeightFileKind kind_ = WeightFileKind::Tfjs;
  std::string path_;
  std::string label_;
  std::vector<WeightInfo> weights_;
  std::vector<std::string> notes_;
  std::vector<Location> locations_;             // one per weight
  std::vector<std::vector<Shard>> sources_;     // byte sources: shard lists (one file for safetensors, gnubg)
};

/// A pattern over weight names. Glob syntax by default: '*' matches any run of characters ('/'
/// included), '?' one character, "[abc]" / "[a-z]" / "[!abc]" one of a set, '\' quotes the next
/// character; the whole name must match ("*conv*/kernel"). A pattern that starts with "re:" is an
/// RE2 regular expression that must match the whole name ("re:.*conv\d+/kernel"). Both match in time
/// linear in the name (globs by one backtracking point, RE2 by automata) and never recurse, so no name or
/// pattern can exhaust the stack; patterns are at most kMaxPatternBytes long.
class NamePattern {
 public:
  static constexpr std::size_t kMaxPatternBytes = 4096;
  /// Memory RE2 may use for one compiled pattern (its programs and DFA caches).
  static constexpr std::int64_t kMaxPatternMemory = std::int64_t{8} << 20;

  /// Parses a pattern; an error names the pattern and the problem (unclosed '[', bad regex).
  static Result<NamePattern> parse(std::string_view pattern);
  /// Whether the whole name matches.
  bool matches(std::string_view name) const;
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  bool is_regex_ = false;
  std::string glob_;
  struct Regex;  // the compiled regular expression (RE2 stays out of this header)
  std::shared_ptr<const Regex> regex_;
};

/// The weights whose names match the pattern, in file order.
std::vector<WeightInfo> select_weights(std::span<const WeightInfo> weights, const NamePattern& pattern);

}  // namespace mxlab
