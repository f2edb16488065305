// Fuzz target: results databases (FOLDER/results.sqlite of mxlab run) through the reader that --resume and
// merge use, then, for a database it accepts, through merge itself.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "mxlab/experiment/results.hpp"
#include "mxlab/experiment/runner.hpp"
#include "mxlab/io/sha256.hpp"
#include "fuzz_support.hpp"

namespace {

[[noreturn]] void broken() { std::abort(); }

/// A refusal is one line naming the database.
void check_message(const mxlab::Error& e) {
  if (e.message.empty() || e.message.find('\n') != std::string::npos) broken();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  namespace ex = mxlab::experiment;
  const fs::path dir = mxlab::fuzz::scratch_dir() / "results_db";
  std::error_code ec;
  fs::create_directories(dir, ec);
  // No journal of an earlier input may replay into this one.
  for (const char* name : {"results.sqlite-wal", "results.sqlite-shm", "results.sqlite-journal"}) fs::remove(dir / name, ec);
  const std::string path =
      mxlab::fuzz::write_scratch("results_db/results.sqlite", {reinterpret_cast<const char*>(data), size});
  auto db = ex::read_results_database(path);
  if (!db) {
    check_message(db.error());
    if (db.error().message.find("results database") == std::string::npos) broken();
    return 0;
  }
  // What it accepts holds: the experiment matches its checksum, every index is in range and in the shard, and
  // every row matches its checksum.
  if (mxlab::sha256_hex(db->experiment_text) != db->experiment_sha256) broken();
  if (db->points == 0 || db->shard >= db->shards) broken();
  for (const auto& [idx, p] : db->stored) {
    if (idx >= db->points || idx % db->shards != db->shard) broken();
    if (p.sha256 != ex::result_checksum(db->experiment_sha256, idx, p.key, p.result)) broken();
    (void)ex::parse_result_json(p.result);
  }
  // Merged alone: a result or a one-line refusal (a shard of several, or a stored result that does not read).
  auto merged = ex::merge_results({dir.string()}, (mxlab::fuzz::scratch_dir() / "results_db_merged").string(), {});
  if (!merged) check_message(merged.error());
  else if (!merged->complete || merged->points != db->points) broken();
  return 0;
}
