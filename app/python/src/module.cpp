// mxlab._mxlab: the engine's ops entry points for Python (pybind11). NumPy arrays in C order are read where
// they lie (float32, float16, float64, bfloat16 bit patterns as uint16); the GIL is released while the engine runs;
// an engine error is a ValueError with the engine's message, a wrong kind of argument a TypeError. The Python
// package (mxlab/__init__.py) turns keyword options into the engine's option names and builds tables and
// records from what this returns.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mxlab/core/bits.hpp"
#include "mxlab/core/provenance.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/gemm/gemm.hpp"
#include "mxlab/gemm/model.hpp"
#include "mxlab/io/mapped.hpp"
#include "mxlab/ops/catalogue.hpp"
#include "mxlab/ops/ops.hpp"
#include "mxlab/ops/packed_file.hpp"
#include "mxlab/ops/requests.hpp"
#include "mxlab/ops/weight_tensors.hpp"
#include "mxlab/train/recipe.hpp"
#include "mxlab/train/scaling.hpp"

namespace py = pybind11;

namespace mxlab::python {
namespace {

template <class T>
T take(Result<T> r) {
  if (!r) throw py::value_error(r.error().message);
  return std::move(*r);
}

/// How messages name a keyword option ("round", "scale_rule"): the CLI names it "option '--scale-rule'".
std::string option_name(std::string_view name) {
  std::string s(name);
  std::replace(s.begin(), s.end(), '-', '_');
  return "option '" + s + "'";
}

ops::Run run_with(unsigned threads) {
  ops::Run run;
  run.threads = threads;
  return run;
}

/// The table as (columns, numeric flags, rows of text): the package makes records of it.
py::tuple table_tuple(const Table& t) {
  std::vector<bool> numeric = t.numeric;
  numeric.resize(t.columns.size(), false);
  return py::make_tuple(t.columns, numeric, t.rows);
}

/// The element format of FORMAT text; a block format's name gives its element format (as `mxlab cast`).
Format element_format(const std::string& text) {
  std::string lowered = text;
  for (char& c : lowered) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& name : block_format_names())
    if (lowered == name)
      if (auto b = parse_block_format(name)) return b->element;
  return take(parse_format(text));
}

// ---- arrays

bool same_dtype(const py::array& a, const char* name) { return a.dtype().equal(py::dtype(name)); }

/// A NumPy array as the engine's tensor source, read in place (float32, float16, float64, bfloat16 as uint16 with
/// bf16), as a mapped .npy file of the same dtype is. The array must stay alive while the source is used: the
/// callers hold it for the whole call.
ops::TensorSource source_of(const py::array& a, bool bf16) {
  if (!(a.flags() & py::array::c_style))
    throw py::type_error("the array is not C-contiguous (numpy.ascontiguousarray makes a copy that is)");
  const char order = a.dtype().attr("byteorder").cast<std::string>().at(0);
  if (order == '>') throw py::type_error("the array is big-endian; mxlab reads little-endian values");
  std::vector<std::int64_t> shape(a.shape(), a.shape() + a.ndim());
  std::optional<MappedType> type;
  if (same_dtype(a, "float32")) type = MappedType::F32;
  else if (same_dtype(a, "float16")) type = MappedType::F16;
  else if (same_dtype(a, "float64")) type = MappedType::F64;
  else if (same_dtype(a, "uint16") && bf16) type = MappedType::BF16;
  if (bf16 && type != MappedType::BF16)
    throw py::type_error("bf16=True needs a uint16 array of bfloat16 bit patterns, not " +
                         py::str(a.dtype()).cast<std::string>());
  if (type) return ops::TensorSource::of(take(MappedTensor::view(a.data(), *type, shape)));
  if (same_dtype(a, "uint16"))
    throw py::type_error("a uint16 array is read as bfloat16 bit patterns only with bf16=True");
  throw py::type_error("expected a float32, float16, float64 array or bfloat16 bit patterns (uint16 with bf16=True), not " +
                       py::str(a.dtype()).cast<std::string>());
}

/// The memory of large result arrays, kept when such an array is freed for the next result of the same size. The
/// pages of new memory are mapped by its first write (a page fault and the system's zeroing of each page, which
/// for a 64 MiB result costs about as much as quantizing it); a new array per call in a loop
/// (`y = mxlab.quantize(x, spec)`) writes to pages already mapped instead. The kKeep most recently freed buffers
/// are kept; arrays under kMinBytes come from NumPy.
class ResultBuffers {
 public:
  static constexpr std::size_t kMinBytes = std::size_t{1} << 20;
  static constexpr std::size_t kKeep = 2;

