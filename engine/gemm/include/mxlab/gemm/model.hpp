// Accumulation models as data (docs/gemm.md): how a dot product of block-scaled vectors is summed in hardware.
// A model is a short string ("safe-mac", "tensorcore-trunc14,promote=128", "product=e4m5,group=4,sum=e4m7b12")
// parsed into the fields below; every field is a parameter of the definition in docs/gemm.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/format.hpp"

namespace mxlab::gemm {

/// The order in which a group's products are added (each addition rounded to the sum format).
enum class SumOrder : std::uint8_t {
  Pairwise,    ///< a balanced tree: adjacent pairs level by level, an odd last value carried up
  Sequential,  ///< left to right
};

/// Where the block scales multiply.
enum class ScaleSite : std::uint8_t {
  Block,    ///< on each group's sum, as OCP MX v1.0 `Dot` (X(A) X(B) times the sum of element products)
  Product,  ///< on each product, before any rounding
};

/// The accumulator across groups.
enum class AccKind : std::uint8_t {
  Exact,    ///< exact
  Float,    ///< acc = round(acc + group value) in a float format
  Aligned,  ///< the accumulator and the group's products aligned to the largest exponent, `aligned_bits` kept
};

/// How an aligned adder drops the bits below its window.
enum class AlignRounding : std::uint8_t {
  Truncate,     ///< toward zero (Fasi et al. 2021: what tensor cores do)
  NearestEven,  ///< to nearest, ties to even
};

/// An accumulation model (docs/gemm.md "Accumulation models").
struct Model {
  std::string name;                  ///< the text it was parsed from
  std::optional<Format> product;     ///< products rounded to this format (none: exact)
  int group = 0;                     ///< products per group (0: a whole block of both operands)
  SumOrder order = SumOrder::Pairwise;
  std::optional<Format> sum;         ///< additions inside a group rounded to this format (none: exact)
  ScaleSite scale = ScaleSite::Block;
  AccKind acc = AccKind::Exact;
  std::optional<Format> acc_format;  ///< AccKind::Float
  int aligned_bits = 0;              ///< AccKind::Aligned: bits kept from the largest addend's leading bit
  AlignRounding align_rounding = AlignRounding::Truncate;
  int promote = 0;                   ///< every this many elements the accumulator is added to an FP32 one (0: never)
  Rounding rounding = Rounding::NearestEven;  ///< of the product, sum and float accumulator roundings
};

/// One named preset: its name, the string it stands for, and what it models.
struct ModelPreset {
  std::string name;
  std::string definition;
  std::string summary;
};

/// The named presets (docs/gemm.md), in the order they are documented.
const std::vector<ModelPreset>& model_presets();

/// Parses a model string: a preset name, or key=value settings, or a preset followed by settings that
/// override it ("tensorcore-trunc14,promote=128"). Errors name the part that is wrong.
Result<Model> parse_model(std::string_view text);

/// The model written back as key=value settings (parse_model of it gives the same model).
std::string describe(const Model& m);

/// Whether two models compute the same (names aside).
bool same_arithmetic(const Model& a, const Model& b);

}  // namespace mxlab::gemm
