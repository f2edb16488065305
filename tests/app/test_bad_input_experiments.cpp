// Checks bad input to mxlab run, check and merge against the CLI contract (exit code 2, one line naming the
// input and the problem, nothing written): shards that do not add up, damaged and edited results databases, a
// folder in use, names that are not file names, sweeps too large to expand, files that are not files, and
// bounds that mean nothing.
#include <catch2/catch.hpp>

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mxlab/core/folder_lock.hpp"
#include "mxlab/experiment/runner.hpp"
#include "support/cli_run.hpp"

namespace {

// Fixture folders have short names: messages shorten paths past 60 characters, and the rows look for the end.
namespace fs = std::filesystem;
using mxlab_test::run_cli;

void put(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

/// A fresh folder for a test's fixtures and outputs, removed at its end.
struct Fixtures {
  fs::path dir;
  std::string d;  ///< dir as text
  explicit Fixtures(const std::string& name)
      : dir(fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))), d(dir.string()) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Fixtures() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  Fixtures(const Fixtures&) = delete;
  Fixtures& operator=(const Fixtures&) = delete;
};

/// Runs `file` in two shards, into folders s0 and s1 beside it.
void run_two_shards(const std::string& d, const std::string& file) {
  for (const char* shard : {"0", "1"})
    REQUIRE(run_cli({"run", d + "/" + file, "--shard", std::string(shard) + "/2", "--out", d + "/s" + shard, "--quiet"}).code == 0);
}

/// Runs SQL on a results database, as a person editing it by hand would.
void sql(const fs::path& db, const std::string& statements) {
  sqlite3* h = nullptr;
  REQUIRE(sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
  char* msg = nullptr;
  const int rc = sqlite3_exec(h, statements.c_str(), nullptr, nullptr, &msg);
  INFO(statements << ": " << (msg ? msg : ""));
  sqlite3_free(msg);
  sqlite3_close(h);
  REQUIRE(rc == SQLITE_OK);
}

/// A copy of a results folder (made by a real run, so it holds the lock file too).
fs::path copy_folder(const fs::path& from, const fs::path& to) {
  fs::copy(from, to, fs::copy_options::recursive);
  return to / "results.sqlite";
}

/// Replaces point `idx`'s result with `result` and a checksum computed as mxlab computes it: only a reader
/// that checks the result itself finds the damage.
void forge_result(const fs::path& db, int idx, const std::string& result) {
  sqlite3* h = nullptr;
  REQUIRE(sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(h, "SELECT (SELECT value FROM meta WHERE key = 'experiment_sha256'), key FROM points WHERE idx = ?",
                             -1, &st, nullptr) == SQLITE_OK);
  sqlite3_bind_int(st, 1, idx);
  REQUIRE(sqlite3_step(st) == SQLITE_ROW);
  const std::string sha = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  const std::string key = reinterpret_cast<const char*>(sqlite3_column_text(st, 1));
  sqlite3_finalize(st);
  const std::string checksum = mxlab::experiment::result_checksum(sha, static_cast<std::size_t>(idx), key, result);
  REQUIRE(sqlite3_prepare_v2(h, "UPDATE points SET result = ?, sha256 = ? WHERE idx = ?", -1, &st, nullptr) == SQLITE_OK);
  sqlite3_bind_text(st, 1, result.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 2, checksum.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, 3, idx);
  REQUIRE(sqlite3_step(st) == SQLITE_DONE);
  sqlite3_finalize(st);
  sqlite3_close(h);
}

/// Four catalogue points (fast): e2m1, e3m2, e2m3, e4m3.
const char* kCatalogue = "name = \"cat\"\njob = \"catalogue\"\n[sweep]\nformat = [\"e2m1\", \"e3m2\", \"e2m3\", \"e4m3\"]\n";

/// An analyze experiment on a generated input with `extra` appended.
std::string analyze_with(const std::string& name, const std::string& extra) {
  return "name = \"" + name + "\"\n[inputs.n]\nsource = \"gen:normal:0,1\"\nshape = \"256\"\n[sweep]\nformat = \"mxfp4\"\n"
         "input = \"n\"\n" + extra;
}

}  // namespace