  /// Memory for `bytes`: a kept buffer of that size, else new memory (mapped by the kernels' threads as they
  /// write their parts).
  void* take(std::size_t bytes) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = kept_.begin(); it != kept_.end(); ++it)
        if (it->bytes == bytes) {
          void* p = it->data;
          kept_.erase(it);
          return p;
        }
    }
    void* p = std::malloc(bytes);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  /// A freed array's memory: kept, the oldest kept buffer beyond kKeep freed.
  void give(void* p, std::size_t bytes) {
    const std::lock_guard<std::mutex> lock(mutex_);
    kept_.push_back({p, bytes});
    if (kept_.size() > kKeep) {
      std::free(kept_.front().data);
      kept_.erase(kept_.begin());
    }
  }

 private:
  struct Kept {
    void* data;
    std::size_t bytes;
  };
  std::mutex mutex_;
  std::vector<Kept> kept_;
};

ResultBuffers& result_buffers() {
  static auto* buffers = new ResultBuffers;  // never destroyed: result arrays may outlive the module's teardown
  return *buffers;
}

/// A new float32 array of this shape (uninitialized), large ones on ResultBuffers' memory.
py::array_t<float> new_result(const py::array& like) {
  const std::vector<py::ssize_t> shape(like.shape(), like.shape() + like.ndim());
  const std::size_t bytes = static_cast<std::size_t>(like.size()) * sizeof(float);
  if (bytes < ResultBuffers::kMinBytes) return py::array_t<float>(shape);
  struct Held {
    void* data;
    std::size_t bytes;
  };
  auto* held = new Held{result_buffers().take(bytes), bytes};
  const py::capsule owner(held, [](void* h) {
    const auto* k = static_cast<Held*>(h);
    result_buffers().give(k->data, k->bytes);
    delete k;
  });
  return py::array_t<float>(shape, static_cast<float*>(held->data), owner);
}

/// The float32 output array: `out` when given (float32, C order, writeable, the input's size), else a new one.
py::array_t<float> output_for(const py::array& x, const py::object& out) {
  if (out.is_none()) return new_result(x);
  if (!py::isinstance<py::array>(out)) throw py::type_error("out= must be a NumPy float32 array");
  auto o = py::reinterpret_borrow<py::array>(out);
  if (!same_dtype(o, "float32")) throw py::type_error("out= must be a float32 array, not " + py::str(o.dtype()).cast<std::string>());
  if (!(o.flags() & py::array::c_style) || !o.writeable()) throw py::type_error("out= must be a writeable C-contiguous array");
  if (o.size() != x.size())
    throw py::value_error("out= holds " + std::to_string(o.size()) + " values for " + std::to_string(x.size()) + " inputs");
  return py::reinterpret_borrow<py::array_t<float>>(o);
}

std::span<const float> floats_of(const py::array& a) { return {static_cast<const float*>(a.data()), static_cast<std::size_t>(a.size())}; }
std::span<float> floats_of(py::array_t<float>& a) { return {a.mutable_data(), static_cast<std::size_t>(a.size())}; }

// ---- block formats

/// A block format with the package's options: (name, value) pairs with the engine's option names.
using Options = std::vector<std::pair<std::string, std::string>>;

BlockFormat block_format(const std::string& spec, const Options& options) {
  return take(ops::block_format(spec, options, option_name));
}

/// An element format as a block format without scale: each element cast alone, as `mxlab cast` casts it.
BlockFormat cast_format(const std::string& text, const std::string& round, const std::string& overflow,
                        const std::string& subnormals, std::uint64_t seed, int random_bits, const std::string& source) {
  BlockFormat f;
  f.element = element_format(text);
  f.name = text;
  CastOptions o;
  auto parsed = [](auto r, const char* name) {
    if (!r) throw py::value_error(option_name(name) + ": " + r.error().message);
    return *r;
  };
  o.rounding = parsed(parse_rounding(round), "round");
  o.overflow = parsed(parse_overflow(overflow), "overflow");
  o.subnormals = parsed(parse_subnormals(subnormals), "subnormals");
  o.source = parsed(parse_source_type(source), "source");
  if (random_bits < 1 || random_bits > 32)
    throw py::value_error(option_name("random_bits") + " " + std::to_string(random_bits) + ": expected an integer 1..32");
  o.random_bits = random_bits;
  f.options.element = take(resolve_options(f.element, o));
  f.options.seed = seed;
  return f;
}

/// Whether ops::FakeQuantizer runs the format on a tensor of this rank as it lies: blocks along the last axis
/// (1-D tiles on it), 2-D tiles, a tensor scale or none; per-channel scales and other block axes go through
/// ops::quantize_fake, which moves them.
bool runs_in_place(const BlockFormat& f, std::size_t rank) {
  const BlockGeometry geometry = f.layout.geometry();
  if (geometry.per_channel()) return false;
  if (!geometry.one_d()) return true;
  const int r = static_cast<int>(rank);
  return rank <= 1 || geometry.axis() == -1 || geometry.axis() == r - 1;
}

