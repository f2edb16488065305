// `mxlab formats`: the catalogue with every derived property.
#include <iostream>

#include "cli/cli.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/quantize/block_format.hpp"

namespace mxlab::cli {

namespace {

/// The named block formats: element, scales, block size, rule and storage cost.
Table block_format_table() {
  Table t;
  for (const char* c : {"name", "element", "scale", "tensor_scale", "block", "scale_rule", "bits_per_element"})
    t.add_column(c, std::string(c) == "block" || std::string(c) == "bits_per_element");
  for (const auto& name : block_format_names()) {
    auto f = parse_block_format(name);
    if (!f) continue;
    t.rows.push_back({f->name, f->element.name(), f->layout.scale ? f->layout.scale->name() : "",
                      f->layout.tensor_scale ? f->layout.tensor_scale->name() : "", std::to_string(f->block_elements()),
                      std::string(to_string(f->options.rule)), g17(f->bits_per_element(0))});
  }
  return t;
}

}  // namespace

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
  Table t;
  for (const char* c : {"name", "aliases", "kind", "role", "bits", "exponent_bits", "mantissa_bits", "bias",
                        "specials", "emax", "max_finite", "min_normal", "min_subnormal", "min_positive",
                        "finite_codes", "has_inf", "has_nan", "has_negative_zero", "description"}) {
    const std::string col = c;
    const bool numeric = col == "bits" || col == "exponent_bits" || col == "mantissa_bits" || col == "bias" ||
                         col == "emax" || col == "max_finite" || col == "min_normal" || col == "min_subnormal" ||
                         col == "min_positive" || col == "finite_codes";
    t.add_column(col, numeric);
  }
  const auto rows = catalogue_rows();
  const auto formats = catalogue_formats();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Format& f = formats[i];
    const FormatSpec& s = f.spec();
    const bool is_float = s.kind == FormatKind::Float;
    const bool has_sub = is_float ? s.subnormals && (s.mantissa_bits > 0 || s.sub_exponent_bits > 0)
                                  : s.kind == FormatKind::Integer;
    t.rows.push_back({
        f.name(),
        std::string(rows[i].aliases),
        std::string(to_string(s.kind)),
        std::string(to_string(s.role)),
        std::to_string(f.bits()),
        is_float ? std::to_string(s.exponent_bits) : "",
        is_float ? std::to_string(s.mantissa_bits) : "",
        is_float ? std::to_string(s.bias) : "",
        is_float ? std::string(to_string(s.specials)) : "none",
        std::to_string(f.emax()),
        g17(f.max_finite()),
        g17(f.min_normal()),
        has_sub ? g17(f.min_positive()) : "",
        g17(f.min_positive()),
        std::to_string(f.finite_count()),
        f.has_inf() ? "true" : "false",
        f.has_nan() ? "true" : "false",
        f.has_negative_zero() ? "true" : "false",
        std::string(rows[i].description),
    });
  }
  if (args->flag("blocks")) return emit_table(io, "formats", *args, block_format_table(), build_provenance());
  const bool text = !args->flag("csv") && !args->flag("json") && !args->flag("md") && !args->value("out");
  const int code = emit_table(io, "formats", *args, t, build_provenance());
  // On a terminal the block formats follow (block format names stand for their element format in cast and
  // codepoints; docs/format-strings.md).
  if (text && code == kExitOk) {
    io.out << "\nblock formats (mxlab formats --blocks; in cast and codepoints a block format's name means its element):\n";
    return emit_table(io, "formats", *args, block_format_table(), build_provenance());
  }
  return code;
}

}  // namespace mxlab::cli
