// `mxlab dequantize`: reads the packed files of `mxlab quantize --packed` and writes the exact values.
#include "cli/cli.hpp"
#include "cli/inputs.hpp"
#include "cli/quant_options.hpp"
#include "mxlab/io/npy.hpp"
#include "mxlab/ops/packed_file.hpp"
#include "mxlab/quantize/pack.hpp"

namespace mxlab::cli {

int cmd_dequantize(const std::vector<std::string>& argv, Io io) {
  std::vector<OptionSpec> specs = {{"out", true, "FILE", "output .npy of the dequantized values (float64, exact)"},
                                   threads_option()};
  // Only the options that change how codes decode (the rest decide how values round, which the codes record).
  for (auto& o : quant_options())
    for (const char* used : {"profile", "int-encoding", "nibble-order", "block-axis", "subtile-bits"})
      if (o.name == used) specs.push_back(o);
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "dequantize", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab dequantize SPEC BASE --out FILE.npy [--profile P] [options]\n\n"
              "Reads BASE.elements.npy, BASE.scales.npy, BASE.tensor_scale.npy and BASE.json written by\n"
              "`mxlab quantize SPEC INPUT --out BASE --packed` (block scale layout), unpacks the codes and\n"
              "writes the dequantized values, exactly, as float64. SPEC must name the block format used to quantize;\n"
              "the packing (nibble order, integer encoding, block axis, subtile bits) is read from BASE.json, and\n"
              "a packing option given here must agree with it.\n\n"
           << options_help(specs);
    return kExitOk;
  }
  if (args->positional.size() != 2) return bad_input(io, "dequantize", "expected SPEC and BASE");
  const auto out = args->value("out");
  if (!out || out->empty()) return bad_input(io, "dequantize", "missing --out FILE");
  auto f = block_format_from_args(args->positional[0], *args);
  if (!f) return bad_input(io, "dequantize", f.error().message);
  const std::string base = args->positional[1];
  auto packed = ops::read_packed(*f, base);
  if (!packed) return bad_input(io, "dequantize", packed.error().message);
  // The codes decode as BASE.json records they were packed; an option given here must agree with it.
  const std::size_t rank = packed->tensor.shape.size();
  const auto given = ops::describe_packing(*f, rank), recorded = ops::describe_packing(packed->format, rank);
  for (std::size_t i = 0; i < given.size(); ++i)
    if (args->value(given[i].first) && given[i].second != recorded[i].second)
      return bad_input(io, "dequantize", "option '--" + given[i].first + " " + given[i].second + "': '" + base +
                                             ".json' records " + given[i].first + " " + recorded[i].second);
  const PackedTensor& p = packed->tensor;
  auto threads = threads_from_args(*args);
  if (!threads) return bad_input(io, "dequantize", threads.error().message);
  ops::Run run;
  run.threads = *threads;
  auto values = ops::dequantize(packed->format, p, run);
  if (!values) return bad_input(io, "dequantize", "'" + base + "': " + values.error().message);
  auto written = write_npy(*out, std::span<const double>(*values), p.shape);
  if (!written) return bad_input(io, "dequantize", written.error().message);
  return kExitOk;
}

}  // namespace mxlab::cli