/// Fake quantization of x into out (float32), engine name returned.
std::string fake_into(const BlockFormat& f, const py::array& x, const ops::TensorSource& source, py::array_t<float>& out,
                      unsigned threads) {
  const ops::Run run = run_with(threads);
  std::span<float> o = floats_of(out);
  if (source.dtype() == DType::F32 && source.mapped() != nullptr && runs_in_place(f, source.shape().size())) {
    ops::QuantizeResult result;
    const std::span<const float> in = floats_of(x);
    Result<std::size_t> r = std::size_t{0};
    {
      py::gil_scoped_release release;
      r = ops::fake_quantize(f, in, source.shape(), o, run, nullptr);
    }
    take(std::move(r));
    return ops::engine_for(f);
  }
  ops::QuantizeSink sink;
  sink.fake = [o](std::size_t first, std::span<const float> v) -> std::optional<Error> {
    std::memcpy(o.data() + first, v.data(), v.size() * sizeof(float));
    return std::nullopt;
  };
  Result<ops::QuantizeResult> r = ops::QuantizeResult{};
  {
    py::gil_scoped_release release;
    r = ops::quantize_fake(f, source, sink, run);
  }
  return take(std::move(r)).engine;
}

py::array_t<std::uint8_t> bytes_array(const std::vector<std::uint8_t>& v) {
  py::array_t<std::uint8_t> a(static_cast<py::ssize_t>(v.size()));
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size());
  return a;
}

std::vector<std::uint8_t> bytes_of(const py::object& o) {
  auto a = py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>::ensure(o);
  if (!a) throw py::type_error("expected an array of bytes (uint8)");
  return {a.data(), a.data() + a.size()};
}

/// The packed tensor as a dict of its arrays (PackedTensor's fields, docs/quantization.md "Packed form").
py::dict packed_dict(const BlockFormat& f, const PackedTensor& p, const std::string& engine) {
  py::dict d;
  d["format"] = f.name;
  d["shape"] = p.shape;
  d["elements"] = bytes_array(p.elements);
  d["scale_grid"] = p.scale_grid;
  d["scales"] = bytes_array(p.scales);
  d["tensor_scale"] = bytes_array(p.tensor_scale);
  d["subtile_grid"] = p.subtile_grid;
  d["subtile_offsets"] = bytes_array(p.subtile_offsets);
  d["packing"] = ops::describe_packing(f, p.shape.size());
  d["engine"] = engine;
  return d;
}

PackedTensor packed_of(const py::dict& d) {
  PackedTensor p;
  p.shape = d["shape"].cast<std::vector<std::int64_t>>();
  p.elements = bytes_of(d["elements"]);
  p.scale_grid = d["scale_grid"].cast<std::vector<std::int64_t>>();
  p.scales = bytes_of(d["scales"]);
  p.tensor_scale = bytes_of(d["tensor_scale"]);
  p.subtile_grid = d["subtile_grid"].cast<std::vector<std::int64_t>>();
  p.subtile_offsets = bytes_of(d["subtile_offsets"]);
  return p;
}

py::array_t<double> values_array(const std::vector<std::int64_t>& shape, const std::vector<double>& v) {
  py::array_t<double> a(std::vector<py::ssize_t>(shape.begin(), shape.end()));
  if (static_cast<std::size_t>(a.size()) != v.size()) throw py::value_error("the packed tensor's shape does not match its values");
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(double));
  return a;
}

/// The figures of one analysis row (the columns of `mxlab analyze`).
py::dict stats_row(const BlockFormat& f, double bits, const std::string& engine, const ErrorStats& s, bool saturation) {
  py::dict r;
  r["format"] = f.name;
  r["elements"] = s.count + s.nan_outputs;
  r["bits_per_element"] = bits;
  r["mse"] = s.mse();
  r["rmse"] = s.rmse();
  r["sqnr_db"] = s.sqnr_db();
  r["bias"] = s.count ? s.error_sum.to_double() / static_cast<double>(s.count) : 0.0;
  r["max_abs_error"] = s.max_abs_error;
  r["max_rel_error"] = s.max_rel_error;
  r["underflow_ratio"] = s.underflow_ratio();
  r["saturation_ratio"] = saturation ? py::object(py::float_(s.saturation_ratio())) : py::object(py::none());
  r["nan_count"] = s.nan_outputs;
  r["engine"] = engine;
  return r;
}

