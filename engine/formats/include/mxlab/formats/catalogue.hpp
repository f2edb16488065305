// The named formats: one table, a row per format. Derived properties are computed from the row
// (format.hpp) and checked with static_assert against docs/formats facts in catalogue.cpp.
#pragma once

#include <span>
#include <string_view>

#include "mxlab/core/error.hpp"
#include "mxlab/formats/format.hpp"

namespace mxlab {

struct CatalogueRow {
  std::string_view name;         ///< canonical name (ml_dtypes/LLVM spelling where one exists)
  std::string_view aliases;      ///< comma-separated short names accepted on input
  std::string_view description;  ///< one line: encoding and source
  FormatSpec spec;
};

/// All rows, in display order.
std::span<const CatalogueRow> catalogue_rows();

/// The validated formats of all rows, built once (same order as catalogue_rows()).
std::span<const Format> catalogue_formats();

/// The catalogue format whose name or alias equals `name` (case-insensitive), or nullptr.
const Format* find_catalogue_format(std::string_view name);

/// The row of a catalogue format name (canonical names only), or nullptr.
const CatalogueRow* find_catalogue_row(std::string_view canonical_name);

}  // namespace mxlab
