// Command-line options of block quantization.
#include "cli/quant_options.hpp"

#include <charconv>

#include "mxlab/exact/exact.hpp"
#include "mxlab/formats/cast.hpp"

namespace mxlab::cli {

std::vector<OptionSpec> quant_options() {
  return {
      {"profile", true, "P", "preset of a peer's choices (see docs/profiles.md); default ocp"},
      {"round", true, "MODE", "element rounding: nearest-even (default), nearest-away, nearest-zero, zero, up, down, odd, stochastic"},
      {"overflow", true, "POLICY", "element overflow: saturate (default), inf, nan"},
      {"subnormals", true, "MODE", "element subnormals: keep (default), flush, flush-input, flush-output"},
      {"seed", true, "N", "stochastic rounding seed; element i uses stochastic_bits(N, i)"},
      {"random-bits", true, "R", "stochastic rounding random bits 1..32 (default 32)"},
      {"scale-rule", true, "RULE", "floor, ceil, rceil, even, midmax, amax, 4over6 (default per format)"},
      {"scale-round", true, "MODE", "rounding of float scales such as UE4M3 (default nearest-even)"},
      {"clamp", true, "SITE", "where the scale exponent is clamped: exponent (default) or amax"},
      {"zero-block", true, "SCALE", "scale of an all-zero block: smallest (default) or one"},
      {"specials", true, "POLICY", "NaN/Inf inputs: block-nan (default) or element"},
      {"min-block-scale", true, "V", "smallest float block scale (NVFP4), e.g. 0x1p-6; default none"},
      {"int-encoding", true, "ENC", "MX integer elements when packed: twos-complement (default) or sign-magnitude"},
      {"nibble-order", true, "ORDER", "two FP4 codes per byte: low-first (default) or high-first"},
      {"block-axis", true, "A", "axis of 1-D tiles (default -1, the last; negative counts from the end)"},
      {"subtile-bits", true, "B", "bits of each subtile's microexponent offset (default 1)"},
  };
}

Result<BlockFormat> block_format_from_args(const std::string& spec, const Args& args) {
  auto parsed = parse_block_format(spec);
  if (!parsed) return parsed.error();
  BlockFormat f = *parsed;
  if (auto p = args.value("profile")) {
    auto r = apply_profile(f, *p);
    if (!r) return make_error("option '--profile': " + r.error().message);
    f = *r;
  }
  QuantOptions& o = f.options;
  auto opt = [&](const char* name) { return args.value(name); };
  if (auto v = opt("round")) {
    auto r = parse_rounding(*v);
    if (!r) return make_error("option '--round': " + r.error().message);
    o.element.rounding = *r;
  }
  if (auto v = opt("overflow")) {
    auto r = parse_overflow(*v);
    if (!r) return make_error("option '--overflow': " + r.error().message);
    o.element.overflow = *r;
  }
  if (auto v = opt("subnormals")) {
    auto r = parse_subnormals(*v);
    if (!r) return make_error("option '--subnormals': " + r.error().message);
    o.element.subnormals = *r;
  }
  if (auto v = opt("seed")) {
    auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), o.seed);
    if (ec != std::errc() || p != v->data() + v->size())
      return make_error("option '--seed " + *v + "': expected a non-negative integer");
  }
  if (auto v = opt("random-bits")) {
    int bits = 0;
    auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), bits);
    if (ec != std::errc() || p != v->data() + v->size() || bits < 1 || bits > 32)
      return make_error("option '--random-bits " + *v + "': expected an integer 1..32");
    o.element.random_bits = bits;
  }
  if (auto v = opt("scale-rule")) {
    auto r = parse_scale_rule(*v);
    if (!r) return make_error("option '--scale-rule': " + r.error().message);
    o.rule = *r;
  }
  if (auto v = opt("scale-round")) {
    auto r = parse_rounding(*v);
    if (!r) return make_error("option '--scale-round': " + r.error().message);
    o.scale.rounding = *r;
  }
  if (auto v = opt("clamp")) {
    auto r = parse_clamp_site(*v);
    if (!r) return make_error("option '--clamp': " + r.error().message);
    o.clamp = *r;
  }
  if (auto v = opt("zero-block")) {
    auto r = parse_zero_block(*v);
    if (!r) return make_error("option '--zero-block': " + r.error().message);
    o.zero_block = *r;
  }
  if (auto v = opt("specials")) {
    auto r = parse_specials_policy(*v);
    if (!r) return make_error("option '--specials': " + r.error().message);
    o.specials = *r;
  }
  if (auto v = opt("min-block-scale")) {
    auto r = exact::parse_rational(*v);
    if (!r) return make_error("option '--min-block-scale': " + r.error().message);
    const double d = r->to_double();
    if (!(d >= 0) || exact::Rational::from_double(d).compare(*r) != 0)
      return make_error("option '--min-block-scale " + *v + "': expected a non-negative number exact in double");
    o.min_block_scale = d;
  }
  if (auto v = opt("int-encoding")) {
    auto r = parse_int_encoding(*v);
    if (!r) return make_error("option '--int-encoding': " + r.error().message);
    o.int_encoding = *r;
  }
  if (auto v = opt("nibble-order")) {
    auto r = parse_nibble_order(*v);
    if (!r) return make_error("option '--nibble-order': " + r.error().message);
    o.nibble_order = *r;
  }
  if (auto v = opt("block-axis")) {
    int a = 0;
    auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), a);
    if (ec != std::errc() || p != v->data() + v->size() || a < -32 || a > 31)
      return make_error("option '--block-axis " + *v + "': expected an axis such as 0, 1 or -1");
    if (f.layout.tiles.size() != 1) return make_error("option '--block-axis': the format has no 1-D tiles");
    f.layout.axis = a;
  }
  if (auto v = opt("subtile-bits")) {
    int b = 0;
    auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), b);
    if (ec != std::errc() || p != v->data() + v->size() || b < 1 || b > 8)
      return make_error("option '--subtile-bits " + *v + "': expected 1..8");
    f.layout.subtile_bits = b;
  }
  // Check the element options against the element format now, so the message names the option.
  auto ro = resolve_options(f.element, o.element);
  if (!ro) return make_error("option '--overflow': " + ro.error().message);
  return f;
}

std::vector<std::pair<std::string, std::string>> describe_options(const BlockFormat& f) {
  const QuantOptions& o = f.options;
  std::vector<std::pair<std::string, std::string>> v = {
      {"format", f.name},
      {"profile", o.profile},
      {"round", std::string(to_string(o.element.rounding))},
      {"overflow", std::string(to_string(o.element.overflow))},
      {"subnormals", std::string(to_string(o.element.subnormals))},
      {"scale_rule", std::string(to_string(o.rule))},
      {"clamp", std::string(to_string(o.clamp))},
      {"zero_block", std::string(to_string(o.zero_block))},
      {"specials", std::string(to_string(o.specials))},
      {"seed", std::to_string(o.seed)},
  };
  if (o.element.rounding == Rounding::Stochastic) v.emplace_back("random_bits", std::to_string(o.element.random_bits));
  if (o.min_block_scale > 0) v.emplace_back("min_block_scale", g17(o.min_block_scale));
  return v;
}

}  // namespace mxlab::cli
