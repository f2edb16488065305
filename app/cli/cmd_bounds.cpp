// `mxlab bounds`: the exact worst-case error of two block formats at every exponent gap, analytic and
// enumerated (docs/bounds.md).
#include <charconv>
#include <iostream>

#include "cli/cli.hpp"
#include "cli/quant_options.hpp"
#include "mxlab/exact/bounds.hpp"
#include "mxlab/ops/catalogue.hpp"

namespace mxlab::cli {
namespace {

/// The columns a terminal shows first: the exact bounds (--columns chooses others; files have every column).
const std::vector<std::string> kBoundsColumns = {"gap", "max_abs_A", "max_abs_B", "abs_smaller", "max_rel_A",
                                                 "max_rel_B", "rel_smaller", "analytic_eq_enumerated"};

}  // namespace

int cmd_bounds(const std::vector<std::string>& argv, Io io) {
  auto specs = table_output_options();
  specs.push_back({"max-gap", true, "G",
                   "last gap of the table, 0.." + std::to_string(exact::kMaxBoundGap) +
                       " (default: the first gap at which both formats have fully underflowed)"});
  // The options that change the bound; they apply to both formats.
  for (const OptionSpec& o : quant_options()) {
    if (o.name == "profile" || o.name == "round" || o.name == "overflow" || o.name == "subnormals" ||
        o.name == "scale-rule" || o.name == "scale-round" || o.name == "clamp" || o.name == "min-block-scale")
      specs.push_back(o);
  }
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "bounds", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab bounds FORMAT_A FORMAT_B [--max-gap G] [options] [--columns A,B,...]\n"
              "                    [--csv|--json|--md] [--out FILE]\n\n"
              "The largest quantization error of an element at exponent gap g = floor(log2 amax) - floor(log2 |x|)\n"
              "of its block, for two block formats: absolute error in units of 2^floor(log2 amax) and relative\n"
              "error |q - x| / |x|, each the supremum over every amax and x with that gap, computed exactly\n"
              "twice: from closed forms and by enumerating every element code and rounding boundary through the\n"
              "reference quantizer. One row per gap: both formats' bounds as exact numbers (2^k or decimal,\n"
              "p/q when not dyadic) and as doubles (%.17g), which is smaller (A, B or equal), whether each\n"
              "supremum is attained (abs, rel) or only approached, and whether the two computations agree.\n"
              "NVFP4-style tensor scales are taken as 1. Derivation and limits: docs/bounds.md.\n"
           << terminal_columns_help({{"", kBoundsColumns}}) << "\n" << options_help(specs);
    return kExitOk;
  }
  if (args->positional.size() != 2)
    return bad_input(io, "bounds", "expected two block formats (e.g. mxlab bounds mxint8 boost_e2m5)");
  const auto max_gap_or = args->integer("max-gap", 0, exact::kMaxBoundGap, -1);
  if (!max_gap_or) return bad_input(io, "bounds", max_gap_or.error().message);
  const int max_gap = static_cast<int>(*max_gap_or);
  std::vector<BlockFormat> formats;
  for (const std::string& spec : args->positional) {
    auto f = block_format_from_args(spec, *args);
    if (!f) return bad_input(io, "bounds", f.error().message);
    formats.push_back(*f);
  }
  auto table = ops::bounds_table(formats[0], formats[1], max_gap);
  if (!table) return bad_input(io, "bounds", table.error().message);

  Provenance prov = build_provenance();
  prov.simd_target = "reference";  // exact arithmetic and the scalar reference quantizer
  prov.inputs = describe_options(formats[0]);
  prov.inputs.front() = {"A", formats[0].name};
  prov.inputs.insert(prov.inputs.begin() + 1, {"B", formats[1].name});
  prov.inputs.emplace_back("max_gap", std::to_string(table->rows.size() - 1));
  const int rc = emit_table(io, "bounds", *args, *table, prov,
                            {kBoundsColumns, "A = " + formats[0].name + ", B = " + formats[1].name});
  if (rc != kExitOk) return rc;
  const std::size_t agree = table->columns.size() - 1;
  for (const auto& row : table->rows) {
    if (row[agree] != "yes") {
      io.err << "mxlab bounds: the analytic and enumerated bounds differ at gap " << row[0] << " (" << row[agree]
             << "); this is a bug\n";
      return kExitFailure;
    }
  }
  return kExitOk;
}

}  // namespace mxlab::cli