py::list analyze(const std::vector<BlockFormat>& formats, const py::array& x, bool bf16, bool gaps, bool per_block,
                 const std::vector<int>& reduction_axes, unsigned threads) {
  if (formats.empty()) throw py::value_error("missing SPEC (e.g. mxlab.analyze(x, 'mxfp4', 'nvfp4'))");
  if (gaps && per_block) throw py::value_error("choose one of gaps, per_block");
  ops::TensorSource source = source_of(x, bf16);
  ops::AnalyzeOptions options;
  options.gaps = gaps;
  options.per_block = per_block;
  Result<std::vector<ops::FormatAnalysis>> results = std::vector<ops::FormatAnalysis>{};
  {
    py::gil_scoped_release release;
    if (!reduction_axes.empty()) {
      auto moved = ops::block_axes_last(source, reduction_axes);
      if (moved) source = std::move(*moved);
      else results = moved.error();
    }
    if (results) results = ops::analyze(formats, source, options, run_with(threads));
  }
  py::list rows;
  for (const auto& a : take(std::move(results))) {
    if (per_block) {
      for (std::size_t b = 0; b < a.blocks.size(); ++b) {
        py::dict r = stats_row(a.format, a.bits_per_element, a.engine, a.blocks[b].stats, true);
        r["block"] = b;
        r["amax"] = a.blocks[b].amax;
        r["scale"] = a.blocks[b].scale;
        rows.append(r);
      }
    } else if (gaps) {
      const bool exact_saturation = a.engine.rfind("reference", 0) == 0;
      for (const auto& [g, s] : a.by_gap) {
        py::dict r = stats_row(a.format, a.bits_per_element, a.engine, s, exact_saturation);
        r["gap"] = g;
        rows.append(r);
      }
    } else {
      rows.append(stats_row(a.format, a.bits_per_element, a.engine, a.total, true));
    }
  }
  return rows;
}

// ---- weight files and capture folders

WeightFile open_weights(const std::string& path) {
  Result<WeightFile> f = make_error("");
  {
    py::gil_scoped_release release;
    f = WeightFile::open(path);
  }
  return take(std::move(f));
}

/// The tensors of a weight file or capture folder: (name, shape, dtype, elements, layout, reduction axes, op);
/// the reader's notes as warnings.
py::list weight_list(const std::string& path, const std::string& select) {
  const WeightFile f = open_weights(path);
  const NamePattern pattern = take(NamePattern::parse(select));
  py::list rows;
  for (const auto& w : f.weights()) {
    if (!pattern.matches(w.name)) continue;
    py::dict r;
    r["name"] = w.name;
    r["shape"] = py::tuple(py::cast(w.shape));
    r["dtype"] = w.dtype;
    r["elements"] = w.elements;
    r["layout"] = std::string(weight_layout_name(w.layout));
    auto axes = reduction_axes(w.shape, w.layout);
    r["reduction_axes"] = axes ? py::object(py::tuple(py::cast(axes->axes))) : py::object(py::none());
    r["op"] = w.op;
    r["readable"] = w.readable();
    rows.append(r);
  }
  // What the reader left aside (a capture's unfinished temporaries): warnings, as `mxlab data weights` notes.
  for (const std::string& note : f.notes()) py::module_::import("warnings").attr("warn")(note, py::arg("stacklevel") = 2);
  return rows;
}

/// One tensor of a weight file or capture folder as the engine reads it, in its stored shape: float32 values
/// (float64 for a float64 tensor, whose exact values the engine keeps).
py::array read_weight(const std::string& path, const std::string& name) {
  const WeightFile f = open_weights(path);
  Result<Tensor> t = make_error("");
  {
    py::gil_scoped_release release;
    auto index = f.find(name);
    t = index ? f.read(*index) : Result<Tensor>(index.error());
  }
  const Tensor tensor = take(std::move(t));
  const std::vector<py::ssize_t> shape(tensor.shape().begin(), tensor.shape().end());
  if (tensor.dtype() == DType::F64) return values_array(tensor.shape(), tensor.f64_data());
  py::array_t<float> a(shape);
  if (tensor.size() != 0) std::memcpy(a.mutable_data(), tensor.data().data(), tensor.size() * sizeof(float));
  return a;
}

/// ops::analyze_weights: records led by tensor, shape and layout, then the columns of analyze.
py::list analyze_weights(const std::vector<BlockFormat>& formats, const std::string& path, const std::string& select,
                         bool gaps, unsigned threads) {
  if (formats.empty()) throw py::value_error("missing SPEC (e.g. mxlab.analyze('capture', 'mxfp4', 'mxint8'))");
  const WeightFile f = open_weights(path);
  const NamePattern pattern = take(NamePattern::parse(select));
  ops::AnalyzeOptions options;
  options.gaps = gaps;
  Result<std::vector<ops::WeightAnalysis>> results = std::vector<ops::WeightAnalysis>{};
  {
    py::gil_scoped_release release;
    results = ops::analyze_weights(formats, f, pattern, options, run_with(threads));
  }
  py::list rows;
  for (const auto& w : take(std::move(results))) {
    for (const auto& a : w.formats) {
      auto lead = [&](py::dict r) {
        py::dict out;
        out["tensor"] = w.info.name;
        out["shape"] = py::tuple(py::cast(w.info.shape));
        out["layout"] = w.layout;
        for (auto item : r) out[item.first] = item.second;
        return out;
      };
      if (!gaps) {
        rows.append(lead(stats_row(a.format, a.bits_per_element, a.engine, a.total, true)));
        continue;
      }
      const bool exact_saturation = a.engine.rfind("reference", 0) == 0;
      for (const auto& [g, s] : a.by_gap) {
        py::dict r = stats_row(a.format, a.bits_per_element, a.engine, s, exact_saturation);
        r["gap"] = g;
        rows.append(lead(r));
      }
    }
  }
  return rows;
}

