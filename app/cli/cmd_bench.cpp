// `mxlab bench`: throughput of the SIMD kernels (elementwise casts, block quantization, dequantization,
// block amax, fused and exact error metrics) against a memory copy measured in the same run and against the
// scalar reference on one thread. It only reports; it never checks results (the tests do).
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <unistd.h>

#include "cli/cli.hpp"
#include "mxlab/core/threads.hpp"
#include "mxlab/core/atomic_file.hpp"
#include "mxlab/io/npy.hpp"
#include "mxlab/core/random.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/gemm/gemm.hpp"
#include "mxlab/kernels/block_kernel.hpp"
#include "mxlab/kernels/cast_kernel.hpp"
#include "mxlab/kernels/fma_peak.hpp"
#include "mxlab/kernels/simd_target.hpp"
#include "mxlab/quantize/analysis.hpp"
#include "mxlab/quantize/pack.hpp"
#include "mxlab/quantize/quantize.hpp"
#include "mxlab/train/trainer.hpp"

namespace mxlab::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(std::min(line.size(), colon + 2));
    }
  }
  return "unknown";
}

/// The first core's clock in MHz as /proc/cpuinfo reports it (0 when it does not).
double cpu_mhz() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("cpu MHz", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return std::atof(line.c_str() + colon + 1);
    }
  return 0;
}

std::string fixed(double v, int digits) { return fixed_digits(v, digits); }

/// Best wall time of fn over repetitions lasting at least `budget` seconds (at least `min_reps` runs).
double best_seconds(const std::function<void()>& fn, double budget, int min_reps) {
  double best = 1e300;
  double total = 0;
  for (int rep = 0; rep < min_reps || total < budget; ++rep) {
    const auto t0 = Clock::now();
    fn();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
    if (rep > 1000) break;
  }
  return best;
}

/// Times of one row over repeats: their median, and their range as a share of it. A row whose repeats span more
/// than kUnstable of their median is unstable (the machine was busy, or memory or clock changed under it), and
/// ratios computed from it are marked.
constexpr double kUnstable = 0.2;
struct Repeats {
  double median = 0, spread = 0;  ///< spread: (max - min) / median
  bool stable() const { return spread <= kUnstable; }
};
Repeats summarize(std::vector<double> seconds) {
  Repeats r;
  if (seconds.empty()) return r;
  std::sort(seconds.begin(), seconds.end());
  const std::size_t n = seconds.size();
  r.median = n % 2 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
  r.spread = r.median > 0 ? (seconds.back() - seconds.front()) / r.median : 0;
  return r;
}

/// The note and the last three cells (repeats, spread_pct, stable) of a row measured `repeats` times.
std::string unstable_note(const Repeats& rep) {
  return rep.stable() ? "" : "unstable: repeats span " + fixed(rep.spread * 100, 0) + "% of their median";
}
std::vector<std::string> repeat_cells(int repeats, const Repeats& rep) {
  return {std::to_string(repeats), fixed(rep.spread * 100, 1), rep.stable() ? "yes" : "no"};
}
/// `note` and `more` joined by "; " (either may be empty).
std::string joined(std::string note, const std::string& more) {
  if (!more.empty()) note += (note.empty() ? "" : "; ") + more;
  return note;
}

/// A benchmark row: a kernel on n elements with the bytes it reads and writes, and optionally the scalar
/// reference of the same work.
struct Case {
  std::string kernel;
  std::string format;
  double bytes_per_element = 0;
  std::function<void(std::size_t n, unsigned threads)> simd;
  std::function<void(std::size_t n)> scalar;  ///< empty: no scalar reference
  std::string unsupported;                    ///< non-empty: reported, not run
  std::function<void(std::size_t n)> setup = {};  ///< untimed preparation at each size (files to read)
  /// The row whose time this row is compared with ("copy" for kernels; the file copy for end-to-end rows).
  std::string baseline = "copy";
};

/// A fresh private folder for the end-to-end rows' files (under TMPDIR, else /tmp).
std::string bench_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp != nullptr && *tmp != 0 ? tmp : "/tmp") + "/mxlab-bench-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) return ".";
  return templ;
}

/// The buffers every row reads and writes, sized for the largest input.
struct Bench {
  explicit Bench(std::size_t n_max);
  std::vector<float> x;             ///< normal values (Box-Muller) in a 1 Mi-element pattern, scaled per repetition
  std::vector<std::uint16_t> xb16;  ///< the same values as bfloat16 (the top half of each float32)
  std::vector<float> fout;
  std::vector<std::uint8_t> out8;
  std::vector<std::uint16_t> out16;
  std::vector<std::uint8_t> scales;
  std::vector<float> amax_out;
  std::vector<std::uint8_t> subtile_out;
  TensorScale tensor_scale;  ///< of the last packed quantization, for the dequantization that follows it
};

