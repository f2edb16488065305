// Parsing and writing accumulation models (docs/gemm.md "Model strings").
#include "mxlab/gemm/model.hpp"

#include <charconv>

#include "mxlab/core/text.hpp"
#include "mxlab/formats/parse.hpp"

namespace mxlab::gemm {
namespace {

constexpr int kMaxGroup = 1 << 20;
constexpr int kMaxPromote = 1 << 30;

Result<int> parse_count(std::string_view key, std::string_view v, int lo, int hi) {
  const auto n = parse_whole_in(v, lo, hi);
  if (!n)
    return make_error("model setting '" + std::string(key) + "=" + std::string(v) + "': expected an integer from " +
                      std::to_string(lo) + " to " + std::to_string(hi));
  return *n;
}

/// A format of a model's arithmetic: a signed float format, or "exact" (none).
Result<std::optional<Format>> parse_arith_format(std::string_view key, std::string_view v) {
  if (v == "exact") return std::optional<Format>();
  auto f = parse_format(v);
  if (!f) return make_error("model setting '" + std::string(key) + "=" + std::string(v) + "': " + f.error().message);
  if (f->kind() != FormatKind::Float || !f->is_signed())
    return make_error("model setting '" + std::string(key) + "=" + std::string(v) +
                      "': the arithmetic of a model needs a signed float format (or exact)");
  return std::optional<Format>(*f);
}

std::string format_text(const std::optional<Format>& f) { return f ? f->name() : std::string("exact"); }

std::optional<Error> apply(Model& m, std::string_view key, std::string_view v) {
  if (key == "product") {
    auto f = parse_arith_format(key, v);
    if (!f) return f.error();
    m.product = *f;
  } else if (key == "sum") {
    auto f = parse_arith_format(key, v);
    if (!f) return f.error();
    m.sum = *f;
  } else if (key == "group") {
    if (v == "block") {
      m.group = 0;
    } else {
      auto n = parse_count(key, v, 1, kMaxGroup);
      if (!n) return n.error();
      m.group = *n;
    }
  } else if (key == "order") {
    if (v == "pairwise") m.order = SumOrder::Pairwise;
    else if (v == "sequential") m.order = SumOrder::Sequential;
    else return make_error("model setting 'order=" + std::string(v) + "': expected pairwise or sequential");
  } else if (key == "scale") {
    if (v == "block") m.scale = ScaleSite::Block;
    else if (v == "product") m.scale = ScaleSite::Product;
    else return make_error("model setting 'scale=" + std::string(v) + "': expected block or product");
  } else if (key == "acc") {
    if (v == "exact") {
      m.acc = AccKind::Exact;
      m.acc_format.reset();
    } else if (v.rfind("aligned:", 0) == 0) {
      std::string_view rest = v.substr(8);
      const auto colon = rest.find(':');
      AlignRounding r = AlignRounding::Truncate;
      if (colon != std::string_view::npos) {
        const std::string_view mode = rest.substr(colon + 1);
        if (mode == "trunc") r = AlignRounding::Truncate;
        else if (mode == "nearest") r = AlignRounding::NearestEven;
        else return make_error("model setting 'acc=" + std::string(v) + "': the aligned adder rounds by trunc or nearest");
        rest = rest.substr(0, colon);
      }
      auto k = parse_count("acc=aligned", rest, 2, 30);
      if (!k) return make_error("model setting 'acc=" + std::string(v) + "': the bits kept must be an integer from 2 to 30");
      m.acc = AccKind::Aligned;
      m.acc_format.reset();
      m.aligned_bits = *k;
      m.align_rounding = r;
    } else {
      auto f = parse_arith_format(key, v);
      if (!f) return f.error();
      m.acc = AccKind::Float;
      m.acc_format = *f;
    }
  } else if (key == "promote") {
    auto n = parse_count(key, v, 0, kMaxPromote);
    if (!n) return n.error();
    m.promote = *n;
  } else if (key == "round") {
    auto r = parse_rounding(v);
    if (!r) return make_error("model setting 'round=" + std::string(v) + "': " + r.error().message);
    if (*r == Rounding::Stochastic) return make_error("model setting 'round=stochastic': a model's roundings are deterministic");
    m.rounding = *r;
  } else {
    return make_error("model setting '" + std::string(key) + "': unknown key (expected product, group, order, sum, "
                      "scale, acc, promote or round)");
  }
  return std::nullopt;
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {
      {"exact", "product=exact,group=block,sum=exact,scale=block,acc=exact,promote=0",
       "every product and sum exact: the exact reference"},
      {"ocp-dot-fp32", "product=exact,group=block,sum=exact,scale=block,acc=fp32",
       "OCP MX Dot of each pair of blocks exact, the blocks summed in FP32"},
      {"safe-mac", "product=e4m7b12,group=4,order=pairwise,sum=e4m7b12,scale=block,acc=fp32",
       "MX-SAFE's SAFE-MAC: exact products entering an FP12 E4M7 adder tree of 4, FP32 across groups"},
      {"tensorcore-trunc14", "product=exact,group=32,scale=product,acc=aligned:14:trunc",
       "tensor core: 32 products and the accumulator aligned to the largest exponent, 14 bits kept, truncated"},
      {"tensorcore-trunc14-promote128", "product=exact,group=32,scale=product,acc=aligned:14:trunc,promote=128",
       "tensorcore-trunc14 with the accumulator added to FP32 every 128 elements (DeepSeek-V3)"},
      {"fp32-seq", "product=exact,group=1,scale=product,acc=fp32",
       "each product added to an FP32 accumulator in order (a fused multiply-add per element)"},
  };
  return presets;
}

Result<Model> parse_model(std::string_view text) {
  if (text.empty()) return make_error("model '': empty (name a preset such as ocp-dot-fp32, or give key=value settings)");
  Model m;
  bool first = true;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = text.find(',', pos);
    const std::string_view part = text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    pos = comma == std::string_view::npos ? text.size() + 1 : comma + 1;
    if (part.empty()) return make_error("model '" + std::string(text) + "': empty setting between commas");
    const std::size_t eq = part.find('=');
    if (eq == std::string_view::npos) {
      const ModelPreset* preset = nullptr;
      for (const auto& p : model_presets())
        if (p.name == part) preset = &p;
      if (!preset || !first) {
        std::string names;
        for (const auto& p : model_presets()) names += (names.empty() ? "" : ", ") + p.name;
        return make_error("model '" + std::string(text) + "': '" + std::string(part) +
                          (preset ? "': a preset must come first" : "': not a preset (" + names + ") or key=value"));
      }
      auto base = parse_model(preset->definition);
      if (!base) return base.error();
      m = *base;
    } else {
      if (auto e = apply(m, part.substr(0, eq), part.substr(eq + 1))) return *e;
    }
    first = false;
  }
  if (m.acc == AccKind::Aligned && m.sum)
    return make_error("model '" + std::string(text) + "': sum=" + m.sum->name() +
                      " has no effect with acc=aligned (the group's products are the aligned adder's addends): use sum=exact");
  m.name = std::string(text);
  return m;
}

std::string describe(const Model& m) {
  std::string s = "product=" + format_text(m.product);
  s += ",group=" + (m.group == 0 ? std::string("block") : std::to_string(m.group));
  s += std::string(",order=") + (m.order == SumOrder::Pairwise ? "pairwise" : "sequential");
  s += ",sum=" + format_text(m.sum);
  s += std::string(",scale=") + (m.scale == ScaleSite::Block ? "block" : "product");
  switch (m.acc) {
    case AccKind::Exact: s += ",acc=exact"; break;
    case AccKind::Float: s += ",acc=" + m.acc_format->name(); break;
    case AccKind::Aligned:
      s += ",acc=aligned:" + std::to_string(m.aligned_bits) +
           (m.align_rounding == AlignRounding::Truncate ? ":trunc" : ":nearest");
      break;
  }
  s += ",promote=" + std::to_string(m.promote);
  s += ",round=" + std::string(to_string(m.rounding));
  return s;
}

bool same_arithmetic(const Model& a, const Model& b) { return describe(a) == describe(b); }

}  // namespace mxlab::gemm
