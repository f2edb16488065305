// `mxlab formats`: the catalogue with every derived property.
#include <iostream>

#include "cli/cli.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/ops/catalogue.hpp"

namespace mxlab::cli {

int cmd_formats(const std::vector<std::string>& argv, Io io) {
  auto specs = table_output_options();
  specs.push_back({"blocks", false, "", "list the named block formats (element, scales, block size, rule, bits per element)"});
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "formats", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab formats [--blocks] [--csv|--json|--md] [--out FILE]\n\n"
              "Every named format: name, aliases, bits, exponent/mantissa bits, bias, emax, max finite,\n"
              "min normal, min subnormal, number of finite codes, inf/NaN. Values are exact doubles (%.17g).\n\n"
           << options_help(specs);
    return kExitOk;
  }
  if (!args->positional.empty()) return bad_input(io, "formats", "unexpected argument '" + args->positional[0] + "'");
  const Table t = ops::format_table(catalogue_formats());
  if (args->flag("blocks")) return emit_table(io, "formats", *args, ops::block_format_table(), build_provenance());
  const bool text = !args->flag("csv") && !args->flag("json") && !args->flag("md") && !args->value("out");
  const int code = emit_table(io, "formats", *args, t, build_provenance());
  // On a terminal the block formats follow (block format names stand for their element format in cast and
  // codepoints; docs/format-strings.md).
  if (text && code == kExitOk) {
    io.out << "\nblock formats (mxlab formats --blocks; in cast and codepoints a block format's name means its element):\n";
    return emit_table(io, "formats", *args, ops::block_format_table(), build_provenance());
  }
  return code;
}

}  // namespace mxlab::cli
