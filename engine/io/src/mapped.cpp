// Memory-mapped tensor files.
#include "mxlab/io/mapped.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <limits>
#include <cstring>

#include "binary.hpp"
#include "input_file.hpp"

namespace mxlab {

struct MappedTensor::Map {
  void* base = MAP_FAILED;
  std::size_t length = 0;
  std::shared_ptr<const void> owner;  ///< memory of a view (MappedTensor::view): never unmapped or released
  bool borrowed = false;
  ~Map() {
    if (!borrowed && base != MAP_FAILED) ::munmap(base, length);
  }
};

namespace {

/// The mapped element type of a .npy descriptor, or a reason it cannot be mapped.
Result<MappedType> npy_mapped_type(const NpyHeader& h, const NpyReadOptions& o) {
  if (h.fortran_order) return make_error("Fortran-order data");
  if (h.descr == "<f4") return MappedType::F32;
  if (h.descr == "<f2") return MappedType::F16;
  if (h.descr == "<f8") return MappedType::F64;
  if (o.u2_as_bf16 && (h.descr == "<u2" || h.descr == "|V2")) return MappedType::BF16;
  return make_error("dtype '" + h.descr + "' is not little-endian float32, float16, bfloat16 or float64");
}

Result<std::shared_ptr<MappedTensor::Map>> map_file(const std::string& path, std::size_t need) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error("cannot open '" + path + "': " + io_detail::errno_message(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error("'" + path + "' is not a regular file");
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size != need) {
    ::close(fd);
    return make_error("'" + path + "' holds " + std::to_string(size) + " bytes; its header and shape need " +
                      std::to_string(need));
  }
  auto m = std::make_shared<MappedTensor::Map>();
  m->length = size;
  if (size > 0) {
    m->base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m->base == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return make_error("cannot map '" + path + "': " + io_detail::errno_message(err));
    }
    ::madvise(m->base, size, MADV_SEQUENTIAL);
  }
  ::close(fd);
  return m;
}

std::size_t type_bytes(MappedType t) {
  switch (t) {
    case MappedType::F32: return 4;
    case MappedType::F64: return 8;
    case MappedType::F16:
    case MappedType::BF16: break;
  }
  return 2;
}

}  // namespace

std::string MappedTensor::why_not_mappable(const std::string& path, const NpyReadOptions& options) {
  if (path.ends_with(".gz")) return "compressed file";
  auto h = read_npy_header(path);
  if (!h) return h.error().message;
  auto t = npy_mapped_type(*h, options);
  return t ? std::string() : t.error().message;
}

Result<MappedTensor> MappedTensor::open_npy(const std::string& path, const NpyReadOptions& options) {
  if (path.ends_with(".gz")) return make_error("npy '" + path + "': a compressed file cannot be mapped");
  auto h = read_npy_header(path);
  if (!h) return h.error();
  auto type = npy_mapped_type(*h, options);
  if (!type) return make_error("npy '" + path + "': " + type.error().message + ", cannot be mapped");
  auto n = shape_elements(h->shape, "npy '" + path + "'");
  if (!n) return n.error();
  struct stat st {};
  const std::uint64_t file_bytes =
      ::stat(path.c_str(), &st) == 0 && static_cast<std::uint64_t>(st.st_size) > h->data_offset
          ? static_cast<std::uint64_t>(st.st_size) - h->data_offset
          : 0;
  if (auto others = io_detail::empty_shape_excess(h->shape, type_bytes(*type), file_bytes))
    return make_error("npy '" + path + "': shape " + format_shape(h->shape) + " has no elements but dimensions that multiply to " +
                      std::to_string(others) + ", far more than a file of this size could hold (corrupt shape?)");
  MappedTensor t;
  t.type_ = *type;
  if (*n > (std::numeric_limits<std::size_t>::max() - h->data_offset) / type_bytes(t.type_))
    return make_error("npy '" + path + "': shape " + format_shape(h->shape) + " is too large");
  auto m = map_file(path, h->data_offset + *n * type_bytes(t.type_));
  if (!m) return make_error("npy " + m.error().message);
  t.map_ = *m;
  t.path_ = path;
  t.shape_ = h->shape;
  t.count_ = *n;
  t.offset_ = h->data_offset;
  return t;
}

