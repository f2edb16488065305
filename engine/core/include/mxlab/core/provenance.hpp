// Provenance recorded in every result file: version, commit, compiler, flags, SIMD target, inputs.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mxlab {

struct Provenance {
  std::string version;
  std::string commit;
  std::string compiler;
  std::string build_type;
  std::string flags;
  std::string simd_target = "scalar";
  std::vector<std::pair<std::string, std::string>> inputs;  ///< name, value (seed, options, files)
};

/// Provenance of this build; callers add the SIMD target and inputs they used.
Provenance build_provenance();

/// A JSON object of every field (the "provenance" of JSON tables, and FILE.provenance.json beside a CSV).
std::string provenance_json(const Provenance& p);

/// One-line "key=value; ..." rendering, for comment lines at the top of CSV and Markdown files.
std::string provenance_line(const Provenance& p);

}  // namespace mxlab
