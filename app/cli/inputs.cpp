// Tensor inputs of the CLI.
#include "cli/inputs.hpp"

#include <charconv>

#include "mxlab/io/csv.hpp"
#include "mxlab/io/distributions.hpp"
#include "mxlab/io/mapped.hpp"
#include "mxlab/io/npy.hpp"
#include "mxlab/io/raw.hpp"

namespace mxlab::cli {
namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
Result<std::uint64_t> data_seed(const Args& args) {
  std::uint64_t seed = 0;
  if (auto v = args.value("data-seed")) {
    auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), seed);
    if (ec != std::errc() || p != v->data() + v->size())
      return make_error("option '--data-seed " + *v + "': expected a non-negative integer");
  }
  return seed;
}
}  // namespace

std::vector<OptionSpec> input_options() {
  return {{"shape", true, "SHAPE", "shape of a generated or raw input, e.g. 1024x1024 (default 65536)"},
          {"data-seed", true, "N", "seed of a generated input (default 0)"},
          {"bf16", false, "", "read a uint16 .npy as bfloat16 bit patterns"},
          {"csv-table", false, "", "read a CSV as a 2-D table (one row per line) instead of a flat list"}};
}

Result<Tensor> load_input(const std::string& input, const Args& args) {
  if (input.rfind("gen:", 0) == 0) {
    auto seed = data_seed(args);
    if (!seed) return seed.error();
    const std::string shape = args.value("shape").value_or("65536");
    return generate(input.substr(4), shape, *seed, DType::F32);
  }
  if (ends_with(input, ".npy") || ends_with(input, ".npy.gz")) {
    NpyReadOptions o;
    o.u2_as_bf16 = args.flag("bf16");
    return read_npy(input, o);
  }
  if (ends_with(input, ".csv") || ends_with(input, ".csv.gz")) {
    CsvOptions o;
    if (args.flag("csv-table")) o.layout = CsvLayout::Table;
    return read_csv(input, o);
  }
  if (ends_with(input, ".f32") || ends_with(input, ".bin") || ends_with(input, ".raw") || ends_with(input, ".f32.gz")) {
    std::optional<std::vector<std::int64_t>> shape;
    if (auto s = args.value("shape")) {
      auto parsed = parse_shape(*s);
      if (!parsed) return parsed.error();
      shape = *parsed;
    }
    return read_raw_f32(input, shape);
  }
  return make_error("input '" + input +
                    "': unknown kind (expected FILE.npy, FILE.csv, FILE.f32 / .bin / .raw, or gen:DIST such as "
                    "gen:normal:0,1)");
}

Result<ops::TensorSource> open_input(const std::string& input, const Args& args) {
  if (ends_with(input, ".npy")) {
    NpyReadOptions o;
    o.u2_as_bf16 = args.flag("bf16");
    if (MappedTensor::why_not_mappable(input, o).empty()) {
      auto m = MappedTensor::open_npy(input, o);
      if (!m) return m.error();
      return ops::TensorSource::of(std::move(*m));
    }
  }
  if (ends_with(input, ".f32") || ends_with(input, ".bin") || ends_with(input, ".raw")) {
    std::vector<std::int64_t> shape;
    if (auto s = args.value("shape")) {
      auto parsed = parse_shape(*s);
      if (!parsed) return parsed.error();
      shape = *parsed;
    }
    auto m = MappedTensor::open_raw_f32(input, shape);
    if (!m) return m.error();
    return ops::TensorSource::of(std::move(*m));
  }
  auto t = load_input(input, args);
  if (!t) return t.error();
  return ops::TensorSource::of(std::move(*t));
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
  const auto v = args.value("threads");
  if (!v) return 0U;
  unsigned t = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), t);
  if (ec != std::errc() || p != v->data() + v->size() || t < 1 || t > 1024)
    return make_error("option '--threads " + *v + "': expected a whole number from 1 to 1024");
  return t;
}

std::string describe_source(const std::string& input, const Args& args, const ops::TensorSource& t) {
  std::string s = input + " (" + std::string(dtype_name(t.dtype())) + " " + format_shape(t.shape()) + ")";
  if (input.rfind("gen:", 0) == 0) s += " data-seed " + args.value("data-seed").value_or("0");
  return s;
}

}  // namespace mxlab::cli
