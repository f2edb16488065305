// Loading and splitting the training data sets through engine/io.
#include "mxlab/train/data.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "mxlab/core/random.hpp"
#include "mxlab/io/datasets.hpp"
#include "mxlab/io/training_data.hpp"

namespace mxlab::train {
namespace {

/// The path of a registered file: the data folder's copy, else the installed Debian package's own file.
Result<std::string> registered_file(std::string_view set, std::string_view file, const std::string& dir) {
  auto in_dir = data_file(set, file, dir);
  if (in_dir) return in_dir;
  auto source = find_data_source(set);
  if (source && (*source)->kind == PackageKind::Debian) {
    for (const auto& f : (*source)->files) {
      std::error_code ec;
      if (f.file == file && std::filesystem::is_regular_file(std::string(f.package_path), ec))
        return std::string(f.package_path);
    }
  }
  return in_dir.error();
}

/// A seeded Fisher-Yates permutation of 0..n-1.
std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  Rng rng(seed);
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng.next_u64() % static_cast<std::uint64_t>(i + 1));
    std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(j)]);
  }
  return p;
}

void append_images(const ImageSet& s, const std::vector<std::int64_t>& order, std::size_t first, std::size_t last,
                   ImageSplit& out) {
  const auto per = static_cast<std::size_t>(s.rows * s.cols);
  const float inv = 1.0F / static_cast<float>(s.max_value);
  for (std::size_t k = first; k < last; ++k) {
    const auto i = static_cast<std::size_t>(order[k]);
    for (std::size_t j = 0; j < per; ++j) out.x.push_back(static_cast<float>(s.pixels[i * per + j]) * inv);
    out.labels.push_back(s.labels[i]);
  }
}

std::vector<std::int64_t> identity(std::int64_t n) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  return p;
}

Result<TrainData> load_images(const std::string& spec, const DataOptions& o) {
  TrainData d;
  d.name = spec;
  ImageSet train_set, test_set;
  if (spec == "fashion-mnist") {
    std::string paths[4];
    const char* files[4] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                            "t10k-labels-idx1-ubyte.gz"};
    for (int i = 0; i < 4; ++i) {
      auto p = registered_file("fashion-mnist", files[i], o.dir);
      if (!p) return p.error();
      paths[i] = *p;
      d.files.push_back(*p);
    }
    auto tr = read_idx_images(paths[0], paths[1]);
    if (!tr) return tr.error();
    auto te = read_idx_images(paths[2], paths[3]);
    if (!te) return te.error();
    train_set = std::move(*tr);
    test_set = std::move(*te);
  } else {
    auto p = registered_file("digits", "digits.csv.gz", o.dir);
    if (!p) return p.error();
    d.files.push_back(*p);
    auto all = read_digits_csv_gz(*p);
    if (!all) return all.error();
    train_set = std::move(*all);
  }
  d.rows = train_set.rows;
  d.cols = train_set.cols;
  d.classes = 10;
  const auto order = permutation(train_set.count, o.seed);
  std::size_t n = order.size();
  std::size_t start = 0;
  if (spec == "digits") {
    // No separate test file: the first 20% of the shuffled images are the test set.
    const auto test_n = static_cast<std::size_t>(std::llround(0.2 * static_cast<double>(n)));
    append_images(train_set, order, 0, test_n, d.test);
    start = test_n;
  } else {
    append_images(test_set, identity(test_set.count), 0, static_cast<std::size_t>(test_set.count), d.test);
  }
  const auto val_n = static_cast<std::size_t>(std::llround(o.validation_fraction * static_cast<double>(n - start)));
  append_images(train_set, order, start, start + val_n, d.validation);
  append_images(train_set, order, start + val_n, n, d.train);
  return d;
}

Result<TrainData> load_text(const std::string& name, const DataOptions& o) {
  TrainData d;
  d.name = "text:" + name;
  d.is_text = true;
  std::string path;
  std::string file = name;
  if (name == "sherlock") file = "pg1661.txt";
  if (name == "tom-sawyer") file = "Mark.Twain-Tom.Sawyer.txt";
  if (auto p = registered_file("texts", file, o.dir)) {
    path = *p;
  } else if (std::error_code ec; std::filesystem::is_regular_file(name, ec)) {
    path = name;
  } else {
    return make_error("text '" + name + "': not sherlock, tom-sawyer, a registered text file nor a readable file (" +
                      p.error().message + ")");
  }
  auto text = read_text(path);
  if (!text) return text.error();
  if (text->size() < 1000) return make_error("text '" + path + "' has fewer than 1000 characters");
  d.files.push_back(path);
  bool seen[256] = {};
  for (unsigned char c : *text) seen[c] = true;
  int id[256] = {};
  for (int c = 0; c < 256; ++c)
    if (seen[c]) {
      id[c] = static_cast<int>(d.alphabet.size());
      d.alphabet.push_back(static_cast<char>(c));
    }
  const auto split = static_cast<std::size_t>(std::llround((1.0 - o.validation_fraction) * static_cast<double>(text->size())));
  for (std::size_t i = 0; i < text->size(); ++i) {
    const int t = id[static_cast<unsigned char>((*text)[i])];
    (i < split ? d.train_tokens : d.validation_tokens).push_back(t);
  }
  return d;
}

}  // namespace

Result<TrainData> load_train_data(const std::string& spec, const DataOptions& options) {
  if (!(options.validation_fraction >= 0.0 && options.validation_fraction < 0.5))
    return make_error("validation fraction must be in [0, 0.5), got " + std::to_string(options.validation_fraction));
  if (spec == "fashion-mnist" || spec == "digits") return load_images(spec, options);
  if (spec.rfind("text:", 0) == 0 && spec.size() > 5) return load_text(spec.substr(5), options);
  return make_error("unknown data '" + spec + "' (known: fashion-mnist, digits, text:NAME)");
}

double unigram_entropy_bits(const std::vector<int>& tokens, int vocabulary) {
  std::vector<double> count(static_cast<std::size_t>(vocabulary), 0.0);
  for (int t : tokens) count[static_cast<std::size_t>(t)] += 1.0;
  const auto n = static_cast<double>(tokens.size());
  double h = 0;
  for (double c : count)
    if (c > 0) h -= c / n * std::log2(c / n);
  return h;
}

}  // namespace mxlab::train
