// The scripts of a Slurm job array running experiments in shards, and of the job merging the shards.
#include "mxlab/experiment/slurm.hpp"

#include <filesystem>
#include <system_error>

#include "mxlab/core/atomic_file.hpp"
#include "mxlab/core/quote.hpp"

namespace mxlab::experiment {

namespace {

/// A path in sbatch's --output pattern: '%' stands for itself only when doubled.
std::string sbatch_pattern_path(std::string_view path) {
  std::string s;
  for (char c : path) {
    s += c;
    if (c == '%') s += '%';
  }
  return s;
}

}  // namespace

std::string shell_quote(std::string_view text) {
  std::string s = "'";
  for (char c : text) {
    if (c == '\'')
      s += "'\\''";
    else
      s += c;
  }
  return s + "'";
}

SlurmScripts slurm_scripts(const SlurmPlan& plan) {
  const std::string n = std::to_string(plan.tasks);
  const std::string dir = shell_quote(plan.out_dir);
  const std::string mxlab = shell_quote(plan.mxlab);
  SlurmScripts s;

  s.submit = "#!/bin/sh\n"
             "# " + plan.name + " on Slurm: a job array of " + n + " tasks (slurm/array.sbatch), task K running shard K/" + n +
             " into\n"
             "# shard-K/, then a job merging the shards into this folder once every task has succeeded (slurm/merge.sbatch).\n"
             "# Arguments go to both sbatch calls (e.g. --partition=P --time=2:00:00 --cpus-per-task=4).\n"
             "set -eu\n"
             "dir=" + dir + "\n"
             "logs=" + shell_quote(sbatch_pattern_path(plan.out_dir) + "/slurm/logs") + "\n"
             "array=$(sbatch --parsable --output=\"$logs/array-%A-%a.out\" \"$@\" \"$dir/slurm/array.sbatch\")\n"
             "array=${array%%;*}\n"
             "merge=$(sbatch --parsable --dependency=afterok:\"$array\" --output=\"$logs/merge-%j.out\" \"$@\" \\\n"
             "  \"$dir/slurm/merge.sbatch\") || { scancel \"$array\"; exit 1; }\n"
             "merge=${merge%%;*}\n"
             "echo \"array job $array (" + n + " tasks), merge job $merge; results in $dir\"\n";

  std::string run = mxlab + " run";
  for (const auto& f : plan.files) run += " " + shell_quote(f);
  run += " --shard \"$task/" + n + "\" --out " + dir + "/shard-\"$task\" --jobs " + std::to_string(plan.jobs);
  run += " --threads " + (plan.threads.empty() ? std::string("\"$threads\"") : shell_quote(plan.threads));
  if (plan.resume) run += " --resume";
  if (plan.quiet) run += " --quiet";
  s.array = "#!/bin/sh\n"
            "#SBATCH --job-name=mxlab-" + plan.name + "\n"
            "#SBATCH --array=0-" + std::to_string(plan.tasks - 1) + "\n"
            "# Task K runs shard K/" + n + " of " + plan.name + " into the folder shard-K beside submit.sh, which submits it.\n"
            "set -eu\n"
            "task=${SLURM_ARRAY_TASK_ID:?not set: submit this script with sbatch, as submit.sh does}\n"
            "cd " + shell_quote(plan.work_dir) + "\n";
  if (plan.threads.empty())
    s.array += "# The CPUs Slurm gave the task (sbatch --cpus-per-task), shared by the points run at once.\n"
               "threads=$(( ${SLURM_CPUS_ON_NODE:-1} / " + std::to_string(plan.jobs) + " ))\n"
               "if [ \"$threads\" -lt 1 ]; then threads=1; fi\n";
  s.array += "exec " + run + "\n";

  s.merge = "#!/bin/sh\n"
            "#SBATCH --job-name=mxlab-" + plan.name + "-merge\n"
            "# Joins the folders shard-0 to shard-" + std::to_string(plan.tasks - 1) +
            " into the folder of submit.sh, which starts it once every array\n"
            "# task has succeeded.\n"
            "set -eu\n"
            "cd " + shell_quote(plan.work_dir) + "\n"
            "dir=" + dir + "\n"
            "merge() {  # merge REL: the folder REL of every shard, merged into $dir$REL\n"
            "  rel=$1\n"
            "  set --\n"
            "  k=0\n"
            "  while [ \"$k\" -lt " + n + " ]; do\n"
            "    set -- \"$@\" \"$dir/shard-$k$rel\"\n"
            "    k=$((k + 1))\n"
            "  done\n"
            "  " + mxlab + " merge \"$@\" --out \"$dir$rel\"\n"
            "}\n";
  for (const auto& m : plan.members) s.merge += "merge " + shell_quote(m) + "\n";
  return s;
}

Result<std::vector<std::string>> write_slurm_scripts(const SlurmPlan& plan) {
  namespace fs = std::filesystem;
  const fs::path dir(plan.out_dir);
  std::error_code ec;
  fs::create_directories(dir / "slurm" / "logs", ec);
  if (ec) return make_error("--out " + quote_input(plan.out_dir) + ": " + ec.message());
  const auto s = slurm_scripts(plan);
  // submit.sh last: once it is there, so is what it submits.
  const std::pair<fs::path, const std::string*> files[] = {
      {dir / "slurm" / "array.sbatch", &s.array}, {dir / "slurm" / "merge.sbatch", &s.merge}, {dir / "submit.sh", &s.submit}};
  std::vector<std::string> written;
  for (const auto& [path, text] : files) {
    auto w = write_file_atomic(path.string(), *text, "script");
    if (!w) return w.error();
    written.push_back(path.string());
  }
  return written;
}

}  // namespace mxlab::experiment
