// Tensor inputs of the CLI: files (.npy, .npy.gz, .csv, raw float32) and generated distributions.
#pragma once

#include <string>

#include "cli/args.hpp"
#include "mxlab/core/error.hpp"
#include "mxlab/io/tensor.hpp"

namespace mxlab::cli {

/// Options that describe an input tensor.
std::vector<OptionSpec> input_options();

/// Loads INPUT: "FILE.npy" (and .npy.gz), "FILE.csv", "FILE.f32"/".bin"/".raw" (little-endian float32,
/// --shape optional), or "gen:DIST" with --shape and --data-seed (e.g. gen:normal:0,1). Errors name INPUT.
Result<Tensor> load_input(const std::string& input, const Args& args);

/// One line describing the input for provenance ("file x.npy f32 1024x1024", "gen:normal:0,1 seed 3 ...").
std::string describe_input(const std::string& input, const Args& args, const Tensor& t);

}  // namespace mxlab::cli
