// Reading a whole small file (a recipe, a checkpoint's metadata, an experiment file, a golden table) with its
// size checked first: only regular files are read, so /dev/zero or a FIFO is refused, not read forever.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "mxlab/core/error.hpp"

namespace mxlab {

/// The bytes of `path`, which must be a regular file (symbolic links are followed to one) of at most
/// `max_bytes` bytes. Errors name the file with `label` ("recipe 'r.txt': is a character device, not a
/// file", "recipe 'r.txt': is 3.2 GB, more than the 1 MB recipe can be").
Result<std::string> read_small_file(const std::string& path, std::uint64_t max_bytes, std::string_view label);

/// "16 MB", "512 KB", "100 bytes": a byte count for messages and docs.
std::string byte_size_text(std::uint64_t bytes);

}  // namespace mxlab
