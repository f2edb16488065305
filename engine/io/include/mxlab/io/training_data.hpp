// Training data from the registered data sets: IDX files (Fashion-MNIST), the scikit-learn digits CSV
// and plain-text books. Readers bound their memory by the file: a gzip file cannot claim more
// decompressed bytes than deflate's maximum ratio allows for its size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mxlab/core/error.hpp"

namespace mxlab {

/// An IDX array of unsigned bytes (the format of the MNIST files: magic 0 0 0x08 rank, then rank
/// big-endian uint32 dimensions, then the bytes in row-major order).
struct IdxArray {
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> data;
};

/// Reads an IDX file of unsigned bytes (names ending in ".gz" are decompressed). Other IDX element
/// types (int8, int16, int32, float32, float64) are refused by name.
Result<IdxArray> read_idx_gz(const std::string& path);

/// Labelled grey images.
struct ImageSet {
  std::int64_t count = 0;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  int max_value = 255;               ///< pixels range over 0..max_value
  std::vector<std::uint8_t> pixels;  ///< count x rows x cols, row-major
  std::vector<std::uint8_t> labels;  ///< count, each 0..9
};

/// Reads an IDX image file (count x rows x cols) and its IDX label file (count); counts must agree and
/// labels be 0..9.
Result<ImageSet> read_idx_images(const std::string& images_path, const std::string& labels_path);

/// Reads the scikit-learn digits CSV (gzip): per line 64 pixel values 0..16 (an 8x8 image, row-major),
/// then the label 0..9; no header.
Result<ImageSet> read_digits_csv_gz(const std::string& path);

/// A split of a registered image data set installed by `mxlab data fetch`: "fashion-mnist" (train: 60,000,
/// test: 10,000) or "digits" (train: the first 1,500 of 1,797, test: the last 297). `dir` "" = the default
/// data folder. A missing file names the command that installs it.
Result<ImageSet> load_image_set(const std::string& name, const std::string& split, const std::string& dir = "");

/// Reads a text file (names ending in ".gz" are decompressed) as UTF-8 text with a byte order mark
/// removed and CRLF line ends turned into LF. A Project Gutenberg header (everything up to and
/// including the "*** START OF ..." line) and footer (from the "*** END OF ..." line or an "End of the
/// Project Gutenberg ..." line on) are removed, as are the blank lines around what remains.
Result<std::string> read_text(const std::string& path);

}  // namespace mxlab
