// The trainer's float32 products: OpenBLAS's SGEMM, one thread per call, on pieces of C that mxlab's threads take.
#include "blas.hpp"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <vector>

#include "mxlab/core/ceil_div.hpp"
#include "mxlab/core/threads.hpp"

extern "C" char* openblas_get_corename(void);

namespace mxlab::train::detail {
namespace {

// A piece is worth a thread's wake-up from about 4 MFLOP (some 60 us at one core's SGEMM rate); it keeps at least
// 64 rows or columns, so the operand every piece packs again (the one not split) is read a few times at most.
constexpr double kPieceFlops = 4e6;
constexpr std::int64_t kMinPieceSide = 64;
constexpr std::int64_t kMaxPieces = 8;
// Beyond two pieces, a piece keeps at least 256 rows or columns: the operand it packs again then costs a small
// part of its work (the weight gradient's dY, packed once per piece of the columns, was a third of the packing).
constexpr std::int64_t kPackedPieceSide = 256;
constexpr std::int64_t kPieceAlign = 16;  // piece edges on multiples of the widest SGEMM register tile

/// OpenBLAS runs each call on one thread: its threaded driver blocks k differently from its single-threaded one
/// (driver/level3/level3_thread.c halves a remainder between GEMM_Q and 2 GEMM_Q where level3.c rounds the half up
/// to GEMM_UNROLL_M), so its own threads would make the sums depend on the thread count.
void single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace

GemmPieces gemm_pieces(std::int64_t m, std::int64_t n, std::int64_t k) {
  GemmPieces p;
  p.by_rows = m >= n;
  const std::int64_t side = p.by_rows ? m : n;
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const auto by_flops = static_cast<std::int64_t>(flops / kPieceFlops);
  const std::int64_t most =
      std::min({kMaxPieces, by_flops, std::max(std::min<std::int64_t>(2, side / kMinPieceSide), side / kPackedPieceSide)});
  while (p.count * 2 <= most) p.count *= 2;  // a power of two: 1, 2, 4 or 8 threads share the pieces evenly
  p.step = ceil_div(ceil_div(side, p.count), kPieceAlign) * kPieceAlign;
  p.count = ceil_div(side, p.step);
  return p;
}

void sgemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
           const float* b, std::int64_t ldb, float* c, std::int64_t ldc, unsigned threads) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (std::int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0F);
    return;
  }
  single_threaded_blas();
  const auto start = std::chrono::steady_clock::now();
  const GemmPieces p = gemm_pieces(m, n, k);
  const auto piece = [&](std::int64_t i) {
    const std::int64_t side = p.by_rows ? m : n;
    const std::int64_t first = i * p.step, count = std::min(side, first + p.step) - first;
    // The rows of op(A) (or the columns of op(B)) of the piece, and where they land in C.
    const float* pa = a;
    const float* pb = b;
    float* pc = c;
    std::int64_t pm = m, pn = n;
    if (p.by_rows) {
      pa += ta ? first : first * lda;
      pc += first * ldc;
      pm = count;
    } else {
      pb += tb ? first * ldb : first;
      pc += first;
      pn = count;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(pm),
                static_cast<int>(pn), static_cast<int>(k), 1.0F, pa, static_cast<int>(lda), pb, static_cast<int>(ldb),
                0.0F, pc, static_cast<int>(ldc));
  };
  const auto parts = static_cast<unsigned>(std::min<std::int64_t>(resolve_threads(threads), p.count));
  run_parts(parts, [&](unsigned t) {
    const std::int64_t first = p.count * t / parts, last = p.count * (t + 1) / parts;
    for (std::int64_t i = first; i < last; ++i) piece(i);
  });
  GemmTally& tally = gemm_tally();
  tally.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  tally.flops += 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
}

void sgemm_rows(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda, const float* b,
                std::int64_t ldb, std::int64_t rows,
                const std::function<void(std::int64_t, std::int64_t, const float*)>& take, unsigned threads) {
  if (m <= 0 || n <= 0) return;
  rows = std::max<std::int64_t>(rows, 1);
  const std::int64_t blocks = ceil_div(m, rows);
  const auto parts = static_cast<unsigned>(std::clamp<std::int64_t>(resolve_threads(threads), 1, blocks));
  std::vector<double> seconds(parts, 0.0);
  run_parts(parts, [&](unsigned t) {
    thread_local std::vector<float> block;
    block.resize(static_cast<std::size_t>(rows * n));
    for (std::int64_t i = blocks * t / parts; i < blocks * (t + 1) / parts; ++i) {
      const std::int64_t r0 = i * rows, r1 = std::min(m, r0 + rows);
      GemmTally& own = gemm_tally();
      const double before = own.seconds, flops = own.flops;
      sgemm(false, false, r1 - r0, n, k, a + r0 * lda, lda, b, ldb, block.data(), n, 1);
      seconds[t] += own.seconds - before;
      own.seconds = before, own.flops = flops;  // counted once, on the calling thread, below
      take(r0, r1, block.data());
    }
  });
  // The products' time as the busiest thread spent it, without the blocks' consumers.
  GemmTally& tally = gemm_tally();
  tally.seconds += *std::max_element(seconds.begin(), seconds.end());
  tally.flops += 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
}

GemmTally& gemm_tally() {
  thread_local GemmTally tally;
  return tally;
}

const char* blas_kernel_name() { return openblas_get_corename(); }

}  // namespace mxlab::train::detail