TEST_CASE("bad input: merges of shards that do not make one run", "[cli][experiment]") {
  const Fixtures f("mxlab_bmerge");
  const fs::path& dir = f.dir;
  const std::string& d = f.d;
  put(dir / "cat.toml", kCatalogue);
  put(dir / "other.toml", "description = \"another file of the same name\"\n" + std::string(kCatalogue));
  run_two_shards(d, "cat.toml");
  REQUIRE(run_cli({"run", d + "/other.toml", "--shard", "1/2", "--out", d + "/other1", "--quiet"}).code == 0);
  // Shards edited by hand, each one way.
  sql(copy_folder(dir / "s1", dir / "moved"), "UPDATE points SET idx = 2 WHERE idx = 1");               // out of its shard
  sql(copy_folder(dir / "s1", dir / "beyond"), "UPDATE points SET idx = 99 WHERE idx = 1");             // past the last point
  sql(copy_folder(dir / "s1", dir / "edited"), "UPDATE points SET result = replace(result, '\"e3m2\"', '\"e3m3\"') WHERE idx = 1");
  sql(copy_folder(dir / "s1", dir / "version"), "UPDATE meta SET value = '0.0.1' WHERE key = 'version'");
  sql(copy_folder(dir / "s1", dir / "text"), "UPDATE meta SET value = value || ' ' WHERE key = 'experiment_text'");
  sql(copy_folder(dir / "s1", dir / "count"), "UPDATE meta SET value = '5' WHERE key = 'points'");
  forge_result(copy_folder(dir / "s1", dir / "forged"), 1, "{\"values\": [[[\"code\"");
  fs::create_directories(dir / "empty");
  put(dir / "file", "not a folder\n");
  const std::string s0 = d + "/s0", s1 = d + "/s1", out = d + "/merged";
  const mxlab_test::BadInput cases[] = {
      // every point index exactly once
      {{"merge", s0, "--out", out}, "2 of 4 points are missing from '" + s0 + "', point 1 first (shard 1/2"},
      {{"merge", s0, s1, s0, "--out", out}, "point 0 is in both '" + s0 + "' and '" + s0 + "'"},
      {{"merge", s0, s1, s1, "--out", out}, "point 1 is in both '" + s1 + "' and '" + s1 + "'"},
      {{"merge", s0, d + "/moved", "--out", out}, "moved/results.sqlite': holds point 2, which is not in its shard 1/2"},
      {{"merge", s0, d + "/beyond", "--out", out}, "beyond/results.sqlite': holds point 99, but the experiment has 4 points"},
      // the same experiment file, the same version, every row as written
      {{"merge", s0, d + "/other1", "--out", out}, "'" + d + "/other1' holds results of a different experiment file than '" + s0 + "'"},
      {{"merge", s0, d + "/version", "--out", out}, "'" + d + "/version' was run by mxlab '0.0.1'"},
      {{"merge", s0, d + "/count", "--out", out}, "'" + d + "/count' holds results of 5 points"},
      {{"merge", s0, d + "/edited", "--out", out}, "edited/results.sqlite': point 1 does not match its checksum"},
      {{"merge", s0, d + "/text", "--out", out}, "text/results.sqlite': the experiment text does not match its checksum"},
      {{"merge", s0, d + "/forged", "--out", out}, "forged/results.sqlite': point 1: stored result unreadable"},
      // folders
      {{"merge", s0, s1, "--out", s1}, "--out '" + s1 + "' is one of the folders merged"},
      {{"merge", s0, d + "/empty", "--out", out}, "'" + d + "/empty' holds no results.sqlite"},
      {{"merge", s0, d + "/file", "--out", out}, "'" + d + "/file': is a file, not a folder"},
      {{"merge", s0, d + "/absent", "--out", out}, "'" + d + "/absent' does not exist"},
      {{"merge", s0, s1, "--out", d + "/file"}, "--out '" + d + "/file': is a file, not a folder"},
  };
  mxlab_test::check_bad_inputs(dir, cases);
}

