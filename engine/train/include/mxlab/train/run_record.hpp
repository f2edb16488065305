// The record of a training run: the totals of its operand metrics (kept by every front end: mxlab train, the
// experiment train job, the GUI), and the files of a run in a folder: metrics.csv row by row, summary.json,
// recipe.txt and the checkpoint a stopped or killed run resumes from.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/core/provenance.hpp"
#include "mxlab/train/trainer.hpp"

namespace mxlab::train {

/// Running sums of one quantized operand's metrics over the metric steps.
struct OperandTotals {
  std::int64_t steps = 0, nonzero = 0, underflow = 0, count = 0, saturated = 0;
  double mse_sum = 0;        ///< the steps' MSEs summed (mean_mse: their mean)
  double squared_error = 0;  ///< MSE x count summed (weighted_mse: the MSE over every value of every step)

  void add(const OperandMetric& m);
  double underflow_ratio() const;   ///< underflows / nonzero values (0 without any)
  double saturation_ratio() const;  ///< saturated / values (0 without any)
  double mean_mse() const;          ///< mean of the steps' MSEs (0 without a step)
  double weighted_mse() const;      ///< squared_error / count (0 without a value)
};

/// One operand of a run: "LAYER.ROLE", and whether it has a delayed scale.
struct OperandColumn {
  std::string key;
  std::string layer;
  Role role = Role::W;
  bool delayed = false;
};

/// The totals of every operand over the steps, in the order the operands first appear.
class MetricTotals {
 public:
  /// Adds every operand of the step.
  void add(const StepMetrics& m);
  /// Sets one operand's totals (a resumed run's, from its checkpoint).
  void set(const OperandColumn& column, const OperandTotals& totals);
  const std::vector<OperandColumn>& columns() const { return columns_; }
  /// The totals of "LAYER.ROLE" (zero when the operand has not appeared).
  const OperandTotals& at(const std::string& key) const;
  /// The sums over every layer of one role (the output gradients' underflow of a whole run).
  OperandTotals of_role(Role role) const;

 private:
  std::vector<OperandColumn> columns_;
  std::vector<OperandTotals> totals_;
  std::map<std::string, std::size_t> index_;
};

/// What a run's record needs from the options and the data alone, before anything is allocated or written.
struct RecordPlan {
  std::size_t operands = 0;        ///< quantized operands over the model's GEMM layers
  std::size_t metric_columns = 0;  ///< their columns in metrics.csv
  std::size_t longest_key = 0;     ///< the longest "LAYER.ROLE"
  double record_bytes = 0;         ///< metrics.csv kept in memory (twice with checkpoints: one copy goes in the file)
};

/// The plan of a run's record; errors are the recipe's (a format a layer cannot take).
Result<RecordPlan> plan_record(const TrainData& data, const TrainOptions& options);

/// Whether the model fits the data: the transformer takes text, the other models images; the transformer's
/// --context leaves a window of context + 1 characters in both the training and the validation text. Errors name
/// the option.
std::optional<Error> check_data_fit(const TrainData& data, const TrainOptions& options);

/// Where and how a record is written.
struct RecordSettings {
  std::string out_dir;   ///< the run's folder (created)
  std::string identity;  ///< the settings that decide the results, one per line: a checkpoint resumes only under
                         ///< the same ones
  bool timing = true;    ///< false: no times in metrics.csv and summary.json (byte-comparable files)
  bool resume = false;   ///< continue from out_dir/checkpoint.bin when there is one
  bool keep_checkpoint = false;  ///< a finished run keeps its checkpoint (the trained model's state after the last
                                 ///< step; TrainOptions::checkpoint_last writes it) instead of removing it
};

/// What a checkpoint file holds for whoever evaluates its model: the settings of the run that wrote it
/// (RecordSettings::identity) and the trainer's state.
struct CheckpointContents {
  std::string identity;
  std::string state;
};

/// Reads a checkpoint file written by a RunRecord: a regular file of at most max_bytes whose SHA-256 matches
/// (as --resume checks it). Errors name the file.
Result<CheckpointContents> read_checkpoint_file(const std::string& path, std::uint64_t max_bytes);

/// Checks the output folder before the data is read: a name, not a file, and no folder or device under the name
/// of one of the run's files. Errors name --out.
std::optional<Error> check_out_dir(const std::string& out_dir);

/// The files of one run in its folder. open() takes the folder (one run per folder), resumes from its checkpoint
/// or removes one left behind; step() writes a metrics row and adds to the totals; checkpoint() writes the run's
/// state with the metrics so far; finish() writes summary.json and recipe.txt and puts metrics.csv in place.
class RunRecord {
 public:
  /// Opens the record; on resume, sets options.resume_state from the checkpoint after checking that it belongs to
  /// this run (identity, state, metrics, an existing metrics.csv). Errors name --out or --resume.
  static Result<RunRecord> open(const TrainData& data, TrainOptions& options, const RecordSettings& settings,
                                const RecordPlan& plan, const MemoryEstimate& estimate);
  RunRecord(RunRecord&&) noexcept;
  RunRecord& operator=(RunRecord&&) noexcept;
  ~RunRecord();

  /// A line for the person running it ("no checkpoint in DIR; starting at step 1"), or empty.
  const std::string& note() const;
  /// One step: its metrics.csv row, and its operands' totals.
  void step(const StepMetrics& m);
  /// Writes DIR/checkpoint.bin (temporary file, synced, renamed): the state with the metrics so far.
  std::optional<Error> checkpoint(const std::string& state);
  /// Writes metrics.csv, recipe.txt and summary.json (with the provenance); removes the checkpoint of a finished
  /// run (a cancelled one keeps it for --resume).
  std::optional<Error> finish(const TrainResult& result, Provenance provenance);
  /// Leaves metrics.csv as it was (a failed run).
  void discard();
  const MetricTotals& totals() const;

 private:
  struct State;
  explicit RunRecord(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

/// A run read back from the folder `mxlab train --out DIR` wrote: its steps (metrics.csv), its final figures
/// (summary.json) and its recipe (recipe.txt), for a front end to show beside the runs it trains.
struct SavedRun {
  std::string dir;
  std::string model, data, recipe;  ///< summary.json's model, data and recipe name
  std::string recipe_text;          ///< recipe.txt, as written
  bool text = false;                ///< a text model: `accuracy` holds bits per character
  bool cancelled = false;           ///< stopped before its last step
  std::int64_t skipped_steps = 0;
  std::vector<double> step, loss, accuracy;  ///< one per row of metrics.csv
  std::vector<double> val_step, val_loss;    ///< the rows with a validation loss
  /// summary.json's final validation and test figures (metric: accuracy, or bits per character for text).
  std::optional<double> validation_loss, validation_metric, test_loss, test_metric;
};

/// Largest metrics.csv read_run reads (a million steps of a model with a hundred operands stay below it).
inline constexpr std::uint64_t kMaxSavedMetricsBytes = std::uint64_t{1} << 30;

/// Reads a run's folder. Errors name the folder and the file at fault: a file missing or not a regular file,
/// summary.json that does not parse or lacks a key (or holds one of another type), a metrics.csv whose header is not
/// a run's, a row that is short, numbered out of order or holds a value that is not a number, and rows that
/// disagree with summary.json's step count.
Result<SavedRun> read_run(const std::string& dir);

/// The provenance inputs of a run (seed, model, data and its files, recipe, steps, batch, lr, optimizer, threads).
void add_run_inputs(Provenance& provenance, const TrainData& data, const TrainOptions& options);

}  // namespace mxlab::train