// ---- recipes

/// A block format per role of a layer under a recipe (None: FP32), in Role order w, a, g, w_bp, a_bp.
std::vector<std::optional<BlockFormat>> layer_formats(const train::Recipe& r, const std::string& layer) {
  return take(train::layer_formats(r, layer));
}

/// A prepared fake quantizer: ops::FakeQuantizer over NumPy arrays.
class Quantizer {
 public:
  explicit Quantizer(BlockFormat f) : q_(std::move(f)) {}
  const BlockFormat& format() const { return q_.format(); }

  /// Fake quantization along the last axis (or as the format lays its blocks): out (float32) returned.
  py::array_t<float> run(const py::array& x, const py::object& out, bool bf16, unsigned threads) const {
    auto o = output_for(x, out);
    const ops::TensorSource source = source_of(x, bf16);
    if (source.dtype() != DType::F32 || !runs_in_place(format(), source.shape().size())) {
      fake_into(format(), x, source, o, threads);
      return o;
    }
    const std::span<const float> in = floats_of(x);
    std::span<float> dst = floats_of(o);
    Result<std::size_t> r = std::size_t{0};
    {
      py::gil_scoped_release release;
      r = q_.run(in, source.shape(), dst, run_with(threads));
    }
    take(std::move(r));
    return o;
  }

  /// Fake quantization of a float32 matrix with the format's blocks down its columns, in x's layout.
  py::array_t<float> run_columns(const py::array& x, const py::object& out, unsigned threads) const {
    auto [rows, cols] = matrix(x);
    auto o = output_for(x, out);
    const std::span<const float> in = floats_of(x);
    std::span<float> dst = floats_of(o);
    Result<std::size_t> r = std::size_t{0};
    {
      py::gil_scoped_release release;
      r = q_.run_columns(in, rows, cols, dst, run_with(threads));
    }
    take(std::move(r));
    return o;
  }

  /// run() and columns.run_columns() of one float32 matrix in one pass: (rows, columns) returned.
  py::tuple run_rows_and_columns(const py::array& x, const Quantizer& columns, unsigned threads) const {
    auto [rows, cols] = matrix(x);
    auto o = output_for(x, py::none());
    auto oc = output_for(x, py::none());
    const std::span<const float> in = floats_of(x);
    std::span<float> dst = floats_of(o), dst_columns = floats_of(oc);
    Result<std::size_t> r = std::size_t{0};
    {
      py::gil_scoped_release release;
      r = q_.run_rows_and_columns(in, rows, cols, dst, columns.q_, dst_columns, run_with(threads));
    }
    take(std::move(r));
    return py::make_tuple(o, oc);
  }

  /// train::delayed_cast of a float32 matrix (along its rows, or down its columns): (out, saturated) returned.
  py::tuple run_delayed(const py::array& x, train::AmaxHistory& history, bool record, bool columns,
                        unsigned threads) const {
    auto [rows, cols] = matrix(x);
    auto o = output_for(x, py::none());
    const std::span<const float> in = floats_of(x);
    std::span<float> dst = floats_of(o);
    Result<std::int64_t> r = std::int64_t{0};
    {
      py::gil_scoped_release release;
      r = train::delayed_cast(q_, in, rows, cols, dst, history, record, run_with(threads), columns);
    }
    const std::int64_t saturated = take(std::move(r));
    return py::make_tuple(o, saturated);
  }

 private:
  static std::pair<std::int64_t, std::int64_t> matrix(const py::array& x) {
    if (x.ndim() != 2 || !same_dtype(x, "float32") || !(x.flags() & py::array::c_style))
      throw py::type_error("expected a C-contiguous 2-D float32 array");
    return {x.shape(0), x.shape(1)};
  }
  ops::FakeQuantizer q_;
};

