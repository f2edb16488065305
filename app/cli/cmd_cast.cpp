// `mxlab cast`: values to a format with explicit rounding, overflow and subnormal handling, with the
// decoded value and the exact error of each.
#include <charconv>
#include <iostream>

#include "cli/cli.hpp"
#include "mxlab/core/random.hpp"
#include "mxlab/core/text.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/ops/inspect.hpp"

namespace mxlab::cli {
namespace {


std::string flags_text(const CastResult& r) {
  std::string s;
  auto add = [&](bool b, const char* name) {
    if (!b) return;
    if (!s.empty()) s += '|';
    s += name;
  };
  add(r.inexact, "inexact");
  add(r.overflow, "overflow");
  add(r.underflow, "underflow");
  add(r.invalid, "invalid");
  return s;
}

/// The columns a terminal shows first (--columns chooses others; files have every column).
const std::vector<std::string> kCastColumns = {"input_text", "hex", "bits", "value", "error", "flags", "exact"};

/// What `mxlab cast` is asked besides the format: the cast's options and the seed of stochastic rounding.
struct CastRequest {
  CastOptions options;
  std::uint64_t seed = 0;
};

std::vector<OptionSpec> cast_option_specs() {
  std::vector<OptionSpec> specs = {
      {"round", true, "MODE", "nearest-even (default), nearest-away, nearest-zero, zero, up, down, odd, stochastic"},
      {"overflow", true, "POLICY", "saturate, inf, nan (default: inf if the format has infinity, else saturate)"},
      {"subnormals", true, "MODE", "keep (default), flush (input and output), flush-input, flush-output"},
      {"from", true, "TYPE", "source type the literals are rounded to first: f64 (default), f32, f16, bf16"},
      {"seed", true, "N", "seed of the stochastic rounding stream (default 0); input i uses stochastic_bits(N, i)"},
      {"random-bits", true, "R", "random bits compared with the discarded fraction, 1..32 (default 32)"},
  };
  for (auto& o : table_output_options()) specs.push_back(o);
  return specs;
}

void print_cast_help(std::ostream& out, const std::vector<OptionSpec>& specs) {
  out << "usage: mxlab cast FORMAT [VALUE...] [--round MODE] [--overflow POLICY] [--subnormals MODE]\n"
         "                  [--from TYPE] [--seed N] [--random-bits R] [--columns A,B,...]\n"
         "                  [--csv|--json|--md] [--out FILE]\n\n"
         "Casts each VALUE (decimal or C99 hex literal such as 0x1.8p+3, parsed exactly; nan, inf, -inf)\n"
         "to FORMAT. Without VALUEs, reads one value per line from standard input (blank lines and\n"
         "lines starting with # are skipped). Columns: input_text, input (the value after rounding the\n"
         "literal to --from, %.17g), input_rounded, code, hex, bits, value (%.17g), exact (exact decimal),\n"
         "error = value - input (%.17g) and error_exact (exact decimal), flags.\n"
         "The rules are in docs/casting.md.\n"
      << terminal_columns_help({{"", kCastColumns}}) << "\n" << options_help(specs);
}

/// The options of the cast to `f` (resolved: the format's own defaults where an option is not given).
Result<CastRequest> cast_request(const Args& args, const Format& f) {
  CastRequest request;
  CastOptions& o = request.options;
  if (auto v = args.value("round")) {
    auto r = parse_rounding(*v);
    if (!r) return make_error("option '--round': " + r.error().message);
    o.rounding = *r;
  }
  if (auto v = args.value("overflow")) {
    auto r = parse_overflow(*v);
    if (!r) return make_error("option '--overflow': " + r.error().message);
    o.overflow = *r;
  }
  if (auto v = args.value("subnormals")) {
    auto r = parse_subnormals(*v);
    if (!r) return make_error("option '--subnormals': " + r.error().message);
    o.subnormals = *r;
  }
  if (auto v = args.value("from")) {
    auto r = parse_source_type(*v);
    if (!r) return make_error("option '--from': " + r.error().message);
    o.source = *r;
  }
  const auto seed = args.unsigned_integer("seed", 0);
  if (!seed) return seed.error();
  request.seed = *seed;
  const auto bits = args.integer("random-bits", 1, 32, o.random_bits);
  if (!bits) return bits.error();
  o.random_bits = static_cast<int>(*bits);
  auto ro = resolve_options(f, o);
  if (!ro) return ro.error();
  o = *ro;
  return request;
}

/// The values to cast: the arguments after FORMAT, or standard input one per line (blank lines and lines
/// starting with # skipped), with the line number of each.
struct CastInputs {
  std::vector<std::string> texts;
  std::vector<std::size_t> line_numbers;  ///< empty: the values are arguments
};

CastInputs cast_inputs(const Args& args, std::istream& in) {
  CastInputs inputs;
  inputs.texts.assign(args.positional.begin() + 1, args.positional.end());
  if (!inputs.texts.empty()) return inputs;
  std::string line;
  std::size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    const std::string t(trim(line));
    if (t.empty() || t[0] == '#') continue;
    inputs.texts.push_back(t);
    inputs.line_numbers.push_back(n);
  }
  return inputs;
}

/// A row per value cast (ops::cast_text); the first value that does not parse is the error, with its line.
Result<Table> cast_table(const Format& f, const CastInputs& inputs, const CastRequest& request) {
  Table t;
  for (const char* c : {"input_text", "input", "input_rounded", "code", "hex", "bits", "value", "exact", "error",
                        "error_exact", "flags"}) {
    const std::string col = c;
    t.add_column(col, col == "input" || col == "code" || col == "value" || col == "error");
  }
  const auto& texts = inputs.texts;
  t.rows.reserve(texts.size());
  const bool stochastic = request.options.rounding == Rounding::Stochastic;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::uint32_t random = stochastic ? stochastic_bits(request.seed, i) : 0;
    auto c = ops::cast_text(f, texts[i], request.options, random);
    if (!c) {
      const std::string where =
          inputs.line_numbers.empty() ? "" : "standard input line " + std::to_string(inputs.line_numbers[i]) + ": ";
      return make_error(where + c.error().message);
    }
    const CastResult& r = c->result;
    // Where the input or the result is not finite, the error is IEEE arithmetic's (documented in --help).
    const std::string err_g = g17(c->error);
    t.rows.push_back({texts[i], g17(c->input), c->input_rounded ? "true" : "false", std::to_string(r.code),
                      hex_code(r.code, f.bits()), bit_string(f, r.code), g17(c->value), c->exact, err_g,
                      c->error_exact.empty() ? err_g : c->error_exact, flags_text(r)});
  }
  return t;
}

