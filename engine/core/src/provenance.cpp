// Build provenance: version, compiler and flags from definitions made at configure time, the commit from
// the file generated at every build.
#include "mxlab/core/provenance.hpp"

#include <string>


namespace mxlab {
namespace detail {
const char* git_commit();  // generated: cmake/git_commit.cmake
}

Provenance build_provenance() {
  Provenance p;
  p.version = MXLAB_VERSION;
  p.commit = detail::git_commit();
#if defined(__clang__)
  p.compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
  p.compiler = "g++ " __VERSION__;
#else
  p.compiler = "unknown";
#endif
  p.build_type = MXLAB_BUILD_TYPE;
  p.flags = MXLAB_CXX_FLAGS;
  return p;
}

std::string provenance_line(const Provenance& p) {
  std::string s = "mxlab " + p.version + "; commit " + p.commit + "; compiler " + p.compiler +
                  "; build " + p.build_type + "; simd " + p.simd_target;
  for (const auto& [k, v] : p.inputs) s += "; " + k + " " + v;
  return s;
}

}  // namespace mxlab
