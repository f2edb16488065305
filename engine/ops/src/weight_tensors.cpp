// The tensors of weight files and capture folders as jobs read them, and their analysis.
#include "mxlab/ops/weight_tensors.hpp"

namespace mxlab::ops {

Result<WeightTensor> read_weight_tensor(const WeightFile& file, std::size_t index, bool along_reduction) {
  auto t = file.read(index);
  if (!t) return t.error();
  const WeightInfo& info = file.weights()[index];
  WeightTensor out{TensorSource::of(std::move(*t)), "last axis"};
  if (!along_reduction || info.layout == WeightLayout::Other) return out;
  auto axes = reduction_axes(info.shape, info.layout);
  if (!axes) return make_error(std::string(weight_file_kind_name(file.kind())) + " '" + file.path() + "', tensor '" +
                               info.name + "': " + axes.error().message);
  out.layout = std::string(weight_layout_name(info.layout)) + ": blocks along " + axes->name;
  if (axes->axes.size() == 1 && axes->axes.front() + 1 == info.shape.size()) return out;  // already last
  std::vector<int> list(axes->axes.begin(), axes->axes.end());
  auto moved = block_axes_last(out.source, list);
  if (!moved) return moved.error();
  out.source = std::move(*moved);
  return out;
}

Result<std::vector<WeightAnalysis>> analyze_weights(const std::vector<BlockFormat>& formats, const WeightFile& file,
                                                    const NamePattern& select, const AnalyzeOptions& options,
                                                    const Run& run) {
  std::vector<WeightAnalysis> out;
  std::int64_t total = 0;
  for (const WeightInfo& info : file.weights())
    if (info.readable() && select.matches(info.name)) total += static_cast<std::int64_t>(info.elements);
  // Progress over every selected tensor: each analysis reports its own elements, counted after those before it.
  std::int64_t before = 0;
  Run each = run;
  if (run.reporter.on_progress)
    each.reporter.on_progress = [&](const Progress& p) { run.reporter.report(before + p.done, total, p.stage); };
  for (std::size_t i = 0; i < file.weights().size(); ++i) {
    const WeightInfo& info = file.weights()[i];
    if (!info.readable() || !select.matches(info.name)) continue;
    if (run.reporter.cancelled()) return make_error(kCancelled);
    auto t = read_weight_tensor(file, i);
    if (!t) return t.error();
    auto a = analyze(formats, t->source, options, each);
    if (!a) return make_error("tensor '" + info.name + "': " + a.error().message);
    out.push_back({info, t->layout, std::move(*a)});
    before += static_cast<std::int64_t>(info.elements);
  }
  if (out.empty())
    return make_error(std::string(weight_file_kind_name(file.kind())) + " '" + file.path() + "': no readable tensor matches '" +
                      select.text() + "'");
  return out;
}

}  // namespace mxlab::ops
