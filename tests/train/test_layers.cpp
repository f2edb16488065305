// The trainer's internal layer helpers (engine/train/src/layers.hpp) against plain definitions.
#include <catch2/catch.hpp>

#include <cstdint>

#include "layers.hpp"

namespace mxlab::train::detail {
namespace {

TEST_CASE("transpose_into equals the element-by-element transpose", "[train]") {
  // Shapes with whole and partial 32 x 32 tiles and 4 x 4 squares, single rows and columns, and the CNN's.
  for (const auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {1, 37}, {37, 1}, {3, 5}, {4, 4},
                                  {31, 33}, {64, 96}, {67, 9}, {50176, 9}, {12544, 144}, {130, 1568}}) {
    INFO(rows << " x " << cols);
    Mat<float> x(rows, cols);
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j) x(i, j) = static_cast<float>(i * cols + j);
    Mat<float> out(2, 3);  // resized by the call
    transpose_into(x, out);
    REQUIRE(out.rows() == cols);
    REQUIRE(out.cols() == rows);
    std::int64_t mismatches = 0;
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j) mismatches += out(j, i) == x(i, j) ? 0 : 1;
    CHECK(mismatches == 0);
  }
}

}  // namespace
}  // namespace mxlab::train::detail
