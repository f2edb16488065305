// Block format strings: short names with block overrides, and ELEMENT:SCALESPEC with TensorCast scale
// specs (seed 002). Grammar and defaults in docs/quantization.md.
#include "mxlab/quantize/block_format.hpp"
#include "mxlab/quantize/quantize.hpp"

#include <cctype>
#include <charconv>

#include "mxlab/core/ceil_div.hpp"
#include "mxlab/core/named.hpp"
#include "mxlab/core/quote.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/formats/parse.hpp"

namespace mxlab {
namespace {


constexpr Named<ZeroBlock> kZero[] = {
    {"smallest", ZeroBlock::Smallest}, {"one", ZeroBlock::One}, {"min-normal", ZeroBlock::MinNormal}};
constexpr Named<SpecialsPolicy> kSpecials[] = {
    {"block-nan", SpecialsPolicy::BlockNan},         {"element", SpecialsPolicy::Element},
    {"block-nan-any", SpecialsPolicy::BlockNanAny},  {"ignore-nan", SpecialsPolicy::IgnoreNan},
    {"torchao-floor", SpecialsPolicy::TorchaoFloor}, {"torchao-rceil", SpecialsPolicy::TorchaoRceil},
    {"tensor-nan", SpecialsPolicy::TensorNan},       {"nan-smallest", SpecialsPolicy::NanSmallest}};
constexpr Named<AmaxLog2> kAmaxLog2[] = {
    {"exact", AmaxLog2::Exact}, {"field", AmaxLog2::Field}, {"float32", AmaxLog2::Float32}};
constexpr Named<RceilQuotient> kRceilQuotient[] = {
    {"exact", RceilQuotient::Exact}, {"f32-div", RceilQuotient::F32Div}, {"f32-mul-rcp", RceilQuotient::F32MulRcp}};
constexpr Named<Code0Multiplier> kCode0[] = {
    {"exact", Code0Multiplier::Exact}, {"one", Code0Multiplier::One}, {"min-normal", Code0Multiplier::MinNormal}};
constexpr Named<AmaxSubnormal> kAmaxSubnormal[] = {
    {"keep", AmaxSubnormal::Keep}, {"flush", AmaxSubnormal::Flush}, {"flush-positive", AmaxSubnormal::FlushPositive}};
constexpr Named<FakeNan> kFakeNan[] = {{"quiet", FakeNan::Quiet}, {"all-ones", FakeNan::AllOnes}};
constexpr Named<ZeroSign> kZeroSign[] = {
    {"keep", ZeroSign::Keep}, {"minus-zero-plus", ZeroSign::MinusZeroPlus}, {"zero-minus", ZeroSign::ZeroMinus}};
constexpr Named<NearestArith> kNearestArith[] = {
    {"exact", NearestArith::Exact}, {"float32-add-half", NearestArith::Float32AddHalf}};
constexpr Named<InputPrecision> kInput[] = {{"exact", InputPrecision::Exact}, {"float32", InputPrecision::Float32}};
constexpr Named<Nvfp4Arith> kNvfp4Arith[] = {
    {"exact", Nvfp4Arith::Exact}, {"te", Nvfp4Arith::Te}, {"modelopt", Nvfp4Arith::ModelOpt}};
constexpr Named<FourOverSixMetric> kFourOverSix[] = {
    {"exact-sse", FourOverSixMetric::ExactSse}, {"mae", FourOverSixMetric::Mae}, {"mse", FourOverSixMetric::Mse}};
constexpr Named<ClampSite> kClamp[] = {{"exponent", ClampSite::Exponent}, {"amax", ClampSite::Amax}};
constexpr Named<NibbleOrder> kNibble[] = {{"low-first", NibbleOrder::LowFirst}, {"high-first", NibbleOrder::HighFirst}};
constexpr Named<IntEncoding> kIntEnc[] = {{"twos-complement", IntEncoding::TwosComplement},
                                          {"sign-magnitude", IntEncoding::SignMagnitude}};


bool read_int64(std::string_view& s, std::int64_t& out) {
  std::size_t n = 0;
  while (n < s.size() && std::isdigit(static_cast<unsigned char>(s[n]))) ++n;
  if (n == 0 || n > 9) return false;
  std::from_chars(s.data(), s.data() + n, out);
  s.remove_prefix(n);
  return true;
}

Error spec_error(std::string_view text, const std::string& what) {
  return make_error("block format " + quote_input(text) + ": " + what);
}

struct ShortName {
  std::string_view name;
  std::string_view element;
  std::string_view scale;
  std::string_view tensor_scale;  // empty: none
  std::int64_t block;
  ScaleRule rule;
};
constexpr ShortName kShort[] = {
    {"mxfp8_e4m3", "float8_e4m3fn", "float8_e8m0fnu", "", 32, ScaleRule::Floor},
    {"mxfp8_e5m2", "float8_e5m2", "float8_e8m0fnu", "", 32, ScaleRule::Floor},
    {"mxfp6_e3m2", "float6_e3m2fn", "float8_e8m0fnu", "", 32, ScaleRule::Floor},
    {"mxfp6_e2m3", "float6_e2m3fn", "float8_e8m0fnu", "", 32, ScaleRule::Floor},
    {"mxfp4", "float4_e2m1fn", "float8_e8m0fnu", "", 32, ScaleRule::Floor},
    {"mxint8", "mxint8", "float8_e8m0fnu", "", 32, ScaleRule::Floor},
    {"mxint4", "mxint4", "float8_e8m0fnu", "", 32, ScaleRule::Floor},
    {"mxint2", "mxint2", "float8_e8m0fnu", "", 32, ScaleRule::Floor},
    {"nvfp4", "float4_e2m1fn", "ue4m3", "float32", 16, ScaleRule::Amax},
    {"mxsf", "float8_mxsf", "float8_e8m0fnu", "", 32, ScaleRule::Floor},
    {"boost_e2m5", "float8_e2m5b3", "float8_e8m0fnu", "", 32, ScaleRule::Floor},
};

/// Element casts in block formats clamp to +-max by default (OCP MX v1.0 6.3); scales round to
/// nearest even and saturate.
QuantOptions default_options() {
  QuantOptions o;
  o.element.overflow = Overflow::Saturate;
  o.scale.overflow = Overflow::Saturate;
  return o;
}

/// Parses "@K" or "@RxC" into tiles.
Result<std::vector<TileDim>> parse_override(std::string_view text, std::string_view ov) {
  std::vector<TileDim> tiles;
  std::int64_t a = 0, b = 0;
  std::string_view s = ov;
  if (!read_int64(s, a) || a < 1) return spec_error(text, "expected a block size after '@' (e.g. @16 or @8x8)");
  tiles.push_back({a, 0});
  if (!s.empty()) {
    if (s.front() != 'x') return spec_error(text, "expected 'x' between the tile sizes (e.g. @8x8)");
    s.remove_prefix(1);
    if (!read_int64(s, b) || b < 1 || !s.empty()) return spec_error(text, "expected a second tile size after 'x'");
    tiles.push_back({b, 0});
  }
  return tiles;
}

Result<BlockFormat> parse_tensorcast(std::string_view text, std::string_view element_text, std::string_view spec) {
  auto elem = parse_format(element_text);
  if (!elem) return spec_error(text, elem.error().message);
  BlockFormat bf{std::string(text), *elem, ScaleLayout{}, default_options()};
  std::vector<std::string_view> segments;
  while (!spec.empty()) {
    const auto u = spec.find('_');
    segments.push_back(spec.substr(0, u));
    if (u == std::string_view::npos) break;
    spec.remove_prefix(u + 1);
  }
  std::vector<Format> numbers;
  for (std::string_view seg : segments) {
    if (!seg.empty() && seg.front() == 't' && seg.size() > 1 && std::isdigit(static_cast<unsigned char>(seg[1]))) {
      std::string_view s = seg.substr(1);
      TileDim t;
      if (!read_int64(s, t.size)) return spec_error(text, "bad tile segment '" + std::string(seg) + "'");
      if (!s.empty() && s.front() == 's') {
        s.remove_prefix(1);
        if (!read_int64(s, t.subtile) || t.subtile < 1)
          return spec_error(text, "bad subtile in '" + std::string(seg) + "' (expected tKsS with S >= 1)");
        if (t.size == 0 || t.size % t.subtile != 0)
          return spec_error(text, "subtile " + std::to_string(t.subtile) + " must divide the tile size in '" +
                                      std::string(seg) + "'");
      }
      if (!s.empty() && s.front() == 'n') {
        s.remove_prefix(1);
        std::int64_t n = 0, m = 0;
        if (!read_int64(s, n) || s.empty() || s.front() != 'm')
          return spec_error(text, "bad sparsity in '" + std::string(seg) + "' (expected nNmM, e.g. n2m4)");
        s.remove_prefix(1);
        if (!read_int64(s, m) || n < 1 || m < 2 || n >= m)
          return spec_error(text, "bad sparsity in '" + std::string(seg) + "' (need 1 <= N < M)");
        bf.layout.sparse_n = static_cast<int>(n);
        bf.layout.sparse_m = static_cast<int>(m);
      }
      if (!s.empty()) return spec_error(text, "unexpected '" + std::string(s) + "' in tile segment '" + std::string(seg) + "'");
      bf.layout.tiles.push_back(t);
      continue;
    }
    if (seg.size() > 1 && seg.front() == 'c' && std::isdigit(static_cast<unsigned char>(seg[1]))) {
      std::string_view s = seg.substr(1);
      std::int64_t axis = 0;
      if (!read_int64(s, axis) || !s.empty() || axis > 31)
        return spec_error(text, "bad channel segment '" + std::string(seg) + "' (expected cA, A the axis)");
      bf.layout.channel_axis = static_cast<int>(axis);
      continue;
    }
    if (!bf.layout.geometry().per_tensor())
      return spec_error(text, "number spec '" + std::string(seg) + "' after a tile segment (numbers come first)");
    std::string name(seg);
    if (name == "e8m0") name = "float8_e8m0fnu";
    auto f = parse_format(name);
    if (!f) return spec_error(text, f.error().message);
    numbers.push_back(*f);
  }
  if (numbers.empty()) return spec_error(text, "missing the scale number spec (e.g. e8m0_t32)");
  if (numbers.size() > 2) return spec_error(text, "at most two number specs (scale and tensor scale)");
  for (const Format& n : numbers)
    if (n.kind() == FormatKind::Codebook)
      return spec_error(text, "the codebook " + quote_input(n.name()) + " cannot be a scale (scales are float or integer formats)");
  const BlockGeometry geometry = bf.layout.geometry();
  if (geometry.tile_dims() > 2) return spec_error(text, "at most two tile segments (1-D or 2-D tiles)");
  if (geometry.tiled() && geometry.per_channel())
    return spec_error(text, "a channel segment (cA) cannot be combined with tile segments");
  if (numbers.size() == 2 && elem->kind() == FormatKind::Integer && !elem->is_signed())
    return spec_error(text, "a zero point for unsigned data (asymmetric scaling) is not supported");
  const bool subtiles = geometry.has_subtiles();
  const FormatSpec& first = numbers[0].spec();
  if (subtiles && !(first.kind == FormatKind::Float && first.mantissa_bits == 0))
    return spec_error(text, "subtiles carry exponent offsets and need a power-of-two scale such as e8m0");
  bf.layout.scale = numbers[0];
  if (numbers.size() == 2) bf.layout.tensor_scale = numbers[1];
  const FormatSpec& ss = numbers[0].spec();
  const bool pow2_scale = ss.kind == FormatKind::Float && ss.mantissa_bits == 0;
  bf.options.rule = pow2_scale ? ScaleRule::Floor : ScaleRule::Amax;
  return bf;
}

}  // namespace

Result<ScaleRule> parse_scale_rule(std::string_view t) { return parse_named(t, kScaleRules, "scale rule"); }
std::string_view to_string(ScaleRule r) { return name_of(r, kScaleRules); }
Result<ZeroBlock> parse_zero_block(std::string_view t) { return parse_named(t, kZero, "zero-block scale"); }
std::string_view to_string(ZeroBlock z) { return name_of(z, kZero); }
Result<SpecialsPolicy> parse_specials_policy(std::string_view t) { return parse_named(t, kSpecials, "NaN/Inf policy"); }
std::string_view to_string(SpecialsPolicy s) { return name_of(s, kSpecials); }
Result<ClampSite> parse_clamp_site(std::string_view t) { return parse_named(t, kClamp, "clamp site"); }
std::string_view to_string(ClampSite c) { return name_of(c, kClamp); }
Result<NibbleOrder> parse_nibble_order(std::string_view t) { return parse_named(t, kNibble, "nibble order"); }
std::string_view to_string(NibbleOrder n) { return name_of(n, kNibble); }
Result<IntEncoding> parse_int_encoding(std::string_view t) { return parse_named(t, kIntEnc, "integer encoding"); }
std::string_view to_string(IntEncoding e) { return name_of(e, kIntEnc); }
Result<AmaxLog2> parse_amax_log2(std::string_view t) { return parse_named(t, kAmaxLog2, "amax log2 reading"); }
std::string_view to_string(AmaxLog2 a) { return name_of(a, kAmaxLog2); }
Result<RceilQuotient> parse_rceil_quotient(std::string_view t) {
  return parse_named(t, kRceilQuotient, "rceil quotient");
}
std::string_view to_string(RceilQuotient r) { return name_of(r, kRceilQuotient); }
Result<Code0Multiplier> parse_code0_multiplier(std::string_view t) {
  return parse_named(t, kCode0, "code-0 multiplier");
}
std::string_view to_string(Code0Multiplier c) { return name_of(c, kCode0); }
Result<AmaxSubnormal> parse_amax_subnormal(std::string_view t) {
  return parse_named(t, kAmaxSubnormal, "subnormal-amax block handling");
}
std::string_view to_string(AmaxSubnormal a) { return name_of(a, kAmaxSubnormal); }
Result<ZeroSign> parse_zero_sign(std::string_view t) { return parse_named(t, kZeroSign, "zero sign"); }
Result<FakeNan> parse_fake_nan(std::string_view t) { return parse_named(t, kFakeNan, "fake-quant NaN"); }
std::string_view to_string(FakeNan n) { return name_of(n, kFakeNan); }
std::string_view to_string(ZeroSign z) { return name_of(z, kZeroSign); }
Result<NearestArith> parse_nearest_arith(std::string_view t) {
  return parse_named(t, kNearestArith, "nearest-rounding arithmetic");
}
std::string_view to_string(NearestArith n) { return name_of(n, kNearestArith); }
Result<InputPrecision> parse_input_precision(std::string_view t) {
  return parse_named(t, kInput, "input precision");
}
std::string_view to_string(InputPrecision p) { return name_of(p, kInput); }
Result<Nvfp4Arith> parse_nvfp4_arith(std::string_view t) { return parse_named(t, kNvfp4Arith, "NVFP4 arithmetic"); }
std::string_view to_string(Nvfp4Arith a) { return name_of(a, kNvfp4Arith); }
Result<FourOverSixMetric> parse_four_over_six_metric(std::string_view t) {
  return parse_named(t, kFourOverSix, "4over6 metric");
}
std::string_view to_string(FourOverSixMetric m) { return name_of(m, kFourOverSix); }

std::vector<std::string> block_format_names() {
  std::vector<std::string> v;
  for (const auto& s : kShort) v.emplace_back(s.name);
  return v;
}

std::int64_t BlockFormat::block_elements() const {
  return layout.scale ? layout.geometry().tile_elements() : 0;
}

double BlockFormat::bits_per_element(std::int64_t tensor_elements) const {
  double bits = element.bits();
  if (layout.scale) {
    const std::int64_t k = block_elements();
    if (k > 0) {
      // Scales are stored in whole bytes (a 7-bit UE4M3 scale occupies a byte, as NVFP4 stores it).
      bits += static_cast<double>(ceil_div(layout.scale->bits(), 8) * 8) / static_cast<double>(k);
    } else if (tensor_elements > 0) {
      bits += static_cast<double>(layout.scale->bits()) / static_cast<double>(tensor_elements);
    }
  }
  const BlockGeometry g = layout.geometry();
  if (const std::int64_t sub = g.subtile_elements(); g.has_subtiles() && sub > 0)
    bits += static_cast<double>(layout.subtile_bits) / static_cast<double>(sub);
  if (layout.tensor_scale && tensor_elements > 0)
    bits += static_cast<double>(layout.tensor_scale->bits()) / static_cast<double>(tensor_elements);
  return bits;
}

double BlockFormat::stored_bits_per_element(const std::vector<std::int64_t>& shape) const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  if (n <= 0) return static_cast<double>(element.bits());
  double bits = static_cast<double>(element.bits()) * static_cast<double>(n);
  if (layout.scale)
    bits += static_cast<double>(BlockIndexer(shape, layout).block_count()) *
            static_cast<double>(ceil_div(layout.scale->bits(), 8) * 8);
  if (layout.geometry().has_subtiles())
    bits += static_cast<double>(BlockIndexer::subtiles(shape, layout).block_count()) *
            static_cast<double>(layout.subtile_bits);
  if (layout.tensor_scale) bits += static_cast<double>(layout.tensor_scale->bits());
  return bits / static_cast<double>(n);
}