Bench::Bench(std::size_t n_max)
    : x(n_max), xb16(n_max), fout(n_max, 0.0F), out8(n_max, 0), out16(n_max, 0), scales(n_max / 16 + 1, 0),
      amax_out(n_max / 16 + 1, 0.0F), subtile_out(n_max / 2 + 1, 0) {
  Rng rng(20240601);
  const std::size_t pattern = std::min<std::size_t>(n_max, std::size_t{1} << 20);
  for (std::size_t i = 0; i < pattern; ++i) {
    const double u1 = 1.0 - rng.uniform();
    const double u2 = rng.uniform();
    x[i] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  for (std::size_t i = pattern; i < n_max; ++i) x[i] = std::ldexp(x[i % pattern], static_cast<int>((i / pattern) % 7) - 3);
  for (std::size_t i = 0; i < n_max; ++i) xb16[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(x[i]) >> 16);
}

/// Memory copy: the bandwidth every kernel row is compared with, split over the same threads.
std::vector<Case> copy_rows(Bench& b) {
  return {{"copy", "float32", 8.0,
           [&b](std::size_t n, unsigned t) {
             std::vector<std::thread> w;
             auto part = [&](unsigned k) {
               const std::size_t first = n * k / t, end = n * (k + 1) / t;
               std::memcpy(b.fout.data() + first, b.x.data() + first, (end - first) * sizeof(float));
             };
             for (unsigned k = 1; k < t; ++k) w.emplace_back(part, k);
             part(0);
             for (auto& th : w) th.join();
           },
           {}, ""}};
}

/// Elementwise casts of float32 to common element formats, against the scalar reference.
std::vector<Case> cast_rows(Bench& b) {
  std::vector<Case> cases;
  for (const char* name : {"float8_e4m3fn", "float8_e5m2", "float16", "bfloat16", "float4_e2m1fn"}) {
    CastOptions co;
    co.overflow = Overflow::Saturate;
    auto k = CastKernel::make(*parse_format(name), co);
    if (!k) {
      cases.push_back({"cast", name, 0, {}, {}, k.error().message});
      continue;
    }
    const bool wide = parse_format(name)->bits() > 8;
    auto kernel = std::make_shared<CastKernel>(*k);
    auto run_cast = [&b, kernel, wide](std::size_t n, unsigned t, bool reference) {
      const std::span<const float> in(b.x.data(), n);
      const KernelRun run{t};
      if (wide) {
        const std::span<std::uint16_t> out(b.out16.data(), n);
        (void)(reference ? kernel->reference_f32(in, out, run) : kernel->cast_f32(in, out, run));
      } else {
        const std::span<std::uint8_t> out(b.out8.data(), n);
        (void)(reference ? kernel->reference_f32(in, out, run) : kernel->cast_f32(in, out, run));
      }
    };
    cases.push_back({"cast", name, wide ? 6.0 : 5.0, [run_cast](std::size_t n, unsigned t) { run_cast(n, t, false); },
                     [run_cast](std::size_t n) { run_cast(n, 1, true); }, ""});
  }
  return cases;
}

/// What the rows of one block format share: the format, its kernel, sizes and its scalar reference.
struct BlockRowContext {
  Bench& b;
  BlockFormat f;
  std::string name;
  std::shared_ptr<BlockKernel> kernel;  ///< null: unsupported
  std::string why;                      ///< why the kernel refuses the format
  double packed_bytes = 0;              ///< bytes per element of codes, scales and subtile offsets
  static std::vector<std::int64_t> shape(std::size_t n) { return {static_cast<std::int64_t>(n)}; }
  std::span<const float> in(std::size_t n) const { return {b.x.data(), n}; }
  Result<QuantizedTensor> reference(std::size_t n) const {
    const std::vector<double> xd(b.x.begin(), b.x.begin() + static_cast<std::ptrdiff_t>(n));
    return quantize(f, xd, shape(n));
  }
  /// Fake quantization of the first n / width rows of width values, along the rows or down the columns.
  void fake_rows(std::size_t n, std::int64_t width, unsigned t, bool columns) const {
    const std::int64_t rows = static_cast<std::int64_t>(n) / width;
    const auto m = static_cast<std::size_t>(rows * width);
    const std::span<float> out(b.fout.data(), m);
    if (columns) {
      (void)kernel->fake_quantize_columns(in(m), rows, width, out, BlockRun{t});
    } else {
      (void)kernel->fake_quantize(in(m), {rows, width}, out, BlockRun{t});
    }
  }
  void reference_analyze(std::size_t n, bool packed) const {
    auto q = reference(n);
    if (!q) return;
    if (packed) (void)pack(f, *q);
    const std::vector<double> xd(b.x.begin(), b.x.begin() + static_cast<std::ptrdiff_t>(n));
    (void)analyze(f, xd, *q);
  }
};

/// A kind of block-kernel row: its name, bytes moved per element, the timed body and the scalar reference of
/// the same work (none: no speed-up column). `all_formats`: run for every block format; otherwise only for
/// the standard ones (peer profiles, subtiles, codebooks and float32 scales get the quantize rows).
struct BlockRowKind {
  const char* kernel;
  bool all_formats;
  double (*bytes)(const BlockRowContext&);
  std::function<void(const BlockRowContext&, std::size_t n, unsigned t)> body;
  std::function<void(const BlockRowContext&, std::size_t n)> scalar;
};

const std::vector<BlockRowKind>& block_row_kinds() {
  static const std::vector<BlockRowKind> kinds = {
      {"block fake-quant", true, [](const BlockRowContext&) { return 8.0; },
       [](const BlockRowContext& c, std::size_t n, unsigned t) {
         (void)c.kernel->fake_quantize(c.in(n), c.shape(n), std::span<float>(c.b.fout.data(), n), BlockRun{t});
       },
       [](const BlockRowContext& c, std::size_t n) { (void)c.reference(n); }},
      // The training's operand shapes: rows of 9 (a first 3x3 convolution's taps: a block each), rows of 144
      // (16 channels' taps: four blocks of 32 and one of 16), and blocks down 9 columns (the same operand for dW);
      // the first n / width * width elements.
      {"block fake-quant rows of 9", false, [](const BlockRowContext&) { return 8.0; },
       [](const BlockRowContext& c, std::size_t n, unsigned t) { c.fake_rows(n, 9, t, false); }, {}},
      {"block fake-quant rows of 144", false, [](const BlockRowContext&) { return 8.0; },
       [](const BlockRowContext& c, std::size_t n, unsigned t) { c.fake_rows(n, 144, t, false); }, {}},
      {"block fake-quant down 9 columns", false, [](const BlockRowContext&) { return 8.0; },
       [](const BlockRowContext& c, std::size_t n, unsigned t) { c.fake_rows(n, 9, t, true); }, {}},
      {"block packed", true, [](const BlockRowContext& c) { return 4.0 + c.packed_bytes; },
       [](const BlockRowContext& c, std::size_t n, unsigned t) {
         (void)c.kernel->quantize_packed(c.in(n), c.shape(n), c.b.out8, c.b.scales, BlockRun{t}, nullptr,
                                         &c.b.tensor_scale, c.b.subtile_out);
       },
       [](const BlockRowContext& c, std::size_t n) {
         auto q = c.reference(n);
         if (q) (void)pack(c.f, *q);
       }},
      // Reads the codes the packed row just wrote (rows run in order at each size).
      {"dequantize", false, [](const BlockRowContext& c) { return 4.0 + c.packed_bytes; },
       [](const BlockRowContext& c, std::size_t n, unsigned t) {
         (void)c.kernel->dequantize(c.b.out8, c.b.scales, c.shape(n), std::span<float>(c.b.fout.data(), n),
                                    BlockRun{t}, c.b.tensor_scale.value);
       },
       {}},
      {"block packed bf16-in", false, [](const BlockRowContext& c) { return 2.0 + c.packed_bytes; },
       [](const BlockRowContext& c, std::size_t n, unsigned t) {
         (void)c.kernel->quantize_packed(BlockInput::bf16(std::span<const std::uint16_t>(c.b.xb16.data(), n)),
                                         c.shape(n), c.b.out8, c.b.scales, BlockRun{t});
       },
       {}},
      {"block amax", false,
       [](const BlockRowContext& c) { return 4.0 + 4.0 / static_cast<double>(c.f.block_elements()); },
       [](const BlockRowContext& c, std::size_t n, unsigned t) {
         (void)c.kernel->block_amax(c.in(n), c.shape(n), c.b.amax_out, BlockRun{t});
       },
       {}},
      {"packed + fused metrics", false, [](const BlockRowContext& c) { return 4.0 + c.packed_bytes; },
       [](const BlockRowContext& c, std::size_t n, unsigned t) {
         BlockMetrics m;
         (void)c.kernel->quantize_packed(c.in(n), c.shape(n), c.b.out8, c.b.scales, BlockRun{t}, &m);
       },
       [](const BlockRowContext& c, std::size_t n) { c.reference_analyze(n, true); }},
      {"exact mse", false, [](const BlockRowContext&) { return 4.0; },
       [](const BlockRowContext& c, std::size_t n, unsigned t) {
         (void)c.kernel->metrics(c.in(n), c.shape(n), BlockRun{t});
       },
       [](const BlockRowContext& c, std::size_t n) { c.reference_analyze(n, false); }},
  };
  return kinds;
}

/// The block formats benchmarked: the standard ones get every row kind; peer profiles (the general
/// power-of-two path, the NVFP4 float32 arithmetic), a subtile format (MX9-like), a codebook (NF4) and float32
/// block scales get the quantize rows.
constexpr std::pair<const char*, const char*> kBlockFormats[] = {
    {"mxfp8_e4m3", ""},        {"mxfp4", ""},          {"nvfp4", ""},          {"mxint8", ""},  {"mxsf", ""},
    {"mxfp8_e4m3", "microxcaling"}, {"mxfp4", "torchao-floor"}, {"mxint8:e8m0_t16s2", ""},
    {"nvfp4", "modelopt"},     {"nvfp4", "transformer-engine-nvfp4-4over6-mse"},
    {"nf4:e4m3_t64", ""},      {"e4m3:float32_t128", ""}};

/// Every row kind for every block format of kBlockFormats.
Result<std::vector<Case>> block_rows(Bench& b) {
  std::vector<Case> cases;
  for (const auto& [spec, profile] : kBlockFormats) {
    auto bf = parse_block_format(spec);
    if (bf && *profile != 0) bf = apply_profile(*bf, profile);
    if (!bf) return bf.error();
    auto c = std::make_shared<BlockRowContext>(BlockRowContext{b, *bf, *profile != 0 ? std::string(spec) + "/" + profile : spec, nullptr, "", 0});
    const BlockFormat& f = c->f;
    auto k = BlockKernel::make(f);
    if (k) c->kernel = std::make_shared<BlockKernel>(*k);
    if (!k) c->why = k.error().message;
    const std::int64_t subtile = f.layout.geometry().tile(0).subtile;
    c->packed_bytes = f.element.bits() / 8.0 + 1.0 / static_cast<double>(f.block_elements()) +
                      (subtile > 0 ? 1.0 / static_cast<double>(subtile) : 0.0);
    const bool standard = *profile == 0 && subtile == 0 && f.element.kind() != FormatKind::Codebook &&
                          f.layout.scale->bits() <= 8;
    for (const BlockRowKind& kind : block_row_kinds()) {
      if (!kind.all_formats && (!standard || !c->kernel)) continue;
      Case row{kind.kernel, c->name, kind.bytes(*c),
               [c, body = kind.body](std::size_t n, unsigned t) { body(*c, n, t); }, {}, c->why};
      if (kind.scalar) row.scalar = [c, scalar = kind.scalar](std::size_t n) { scalar(*c, n); };
      cases.push_back(std::move(row));
    }
  }
  return cases;
}

/// End to end: what a user runs, from a .npy file to a file (quantize) or to a table (analyze), compared with
/// reading the same file and writing its bytes to another (in dir, removed by the caller).
std::vector<Case> end_to_end_rows(Bench& b, const std::string& dir) {
  struct Files {
    std::string in, out;
    std::size_t written = 0;
    std::ostringstream sink_out, sink_err;
    std::istringstream no_in;
  };
  auto files = std::make_shared<Files>();
  files->in = dir + "/bench-input.npy";
  files->out = dir + "/bench-output.npy";
  auto write_input = [files, &b](std::size_t n) {
    if (files->written == n) return;
    std::string bytes = npy_header("<f4", std::vector<std::int64_t>{static_cast<std::int64_t>(n)});
    bytes.append(reinterpret_cast<const char*>(b.x.data()), n * sizeof(float));
    if (!write_file_atomic(files->in, bytes, "npy")) return;
    files->written = n;
  };
  auto run_cli = [files](std::vector<std::string> words, unsigned t) {
    words.insert(words.begin(), "mxlab");
    words.push_back("--threads");
    words.push_back(std::to_string(t));
    files->sink_out.str("");
    (void)run(words, Io{files->no_in, files->sink_out, files->sink_err});
  };
  std::vector<Case> cases;
  cases.push_back({"e2e file copy", "float32 npy", 8.0,
                   [files](std::size_t, unsigned) {
                     // Read in 1 MiB pieces and write them to a new file, as quantize reads and writes.
                     std::FILE* in = std::fopen(files->in.c_str(), "rb");
                     auto out = AtomicFile::create(files->out, "npy");
                     if (in == nullptr || !out) {
                       if (in != nullptr) std::fclose(in);
                       return;
                     }
                     std::vector<char> piece(std::size_t{1} << 20);
                     for (std::size_t got; (got = std::fread(piece.data(), 1, piece.size(), in)) > 0;)
                       out->write(piece.data(), got);
                     std::fclose(in);
                     (void)out->commit();
                   },
                   {}, "", write_input, "e2e file copy"});
  for (const char* spec : {"mxfp8_e4m3", "mxfp4", "nvfp4", "mxint8", "mxsf"}) {
    cases.push_back({"e2e analyze", spec, 8.0,
                     [run_cli, files, spec](std::size_t, unsigned t) { run_cli({"analyze", spec, files->in, "--csv"}, t); },
                     {}, "", write_input, "e2e file copy"});
    cases.push_back({"e2e quantize", spec, 8.0,
                     [run_cli, files, spec](std::size_t, unsigned t) {
                       run_cli({"quantize", spec, files->in, "--out", files->out}, t);
                     },
                     {}, "", write_input, "e2e file copy"});
  }
  return cases;
}

/// The table's columns.
Table bench_table() {
  Table t;
  for (const char* c : {"name", "kernel", "format", "input_bytes", "elements", "threads", "seconds", "elements_per_s",
                        "melem_per_s", "gb_per_s", "ratio_to_copy", "simd_1t_melem_per_s", "scalar_1t_melem_per_s",
                        "speedup_vs_scalar", "note", "repeats", "spread_pct", "stable"}) {
    const std::string col = c;
    t.add_column(col, col != "name" && col != "kernel" && col != "format" && col != "note" && col != "stable");
  }
  return t;
}

/// Every row at every size, `repeats` times: each repeat the best time over its share of the budget, the row's
/// time their median; its ratio to the row's baseline measured at the same size (marked in the note when either
/// row is unstable), and at the smallest size the one-thread SIMD and scalar-reference rates.
void measure(const std::vector<Case>& cases, const std::vector<std::size_t>& sizes, unsigned threads, bool quick,
             int repeats, Table& t) {
  const double budget = quick ? 0.05 : 0.3;
  for (std::size_t size : sizes) {
    const std::size_t n = size / 4;
    const int min_reps = size >= (std::size_t{64} << 20) ? 2 : 3;
    std::map<std::string, std::pair<double, Repeats>> baselines;  // GB/s and repeats of each baseline row
    for (const Case& c : cases) {
      const std::string name = c.kernel + " " + c.format;
      if (!c.unsupported.empty()) {
        if (size == sizes.front())
          t.rows.push_back({name, c.kernel, c.format, std::to_string(size), std::to_string(n), std::to_string(threads), "",
                            "", "", "", "", "", "", "", "unsupported: " + c.unsupported});
        continue;
      }
      if (c.setup) c.setup(n);
      std::vector<double> times;
      for (int r = 0; r < repeats; ++r) times.push_back(best_seconds([&] { c.simd(n, threads); }, budget / repeats, min_reps));
      const Repeats rep = summarize(times);
      const double s = rep.median;
      const double eps = static_cast<double>(n) / s;
      const double gbs = eps * c.bytes_per_element / 1e9;
      if (c.kernel == c.baseline) baselines[c.kernel] = {gbs, rep};
      const auto base = baselines.find(c.baseline);
      const double copy_gbs = base != baselines.end() ? base->second.first : 0.0;
      std::string note = unstable_note(rep);
      if (copy_gbs > 0 && c.kernel != c.baseline && !(rep.stable() && base->second.second.stable()))
        note = joined(note, "ratio_to_copy from an unstable row" +
                                (base->second.second.stable() ? "" : " (" + c.baseline + " spans " + fixed(base->second.second.spread * 100, 0) + "%)"));
      std::string simd1, scalar1, speedup;
      if (size == sizes.front() && c.scalar) {
        const double s1 = best_seconds([&] { c.simd(n, 1); }, budget, 3);
        const double r1 = best_seconds([&] { c.scalar(n); }, budget, 1);
        simd1 = fixed(static_cast<double>(n) / s1 / 1e6, 1);
        scalar1 = fixed(static_cast<double>(n) / r1 / 1e6, 2);
        speedup = fixed(r1 / s1, 1);
      }
      t.rows.push_back({name, c.kernel, c.format, std::to_string(size), std::to_string(n), std::to_string(threads),
                        fixed(s, 6), fixed(eps, 0), fixed(eps / 1e6, 1), fixed(gbs, 2),
                        copy_gbs > 0 ? fixed(gbs / copy_gbs, 3) : "", simd1, scalar1, speedup, note});
      for (auto& cell : repeat_cells(repeats, rep)) t.rows.back().push_back(cell);
    }
  }
}

/// The nominal FP32 peak of one core in GFLOP/s: the clock /proc/cpuinfo reports times the lanes of the widest
/// vectors the SIMD kernels run on, two FMA units and two operations per FMA (0 when the clock is unknown). A CPU
/// that executes a 512-bit FMA as two 256-bit halves (AMD Zen 4) reaches half of it at that clock.
double nominal_core_peak() {
  const std::string target = active_simd_target();
  const double lanes = target.rfind("AVX3", 0) == 0 ? 16 : target == "AVX2" ? 8 : 4;
  return cpu_mhz() * 1e6 * lanes * 4 / 1e9;
}

/// The float32 multiply-add rate `threads` cores reach at once (mxlab::measured_fma_peak), measured once per
/// thread count in a process.
double fma_peak(unsigned threads) {
  static std::map<unsigned, double> peaks;
  const auto it = peaks.find(threads);
  return it != peaks.end() ? it->second : peaks[threads] = measured_fma_peak(threads, 0.2);
}

/// The GEMM throughput and its share of the nominal peak of `threads` cores and of their measured FMA rate, as a note.
std::string gemm_note(double gflops, unsigned threads) {
  const double peak = nominal_core_peak() * threads, measured = fma_peak(threads);
  const std::string cores = std::to_string(threads) + (threads == 1 ? " core " : " cores ");
  std::string note = "gemm_gflops=" + fixed(gflops, 1);
  if (peak > 0) note += "; of_peak=" + fixed(gflops / peak, 3) + " (nominal peak of " + cores + fixed(peak, 0) + ")";
  note += "; of_fma_peak=" + fixed(gflops / measured, 3) + " (measured FMA rate of " + cores + fixed(measured, 0) + ")";
  return note;
}

/// A training row's recipe: a preset, or a preset and one recipe setting ("mxfp8 accumulate=tensorcore-trunc14").
Result<train::Recipe> bench_recipe(const std::string& label) {
  const auto space = label.find(' ');
  auto r = train::recipe_preset(label.substr(0, space));
  if (!r || space == std::string::npos) return r;
  const auto eq = label.find('=', space);
  if (auto e = train::apply_recipe_setting(*r, label.substr(space + 1, eq - space - 1), label.substr(eq + 1))) return *e;
  return r;
}

/// Training steps (mxlab train) on 1 thread and on `threads`: the step time of each quantized recipe over the FP32
/// step time measured in the same run and on as many threads, and the FP32 step's own GEMMs (OpenBLAS SGEMM) in
/// GFLOP/s beside the nominal peak of the cores; the FP32 GEMM at 128^3 and 512^3. Each row is measured `repeats`
/// times (the recipes and thread counts alternating, so a change of machine load hits them alike): the median and
/// spread. Without --quick the CNN adds the format comparison's recipes and NVFP4, and the ResNet, MobileNetV2 and
/// vision transformer their FP32 and MXFP8 steps.
std::optional<Error> training_rows(bool quick, int repeats, unsigned threads, Table& t) {
  std::vector<unsigned> thread_counts = {1};
  if (threads > 1) thread_counts.push_back(threads);
  struct Model {
    const char* kind;
    std::int64_t batch, steps;
    std::vector<std::string> recipes;
  };
  // The last recipe of the MLP and CNN: MXFP8 with every GEMM of the step under an accumulation model (the recipe
  // key accumulate, docs/training.md), computed by gemm's SIMD kernel instead of the float32 GEMM.
  const std::vector<std::string> recipes = {"fp32", "mxfp8", "fp8_current", "fp8_delayed",
                                            "mxfp8 accumulate=tensorcore-trunc14"};
  // The CNN also steps under the format comparison's recipes (docs/training.md) and NVFP4, without --quick.
  std::vector<std::string> cnn_recipes = recipes;
  if (!quick)
    for (const char* r : {"mxint8", "boost_e2m5", "mxsf", "mxfp8_e4m3 all=mxfp8_e4m3@8x8", "nvfp4"}) cnn_recipes.emplace_back(r);
  std::vector<Model> models = {{"mlp", 128, quick ? 10 : 30, recipes}, {"cnn", 64, quick ? 10 : 30, cnn_recipes}};
  if (!quick)
    for (const char* kind : {"resnet", "mobilenet", "vit"}) models.push_back({kind, 64, 3, {"fp32", "mxfp8"}});
  for (const Model& model : models) {
    train::ModelConfig mc;
    mc.kind = model.kind;
    const std::size_t runs = model.recipes.size() * thread_counts.size();
    std::vector<std::vector<double>> times(runs);
    std::vector<train::StepTime> fp32(thread_counts.size());
    for (int rep = 0; rep < repeats; ++rep)
      for (std::size_t i = 0; i < runs; ++i) {
        const std::size_t r = i % model.recipes.size(), th = i / model.recipes.size();
        auto recipe = bench_recipe(model.recipes[r]);
        if (!recipe) return recipe.error();
        auto s = train::step_time(mc, *recipe, model.batch, model.steps, 1, thread_counts[th]);
        if (!s) return s.error();
        times[i].push_back(s->seconds);
        if (r == 0 && (rep == 0 || s->seconds < fp32[th].seconds)) fp32[th] = *s;
      }
    const std::string name = "train step " + std::string(model.kind) + " batch " + std::to_string(model.batch);
    for (std::size_t i = 0; i < runs; ++i) {
      const std::size_t r = i % model.recipes.size(), th = i / model.recipes.size();
      const Repeats rep = summarize(times[i]), base = summarize(times[th * model.recipes.size()]);
      std::string note = unstable_note(rep);
      if (r > 0) {
        note = joined(note, "ratio_to_fp32_step=" + fixed(rep.median / base.median, 3));
        if (!base.stable()) note = joined(note, "ratio from an unstable fp32 row");
      } else {
        const train::StepTime& f = fp32[th];
        if (f.gemm_seconds > 0)
          note = joined(note, "gemm_share=" + fixed(f.gemm_seconds / f.seconds, 3) + "; " +
                                  gemm_note(f.gemm_flops / f.gemm_seconds / 1e9, thread_counts[th]));
        if (th > 0) note = joined(note, "ratio_to_1_thread=" + fixed(rep.median / summarize(times[r]).median, 3));
      }
      t.rows.push_back({name, "train step", model.recipes[r], "", std::to_string(model.batch),
                        std::to_string(thread_counts[th]), fixed(rep.median, 6), "", "", "", "", "", "", "", note});
      for (auto& cell : repeat_cells(repeats, rep)) t.rows.back().push_back(cell);
    }
  }
  for (std::int64_t n : {128, 512})
    for (const unsigned th : thread_counts) {
      const double gflops = train::fp32_gemm_gflops(n, n, n, quick ? 3 : 10, th);
      t.rows.push_back({"fp32 gemm " + std::to_string(n) + "^3", "gemm", "float32", "", std::to_string(n * n * n),
                        std::to_string(th), "", "", "", "", "", "", "", "",
                        gemm_note(gflops, th) + "; openblas_kernel=" + train::blas_kernel()});
    }
  return std::nullopt;
}

/// GEMMs of MXFP8 E4M3 operands (mxlab gemm): the exact product and every accumulation model on the SIMD kernel
/// (256 x 4096 x 256; 64 x 4096 x 64 with --quick), one thread, in multiply-accumulates per second beside the
/// trainer's FP32 GEMM (OpenBLAS's SGEMM, one thread) of the same shape in the same run; and the scalar definition of
/// each at 16 x 4096 x 16. Each row is measured `repeats` times: the median and spread (OpenBLAS's row too, beside
/// which the ratios stand).
std::optional<Error> gemm_rows(bool quick, int repeats, Table& t) {
  auto f = parse_block_format("mxfp8_e4m3");
  if (!f) return f.error();
  const Format out = *parse_format("float32");
  const double budget = quick ? 0.2 : 1.0;
  for (const bool scalar : {false, true}) {
    const std::int64_t m = scalar ? 16 : quick ? 64 : 256, k = 4096, n = m;
    std::vector<double> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(n * k));
    Rng rng(20240601);
    for (auto* v : {&a, &b})
      for (double& x : *v) x = static_cast<double>(rng.next_u32()) / 4294967296.0 - 0.5;
    auto qa = gemm::quantize_operand(*f, a, m, k);
    auto qb = gemm::quantize_operand(*f, b, n, k);
    if (!qa) return qa.error();
    if (!qb) return qb.error();
    const double macs = static_cast<double>(m * n * k);
    std::vector<double> blas_times;
    for (int r = 0; r < repeats; ++r)
      blas_times.push_back(macs / (train::fp32_gemm_gflops(m, n, k, quick ? 3 : 10) * 1e9 / 2));
    const Repeats blas_rep = summarize(blas_times);
    const double blas = macs / blas_rep.median;
    const std::string shape = std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
    const std::string path = scalar ? " scalar" : "";
    auto row = [&](const std::string& what, const std::function<void()>& work) {
      std::vector<double> times;
      for (int r = 0; r < repeats; ++r) times.push_back(best_seconds(work, budget / repeats, 1));
      const Repeats rep = summarize(times);
      const double seconds = rep.median;
      std::string note = joined(unstable_note(rep), "mac_per_s=" + fixed(macs / seconds, 0) +
                                                        "; ratio_to_openblas_fp32=" + fixed(macs / seconds / blas, 4));
      if (!blas_rep.stable()) note = joined(note, "ratio from an unstable openblas row");
      t.rows.push_back({"gemm " + what + path + " " + shape, "gemm", "mxfp8_e4m3", "", fixed(macs, 0), "1",
                        fixed(seconds, 6), fixed(macs / seconds, 0), fixed(macs / seconds / 1e6, 3), "", "", "", "", "",
                        note});
      for (auto& cell : repeat_cells(repeats, rep)) t.rows.back().push_back(cell);
    };
    if (!scalar) row("exact reference", [&] { (void)gemm::exact_gemm(*qa, *qb, out, 1); });
    for (const auto& p : gemm::model_presets()) {
      auto model = gemm::parse_model(p.name);
      if (!model) return model.error();
      row(p.name, [&] { (void)gemm::model_gemm(*model, *qa, *qb, out, 1, nullptr, scalar); });
    }
    t.rows.push_back({"openblas fp32 gemm " + shape, "gemm", "float32", "", fixed(macs, 0), "1",
                      fixed(blas_rep.median, 6), fixed(blas, 0), fixed(blas / 1e6, 3), "", "", "", "", "",
                      joined(unstable_note(blas_rep), "mac_per_s=" + fixed(blas, 0))});
    for (auto& cell : repeat_cells(repeats, blas_rep)) t.rows.back().push_back(cell);
  }
  return std::nullopt;
}

