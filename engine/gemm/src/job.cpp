// The GEMM job every front end runs: quantize both operands, the exact products, every model, the errors.
#include <algorithm>
#include <cmath>
#include <limits>

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

}  // namespace mxlab::gemm
