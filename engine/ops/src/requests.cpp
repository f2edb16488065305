// Block formats with named options, and inputs named by text: built the same way for every front end.
#include "mxlab/ops/requests.hpp"

#include <charconv>

#include "mxlab/core/bits.hpp"
#include "mxlab/core/text.hpp"
#include "mxlab/exact/exact.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/io/csv.hpp"
#include "mxlab/io/distributions.hpp"
#include "mxlab/io/mapped.hpp"
#include "mxlab/io/npy.hpp"
#include "mxlab/io/raw.hpp"

namespace mxlab::ops {
namespace {

/// The scale rules' names, comma-separated, from their traits rows.
std::string scale_rule_list() {
  std::string list;
  for (const ScaleRuleTraits& t : kScaleRules) list += (list.empty() ? "" : ", ") + std::string(t.name);
  return list;
}

}  // namespace

const std::vector<FormatOptionInfo>& format_options() {
  static const std::vector<FormatOptionInfo> kOptions = {
      {"profile", "P", "preset of a peer's choices (see docs/profiles.md); default ocp"},
      {"round", "MODE", "element rounding: nearest-even (default), nearest-away, nearest-zero, zero, up, down, odd, stochastic"},
      {"overflow", "POLICY", "element overflow: saturate (default), inf, nan"},
      {"subnormals", "MODE", "element subnormals: keep (default), flush, flush-input, flush-output"},
      {"seed", "N", "stochastic rounding seed; element i uses stochastic_bits(N, i)"},
      {"random-bits", "R", "stochastic rounding random bits 1..32 (default 32)"},
      {"scale-rule", "RULE", scale_rule_list() + " (default per format)"},
      {"scale-round", "MODE", "rounding of float scales such as UE4M3 (default nearest-even)"},
      {"clamp", "SITE", "where the scale exponent is clamped: exponent (default) or amax"},
      {"zero-block", "SCALE", "scale of an all-zero block: smallest (default) or one"},
      {"specials", "POLICY", "NaN/Inf inputs: block-nan (default) or element"},
      {"min-block-scale", "V", "smallest float block scale (NVFP4), e.g. 0x1p-6; default none"},
      {"int-encoding", "ENC", "MX integer elements when packed: twos-complement (default) or sign-magnitude"},
      {"nibble-order", "ORDER", "two FP4 codes per byte: low-first (default) or high-first"},
      {"scale-overflow", "POLICY", "overflow of scales: saturate (default) or nan (a non-saturating E4M3 cast; an E8M0 exponent above 127 makes the block NaN)"},
      {"input-precision", "P", "exact (default) or float32: inputs rounded to float32 first"},
      {"amax-log2", "M", "exponent of amax: exact (default), field (float32 exponent bits), float32 (float32 log2)"},
      {"rceil-quotient", "Q", "amax/max for rceil: exact (default), f32-div, f32-mul-rcp"},
      {"code0-multiplier", "M", "elements of an E8M0 0x00 block scaled by: exact (default), one, min-normal"},
      {"amax-subnormal", "M", "block with an FP32-subnormal amax: keep (default), flush, flush-positive"},
      {"zero-sign", "M", "zero codes: keep (default), minus-zero-plus, zero-minus"},
      {"fake-nan", "N", "float32 bits of NaN fake-quant values: quiet (default) or all-ones (0xFFFFFFFF)"},
      {"nearest-arith", "M", "nearest-away arithmetic: exact (default) or float32-add-half"},
      {"nvfp4-arith", "M", "NVFP4 scale arithmetic: exact (default), te, modelopt"},
      {"four-over-six", "M", "4over6 candidate metric: exact-sse (default), mae, mse"},
      {"tensor-scale-max", "V", "block-scale maximum the tensor scale divides by (default: the scale format's max)"},
      {"block-axis", "A", "axis of 1-D tiles (default -1, the last; negative counts from the end)"},
      {"subtile-bits", "B", "bits of each subtile's microexponent offset (default 1)"},
  };
  return kOptions;
}

namespace {

/// A non-negative number exact in double (fractions and hex floats welcome: "1/64", "0x1p-6").
Result<double> exact_double(std::string_view v) {
  auto r = exact::parse_rational(v);
  const double d = r ? r->to_double() : -1;
  if (!r || !(d >= 0) || exact::Rational::from_double(d).compare(*r) != 0)
    return make_error("expected a non-negative number exact in double");
  return d;
}

/// Sets one option of `f` from its text; the error says what the value should be (without the option's name).
std::optional<Error> set_option(BlockFormat& f, std::string_view name, std::string_view v) {
  QuantOptions& o = f.options;
  auto parsed = [&](auto parse, auto& field) -> std::optional<Error> {
    auto r = parse(v);
    if (!r) return r.error();
    field = *r;
    return std::nullopt;
  };
  if (name == "round") return parsed(parse_rounding, o.element.rounding);
  if (name == "overflow") return parsed(parse_overflow, o.element.overflow);
  if (name == "subnormals") return parsed(parse_subnormals, o.element.subnormals);
  if (name == "scale-rule") return parsed(parse_scale_rule, o.rule);
  if (name == "scale-round") return parsed(parse_rounding, o.scale.rounding);
  if (name == "scale-overflow") return parsed(parse_overflow, o.scale.overflow);
  if (name == "clamp") return parsed(parse_clamp_site, o.clamp);
  if (name == "zero-block") return parsed(parse_zero_block, o.zero_block);
  if (name == "specials") return parsed(parse_specials_policy, o.specials);
  if (name == "int-encoding") return parsed(parse_int_encoding, o.int_encoding);
  if (name == "nibble-order") return parsed(parse_nibble_order, o.nibble_order);
  if (name == "input-precision") return parsed(parse_input_precision, o.input);
  if (name == "amax-log2") return parsed(parse_amax_log2, o.amax_log2);
  if (name == "rceil-quotient") return parsed(parse_rceil_quotient, o.rceil_quotient);
  if (name == "code0-multiplier") return parsed(parse_code0_multiplier, o.code0_multiplier);
  if (name == "amax-subnormal") return parsed(parse_amax_subnormal, o.amax_subnormal);
  if (name == "zero-sign") return parsed(parse_zero_sign, o.zero_sign);
  if (name == "fake-nan") return parsed(parse_fake_nan, o.fake_nan);
  if (name == "nearest-arith") return parsed(parse_nearest_arith, o.nearest_arith);
  if (name == "nvfp4-arith") return parsed(parse_nvfp4_arith, o.nvfp4_arith);
  if (name == "four-over-six") return parsed(parse_four_over_six_metric, o.four_over_six);
  if (name == "min-block-scale") return parsed(exact_double, o.min_block_scale);
  if (name == "tensor-scale-max") {
    // 0 inside QuantOptions means "the scale format's max"; a user who means that omits the option.
    auto r = exact_double(v);
    if (!r || *r == 0) return make_error("expected a positive number exact in double (omit it for the scale format's max)");
    if (!f.layout.tensor_scale) return make_error("the format has no tensor scale");
    o.tensor_scale_max = *r;
    return std::nullopt;
  }
  if (name == "seed") {
    auto r = parse_whole_in<std::uint64_t>(v, 0, UINT64_MAX);
    if (!r) return make_error("'" + std::string(v) + "': expected a non-negative integer");
    o.seed = *r;
    return std::nullopt;
  }
  if (name == "random-bits") {
    auto r = parse_whole_in<int>(v, 1, 32);
    if (!r) return make_error("'" + std::string(v) + "': expected an integer 1..32");
    o.element.random_bits = *r;
    return std::nullopt;
  }
  if (name == "block-axis") {
    auto r = parse_whole_in<int>(v, -32, 31);
    if (!r) return make_error("'" + std::string(v) + "': expected an axis such as 0, 1 or -1");
    if (!f.layout.geometry().one_d()) return make_error("the format has no 1-D tiles");
    f.layout.axis = *r;
    return std::nullopt;
  }
  if (name == "subtile-bits") {
    auto r = parse_whole_in<int>(v, 1, 8);
    if (!r) return make_error("'" + std::string(v) + "': expected 1..8");
    f.layout.subtile_bits = *r;
    return std::nullopt;
  }
  return make_error("unknown option");
}

}  // namespace

Result<BlockFormat> block_format(std::string_view spec, const std::vector<std::pair<std::string, std::string>>& options,
                                 const OptionNamer& namer) {
  auto parsed = parse_block_format(spec);
  if (!parsed) return parsed.error();
  BlockFormat f = *parsed;
  for (const auto& [name, value] : options) {
    if (name != "profile") continue;
    auto r = apply_profile(f, value);
    if (!r) return make_error(namer(name) + ": " + r.error().message);
    f = *r;
  }
  for (const auto& [name, value] : options) {
    if (name == "profile") continue;
    if (auto e = set_option(f, name, value)) {
      if (e->message == "unknown option") {
        std::string known;
        for (const auto& o : format_options()) known += (known.empty() ? "" : ", ") + o.name;
        return make_error(namer(name) + ": unknown option (known: " + known + ")");
      }
      const bool quoted = !e->message.empty() && e->message.front() == '\'';
      return make_error(namer(name) + (quoted ? " " : " '" + value + "': ") + e->message);
    }
  }
  // Check the element options against the element format now, so the message names the option.
  auto ro = resolve_options(f.element, f.options.element);
  if (!ro) return make_error(namer("overflow") + ": " + ro.error().message);
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
      {"fake_nan", s(o.fake_nan)},
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


Result<Tensor> load_tensor(const InputRequest& r) {
  const std::string& input = r.input;
  if (input.rfind("gen:", 0) == 0) return generate(input.substr(4), r.shape.empty() ? "65536" : r.shape, r.seed, DType::F32);
  if (input.ends_with(".npy") || input.ends_with(".npy.gz")) {
    NpyReadOptions o;
    o.u2_as_bf16 = r.bf16;
    return read_npy(input, o);
  }
  if (input.ends_with(".csv") || input.ends_with(".csv.gz")) {
    CsvOptions o;
    if (r.csv_table) o.layout = CsvLayout::Table;
    return read_csv(input, o);
  }
  if (input.ends_with(".f32") || input.ends_with(".bin") || input.ends_with(".raw") || input.ends_with(".f32.gz")) {
    std::optional<std::vector<std::int64_t>> shape;
    if (!r.shape.empty()) {
      auto parsed = parse_shape(r.shape);
      if (!parsed) return parsed.error();
      shape = *parsed;
    }
    return read_raw_f32(input, shape);
  }
  return make_error("input '" + input +
                    "': unknown kind (expected FILE.npy, FILE.csv, FILE.f32 / .bin / .raw, or gen:DIST such as "
                    "gen:normal:0,1)");
}

Result<TensorSource> open_tensor(const InputRequest& r) {
  const std::string& input = r.input;
  if (input.ends_with(".npy")) {
    NpyReadOptions o;
    o.u2_as_bf16 = r.bf16;
    if (MappedTensor::why_not_mappable(input, o).empty()) {
      auto m = MappedTensor::open_npy(input, o);
      if (!m) return m.error();
      return TensorSource::of(std::move(*m));
    }
  }
  if (input.ends_with(".f32") || input.ends_with(".bin") || input.ends_with(".raw")) {
    std::vector<std::int64_t> shape;
    if (!r.shape.empty()) {
      auto parsed = parse_shape(r.shape);
      if (!parsed) return parsed.error();
      shape = *parsed;
    }
    auto m = MappedTensor::open_raw_f32(input, shape);
    if (!m) return m.error();
    return TensorSource::of(std::move(*m));
  }
  auto t = load_tensor(r);
  if (!t) return t.error();
  return TensorSource::of(std::move(*t));
}

}  // namespace mxlab::ops
