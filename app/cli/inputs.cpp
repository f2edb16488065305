// Tensor inputs of the CLI.
#include "cli/inputs.hpp"

#include <charconv>

#include "mxlab/ops/requests.hpp"


namespace mxlab::cli {
std::vector<OptionSpec> input_options() {
  return {{"shape", true, "SHAPE", "shape of a generated or raw input, e.g. 1024x1024 (default 65536)"},
          {"data-seed", true, "N", "seed of a generated input (default 0)"},
          {"bf16", false, "", "read a uint16 .npy as bfloat16 bit patterns"},
          {"csv-table", false, "", "read a CSV as a 2-D table (one row per line) instead of a flat list"}};
}

namespace {
Result<ops::InputRequest> request_from_args(const std::string& input, const Args& args) {
  ops::InputRequest r;
  r.input = input;
  if (auto shape = args.value("shape")) {
    // An empty value would mean the default shape; a user who means that omits the option.
    if (shape->empty()) return make_error("option '--shape': empty (give a shape such as 65536 or 1024x1024, or omit it)");
    r.shape = *shape;
  }
  auto seed = args.unsigned_integer("data-seed", 0);
  if (!seed) return seed.error();
  r.seed = *seed;
  r.bf16 = args.flag("bf16");
  r.csv_table = args.flag("csv-table");
  return r;
}
}  // namespace

Result<Tensor> load_input(const std::string& input, const Args& args) {
  auto r = request_from_args(input, args);
  if (!r) return r.error();
  return ops::load_tensor(*r);
}

Result<ops::TensorSource> open_input(const std::string& input, const Args& args) {
  auto r = request_from_args(input, args);
  if (!r) return r.error();
  return ops::open_tensor(*r);
}

Result<std::string> input_argument(const Args& args, std::size_t index) {
  const auto flag = args.value("input");
  const bool positional = args.positional.size() > index;
  if (flag && positional)
    return make_error("input given twice: '" + args.positional[index] + "' and '--input " + *flag + "'");
  if (flag) return *flag;
  if (positional) return args.positional[index];
  return make_error("missing INPUT (a positional argument or --input INPUT)");
}

OptionSpec threads_option() {
  return {"threads", true, "N", "worker threads (default: every hardware thread); results do not depend on it"};
}

Result<unsigned> threads_from_args(const Args& args) {
  auto t = args.integer("threads", 1, 1024, 0);
  if (!t) return t.error();
  return static_cast<unsigned>(*t);
}

std::string describe_source(const std::string& input, const Args& args, const ops::TensorSource& t) {
  std::string s = input + " (" + std::string(dtype_name(t.dtype())) + " " + format_shape(t.shape()) + ")";
  if (input.rfind("gen:", 0) == 0) s += " data-seed " + args.value("data-seed").value_or("0");
  return s;
}

}  // namespace mxlab::cli