Result<MappedTensor> MappedTensor::open_raw_f32(const std::string& path, std::vector<std::int64_t> shape) {
  if (path.ends_with(".gz")) return make_error("raw '" + path + "': a compressed file cannot be mapped");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return make_error("raw '" + path + "': " + io_detail::errno_message(errno));
  const auto bytes = static_cast<std::size_t>(st.st_size);
  if (shape.empty()) {
    if (bytes % 4 != 0) return make_error("raw '" + path + "': size " + std::to_string(bytes) + " is not a multiple of 4");
    shape = {static_cast<std::int64_t>(bytes / 4)};
  }
  auto n = shape_elements(shape, "raw '" + path + "'");
  if (!n) return n.error();
  if (*n > std::numeric_limits<std::size_t>::max() / 4)
    return make_error("raw '" + path + "': shape " + format_shape(shape) + " is too large");
  auto m = map_file(path, *n * 4);
  if (!m) return make_error("raw " + m.error().message);
  MappedTensor t;
  t.map_ = *m;
  t.path_ = path;
  t.shape_ = std::move(shape);
  t.count_ = *n;
  return t;
}

Result<MappedTensor> MappedTensor::view(const void* data, MappedType type, std::vector<std::int64_t> shape,
                                       std::shared_ptr<const void> owner, std::string name) {
  auto n = shape_elements(shape, name);
  if (!n) return n.error();
  if (data == nullptr && *n > 0) return make_error(name + ": no data");
  auto m = std::make_shared<Map>();
  m->base = *n > 0 ? const_cast<void*>(data) : MAP_FAILED;
  m->length = *n * type_bytes(type);
  m->owner = std::move(owner);
  m->borrowed = true;
  MappedTensor t;
  t.map_ = std::move(m);
  t.path_ = std::move(name);
  t.shape_ = std::move(shape);
  t.count_ = *n;
  t.type_ = type;
  return t;
}

DType MappedTensor::dtype() const {
  switch (type_) {
    case MappedType::F16: return DType::F16;
    case MappedType::BF16: return DType::BF16;
    case MappedType::F64: return DType::F64;
    case MappedType::F32: break;
  }
  return DType::F32;
}

const void* MappedTensor::data() const {
  if (!map_ || map_->base == MAP_FAILED) return nullptr;
  return static_cast<const std::uint8_t*>(map_->base) + offset_;
}

double MappedTensor::value(std::size_t i) const {
  const auto* p = static_cast<const std::uint8_t*>(data());
  if (type_ == MappedType::F32) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  if (type_ == MappedType::F64) {
    double d;
    std::memcpy(&d, p + 8 * i, 8);
    return d;
  }
  std::uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  if (type_ == MappedType::BF16) return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
  // float16: sign, 5-bit exponent (bias 15), 10-bit fraction; every value is a double exactly.
  const int e = (h >> 10) & 0x1F;
  const int frac = h & 0x3FF;
  double v = e == 0 ? std::ldexp(frac, -24)
             : e == 31 ? (frac ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity())
                       : std::ldexp(1024 + frac, e - 25);
  return (h & 0x8000) ? -v : v;
}

void MappedTensor::release(std::size_t end) const {
  if (!map_ || map_->base == MAP_FAILED || map_->borrowed) return;
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t bytes = (offset_ + end * type_bytes(type_)) / page * page;
  if (bytes > 0) ::madvise(map_->base, std::min(bytes, map_->length), MADV_DONTNEED);
}

Result<Tensor> MappedTensor::load() const {
  if (type_ == MappedType::F64) {
    std::vector<double> d(count_);
    if (count_ > 0) std::memcpy(d.data(), data(), count_ * sizeof(double));
    return Tensor::from_f64(shape_, std::move(d));
  }
  std::vector<float> v(count_);
  for (std::size_t i = 0; i < count_; ++i) v[i] = static_cast<float>(value(i));
  return Tensor::from_f32(shape_, std::move(v), dtype());
}

}  // namespace mxlab
