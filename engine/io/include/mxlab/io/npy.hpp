// NumPy .npy files (format versions 1.0, 2.0 and 3.0; numpy.lib.format): reading float tensors,
// writing float and integer arrays atomically, byte-identical to numpy.save for the same array.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/io/tensor.hpp"

namespace mxlab {

/// Choices for reading .npy files.
struct NpyReadOptions {
  /// Read 2-byte unsigned integers ('<u2', '>u2') as bfloat16 bit patterns. NumPy has no bfloat16
  /// dtype, so bfloat16 tensors travel as uint16 bits; this flag says that is what a file holds. With it
  /// set, 2-byte void arrays ('|V2', which is how numpy.save stores ml_dtypes.bfloat16) are read the same
  /// way. Without it such files are rejected rather than read as integers.
  bool u2_as_bf16 = false;
};

/// What the header of a .npy file says.
struct NpyHeader {
  int major = 1;  ///< format version
  int minor = 0;
  std::string descr;                ///< dtype descriptor as written, e.g. "<f4", ">f8", "|u1"
  bool fortran_order = false;       ///< column-major data (rejected by read_npy)
  std::vector<std::int64_t> shape;  ///< empty for a 0-d array
  std::size_t data_offset = 0;      ///< bytes before the array data
};

/// Reads the header of a .npy file (names ending in ".gz" are decompressed).
Result<NpyHeader> read_npy_header(const std::string& path);

/// Reads a .npy file of float16 ('f2'), float32 ('f4') or float64 ('f8') values in either byte order
/// and C order, or bfloat16 stored as uint16 (see NpyReadOptions). Names ending in ".gz" are
/// decompressed. The data must be exactly as long as the shape needs.
Result<Tensor> read_npy(const std::string& path, const NpyReadOptions& options = {});

/// Reads .npy bytes held in memory; `name` stands for the file name in messages.
Result<Tensor> parse_npy(std::string_view bytes, std::string_view name, const NpyReadOptions& options = {});

/// A one-byte-per-element array ('|u1'): packed codes as `mxlab quantize --packed` writes them.
struct NpyBytes {
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> data;
};
/// Reads a C-order .npy file of uint8 values ('|u1'); the data must be exactly as long as the shape needs.
Result<NpyBytes> read_npy_u8(const std::string& path);
/// Reads uint8 .npy bytes held in memory; `name` stands for the file name in messages.
Result<NpyBytes> parse_npy_u8(std::string_view bytes, std::string_view name);
/// The bytes numpy.save writes before the data of a C-order array: magic "\x93NUMPY", version (1.0, or
/// 2.0 if the header needs more than 65535 bytes), header length, the header dictionary, padded with
/// spaces and a final '\n' to a multiple of 64 bytes. Like current NumPy (numpy.lib.format,
/// GROWTH_AXIS_MAX_DIGITS = 21) it first appends 21 - digits(shape[0]) spare spaces so the first
/// dimension can grow in place; older NumPy omitted them, which changes only the padding.
std::string npy_header(std::string_view descr, std::span<const std::int64_t> shape);

/// Writes float32 values as '<f4' (atomically: a temporary file renamed over `path`). Returns the bytes
/// written. The shape must have as many elements as there are values.
Result<std::size_t> write_npy(const std::string& path, std::span<const float> values,
                              const std::vector<std::int64_t>& shape);
/// Writes float64 values as '<f8'.
Result<std::size_t> write_npy(const std::string& path, std::span<const double> values,
                              const std::vector<std::int64_t>& shape);
/// Writes bytes (packed codes) as '|u1'.
Result<std::size_t> write_npy(const std::string& path, std::span<const std::uint8_t> values,
                              const std::vector<std::int64_t>& shape);
/// Writes 16-bit codes as '<u2'.
Result<std::size_t> write_npy(const std::string& path, std::span<const std::uint16_t> values,
                              const std::vector<std::int64_t>& shape);
/// Writes 32-bit integers as '<i4'.
Result<std::size_t> write_npy(const std::string& path, std::span<const std::int32_t> values,
                              const std::vector<std::int64_t>& shape);

/// Writes a tensor: F64 sources as '<f8' (their exact values), all others as '<f4' (exact too).
Result<std::size_t> write_npy(const std::string& path, const Tensor& tensor);

}  // namespace mxlab