TEST_CASE("bad input: damaged results databases, resumed or merged", "[cli][experiment]") {
  const Fixtures f("mxlab_bdb");
  const fs::path& dir = f.dir;
  const std::string& d = f.d;
  put(dir / "cat.toml", kCatalogue);
  REQUIRE(run_cli({"run", d + "/cat.toml", "--out", d + "/full", "--quiet"}).code == 0);
  // NULL and text where numbers and text belong: the tables rebuilt without their NOT NULL constraints.
  const std::string loose_meta =
      "CREATE TABLE m(key TEXT PRIMARY KEY, value TEXT); INSERT INTO m SELECT * FROM meta; DROP TABLE meta; "
      "ALTER TABLE m RENAME TO meta;";
  const std::string loose_points =
      "CREATE TABLE p(idx INTEGER PRIMARY KEY, key TEXT, result TEXT, seconds REAL, sha256 TEXT); "
      "INSERT INTO p SELECT * FROM points; DROP TABLE points; ALTER TABLE p RENAME TO points;";
  sql(copy_folder(dir / "full", dir / "null_meta"), loose_meta + "UPDATE meta SET value = NULL WHERE key = 'shard'");
  sql(copy_folder(dir / "full", dir / "text_points"), "UPDATE meta SET value = 'many' WHERE key = 'points'");
  sql(copy_folder(dir / "full", dir / "null_key"), loose_points + "UPDATE points SET key = NULL WHERE idx = 2");
  sql(copy_folder(dir / "full", dir / "text_seconds"), "UPDATE points SET seconds = 'fast' WHERE idx = 3");
  sql(copy_folder(dir / "full", dir / "blob_sha"), "UPDATE points SET sha256 = x'00ff' WHERE idx = 0");
  sql(copy_folder(dir / "full", dir / "old"), "DELETE FROM meta WHERE key = 'schema'");
  sql(copy_folder(dir / "full", dir / "shard"), "UPDATE meta SET value = '2/1' WHERE key = 'shard'");
  sql(copy_folder(dir / "full", dir / "edited"),
      "UPDATE points SET result = replace(result, '\"e3m2\"', '\"e3m3\"') WHERE idx = 1");
  sql(copy_folder(dir / "full", dir / "foreign"), "DROP TABLE points; CREATE TABLE notes(text TEXT)");
  sql(copy_folder(dir / "full", dir / "version"), "UPDATE meta SET value = '0.0.1' WHERE key = 'version'");
  copy_folder(dir / "full", dir / "garbage");
  put(dir / "garbage/results.sqlite", std::string(8192, 'x'));
  copy_folder(dir / "full", dir / "folder");
  fs::remove(dir / "folder/results.sqlite");
  fs::create_directories(dir / "folder/results.sqlite");
  copy_folder(dir / "full", dir / "fifo");
  fs::remove(dir / "fifo/results.sqlite");
  REQUIRE(::mkfifo((dir / "fifo/results.sqlite").c_str(), 0600) == 0);
  auto resume = [&](const std::string& folder) {
    return std::vector<std::string>{"run", d + "/cat.toml", "--out", d + "/" + folder, "--resume", "--quiet"};
  };
  const std::string out = d + "/merged";
  const mxlab_test::BadInput cases[] = {
      {resume("null_meta"), "null_meta/results.sqlite': meta 'shard' is NULL, not text"},
      {resume("text_points"), "text_points/results.sqlite': meta 'points' is 'many', not a count"},
      {resume("null_key"), "null_key/results.sqlite': point 2: column 'key' is NULL, not text"},
      {resume("text_seconds"), "text_seconds/results.sqlite': point 3: column 'seconds' is text, not a number"},
      {resume("blob_sha"), "blob_sha/results.sqlite': point 0: column 'sha256' is a blob, not text"},
      {resume("old"), "old/results.sqlite': has no meta 'schema'"},
      {resume("shard"), "shard/results.sqlite': meta 'shard' is '2/1', not I/N"},
      {resume("edited"), "edited/results.sqlite': point 1 does not match its checksum"},
      {resume("foreign"), "foreign/results.sqlite': is not a results database (it has no table 'points')"},
      {resume("version"), "were computed by mxlab '0.0.1'"},
      {resume("garbage"), "garbage/results.sqlite': is damaged or not a database (file is not a database)"},
      {resume("folder"), "folder/results.sqlite': is a directory, not a database"},
      {resume("fifo"), "fifo/results.sqlite': is a FIFO, not a database"},
      {{"check", d + "/cat.toml", "--out", d + "/edited", "--resume", "--quiet"}, "point 1 does not match its checksum"},
      {{"merge", d + "/null_key", "--out", out}, "point 2: column 'key' is NULL, not text"},
      {{"merge", d + "/text_points", "--out", out}, "meta 'points' is 'many', not a count"},
      {{"merge", d + "/garbage", "--out", out}, "garbage/results.sqlite': is damaged or not a database"},
      {{"merge", d + "/fifo", "--out", out}, "fifo/results.sqlite': is a FIFO, not a database"},
  };
  mxlab_test::check_bad_inputs(dir, cases);
}