Result<BlockFormat> parse_block_format(std::string_view text_in) {
  std::string lowered(text_in);
  for (char& c : lowered) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string_view text = lowered;
  if (text.empty()) return make_error("block format '': empty");
  if (const auto colon = text.find(':'); colon != std::string_view::npos)
    return parse_tensorcast(text_in, text.substr(0, colon), text.substr(colon + 1));
  const auto at = text.find('@');
  const std::string_view base = text.substr(0, at);
  for (const auto& s : kShort) {
    if (s.name != base) continue;
    BlockFormat bf{std::string(text_in), *find_catalogue_format(s.element), ScaleLayout{}, default_options()};
    bf.layout.scale = *find_catalogue_format(s.scale);
    if (!s.tensor_scale.empty()) bf.layout.tensor_scale = *find_catalogue_format(s.tensor_scale);
    bf.layout.tiles = {TileDim{s.block, 0}};
    bf.options.rule = s.rule;
    if (at != std::string_view::npos) {
      auto tiles = parse_override(text_in, text.substr(at + 1));
      if (!tiles) return tiles.error();
      bf.layout.tiles = *tiles;
    }
    return bf;
  }
  std::string msg = "not a block format name (known: ";
  const auto names = block_format_names();
  for (std::size_t i = 0; i < names.size(); ++i) msg += (i ? ", " : "") + names[i];
  msg += "; or ELEMENT:SCALESPEC such as e2m1:e8m0_t32)";
  std::string best;
  std::size_t best_d = 3;
  for (const auto& n : names) {
    if (base.size() >= n.size() + best_d || n.size() >= base.size() + best_d) continue;  // too far by length alone
    const std::size_t d = edit_distance(base, n);
    if (d < best_d) best_d = d, best = n;
  }
  if (!best.empty()) msg += " (did you mean '" + best + "'?)";
  return spec_error(text_in, msg);
}

}  // namespace mxlab
