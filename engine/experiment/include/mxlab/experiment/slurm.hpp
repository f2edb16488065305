// Sweeps on a Slurm cluster: the scripts of a job array that runs experiments in shards (one task per shard,
// `mxlab run --shard K/N`) and of the job that merges the shards (`mxlab merge`) once every task has succeeded.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "mxlab/core/error.hpp"

namespace mxlab::experiment {

/// What the scripts run. Paths should be absolute: the jobs run on other machines, from other folders.
struct SlurmPlan {
  std::string mxlab;                 ///< the mxlab binary
  std::vector<std::string> files;    ///< the experiment files, as given to mxlab run
  std::string out_dir;               ///< the merged results folder; task K runs into out_dir/shard-K
  std::vector<std::string> members;  ///< each experiment's results folder relative to out_dir ("" or "/NAME...")
  std::string work_dir;              ///< the jobs' working directory (relative data paths resolve from there)
  std::string name;                  ///< names the jobs (mxlab-NAME, mxlab-NAME-merge)
  std::size_t tasks = 1;             ///< array tasks (shards)
  unsigned jobs = 1;                 ///< points run at once in a task (mxlab run --jobs)
  std::string threads;               ///< mxlab run --threads as given ("": the task's CPUs divided among its jobs)
  bool resume = false;               ///< mxlab run --resume in each shard's folder
  bool quiet = false;                ///< mxlab run --quiet
};

/// The scripts' texts (POSIX sh).
struct SlurmScripts {
  std::string submit;  ///< submit.sh: sbatch of the array, then of the merge with --dependency=afterok:ARRAY
  std::string array;   ///< slurm/array.sbatch: #SBATCH --array=0-(N-1); task K runs shard K/N
  std::string merge;   ///< slurm/merge.sbatch: mxlab merge of every shard folder into out_dir
};

/// `text` as one word for the shell: in single quotes, each ' written as '\''.
std::string shell_quote(std::string_view text);

SlurmScripts slurm_scripts(const SlurmPlan& plan);

/// Writes the scripts into plan.out_dir (submit.sh, slurm/array.sbatch, slurm/merge.sbatch; the jobs' output goes
/// to slurm/logs/), each atomically; returns the files written.
Result<std::vector<std::string>> write_slurm_scripts(const SlurmPlan& plan);

}  // namespace mxlab::experiment