TEST_CASE("bad input: a results folder in use by another run or merge", "[cli][experiment]") {
  const Fixtures f("mxlab_block");
  const fs::path& dir = f.dir;
  const std::string& d = f.d;
  fs::create_directories(dir / "busy");
  put(dir / "cat.toml", kCatalogue);
  run_two_shards(d, "cat.toml");
  // This process holds the folder, as a running mxlab would (test_experiment does it with a second process).
  auto lock = mxlab::FolderLock::acquire(d + "/busy", "mxlab run");
  REQUIRE(lock.ok());
  const std::string holder = "'" + d + "/busy' is in use by process " + std::to_string(::getpid()) + " (mxlab run)";
  const mxlab_test::BadInput cases[] = {
      {{"run", d + "/cat.toml", "--out", d + "/busy", "--quiet"}, holder},
      {{"run", d + "/cat.toml", "--out", d + "/busy", "--resume", "--quiet"}, holder},
      {{"merge", d + "/s0", d + "/s1", "--out", d + "/busy"}, holder},
  };
  mxlab_test::check_bad_inputs(dir, cases);
}

TEST_CASE("bad input: names that are not plain file names, and two experiments of one name", "[cli][experiment]") {
  const Fixtures f("mxlab_bname");
  const fs::path& dir = f.dir;
  const std::string& d = f.d;
  fs::create_directories(dir / "sub");
  put(dir / "dotdot.toml", std::string(kCatalogue).replace(8, 3, ".."));
  put(dir / "dot.toml", std::string(kCatalogue).replace(8, 3, "."));
  put(dir / "bell.toml", std::string(kCatalogue).replace(8, 3, "a\\u0007b"));
  put(dir / "slash.toml", std::string(kCatalogue).replace(8, 3, "a/b"));
  put(dir / "empty.toml", std::string(kCatalogue).replace(8, 3, ""));
  put(dir / "input.toml", analyze_with("x", "").replace(analyze_with("x", "").find("inputs.n"), 8, "inputs.\"..\""));
  put(dir / "cat.toml", kCatalogue);
  put(dir / "sub/cat.toml", kCatalogue);
  put(dir / "batch_dotdot.toml", "name = \"..\"\nbatch = [\"cat.toml\"]\n");
  put(dir / "batch_twice.toml", "name = \"b\"\nbatch = [\"cat.toml\", \"sub/cat.toml\"]\n");
  put(dir / "batch_same.toml", "name = \"b\"\nbatch = [\"cat.toml\", \"./cat.toml\"]\n");
  const std::string out = d + "/runs";
  const mxlab_test::BadInput cases[] = {
      {{"run", d + "/dotdot.toml", "--out", out}, "dotdot.toml:1: key 'name': an experiment needs name"},
      {{"run", d + "/dot.toml", "--out", out}, "not '.' or '..'"},
      {{"run", d + "/bell.toml", "--out", out}, "bell.toml:1: key 'name'"},
      {{"run", d + "/slash.toml", "--out", out}, "slash.toml:1: key 'name'"},
      {{"run", d + "/empty.toml", "--out", out}, "empty.toml:1: key 'name'"},
      {{"run", d + "/input.toml", "--out", out}, "key 'inputs...': an input name is letters"},
      {{"run", d + "/batch_dotdot.toml", "--out", out}, "batch_dotdot.toml:1: key 'name': a batch needs name"},
      {{"run", d + "/batch_twice.toml", "--out", out},
       "experiment files '" + d + "/cat.toml' and '" + d + "/sub/cat.toml' are both named 'cat'"},
      {{"run", d + "/batch_same.toml", "--out", out}, "experiment file '" + d + "/cat.toml' is given twice"},
      {{"run", d + "/cat.toml", d + "/sub/cat.toml", "--out", out}, "are both named 'cat'"},
      {{"check", d + "/cat.toml", d + "/cat.toml"}, "experiment file '" + d + "/cat.toml' is given twice"},
  };
  mxlab_test::check_bad_inputs(dir, cases);
}

