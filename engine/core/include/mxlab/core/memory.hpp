// The memory budget: sizes that inputs ask for (generated tensors, code point ranges, tensors read whole)
// are checked against it before anything is allocated, so a hostile or mistyped size is a message naming
// the size instead of an allocation failure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "mxlab/core/error.hpp"

namespace mxlab {

/// Bytes one job may allocate: the environment variable MXLAB_MEMORY_BUDGET (bytes, or with a suffix K, M, G,
/// T for powers of 1024) if set, else half of the smaller of physical memory and the address-space limit.
std::uint64_t memory_budget();

/// An error when `count` items of `item_bytes` each exceed the budget (or overflow); `what` names the
/// request in the message ("generated tensor 30000x30000").
std::optional<Error> check_memory(std::uint64_t count, std::uint64_t item_bytes, const std::string& what);

/// For the programs' main functions (mxlab, mxlab-gui), not a library's: glibc's allocator keeps freed blocks of up
/// to 32 MiB in the process and gives back the top of its heap only beyond 512 MiB free. Training and evaluation
/// free and allocate activations of several MiB per batch; with glibc's adaptive defaults those went back to the
/// kernel and were faulted in again (docs/training.md, "Speed of a training step"). Does nothing under another
/// allocator (a sanitizer's).
void keep_freed_memory();

}  // namespace mxlab