/// The columns a terminal shows first (--columns chooses others; files have every column).
const std::vector<std::string> kBenchColumns = {"name", "input_bytes", "melem_per_s", "gb_per_s", "ratio_to_copy",
                                                "speedup_vs_scalar", "spread_pct", "note"};

}  // namespace

namespace {

std::vector<OptionSpec> bench_option_specs() {
  auto specs = table_output_options();
  specs.push_back({"quick", false, "", "two sizes (256 KiB and 256 MiB of float32 input) and short timings"});
  specs.push_back({"train-only", false, "", "only the training rows (step times of the recipes, FP32 GEMM)"});
  specs.push_back({"gemm-only", false, "", "only the GEMM rows (mxlab gemm's models beside the trainer's FP32 GEMM)"});
  specs.push_back({"kernels-only", false, "", "only the kernel rows (casts, block kernels, end to end), not GEMM or training"});
  specs.push_back({"repeats", true, "N", "times each row is measured (default 5, 3 with --quick): median and spread"});
  specs.push_back({"threads", true, "N", "worker threads of the SIMD kernels and the training rows' second thread count (default: all hardware threads)"});
  specs.push_back({"max-mib", true, "MIB", "largest input size in MiB of float32 (default 256)"});
  return specs;
}

void print_bench_help(std::ostream& out, const std::vector<OptionSpec>& specs) {
  out << "usage: mxlab bench [--quick] [--train-only|--gemm-only|--kernels-only] [--repeats N] [--threads N] [--max-mib MIB]\n"
         "                   [--columns A,B,...] [--csv|--json|--md]\n"
         "                   [--out FILE]\n\n"
         "Throughput of the SIMD kernels on float32 inputs (bfloat16 in the 'bf16-in' rows) from L2-resident\n"
         "sizes (256 KiB of float32) to main memory:\n"
         "elements/s, GB/s (bytes read + written), the ratio to a memory copy measured in the same run, and\n"
         "the speed-up over the scalar reference on one thread (at the smallest size). Each row (kernels, GEMM,\n"
         "training steps) runs\n"
         "--repeats times: its time is their median, spread_pct their range over the median; a row whose\n"
         "repeats span more than 20% is unstable (stable = no), and a ratio from an unstable row or baseline\n"
         "says so in its note. --out FILE.json\n"
         "writes JSON. The benchmark reports only; correctness is the tests' job.\n\n"
      << terminal_columns_help({{"", kBenchColumns}}) << "\n"
      << options_help(specs);
}

/// The kernel rows (copies, casts, block kernels, end to end) at each size from L2-resident to `max_mib` MiB.
std::optional<Error> kernel_rows(bool quick, std::size_t max_mib, unsigned threads, int repeats, Table& t) {
  // Sizes in bytes of float32 input: L2-resident, L3-ish, and main memory.
  std::vector<std::size_t> sizes = {std::size_t{256} << 10};
  if (!quick) {
    for (std::size_t s : {std::size_t{4} << 20, std::size_t{64} << 20})
      if (s < (max_mib << 20)) sizes.push_back(s);
  }
  sizes.push_back(max_mib << 20);
  Bench bench(sizes.back() / 4);
  const std::string dir = bench_dir();

  // The rows, in the order they run at each size (a row's baseline runs before it).
  std::vector<Case> cases = copy_rows(bench);
  for (Case& c : cast_rows(bench)) cases.push_back(std::move(c));
  auto blocks = block_rows(bench);
  if (!blocks) return blocks.error();
  for (Case& c : *blocks) cases.push_back(std::move(c));
  for (Case& c : end_to_end_rows(bench, dir)) cases.push_back(std::move(c));
  measure(cases, sizes, threads, quick, repeats, t);
  std::remove((dir + "/bench-input.npy").c_str());
  std::remove((dir + "/bench-output.npy").c_str());
  ::rmdir(dir.c_str());
  return std::nullopt;
}

}  // namespace

