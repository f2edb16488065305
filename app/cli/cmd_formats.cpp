// `mxlab formats`: the catalogue with every derived property.
#include <iostream>

#include "cli/cli.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/ops/catalogue.hpp"

namespace mxlab::cli {
namespace {

/// The columns a terminal shows first (--columns chooses others; files have every column).
const std::vector<std::string> kFormatColumns = {"name", "bits", "exponent_bits", "mantissa_bits", "max_finite",
                                                 "min_normal", "min_subnormal", "specials", "kind"};
const std::vector<std::string> kBlockFormatColumns = {"name", "element", "scale", "tensor_scale", "block", "scale_rule",
                                                      "bits_per_element"};

/// No kernel runs here: every figure comes from the scalar reference.
Provenance formats_provenance() {
  Provenance p = build_provenance();
  p.simd_target = "reference";
  return p;
}

}  // namespace

int cmd_formats(const std::vector<std::string>& argv, Io io) {
  auto specs = table_output_options();
  specs.push_back({"blocks", false, "", "list the named block formats (element, scales, block size, rule, bits per element)"});
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "formats", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab formats [--blocks] [--columns A,B,...] [--csv|--json|--md] [--out FILE]\n\n"
              "Every named format: name, aliases, bits, exponent/mantissa bits, bias, emax, max finite,\n"
              "min normal, min subnormal, number of finite codes, inf/NaN. Values are exact doubles (%.17g).\n"
              "On a terminal the block formats follow, unless --columns chooses the columns of one table.\n"
           << terminal_columns_help({{"", kFormatColumns}, {"--blocks", kBlockFormatColumns}}) << "\n"
           << options_help(specs);
    return kExitOk;
  }
  if (!args->positional.empty()) return bad_input(io, "formats", "unexpected argument '" + args->positional[0] + "'");
  const Table t = ops::format_table(catalogue_formats());
  if (args->flag("blocks"))
    return emit_table(io, "formats", *args, ops::block_format_table(), formats_provenance(), {kBlockFormatColumns, ""});
  const bool text = !args->flag("csv") && !args->flag("json") && !args->flag("md") && !args->value("out");
  const int code = emit_table(io, "formats", *args, t, formats_provenance(), {kFormatColumns, ""});
  // On a terminal the block formats follow (block format names stand for their element format in cast and
  // codepoints; docs/format-strings.md); --columns names the columns of one table.
  if (text && code == kExitOk && !args->value("columns"))
    return emit_table(io, "formats", *args, ops::block_format_table(), formats_provenance(),
                      {kBlockFormatColumns, "\nblock formats (mxlab formats --blocks):"});
  return code;
}

}  // namespace mxlab::cli
