// The tensors of weight files and capture folders as jobs read them (blocks along each tensor's reduction
// axes), and the analysis of every selected tensor, for the CLI, Python and experiments alike.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/io/weights.hpp"
#include "mxlab/ops/ops.hpp"
#include "mxlab/ops/tensor_source.hpp"

namespace mxlab::ops {

/// One tensor of a weight file, read, with the axes its blocks run along.
struct WeightTensor {
  TensorSource source;  ///< [rest, reduction] when the reduction axes were moved last; else as stored
  std::string layout;   ///< "last axis", "conv HWIO: blocks along I", "tokens x hidden: blocks along hidden", ...
};

/// Reads tensor `index` of `file`. With `along_reduction`, a tensor whose layout is known gets its reduction
/// axes moved last (block_axes_last; no copy when they are the last axis already, as for captured
/// activations); other tensors, or all without `along_reduction`, keep their blocks along the last axis.
Result<WeightTensor> read_weight_tensor(const WeightFile& file, std::size_t index, bool along_reduction = true);

/// The analysis of one tensor of a weight file.
struct WeightAnalysis {
  WeightInfo info;
  std::string layout;                    ///< as WeightTensor::layout
  std::vector<FormatAnalysis> formats;   ///< one per format, in order
};

/// analyze() of every readable tensor of `file` whose name `select` matches, in file order, each read with
/// its blocks along its reduction axes (read_weight_tensor) and released before the next is read. Progress counts
/// the elements of every selected tensor (each tensor's per-format passes within its share); cancellation is
/// checked between tensors and inside each analysis. An error names the file when no readable tensor matches.
Result<std::vector<WeightAnalysis>> analyze_weights(const std::vector<BlockFormat>& formats, const WeightFile& file,
                                                    const NamePattern& select, const AnalyzeOptions& options = {},
                                                    const Run& run = {});

}  // namespace mxlab::ops