/// Formats: the catalogue, code points, block formats and their options.
void register_formats(py::module_& m) {
  m.def("version", [] { return build_provenance().version; });
  m.def("simd_target", &ops::simd_target);
  m.def("format_table", [] { return table_tuple(ops::format_table(catalogue_formats())); });
  m.def("block_format_table", [] { return table_tuple(ops::block_format_table()); });
  m.def("codepoint_count", [](const std::string& fmt) { return element_format(fmt).code_count(); });
  m.def("codepoint_table", [](const std::string& fmt, std::uint64_t first, std::uint64_t last) {
    const Format f = element_format(fmt);
    if (first > last || last >= f.code_count())
      throw py::value_error("codes must satisfy first <= last < " + std::to_string(f.code_count()));
    Table t;
    {
      py::gil_scoped_release release;
      t = ops::codepoint_table(f, first, last);
    }
    return table_tuple(t);
  });
  m.def("format_options", [] {
    std::vector<std::tuple<std::string, std::string, std::string>> v;
    for (const auto& o : ops::format_options()) v.emplace_back(o.name, o.value_name, o.help);
    return v;
  });

  py::class_<BlockFormat>(m, "BlockFormat")
      .def_readonly("name", &BlockFormat::name)
      .def_property_readonly("element", [](const BlockFormat& f) { return f.element.name(); })
      .def_property_readonly("element_bits", [](const BlockFormat& f) { return f.element.bits(); })
      .def_property_readonly("options", [](const BlockFormat& f) { return ops::describe_options(f); })
      .def_property_readonly("engine", [](const BlockFormat& f) { return ops::engine_for(f); })
      .def("bits_per_element", [](const BlockFormat& f, const std::vector<std::int64_t>& shape) {
        return f.stored_bits_per_element(shape);
      })
      .def("__repr__", [](const BlockFormat& f) { return "<mxlab block format " + f.name + ">"; });
  m.def("block_format", &mxlab::python::block_format, py::arg("spec"), py::arg("options"));
  m.def("cast_format", &mxlab::python::cast_format);
}

/// Quantizing NumPy arrays: fake-quantized, packed, dequantized, read from packed files.
void register_quantize(py::module_& m) {
  // Where the engine reads an array's values (the array's own buffer, or an engine copy): the tests check that
  // arrays are read in place.
  m.def("source_address", [](const py::array& x, bool bf16) {
    const ops::TensorSource s = source_of(x, bf16);
    const void* p = s.mapped() != nullptr ? s.mapped()->data() : static_cast<const void*>(s.tensor()->data().data());
    return reinterpret_cast<std::uintptr_t>(p);
  });
  m.def("quantize_fake", [](const BlockFormat& f, const py::array& x, const py::object& out, bool bf16, unsigned threads) {
    auto o = output_for(x, out);
    const std::string engine = fake_into(f, x, source_of(x, bf16), o, threads);
    return py::make_tuple(o, engine);
  });
  m.def("quantize_packed", [](const BlockFormat& f, const py::array& x, bool bf16, unsigned threads) {
    const ops::TensorSource source = source_of(x, bf16);
    ops::QuantizeResult result;
    Result<PackedTensor> p = PackedTensor{};
    {
      py::gil_scoped_release release;
      p = ops::quantize_packed(f, source, run_with(threads), &result);
    }
    return packed_dict(f, take(std::move(p)), result.engine);
  });
  m.def("dequantize", [](const BlockFormat& f, const py::dict& packed, unsigned threads) {
    const PackedTensor p = packed_of(packed);
    Result<std::vector<double>> v = std::vector<double>{};
    {
      py::gil_scoped_release release;
      v = ops::dequantize(f, p, run_with(threads));
    }
    return values_array(p.shape, take(std::move(v)));
  });
  m.def("read_packed", [](const BlockFormat& f, const std::string& base) {
    ops::PackedFile file = take(ops::read_packed(f, base));
    return py::make_tuple(file.format, packed_dict(file.format, file.tensor, "file"));
  });
}

/// Analysis of arrays and of the tensors of weight files, and the analytic bounds.
void register_analyze(py::module_& m) {
  m.def("analyze", &mxlab::python::analyze);
  m.def("weight_list", &mxlab::python::weight_list);
  m.def("read_weight", &mxlab::python::read_weight);
  m.def("analyze_weights", &mxlab::python::analyze_weights);
  m.def("bounds_table", [](const BlockFormat& a, const BlockFormat& b, int max_gap) {
    Result<Table> t = Table{};
    {
      py::gil_scoped_release release;
      t = ops::bounds_table(a, b, max_gap);
    }
    return table_tuple(take(std::move(t)));
  });
}

