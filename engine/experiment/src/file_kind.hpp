// What a path is when it is not the regular file (or folder) expected, for messages.
#pragma once

#include <filesystem>
#include <string>

namespace mxlab::experiment {

/// "a directory", "a FIFO", "a character device", ...
inline std::string file_kind(const std::filesystem::file_status& st) {
  switch (st.type()) {
    case std::filesystem::file_type::regular: return "a file";
    case std::filesystem::file_type::directory: return "a directory";
    case std::filesystem::file_type::fifo: return "a FIFO";
    case std::filesystem::file_type::socket: return "a socket";
    case std::filesystem::file_type::character: return "a character device";
    case std::filesystem::file_type::block: return "a block device";
    case std::filesystem::file_type::symlink: return "a symbolic link";
    default: return "a special file";
  }
}

}  // namespace mxlab::experiment