TEST_CASE("bad input: sweeps too large to expand, files that are not files, bounds that mean nothing", "[cli][experiment]") {
  const Fixtures f("mxlab_bsweep");
  const fs::path& dir = f.dir;
  const std::string& d = f.d;
  fs::create_directories(dir / "folder.toml");
  fs::create_directories(dir / "tensor_dir.npy");
  // Six axes of 16 values: 2^24 points from a file of a few hundred bytes.
  std::string sixteen = "[";
  for (int i = 0; i < 16; ++i) sixteen += (i ? ", " : "") + std::to_string(i + 1);
  sixteen += "]";
  std::string wide = "name = \"wide\"\njob = \"bounds\"\nmax_gap = 1\n[sweep]\nformat = \"mxint8\"\n";
  for (const char* axis : {"block", "seed", "round", "overflow", "subnormals", "scale-rule"}) wide += std::string(axis) + " = " + sixteen + "\n";
  put(dir / "wide.toml", wide);
  // Eighteen axes of 16 values: 2^72 points, past what 64 bits count.
  std::string huge = "name = \"huge\"\njob = \"bounds\"\n[sweep]\nformat = \"mxint8\"\n";
  for (const char* axis : {"block", "profile", "round", "overflow", "subnormals", "seed", "random-bits", "scale-rule", "scale-round",
                           "clamp", "zero-block", "specials", "min-block-scale", "int-encoding", "nibble-order",
                           "scale-overflow", "input-precision", "rceil-quotient"})
    huge += std::string(axis) + " = " + sixteen + "\n";
  put(dir / "huge.toml", huge);
  // 600 explicit points, each crossed with a sweep of 4096 points: 601 x 4096 with the sweep's own.
  std::string crossed = "name = \"crossed\"\njob = \"bounds\"\nmax_gap = 1\n[sweep]\nformat = \"mxint8\"\nblock = " + sixteen +
                        "\nseed = " + sixteen + "\nround = " + sixteen + "\n";
  for (int i = 0; i < 600; ++i) crossed += "[[points]]\nscale-rule = \"floor\"\n";
  put(dir / "crossed.toml", crossed);
  // 1,024 points whose one long value is 100 KB: 100 MB of parameters from a file of 100 KB.
  std::string heavy = "name = \"heavy\"\njob = \"bounds\"\nmax_gap = 1\n[sweep]\nformat = \"mxint8\"\nblock = " + sixteen +
                      "\nseed = " + sixteen + "\nround = " + sixteen + "\nprofile = [\"" + std::string(100000, 'p') + "\"]\n";
  put(dir / "heavy.toml", heavy);
  put(dir / "big.toml", "# " + std::string(std::size_t{1} << 21, 'x') + "\n");
  REQUIRE(::mkfifo((dir / "fifo.toml").c_str(), 0600) == 0);
  REQUIRE(::mkfifo((dir / "tensor_fifo.npy").c_str(), 0600) == 0);
  put(dir / "at_most_inf.toml", analyze_with("x", "[[expect]]\nmetric = \"mse\"\nat_most = inf\n"));
  put(dir / "at_least_ninf.toml", analyze_with("x", "[[expect]]\nmetric = \"mse\"\nat_least = -inf\n"));
  put(dir / "equals_nan.toml", analyze_with("x", "[[expect]]\nmetric = \"mse\"\nequals = nan\n"));
  put(dir / "tolerance_inf.toml",
      analyze_with("x", "[[expect]]\nmetric = \"mse\"\nequals = 0\ntolerance = inf\nreason = \"anything\"\n"));
  put(dir / "y_min_nan.toml", analyze_with("x", "[[plot]]\nx = \"format\"\ny = \"mse\"\ny_min = nan\n"));
  put(dir / "source_dir.toml", analyze_with("x", "").replace(analyze_with("x", "").find("gen:normal:0,1"), 14, "tensor_dir.npy"));
  put(dir / "source_fifo.toml", analyze_with("x", "").replace(analyze_with("x", "").find("gen:normal:0,1"), 14, "tensor_fifo.npy"));
  const std::string out = d + "/runs";
  const mxlab_test::BadInput cases[] = {
      {{"run", d + "/wide.toml", "--out", out}, "wide.toml: the sweep gives 16777216 points, more than the 1048576 (2^20)"},
      {{"run", d + "/huge.toml", "--out", out}, "huge.toml: the sweep gives more than 2^64 points"},
      {{"run", d + "/crossed.toml", "--out", out}, "crossed.toml: the sweep gives 2461696 points"},
      {{"check", d + "/heavy.toml", "--out", out}, "heavy.toml: the sweep's 4096 points have 390.8 MB of parameters, more than the 64 MB"},
      {{"run", d + "/big.toml", "--out", out}, "experiment file '" + d + "/big.toml': is 2.0 MB, more than the 1 MB"},
      {{"run", d + "/fifo.toml", "--out", out}, "experiment file '" + d + "/fifo.toml': is a FIFO, not a file"},
      {{"run", d + "/folder.toml", "--out", out}, "experiment file '" + d + "/folder.toml': is a directory, not a file"},
      {{"run", "/dev/zero", "--out", out}, "experiment file '/dev/zero': is a character device, not a file"},
      {{"run", d + "/at_most_inf.toml", "--out", out}, "at_most_inf.toml:10: key 'expect.at_most': expected a finite number, found inf"},
      {{"run", d + "/at_least_ninf.toml", "--out", out}, "key 'expect.at_least': expected a finite number, found -inf"},
      {{"run", d + "/equals_nan.toml", "--out", out}, "key 'expect.equals': expected a finite number, found nan"},
      {{"check", d + "/tolerance_inf.toml", "--out", out}, "key 'expect.tolerance': expected a finite number, found inf"},
      {{"run", d + "/y_min_nan.toml", "--out", out}, "key 'plot.y_min': expected a finite number, found nan"},
      {{"run", d + "/source_dir.toml", "--out", out}, "input 'n': file '" + d + "/tensor_dir.npy': is a directory, not a file"},
      {{"run", d + "/source_fifo.toml", "--out", out}, "input 'n': file '" + d + "/tensor_fifo.npy': is a FIFO, not a file"},
  };
  mxlab_test::check_bad_inputs(dir, cases);
}