/// What mxlab.torch needs: a quantizer held across calls, delayed scaling and the non-GEMM format.
/// The GEMM job (gemm::run, as `mxlab gemm`): A (M x K) and B (K x N) as float arrays, both formats, the models
/// (';'-separated), C's format (None: float32). Returns (the report table, {model name: C as float64 M x N}).
void register_gemm(py::module_& m) {
  m.def(
      "gemm",
      [](const py::array& a, const py::array& b, const BlockFormat& format_a, const BlockFormat& format_b,
         const std::string& accumulate, const std::optional<std::string>& output, unsigned threads) {
        const auto values = [](const py::array& x, const char* name) {
          if (x.ndim() != 2) throw py::value_error(std::string(name) + ": expected a 2-D array, got " + std::to_string(x.ndim()) + " dimensions");
          if (!(x.flags() & py::array::c_style)) throw py::type_error(std::string(name) + ": expected a C-contiguous array");
          std::vector<double> v(static_cast<std::size_t>(x.size()));
          if (same_dtype(x, "float64")) std::copy_n(static_cast<const double*>(x.data()), v.size(), v.begin());
          else if (same_dtype(x, "float32")) std::copy_n(static_cast<const float*>(x.data()), v.size(), v.begin());
          else throw py::type_error(std::string(name) + ": expected a float32 or float64 array, not " + py::str(x.dtype()).cast<std::string>());
          return v;
        };
        gemm::GemmRequest r;
        r.format_a = format_a;
        r.format_b = format_b;
        r.models = take(gemm::parse_models(accumulate));
        if (output) r.out = element_format(*output);
        r.m = a.ndim() == 2 ? a.shape(0) : 0;
        r.k = a.ndim() == 2 ? a.shape(1) : 0;
        r.n = b.ndim() == 2 ? b.shape(1) : 0;
        r.a = values(a, "a");
        r.b = values(b, "b");
        if (b.shape(0) != r.k)
          throw py::value_error("a is " + std::to_string(r.m) + " x " + std::to_string(r.k) + " but b has " +
                                std::to_string(b.shape(0)) + " rows (a @ b needs " + std::to_string(r.k) + ")");
        r.threads = threads;
        Result<gemm::GemmReport> rep = make_error("not run");
        {
          py::gil_scoped_release release;
          rep = gemm::run(r);
        }
        const gemm::GemmReport report = take(std::move(rep));
        py::dict c;
        for (const auto& mr : report.models) {
          py::array_t<double> v({r.m, r.n});
          std::copy(mr.c.values.begin(), mr.c.values.end(), v.mutable_data());
          c[py::str(mr.model.name)] = v;
        }
        return py::make_tuple(table_tuple(gemm::report_table(r, report)), c);
      },
      py::arg("a"), py::arg("b"), py::arg("format_a"), py::arg("format_b"), py::arg("accumulate"), py::arg("output"),
      py::arg("threads") = 0);
}

void register_torch_helpers(py::module_& m) {
  py::class_<Quantizer>(m, "Quantizer")
      .def(py::init<BlockFormat>())
      .def_property_readonly("format", &Quantizer::format)
      .def("run", &Quantizer::run, py::arg("x"), py::arg("out") = py::none(), py::arg("bf16") = false, py::arg("threads") = 0)
      .def("run_columns", &Quantizer::run_columns, py::arg("x"), py::arg("out") = py::none(), py::arg("threads") = 0)
      .def("run_rows_and_columns", &Quantizer::run_rows_and_columns, py::arg("x"), py::arg("columns"), py::arg("threads") = 0)
      .def("run_delayed", &Quantizer::run_delayed, py::arg("x"), py::arg("history"), py::arg("record"),
           py::arg("columns") = false, py::arg("threads") = 0);

  // Delayed scaling: one operand's amax history and scale (train::AmaxHistory); delayed_operand gives the format
  // and a new history of an operand the recipe gives a delayed scale (None for the others), as mxlab train does.
  py::class_<train::AmaxHistory>(m, "AmaxHistory")
      .def_property_readonly("scale", &train::AmaxHistory::scale)
      .def_property_readonly("scale_inv", &train::AmaxHistory::scale_inv)
      .def_property_readonly("fp8_max", &train::AmaxHistory::fp8_max)
      .def_property_readonly("history", [](const train::AmaxHistory& h) { return h.history(); })
      .def("update", &train::AmaxHistory::update)
      .def("restore", &train::AmaxHistory::restore, py::arg("history"), py::arg("scale"));
  // A product of fake-quantized float32 matrices under an accumulation model (gemm::values_product, as mxlab train
  // computes its GEMMs under a recipe's `accumulate`): a (or its transpose) times bt's transpose.
  m.def(
      "values_product",
      [](const std::string& model, const py::array& a, const std::optional<BlockFormat>& a_format, bool a_transposed,
         const py::array& bt, const std::optional<BlockFormat>& bt_format, bool bt_transposed, unsigned threads) {
        const gemm::Model mdl = take(gemm::parse_model(model));
        const auto matrix = [](const py::array& x, const char* name) {
          if (x.ndim() != 2 || !same_dtype(x, "float32") || !(x.flags() & py::array::c_style))
            throw py::type_error(std::string(name) + ": expected a C-contiguous 2-D float32 array");
          return std::pair<std::int64_t, std::int64_t>{x.shape(0), x.shape(1)};
        };
        const auto [ar, ac] = matrix(a, "a");
        const auto [br, bc] = matrix(bt, "bt");
        const gemm::ValuesMatrix va{static_cast<const float*>(a.data()), ar, ac, a_format ? &*a_format : nullptr,
                                    a_transposed};
        const gemm::ValuesMatrix vb{static_cast<const float*>(bt.data()), br, bc, bt_format ? &*bt_format : nullptr,
                                    bt_transposed};
        Result<std::vector<float>> r = std::vector<float>{};
        {
          py::gil_scoped_release release;
          r = gemm::values_product(mdl, va, vb, threads);
        }
        std::vector<float> c = take(std::move(r));
        py::array_t<float> out({a_transposed ? ac : ar, bt_transposed ? bc : br});
        std::copy(c.begin(), c.end(), out.mutable_data());
        return out;
      },
      py::arg("model"), py::arg("a"), py::arg("a_format"), py::arg("a_transposed"), py::arg("bt"), py::arg("bt_format"),
      py::arg("bt_transposed"), py::arg("threads") = 0);
  m.def("delayed_operand", [](const train::Recipe& r, const BlockFormat& f) -> py::object {
    auto g = train::delayed_format(r, f);
    if (!g) return py::none();
    return py::make_tuple(*g, train::AmaxHistory(r.delayed, g->element.max_finite()));
  });
  // The format the outputs of non-GEMM layers are rounded to (None: FP32).
  m.def("nongemm_format", [](const train::Recipe& r) { return take(train::role_format(r.nongemm)); });
}

