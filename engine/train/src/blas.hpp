// Internal: the trainer's float32 products on OpenBLAS's SGEMM, split into pieces that depend on the shape only.
#pragma once

#include <cstdint>
#include <functional>

namespace mxlab::train::detail {

/// The pieces an m x n product is split into: `count` blocks of `step` rows (by_rows) or columns of C, the
/// last one shorter. A function of the shape only, never of the thread count.
struct GemmPieces {
  bool by_rows = true;
  std::int64_t count = 1;
  std::int64_t step = 0;
};

/// How sgemm splits an m x n x k product.
GemmPieces gemm_pieces(std::int64_t m, std::int64_t n, std::int64_t k);

/// C = op(A) op(B) in float32, row-major: op(A) is m x k (A stored k x m when ta), op(B) is k x n (B stored
/// n x k when tb), C m x n with leading dimension ldc. Each piece of C (gemm_pieces) is one single-threaded
/// OpenBLAS SGEMM over the whole of k, and `threads` threads take the pieces, so C does not depend on the thread
/// count; it depends on the SGEMM kernel OpenBLAS picks for the CPU.
void sgemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
           const float* b, std::int64_t ldb, float* c, std::int64_t ldc, unsigned threads);

/// C = A B as sgemm(false, false, m, n, k, a, lda, b, ldb, ...) computes it, by blocks of `rows` rows of C: each
/// block an SGEMM of its own into a per-thread buffer, handed to take(r0, r1, values) (rows [r0, r1) of C, n
/// values a row) while in the caches, and not kept. C's values do not depend on how its rows are split: every
/// value is one SGEMM's sum over the whole of k. `threads` threads take the blocks (take runs on any of them).
void sgemm_rows(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda, const float* b,
                std::int64_t ldb, std::int64_t rows,
                const std::function<void(std::int64_t, std::int64_t, const float*)>& take, unsigned threads);

/// The seconds spent in sgemm calls made from this thread, and their floating-point operations (2 m n k each):
/// how `mxlab bench` measures the trainer's own products within its steps.
struct GemmTally {
  double seconds = 0;
  double flops = 0;
};
GemmTally& gemm_tally();

/// The name of the SGEMM kernel OpenBLAS picked for this CPU (its core name, "Haswell", "SkylakeX", ...).
const char* blas_kernel_name();

}  // namespace mxlab::train::detail
