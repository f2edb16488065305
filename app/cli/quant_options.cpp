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
      {"scale-overflow", true, "POLICY", "overflow of float scales: saturate (default) or nan (non-saturating E4M3 cast)"},
      {"input-precision", true, "P", "exact (default) or float32: inputs rounded to float32 first"},
      {"amax-log2", true, "M", "exponent of amax: exact (default), field (float32 exponent bits), float32 (float32 log2)"},
      {"rceil-quotient", true, "Q", "amax/max for rceil: exact (default), f32-div, f32-mul-rcp"},
      {"code0-multiplier", true, "M", "elements of an E8M0 0x00 block scaled by: exact (default), one, min-normal"},
      {"amax-subnormal", true, "M", "block with an FP32-subnormal amax: keep (default), flush, flush-positive"},
      {"zero-sign", true, "M", "zero codes: keep (default), minus-zero-plus, zero-minus"},
      {"nearest-arith", true, "M", "nearest-away arithmetic: exact (default) or float32-add-half"},
      {"nvfp4-arith", true, "M", "NVFP4 scale arithmetic: exact (default), te, modelopt"},
      {"four-over-six", true, "M", "4over6 candidate metric: exact-sse (default), mae, mse"},
      {"tensor-scale-max", true, "V", "block-scale maximum the tensor scale divides by (default: the scale format's max)"},
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
  // Every enumerated option: parse its text, or name the option in the error.
  std::optional<Error> err;
  auto set = [&](const char* name, auto parse, auto& field) {
    if (err) return;
    if (auto v = opt(name)) {
      auto r = parse(*v);
      if (!r) err = make_error("option '--" + std::string(name) + "': " + r.error().message);
      else field = *r;
    }
  };
  set("round", parse_rounding, o.element.rounding);
  set("overflow", parse_overflow, o.element.overflow);
  set("subnormals", parse_subnormals, o.element.subnormals);
  set("scale-rule", parse_scale_rule, o.rule);
  set("scale-round", parse_rounding, o.scale.rounding);
  set("scale-overflow", parse_overflow, o.scale.overflow);
  set("clamp", parse_clamp_site, o.clamp);
  set("zero-block", parse_zero_block, o.zero_block);
  set("specials", parse_specials_policy, o.specials);
  set("int-encoding", parse_int_encoding, o.int_encoding);
  set("nibble-order", parse_nibble_order, o.nibble_order);
  set("input-precision", parse_input_precision, o.input);
  set("amax-log2", parse_amax_log2, o.amax_log2);
  set("rceil-quotient", parse_rceil_quotient, o.rceil_quotient);
  set("code0-multiplier", parse_code0_multiplier, o.code0_multiplier);
  set("amax-subnormal", parse_amax_subnormal, o.amax_subnormal);
  set("zero-sign", parse_zero_sign, o.zero_sign);
  set("nearest-arith", parse_nearest_arith, o.nearest_arith);
  set("nvfp4-arith", parse_nvfp4_arith, o.nvfp4_arith);
  set("four-over-six", parse_four_over_six_metric, o.four_over_six);
  if (err) return *err;
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
  auto exact_double = [&](const char* name, double& field) {
    if (err) return;
    if (auto v = opt(name)) {
      auto r = exact::parse_rational(*v);
      const double d = r ? r->to_double() : -1;
      if (!r || !(d >= 0) || exact::Rational::from_double(d).compare(*r) != 0)
        err = make_error("option '--" + std::string(name) + " " + *v + "': expected a non-negative number exact in double");
      else field = d;
    }
  };
  exact_double("min-block-scale", o.min_block_scale);
  exact_double("tensor-scale-max", o.tensor_scale_max);
  if (err) return *err;
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
  auto s = [](auto v) { return std::string(to_string(v)); };
  std::vector<std::pair<std::string, std::string>> v = {
      {"format", f.name},
      {"profile", o.profile},
      {"round", s(o.element.rounding)},
      {"overflow", s(o.element.overflow)},
      {"subnormals", s(o.element.subnormals)},
      {"scale_rule", s(o.rule)},
      {"scale_round", s(o.scale.rounding)},
      {"scale_overflow", s(o.scale.overflow)},
      {"clamp", s(o.clamp)},
      {"zero_block", s(o.zero_block)},
      {"specials", s(o.specials)},
      {"input_precision", s(o.input)},
      {"amax_log2", s(o.amax_log2)},
      {"rceil_quotient", s(o.rceil_quotient)},
      {"code0_multiplier", s(o.code0_multiplier)},
      {"amax_subnormal", s(o.amax_subnormal)},
      {"zero_sign", s(o.zero_sign)},
      {"nearest_arith", s(o.nearest_arith)},
      {"nvfp4_arith", s(o.nvfp4_arith)},
      {"four_over_six", s(o.four_over_six)},
      {"seed", std::to_string(o.seed)},
  };
  if (o.element.rounding == Rounding::Stochastic) v.emplace_back("random_bits", std::to_string(o.element.random_bits));
  if (o.min_block_scale > 0) v.emplace_back("min_block_scale", g17(o.min_block_scale));
  if (o.tensor_scale_max > 0) v.emplace_back("tensor_scale_max", g17(o.tensor_scale_max));
  return v;
}

}  // namespace mxlab::cli
