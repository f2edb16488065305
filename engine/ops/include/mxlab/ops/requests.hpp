// The requests every front end builds the same way: a block format with named options (the CLI's
// --round, an experiment file's round = ...) and an input tensor named by text (a file or gen:DIST).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/ops/tensor_source.hpp"
#include "mxlab/quantize/block_format.hpp"

namespace mxlab::ops {

/// One option of block quantization (docs/quantization.md): its name, what its value looks like, what it does.
struct FormatOptionInfo {
  std::string name;        ///< "round", "scale-rule", ...
  std::string value_name;  ///< "MODE"
  std::string help;
};

/// Every option of block quantization, in the order they are documented.
const std::vector<FormatOptionInfo>& format_options();

/// How an error names an option (the CLI says "option '--round'", an experiment file "key 'round'").
using OptionNamer = std::function<std::string(std::string_view name)>;

/// Parses SPEC, applies the option "profile" first, then every other option (name, value) in order.
/// Unknown names and bad values give an error naming the option with `namer`.
Result<BlockFormat> block_format(std::string_view spec, const std::vector<std::pair<std::string, std::string>>& options,
                                 const OptionNamer& namer);

/// The options of a block format as (key, value) pairs for provenance.
std::vector<std::pair<std::string, std::string>> describe_options(const BlockFormat& f);

/// An input tensor named by text.
struct InputRequest {
  /// "FILE.npy" (and .npy.gz), "FILE.csv" (.csv.gz), "FILE.f32" / ".bin" / ".raw" (little-endian float32, .f32.gz),
  /// or "gen:DIST" (gen:normal:0,1; see mxlab::generate).
  std::string input;
  std::string shape;        ///< generated and raw inputs ("" = 65536 for generated, flat for raw)
  std::uint64_t seed = 0;   ///< generated inputs
  bool bf16 = false;        ///< a uint16 .npy holds bfloat16 bit patterns
  bool csv_table = false;   ///< a CSV is a 2-D table (one row per line), not a flat list
};

/// Loads the input into memory. Errors name the input.
Result<Tensor> load_tensor(const InputRequest& r);

/// Opens the input as a tensor source: an uncompressed little-endian float32/float16 (or bf16) .npy or a raw
/// float32 file is mapped and read in place (memory stays bounded for tensors larger than memory); every
/// other input is loaded as load_tensor does.
Result<TensorSource> open_tensor(const InputRequest& r);

}  // namespace mxlab::ops
