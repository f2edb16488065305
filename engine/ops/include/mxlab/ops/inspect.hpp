// One value and one block looked at closely (the GUI's Value Explorer and Block view): a number cast to a
// format as `mxlab cast` casts it, with its exact error; the codes next to a code; and every element of one
// block of a quantized tensor with its code, shared scale, exact error and whether it underflowed or saturated.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/format.hpp"
#include "mxlab/ops/ops.hpp"
#include "mxlab/ops/tensor_source.hpp"
#include "mxlab/quantize/block_format.hpp"

namespace mxlab::ops {

/// A number literal cast to a format (`mxlab cast`'s row of it).
struct ValueCast {
  double input = 0;            ///< the literal rounded to the options' source type (NaN, +-inf as such)
  bool input_rounded = false;  ///< the literal was not a value of the source type
  std::string input_exact;     ///< the input's exact decimal value (NaN and Inf as %.17g)
  CastResult result;
  double value = 0;            ///< the result's value
  std::string exact;           ///< the result's exact decimal value (NaN and Inf as %.17g)
  /// value - input exactly, and |value - input| / |input| exactly (a fraction p/q where it is not a dyadic
  /// rational); empty where the input or the result is not finite, and the relative error where the input is 0.
  std::string error_exact, rel_error_exact;
  double error = 0;            ///< value - input rounded to double (IEEE arithmetic where not finite)
  double rel_error = 0;        ///< rel_error_exact rounded to double; NaN where it is empty
};

/// Casts a decimal or C99 hex literal (parsed exactly; nan, inf, -inf) to f under resolved options; `random`
/// drives stochastic rounding (stochastic_bits(seed, i) for the i-th value). An error names the literal.
Result<ValueCast> cast_text(const Format& f, std::string_view text, const CastOptions& options, std::uint32_t random = 0);

/// The codes of the values next to a code's value: `down` the largest value below it, `up` the smallest above
/// (IEEE 754 nextDown and nextUp over the format's values, -0 and +0 one value): past the largest finite value
/// the infinity of a format that has one, none past the ends of the others; none for NaN and unused codes.
struct Neighbours {
  std::optional<std::uint32_t> down, up;
};
Neighbours neighbours(const Format& f, std::uint32_t code);

/// One element of a block.
struct BlockElement {
  std::int64_t index = 0;   ///< its position in the tensor (row-major)
  double x = 0;             ///< its input value
  double q = 0;             ///< its dequantized value
  std::uint32_t code = 0;   ///< its element code
  bool underflow = false;   ///< a finite nonzero input that became zero (ErrorStats' underflows)
  bool saturated = false;   ///< its cast overflowed: clamped, or a special (ErrorStats' saturations)
  std::string error_exact;  ///< q - x exactly (empty where either is not finite)
  double error = 0;         ///< q - x rounded to double
  double rel_error = 0;     ///< |q - x| / |x| rounded to double; NaN for x = 0 or not finite
};

/// One block of a tensor quantized with a block format, element by element.
struct BlockDetail {
  std::int64_t block = 0;   ///< its index, row-major over the block grid
  std::int64_t blocks = 0;  ///< how many blocks the tensor has
  std::vector<std::int64_t> block_grid;
  std::vector<BlockElement> elements;
  bool has_scale = false;
  std::uint32_t scale_code = 0;  ///< the block scale's code in the scale format
  double scale = 0;              ///< its decoded value (NaN for a NaN scale)
  std::string scale_exact;       ///< its exact decimal value
  std::optional<int> shared_exponent;  ///< X of a power-of-two scale 2^X
  double amax = 0;               ///< the block's largest finite magnitude
  bool has_tensor_scale = false;
  std::uint32_t tensor_scale_code = 0;
  double tensor_scale = 1;
  std::string engine;            ///< what computed it
};

/// Block `block` of the tensor under f, from the scalar reference, the definition of every format's values: the
/// block's elements alone, quantized as a tensor of the block's extent, where its values depend on them only (an
/// element read of a 100-million-element tensor is a block's, not the tensor's); the whole tensor where a
/// tensor-level quantity (NVFP4's tensor scale), N:M sparsity or stochastic rounding (random words drawn by each
/// element's index in the tensor) enters. Cancelled through run.reporter before the quantization, or after it (the
/// quantization itself runs to its end, under a second for 2^22 elements); an error names the block index when it
/// is out of range.
Result<BlockDetail> block_detail(const BlockFormat& f, const TensorSource& input, std::int64_t block, const Run& run = {});

}  // namespace mxlab::ops