/// Training recipes: presets, recipe files and the format of each layer.
void register_recipes(py::module_& m) {
  py::class_<train::Recipe>(m, "Recipe")
      .def_readonly("name", &train::Recipe::name)
      .def_property_readonly("formats", [](const train::Recipe& r) {
        py::dict d;
        for (int i = 0; i < train::kRoleCount; ++i) {
          const auto role = static_cast<train::Role>(i);
          d[py::str(std::string(train::role_name(role)))] = r.formats.at(role).text();
        }
        return d;
      })
      .def_property_readonly("loss_scaling", [](const train::Recipe& r) {
        const char* modes[] = {"none", "static", "dynamic"};
        py::dict d;
        d["mode"] = modes[static_cast<int>(r.loss_scaling.mode)];
        d["initial"] = r.loss_scaling.initial;
        d["growth_interval"] = r.loss_scaling.growth_interval;
        d["growth"] = r.loss_scaling.growth;
        d["backoff"] = r.loss_scaling.backoff;
        d["min_scale"] = r.loss_scaling.min_scale;
        return d;
      })
      .def_property_readonly("delayed_scaling", [](const train::Recipe& r) { return r.delayed.enabled; })
      .def_property_readonly("amax_history_len", [](const train::Recipe& r) { return r.delayed.history_len; })
      .def_property_readonly("amax_compute_algo", [](const train::Recipe& r) {
        return r.delayed.algo == train::DelayedScaling::Algo::Max ? "max" : "most_recent";
      })
      .def_property_readonly("margin", [](const train::Recipe& r) { return r.delayed.margin; })
      .def_readonly("nongemm", &train::Recipe::nongemm)
      .def_property_readonly("accumulate", [](const train::Recipe& r) -> py::object {
        if (r.accumulate.empty()) return py::none();
        return py::str(r.accumulate);
      })
      .def_property_readonly("text", [](const train::Recipe& r) { return train::recipe_text(r); })
      .def("__repr__", [](const train::Recipe& r) { return "<mxlab recipe " + r.name + ">"; });
  // The recipe, and the warning its file's old "key = value" lines call for (None for TOML, a preset or a format).
  m.def("load_recipe", [](const std::string& name) {
    auto syntax = train::RecipeSyntax::Toml;
    auto r = take(train::load_recipe(name, &syntax));
    std::optional<std::string> warning;
    if (syntax == train::RecipeSyntax::KeyValue) warning = train::recipe_syntax_warning(name);
    return std::make_pair(std::move(r), warning);
  });
  m.def("recipe_presets", &train::recipe_presets);
  m.def("layer_formats", &mxlab::python::layer_formats);
}

}  // namespace
}  // namespace mxlab::python

PYBIND11_MODULE(_mxlab, m) {
  m.doc() = "mxlab's engine entry points (ops) for NumPy arrays; use the mxlab package.";
  mxlab::python::register_formats(m);
  mxlab::python::register_quantize(m);
  mxlab::python::register_analyze(m);
  mxlab::python::register_torch_helpers(m);
  mxlab::python::register_gemm(m);
  mxlab::python::register_recipes(m);
}
