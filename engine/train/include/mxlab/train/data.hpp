// Training data for the models: labelled images (Fashion-MNIST, scikit-learn digits) split into train,
// validation and test with a seeded shuffle, and character-level text (Gutenberg books) split into train and
// validation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mxlab/core/error.hpp"

namespace mxlab::train {

/// Labelled images as float features in [0, 1], each image rows x cols x channels (row-major, HWC).
struct ImageSplit {
  std::vector<float> x;      ///< count x (rows * cols * channels)
  std::vector<int> labels;   ///< count
  std::int64_t count() const { return static_cast<std::int64_t>(labels.size()); }
};

/// A data set in memory: images with classes, or text as character ids.
struct TrainData {
  std::string name;
  bool is_text = false;
  // Images.
  std::int64_t rows = 0, cols = 0, channels = 1;
  int classes = 0;
  ImageSplit train, validation, test;
  // Text.
  std::string alphabet;                 ///< id -> byte
  std::vector<int> train_tokens, validation_tokens;
  std::vector<std::string> files;       ///< the files read (provenance)

  std::int64_t features() const { return rows * cols * channels; }
  int vocabulary() const { return static_cast<int>(alphabet.size()); }
};

/// Where and how to load.
struct DataOptions {
  std::string dir;             ///< data folder (mxlab data fetch); "" = default_data_dir()
  std::uint64_t seed = 0;      ///< the shuffle before the train/validation split
  double validation_fraction = 0.1;  ///< of the training images (or of the text, taken from its end)
};

/// Loads "fashion-mnist" (60,000 train images split into train and validation; the 10,000 t10k images are the
/// test set), "digits" (1,797 images split into test 20%, then validation and train) or "text:NAME" (NAME =
/// sherlock, tom-sawyer, a file of the registered texts, or a path to a text file). Registered files come from
/// the data folder or, for a Debian package that is installed, from the package's own path.
Result<TrainData> load_train_data(const std::string& spec, const DataOptions& options);

/// Entropy in bits per character of the text's unigram (character frequency) distribution.
double unigram_entropy_bits(const std::vector<int>& tokens, int vocabulary);

}  // namespace mxlab::train
