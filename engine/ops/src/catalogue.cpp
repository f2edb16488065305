// The format catalogue as tables (mxlab formats, the catalogue experiment, the GUI's properties panel).
#include "mxlab/ops/catalogue.hpp"

#include <cmath>
#include <cstdio>

#include "mxlab/core/bits.hpp"
#include "mxlab/exact/bounds.hpp"
#include "mxlab/exact/exact.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/formats/codepoints.hpp"
#include "mxlab/quantize/block_format.hpp"

namespace mxlab::ops {

Table format_table(std::span<const Format> formats) {
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
  for (const Format& f : formats) {
    const CatalogueRow* row = find_catalogue_row(f.name());
    const FormatSpec& s = f.spec();
    const bool is_float = s.kind == FormatKind::Float;
    const bool has_sub = is_float ? s.subnormals && (s.mantissa_bits > 0 || s.sub_exponent_bits > 0)
                                  : s.kind == FormatKind::Integer;
    t.rows.push_back({
        f.name(),
        row ? std::string(row->aliases) : "",
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
        row ? std::string(row->description) : "",
    });
  }
  return t;
}

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

Table codepoint_table(const Format& f, std::uint64_t first, std::uint64_t last) {
  Table t;
  for (const char* c : {"code", "hex", "bits", "sign", "exponent", "mantissa", "class", "value", "exact", "gap_up"}) {
    const std::string col = c;
    t.add_column(col, col == "code" || col == "sign" || col == "exponent" || col == "mantissa" || col == "value" ||
                          col == "gap_up");
  }
  const bool is_float = f.kind() == FormatKind::Float;
  for (const CodePoint& p : enumerate_codes(f, first, last)) {
    const bool finite = p.cls != CodeClass::Nan && p.cls != CodeClass::Inf;
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%0*X", (f.bits() + 3) / 4, p.code);
    t.rows.push_back({std::to_string(p.code), hex, p.bits, p.fields.sign ? "1" : "0",
                      is_float ? std::to_string(p.fields.exponent) : "", is_float ? std::to_string(p.fields.mantissa) : "",
                      std::string(to_string(p.cls)), g17(p.value),
                      finite ? exact::code_value(f, p.code).to_decimal() : g17(p.value),
                      std::isnan(p.gap_up) ? "" : g17(p.gap_up)});
  }
  return t;
}

Result<Table> bounds_table(const BlockFormat& a, const BlockFormat& b, int max_gap) {
  for (const BlockFormat* f : {&a, &b})
    if (auto e = exact::check_bounds_support(*f)) return *e;
  return exact::bounds_table(a, b, max_gap);
}

}  // namespace mxlab::ops