int cmd_bench(const std::vector<std::string>& argv, Io io) {
  const std::vector<OptionSpec> specs = bench_option_specs();
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "bench", args.error().message);
  if (args->help) {
    print_bench_help(io.out, specs);
    return kExitOk;
  }
  if (!args->positional.empty()) return bad_input(io, "bench", "unexpected argument '" + args->positional[0] + "'");
  const bool quick = args->flag("quick");
  if (args->flag("train-only") + args->flag("gemm-only") + args->flag("kernels-only") > 1)
    return bad_input(io, "bench", "--train-only, --gemm-only and --kernels-only exclude each other");
  const auto threads_opt = args->integer("threads", 1, 1024, hardware_threads());
  if (!threads_opt) return bad_input(io, "bench", threads_opt.error().message);
  const auto repeats_opt = args->integer("repeats", 1, 100, quick ? 3 : 5);
  if (!repeats_opt) return bad_input(io, "bench", repeats_opt.error().message);
  const auto max_mib_opt = args->integer("max-mib", 1, 65536, 256);
  if (!max_mib_opt) return bad_input(io, "bench", max_mib_opt.error().message);
  const auto threads = static_cast<unsigned>(*threads_opt);
  const auto max_mib = static_cast<std::size_t>(*max_mib_opt);
  if (auto e = check_table_options(*args, bench_table())) return bad_input(io, "bench", e->message);
  Args out_args = *args;
  if (auto o = args->value("out"); o && o->size() > 5 && o->substr(o->size() - 5) == ".json" && !args->flag("csv") &&
                                   !args->flag("md"))
    out_args.flags["json"] = true;

  Table t = bench_table();
  if (!args->flag("train-only") && !args->flag("gemm-only"))
    if (auto e = kernel_rows(quick, max_mib, threads, static_cast<int>(*repeats_opt), t)) return bad_input(io, "bench", e->message);
  const bool kernels_only = args->flag("kernels-only");
  if (!args->flag("train-only") && !kernels_only) {
    if (auto e = gemm_rows(quick, static_cast<int>(*repeats_opt), t)) return bad_input(io, "bench", e->message);
  }
  if (!args->flag("gemm-only") && !kernels_only)
    if (const auto trained = training_rows(quick, static_cast<int>(*repeats_opt), threads, t))
      return bad_input(io, "bench", trained->message);

  for (auto& row : t.rows) row.resize(t.columns.size());  // unsupported rows have no times
  Provenance prov = build_provenance();
  prov.simd_target = active_simd_target();
  prov.inputs.push_back({"cpu", cpu_model()});
  prov.inputs.push_back({"threads", std::to_string(threads)});
  prov.inputs.push_back({"input", "normal(0,1) float32, seed 20240601, scaled by 2^((i/2^20) mod 7 - 3)"});
  prov.inputs.push_back({"mode", quick ? "quick" : "full"});
  const bool stdout_is_table = !out_args.value("out") && !out_args.flag("json") && !out_args.flag("csv") &&
                               !out_args.flag("md");
  if (stdout_is_table || out_args.value("out")) {
    io.out << "cpu: " << cpu_model() << "\nsimd target: " << prov.simd_target << "\nthreads: " << threads
           << "\ncompiler: " << prov.compiler << " (" << prov.build_type << ")\nflags: " << prov.flags << "\n\n";
  }
  return emit_table(io, "bench", out_args, t, prov, {kBenchColumns, ""});
}

}  // namespace mxlab::cli
