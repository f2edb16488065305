// Tensor inputs of the CLI: files (.npy, .npy.gz, .csv, raw float32) and generated distributions.
#pragma once

#include <string>

#include "cli/args.hpp"
#include "mxlab/core/error.hpp"
#include "mxlab/io/tensor.hpp"
#include "mxlab/ops/ops.hpp"

namespace mxlab::cli {

/// Options that describe an input tensor.
std::vector<OptionSpec> input_options();

/// Loads INPUT: "FILE.npy" (and .npy.gz), "FILE.csv", "FILE.f32"/".bin"/".raw" (little-endian float32,
/// --shape optional), or "gen:DIST" with --shape and --data-seed (e.g. gen:normal:0,1). Errors name INPUT.
Result<Tensor> load_input(const std::string& input, const Args& args);

/// Opens INPUT as a tensor source: an uncompressed little-endian float32/float16 (or --bf16) .npy or a raw
/// float32 file is mapped and read in place (memory stays bounded for tensors larger than memory); every
/// other input is loaded as load_input does.
Result<ops::TensorSource> open_input(const std::string& input, const Args& args);

/// The input of a command that takes it as a positional argument or as --input (either, not both): the
/// positional argument at `index` if present. Errors say which forms were seen.
Result<std::string> input_argument(const Args& args, std::size_t index);

/// Options of commands that do numeric work: --threads N.
OptionSpec threads_option();
/// The value of --threads (0 = every hardware thread); errors name the option.
Result<unsigned> threads_from_args(const Args& args);

/// One line describing a tensor source for provenance.
std::string describe_source(const std::string& input, const Args& args, const ops::TensorSource& t);

}  // namespace mxlab::cli