TEST_CASE("bad input: a results database that cannot be written", "[cli][experiment]") {
  const Fixtures f("mxlab_bro");
  put(f.dir / "cat.toml", kCatalogue);
  REQUIRE(run_cli({"run", f.d + "/cat.toml", "--out", f.d + "/ro", "--quiet"}).code == 0);
  // Immutable (root reads and writes any file whatever its mode): where the file system or the user cannot make
  // it so, there is nothing to test.
  const std::string db = f.d + "/ro/results.sqlite";
  if (std::system(("chattr +i '" + db + "' 2>/dev/null").c_str()) != 0) {
    WARN("skipped: chattr +i is not allowed here");
    return;
  }
  struct Writable {
    std::string path;
    ~Writable() { (void)std::system(("chattr -i '" + path + "' 2>/dev/null").c_str()); }
  } writable{db};
  const std::string needle = "ro/results.sqlite': is read-only; points are recorded in it";
  const mxlab_test::BadInput cases[] = {
      {{"run", f.d + "/cat.toml", "--out", f.d + "/ro", "--resume", "--quiet"}, needle},
      {{"run", f.d + "/cat.toml", "--out", f.d + "/ro", "--quiet"}, needle},
  };
  mxlab_test::check_bad_inputs(f.dir, cases);
}
