// Tensors read in place from their files (memory-mapped .npy and raw float32), so work over a tensor larger
// than memory keeps only the part it is reading resident.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/io/npy.hpp"
#include "mxlab/io/tensor.hpp"

namespace mxlab {

/// The element encoding of a mapped tensor's bytes (little-endian).
enum class MappedType : std::uint8_t { F32, F16, BF16, F64 };

/// A read-only memory map of a tensor file's data: float32, float16, bfloat16 (uint16 bit patterns) or float64,
/// little-endian, C order. Files of other kinds (compressed, big-endian, Fortran order) are not mapped:
/// why_not_mappable says why.
class MappedTensor {
 public:
  /// Maps a .npy file; an error names the file and why it cannot be mapped (or read at all).
  static Result<MappedTensor> open_npy(const std::string& path, const NpyReadOptions& options = {});
  /// Maps a raw little-endian float32 file with the given shape (1-D when empty).
  static Result<MappedTensor> open_raw_f32(const std::string& path, std::vector<std::int64_t> shape);
  /// A view of memory the caller owns (a NumPy array's buffer), read in place as a mapped file is: `count`
  /// elements of `type` in C order at `data`, kept valid by `owner` (or by the caller while the view lives);
  /// release() leaves such memory alone. `name` stands for it in messages.
  static Result<MappedTensor> view(const void* data, MappedType type, std::vector<std::int64_t> shape,
                                   std::shared_ptr<const void> owner = {}, std::string name = "array");
  /// An empty string when the file could be mapped, else the reason (so callers can read it instead).
  static std::string why_not_mappable(const std::string& path, const NpyReadOptions& options = {});

  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::size_t size() const { return count_; }
  MappedType type() const { return type_; }
  /// The dtype of the values (F32, F16, BF16 or F64).
  DType dtype() const;
  /// The first element's bytes.
  const void* data() const;
  const std::string& path() const { return path_; }
  /// Exact value of element i.
  double value(std::size_t i) const;
  /// Tells the system that elements [0, end) will not be read again, so their pages leave memory.
  void release(std::size_t end) const;
  /// Reads the whole tensor into memory (float64 values as Tensor::from_f64 keeps them).
  Result<Tensor> load() const;

  struct Map;  ///< the mapping (unmapped when the last copy goes)

 private:
  std::shared_ptr<Map> map_;
  std::string path_;
  std::vector<std::int64_t> shape_;
  std::size_t count_ = 0;
  std::size_t offset_ = 0;
  MappedType type_ = MappedType::F32;
};

}  // namespace mxlab
