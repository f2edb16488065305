// The SIMD path of the models (fast.hpp): the bounds under which the kernel's double arithmetic is exact, the
// operands packed in panels of B's columns, and the kernel run over C on threads.
#include "fast.hpp"

#include "arith.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <optional>

#include "mxlab/core/threads.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/kernels/gemm_kernel.hpp"

namespace mxlab::gemm::detail {
namespace {

/// A format's rounding as a float grid the kernel rounds to, or none (a format it does not model: no zero or
/// subnormals, a second reading of exponent field 0, an exponent range its powers of two do not reach).
std::optional<GemmRounding> grid_of(const Format& f, Rounding r) {
  const FormatSpec& s = f.spec();
  if (s.kind != FormatKind::Float || !s.is_signed || !s.subnormals || s.sub_exponent_bits != 0 || s.mantissa_bits < 1)
    return std::nullopt;
  CastOptions o;
  o.rounding = r;
  auto resolved = resolve_options(f, o);
  if (!resolved || resolved->subnormals != SubnormalMode::Keep) return std::nullopt;
  GemmRounding g;
  g.precision = s.mantissa_bits + 1;
  g.min_exponent = min_normal_exponent(s);
  g.max_finite = max_finite(s);
  g.saturate = resolved->overflow == Overflow::Saturate;
  g.mode = r;
  if (g.min_exponent - g.precision + 1 < -1000 || emax(s) > 1000) return std::nullopt;
  return g;
}

/// What the bounds need of one operand's values (elements, or elements times their scales) and scales.
struct Facts {
  double max_abs = 0;
  int low_bit = 1 << 20;  ///< the lowest set bit over the nonzero finite values (none: large)
  int bits = 0;           ///< significant bits of the values
  int scale_bits = 0;
};

Facts facts_of(const std::vector<double>& values, const std::vector<double>& scales) {
  Facts f;
  for (double v : values) {
    if (v == 0 || !std::isfinite(v)) continue;
    f.max_abs = std::max(f.max_abs, std::fabs(v));
    f.low_bit = std::min(f.low_bit, low_bit_exponent(v));
    f.bits = std::max(f.bits, significant_bits(v));
  }
  for (double s : scales) f.scale_bits = std::max(f.scale_bits, significant_bits(s));
  return f;
}

std::vector<double> scaled_values(const Operand& op) {
  std::vector<double> v(op.element.size());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = op.element[i] * op.scale[i];
  return v;
}

/// The groups of row i (docs/gemm.md step 2): their ends and whether a promotion follows each.
void row_groups(const Model& m, const Operand& a, std::int64_t i, const Operand& b, std::vector<std::int32_t>& ends,
                std::vector<std::uint8_t>& promote) {
  ends.clear();
  promote.clear();
  const std::size_t a0 = a.at(i, 0);
  for (std::int64_t k = 1; k <= a.depth; ++k) {
    const bool last = k == a.depth;
    const bool boundary = last || a.block_start[a0 + static_cast<std::size_t>(k)] != 0 ||
                          b.block_start[static_cast<std::size_t>(k)] != 0 || (m.group > 0 && k % m.group == 0) ||
                          (m.promote > 0 && k % m.promote == 0);
    if (!boundary) continue;
    ends.push_back(static_cast<std::int32_t>(k));
    promote.push_back(m.promote > 0 && (k % m.promote == 0 || last) ? 1 : 0);
  }
}

}  // namespace

std::string kernel_states(const Model& m, const Operand& a, const Operand& b, unsigned threads, KernelStates& out,
                          Ticker& ticker) {
  const std::int64_t rows = a.rows, cols = b.rows, depth = a.depth;
  if (depth <= 0 || rows <= 0 || cols <= 0) return "an empty operand";
  if (depth > (std::int64_t{1} << 30)) return "K beyond 2^30";
  // Every row of B's transpose must share its block starts: the lanes walk the same groups.
  for (std::int64_t j = 1; j < cols; ++j)
    if (!std::equal(b.block_start.begin(), b.block_start.begin() + depth, b.block_start.begin() + j * depth))
      return "B's rows have different blocks along K";

  GemmKernelModel km;
  km.scale_product = m.scale == ScaleSite::Product;
  km.sequential = m.order == SumOrder::Sequential;
  km.fp32 = *grid_of(*parse_format("float32"), Rounding::NearestEven);
  if (m.product) {
    auto g = grid_of(*m.product, m.rounding);
    if (!g) return "product format " + m.product->name();
    km.round_product = true;
    km.product = *g;
  }
  if (m.sum) {
    auto g = grid_of(*m.sum, m.rounding);
    if (!g) return "sum format " + m.sum->name();
    km.round_sum = true;
    km.sum = *g;
  }
  switch (m.acc) {
    case AccKind::Exact: km.acc = GemmKernelModel::Acc::Exact; break;
    case AccKind::Float: {
      auto g = grid_of(*m.acc_format, m.rounding);
      if (!g) return "accumulator format " + m.acc_format->name();
      km.acc = GemmKernelModel::Acc::Float;
      km.acc_rounding = *g;
      break;
    }
    case AccKind::Aligned:
      km.acc = GemmKernelModel::Acc::Aligned;
      km.aligned_bits = m.aligned_bits;
      km.aligned_nearest = m.align_rounding == AlignRounding::NearestEven;
      break;
  }

  // The exactness bounds. Products of the values the model multiplies must be doubles; an exact group sum is a
  // plain double sum when every partial sum is a multiple of the products' lowest bit below 2^53 of it.
  const std::vector<double> sa = scaled_values(a), sb = scaled_values(b);
  const Facts fa = facts_of(km.scale_product ? sa : a.element, a.scale);
  const Facts fb = facts_of(km.scale_product ? sb : b.element, b.scale);
  if (fa.bits + fb.bits > 53) return "products beyond 53 bits";
  std::vector<std::vector<std::int32_t>> ends(static_cast<std::size_t>(rows));
  std::vector<std::vector<std::uint8_t>> promote(static_cast<std::size_t>(rows));
  std::size_t longest = 1;
  for (std::int64_t i = 0; i < rows; ++i) {
    auto& e = ends[static_cast<std::size_t>(i)];
    row_groups(m, a, i, b, e, promote[static_cast<std::size_t>(i)]);
    std::int32_t start = 0;
    for (std::int32_t end : e) {
      longest = std::max(longest, static_cast<std::size_t>(end - start));
      start = end;
    }
  }
  const int scale_bits = km.scale_product ? 0 : fa.scale_bits + fb.scale_bits;
  if (!m.sum && m.acc != AccKind::Aligned) {
    const int low = fa.low_bit + fb.low_bit;
    const double bound = static_cast<double>(longest) * fa.max_abs * fb.max_abs;
    km.plain_group_sum = !m.product && (bound == 0 || (low >= -1000 && bound < std::ldexp(1.0, 53 + low) &&
                                                       std::ilogb(bound) + 1 - low + scale_bits <= 53));
    // Otherwise each product times the block scales enters the pair of doubles exactly.
    const int product_bits = m.product ? std::min(fa.bits + fb.bits, km.product.precision) : fa.bits + fb.bits;
    if (!km.plain_group_sum && product_bits + scale_bits > 53) return "products times block scales beyond 53 bits";
  }
  // A sum format's or an aligned adder's value times the block scales: check_model_operands' bound.

  // B's transpose in panels of `lanes` columns, lane fastest (missing columns: zeros).
  const std::size_t lanes = gemm_lanes();
  const auto panels = static_cast<std::size_t>((cols + static_cast<std::int64_t>(lanes) - 1) / static_cast<std::int64_t>(lanes));
  const auto kd = static_cast<std::size_t>(depth);
  std::vector<double> pe(panels * kd * lanes, 0.0), ps(pe.size(), 0.0), pc(pe.size(), 1.0);
  for (std::size_t p = 0; p < panels; ++p)
    for (std::size_t l = 0; l < lanes; ++l) {
      const std::size_t j = p * lanes + l;
      if (j >= static_cast<std::size_t>(cols)) break;
      for (std::size_t k = 0; k < kd; ++k) {
        const std::size_t src = j * kd + k, dst = (p * kd + k) * lanes + l;
        pe[dst] = b.element[src];
        ps[dst] = sb[src];
        pc[dst] = b.scale[src];
      }
    }

  const auto entries = static_cast<std::size_t>(rows * cols);
  out.acc.assign(entries, 0.0);
  out.lo.assign(entries, 0.0);
  out.outer.assign(entries, 0.0);
  out.redo.assign(entries, 0);
  // Work items panel by panel, rows inside, so that a thread's panel of B stays in cache.
  const std::size_t items = panels * static_cast<std::size_t>(rows);
  const unsigned parts = std::max(1U, std::min<unsigned>(resolve_threads(threads), static_cast<unsigned>(std::min<std::size_t>(items, 1U << 16))));
  run_parts(parts, [&](unsigned t) {
    std::vector<double> scratch(longest * lanes), acc(lanes), lo(lanes), outer(lanes);
    std::vector<std::uint64_t> redo(lanes);
    const std::size_t first = items * t / parts, last = items * (t + 1) / parts;
    for (std::size_t item = first; item < last; ++item) {
      const std::size_t p = item / static_cast<std::size_t>(rows), i = item % static_cast<std::size_t>(rows);
      GemmPanelCall c;
      c.depth = depth;
      c.a_element = a.element.data() + i * kd;
      c.a_scaled = sa.data() + i * kd;
      c.a_scale = a.scale.data() + i * kd;
      c.b_element = pe.data() + p * kd * lanes;
      c.b_scaled = ps.data() + p * kd * lanes;
      c.b_scale = pc.data() + p * kd * lanes;
      c.group_end = ends[i].data();
      c.promote_after = m.promote > 0 ? promote[i].data() : nullptr;
      c.groups = ends[i].size();
      c.scratch = scratch.data();
      c.acc = acc.data();
      c.lo = lo.data();
      c.outer = outer.data();
      c.redo = redo.data();
      gemm_panel(km, c);
      for (std::size_t l = 0; l < lanes; ++l) {
        const std::size_t j = p * lanes + l;
        if (j >= static_cast<std::size_t>(cols)) break;
        const std::size_t at = i * static_cast<std::size_t>(cols) + j;
        out.acc[at] = acc[l];
        out.lo[at] = lo[l];
        out.outer[at] = outer[l];
        out.redo[at] = redo[l] != 0 ? 1 : 0;
      }
      if (!ticker.add(static_cast<std::int64_t>(std::min<std::size_t>(lanes, static_cast<std::size_t>(cols) - p * lanes)), t))
        break;
    }
  });
  ticker.finish();
  return {};
}

}  // namespace mxlab::gemm::detail