Provenance cast_provenance(const Format& f, const CastRequest& request) {
  const CastOptions& o = request.options;
  Provenance p = build_provenance();
  p.simd_target = "reference";  // the scalar reference cast, value by value
  p.inputs = {{"format", f.name()},
              {"round", std::string(to_string(o.rounding))},
              {"overflow", std::string(to_string(o.overflow))},
              {"subnormals", std::string(to_string(o.subnormals))},
              {"from", std::string(to_string(o.source))},
              {"seed", std::to_string(request.seed)},
              {"random_bits", std::to_string(o.random_bits)}};
  return p;
}

}  // namespace

int cmd_cast(const std::vector<std::string>& argv, Io io) {
  const std::vector<OptionSpec> specs = cast_option_specs();
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "cast", args.error().message);
  if (args->help) {
    print_cast_help(io.out, specs);
    return kExitOk;
  }
  if (args->positional.empty()) return bad_input(io, "cast", "missing FORMAT (e.g. mxlab cast e4m3 1.1 300)");
  auto f = element_format_arg(args->positional[0], io, "cast");
  if (!f) return bad_input(io, "cast", f.error().message);
  auto request = cast_request(*args, *f);
  if (!request) return bad_input(io, "cast", request.error().message);
  // All inputs are parsed before anything is written, so a bad value produces one message and no partial output.
  auto table = cast_table(*f, cast_inputs(*args, io.in), *request);
  if (!table) return bad_input(io, "cast", table.error().message);
  return emit_table(io, "cast", *args, *table, cast_provenance(*f, *request), {kCastColumns, ""});
}

}  // namespace mxlab::cli
