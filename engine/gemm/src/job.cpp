// The GEMM job every front end runs: quantize both operands, the exact products, every model, the errors.
#include <algorithm>
#include <cmath>
#include <limits>

#include "mxlab/core/bits.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/gemm/gemm.hpp"

namespace mxlab::gemm {

ErrorSummary compare(std::span<const double> c, std::span<const double> reference) {
  ErrorSummary s;
  std::vector<double> rel;
  rel.reserve(c.size());
  double signal = 0, noise = 0, rel_sum = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const double x = c[i], r = reference[i];
    if (std::isnan(x) || std::isnan(r)) {
      ++s.nan_count;
      continue;
    }
    ++s.count;
    const double err = x == r ? 0.0 : std::fabs(x - r);  // equal infinities: no error
    s.max_abs_error = std::max(s.max_abs_error, err);
    signal += r * r;
    noise += err * err;
    if (r == 0) {
      ++s.zero_reference;
      continue;
    }
    const double e = err / std::fabs(r);
    rel.push_back(e);
    rel_sum += e;
  }
  if (!rel.empty()) {
    std::sort(rel.begin(), rel.end());
    s.max_rel_error = rel.back();
    s.mean_rel_error = rel_sum / static_cast<double>(rel.size());
    auto rank = [&](double q) {  // nearest rank: the smallest value with at least q of the values at or below it
      const auto n = static_cast<double>(rel.size());
      const auto r = static_cast<std::size_t>(std::max(1.0, std::ceil(q * n)));
      return rel[std::min(r, rel.size()) - 1];
    };
    s.p50_rel_error = rank(0.5);
    s.p90_rel_error = rank(0.9);
    s.p99_rel_error = rank(0.99);
  }
  s.signal = signal;
  s.noise = noise;
  s.sqnr_db = noise == 0 ? std::numeric_limits<double>::infinity() : 10 * std::log10(signal / noise);
  return s;
}

Result<GemmReport> run(const GemmRequest& r) {
  const auto mk = static_cast<std::size_t>(r.m * r.k), kn = static_cast<std::size_t>(r.k * r.n);
  if (r.m <= 0 || r.k <= 0 || r.n <= 0) return make_error("shape: M, K and N must be positive");
  if (r.a.size() != mk) return make_error("operand A: " + std::to_string(r.a.size()) + " values for M x K = " + std::to_string(mk));
  if (r.b.size() != kn) return make_error("operand B: " + std::to_string(r.b.size()) + " values for K x N = " + std::to_string(kn));
  if (r.models.empty()) return make_error("no accumulation model");
  const Format out = r.out ? *r.out : *parse_format("float32");
  const std::vector<double> bt = transpose(r.b, r.k, r.n);
  auto qa = quantize_operand(r.format_a, r.a, r.m, r.k);
  if (!qa) return make_error("operand A (" + r.format_a.name + "): " + qa.error().message);
  auto qb = quantize_operand(r.format_b, bt, r.n, r.k);
  if (!qb) return make_error("operand B (" + r.format_b.name + "): " + qb.error().message);
  for (const auto& m : r.models)
    if (auto e = check_model_operands(m, *qa, *qb)) return *e;

  // The float32 operands: the inputs rounded to float32, unquantized.
  auto to_f32 = [](std::span<const double> x) {
    std::vector<double> v(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) v[i] = static_cast<double>(static_cast<float>(x[i]));
    return v;
  };
  const std::vector<double> af = to_f32(r.a), bf = to_f32(bt);
  const Operand fa = plain_operand("float32", af, r.m, r.k), fb = plain_operand("float32", bf, r.n, r.k);
  // References at double precision (rounded once from the exact products), for the error statistics.
  const Reporter* rep = &r.reporter;
  const Error cancelled = make_error("cancelled");
  const Matrix exact_d = exact_gemm_double(*qa, *qb, r.threads, nullptr, rep);
  if (rep->cancelled()) return cancelled;
  const Matrix fp32_d = exact_gemm_double(fa, fb, r.threads, nullptr, rep);
  if (rep->cancelled()) return cancelled;
  GemmReport report;
  report.exact_vs_fp32 = compare(exact_d.values, fp32_d.values);
  for (const auto& m : r.models) {
    auto c = model_gemm(m, *qa, *qb, out, r.threads, nullptr, false, rep);
    if (!c) return c.error();
    if (rep->cancelled()) return cancelled;
    ModelResult mr{m, std::move(*c), {}, {}};
    mr.vs_exact = compare(mr.c.values, exact_d.values);
    mr.vs_fp32 = compare(mr.c.values, fp32_d.values);
    report.models.push_back(std::move(mr));
  }
  return report;
}

Result<std::vector<Model>> parse_models(std::string_view text) {
  std::vector<Model> models;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t semi = text.find(';', pos);
    const std::string_view part = text.substr(pos, semi == std::string_view::npos ? std::string_view::npos : semi - pos);
    pos = semi == std::string_view::npos ? text.size() + 1 : semi + 1;
    auto m = parse_model(part);
    if (!m) return m.error();
    models.push_back(*m);
  }
  return models;
}

Table report_header() {
  Table t;
  for (const char* c : {"model", "reference", "format_a", "format_b", "shape"}) t.add_column(c);
  for (const char* c : {"count", "nan_count", "zero_reference", "max_rel_error", "mean_rel_error", "p50_rel_error",
                        "p90_rel_error", "p99_rel_error", "max_abs_error", "sqnr_db"})
    t.add_column(c, true);
  t.add_column("definition");
  return t;
}

namespace {

std::vector<std::string> report_row(const std::string& model, const std::string& reference,
                                    const std::string& definition, const GemmRequest& r, const ErrorSummary& s) {
  const std::string shape = std::to_string(r.m) + "x" + std::to_string(r.k) + "x" + std::to_string(r.n);
  return {model, reference, r.format_a.name, r.format_b.name, shape, std::to_string(s.count),
          std::to_string(s.nan_count), std::to_string(s.zero_reference), g17(s.max_rel_error), g17(s.mean_rel_error),
          g17(s.p50_rel_error), g17(s.p90_rel_error), g17(s.p99_rel_error), g17(s.max_abs_error), g17(s.sqnr_db),
          definition};
}

}  // namespace

Table report_table(const GemmRequest& r, const GemmReport& report) {
  Table table = report_header();
  table.rows.push_back(report_row("exact product", "fp32", "", r, report.exact_vs_fp32));
  for (const auto& m : report.models) {
    const std::string def = describe(m.model);
    table.rows.push_back(report_row(m.model.name, "exact", def, r, m.vs_exact));
    table.rows.push_back(report_row(m.model.name, "fp32", def, r, m.vs_fp32));
  }
  return table;
}

}  // namespace mxlab::gemm
