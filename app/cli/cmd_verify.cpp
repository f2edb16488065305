// `mxlab verify-cast`: every float32 bit pattern through the SIMD cast and the scalar reference.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <iostream>
#include <thread>

#include "cli/cli.hpp"
#include "mxlab/core/text.hpp"
#include "mxlab/core/threads.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/kernels/simd_target.hpp"
#include "mxlab/kernels/verify.hpp"

namespace mxlab::cli {
namespace {
/// The columns a terminal shows first (--columns chooses others; files have every column).
const std::vector<std::string> kVerifyColumns = {"format", "round", "simd_target", "checked", "mismatches", "seconds"};

std::vector<OptionSpec> verify_option_specs() {
  std::vector<OptionSpec> specs = {
      {"round", true, "MODE", "rounding mode (default nearest-even); stochastic uses stochastic_bits(seed, bits)"},
      {"overflow", true, "POLICY", "saturate, inf, nan (default: inf if the format has infinity, else saturate)"},
      {"subnormals", true, "MODE", "keep (default), flush, flush-input, flush-output"},
      {"seed", true, "N", "stochastic rounding seed (default 0)"},
      {"random-bits", true, "R", "stochastic rounding random bits 1..32 (default 32)"},
      {"threads", true, "N", "worker threads (default: all hardware threads)"},
      {"range", true, "FIRST:LAST", "only these float32 bit patterns (inclusive; default all 2^32)"},
      {"target", true, "NAME", "force one SIMD target (e.g. AVX2, SSE4, EMU128); default the best"},
      {"examples", true, "N", "mismatches to list (default 16)"},
  };
  for (auto& o : table_output_options()) specs.push_back(o);
  return specs;
}

void print_verify_help(std::ostream& out, const std::vector<OptionSpec>& specs) {
  out << "usage: mxlab verify-cast FORMAT [--round MODE] [--overflow P] [--subnormals M] [--threads N]\n"
         "                         [--range FIRST:LAST] [--target NAME] [--columns A,B,...]\n"
         "                         [--csv|--json|--md]\n\n"
         "Casts every float32 bit pattern (or a range) with the SIMD kernel and with the scalar reference,\n"
         "multithreaded, and reports the number of mismatches with examples. Exit code 1 when any differ.\n"
      << terminal_columns_help({{"", kVerifyColumns}}) << "\n" << options_help(specs);
}

/// What `mxlab verify-cast` is asked besides the format: the cast's options and the verification's.
struct VerifyRequest {
  CastOptions cast;
  VerifyOptions verify;
};

Result<VerifyRequest> verify_request(const Args& args) {
  VerifyRequest request;
  CastOptions& o = request.cast;
  std::optional<Error> err;
  auto set = [&](const char* name, auto parse, auto& field) {
    if (err) return;
    if (auto v = args.value(name)) {
      auto r = parse(*v);
      if (!r) err = make_error("option '--" + std::string(name) + "': " + r.error().message);
      else field = *r;
    }
  };
  set("round", parse_rounding, o.rounding);
  set("overflow", parse_overflow, o.overflow);
  set("subnormals", parse_subnormals, o.subnormals);
  if (err) return *err;
  VerifyOptions& vo = request.verify;
  vo.threads = 0;
  const auto threads = args.integer("threads", 0, 1024, 0);
  const auto seed = args.unsigned_integer("seed", vo.seed);
  const auto random_bits = args.integer("random-bits", 1, 32, o.random_bits);
  const auto examples = args.size("examples", 0, 100000, vo.max_examples);
  if (!threads) return threads.error();
  if (!seed) return seed.error();
  if (!random_bits) return random_bits.error();
  if (!examples) return examples.error();
  vo.threads = static_cast<unsigned>(*threads);
  vo.seed = *seed;
  o.random_bits = static_cast<int>(*random_bits);
  vo.max_examples = *examples;
  if (auto v = args.value("range")) {
    const auto colon = v->find(':');
    const auto a = parse_code(std::string_view(*v).substr(0, colon));
    const auto b = colon == std::string::npos ? std::nullopt : parse_code(std::string_view(*v).substr(colon + 1));
    if (!a || !b || *a > *b || *b > 0xFFFFFFFFULL)
      return make_error("option '--range " + *v + "': expected FIRST:LAST with FIRST <= LAST <= 0xFFFFFFFF");
    vo.begin = *a;
    vo.end = *b + 1;
  }
  return request;
}

/// The report's one row: the format, the options as resolved, the target, the counts and the time.
Table verify_table(const Format& f, const VerifyRequest& request, const VerifyReport& report) {
  const CastOptions& o = request.cast;
  Table t;
  for (const char* c : {"format", "round", "overflow", "subnormals", "simd_target", "threads", "checked", "mismatches", "seconds"})
    t.add_column(c, std::string(c) == "checked" || std::string(c) == "mismatches" || std::string(c) == "seconds");
  auto ro = resolve_options(f, o);
  t.rows.push_back({f.name(), std::string(to_string(o.rounding)), std::string(to_string(ro ? ro->overflow : o.overflow)),
                    std::string(to_string(o.subnormals)), report.simd_target,
                    std::to_string(request.verify.threads != 0 ? request.verify.threads : hardware_threads()),
                    std::to_string(report.checked), std::to_string(report.mismatches), fixed_digits(report.seconds, 3)});
  return t;
}

}  // namespace

int cmd_verify_cast(const std::vector<std::string>& argv, Io io) {
  const std::vector<OptionSpec> specs = verify_option_specs();
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "verify-cast", args.error().message);
  if (args->help) {
    print_verify_help(io.out, specs);
    return kExitOk;
  }
  if (args->positional.size() != 1) return bad_input(io, "verify-cast", "expected one FORMAT");
  auto f = parse_format(args->positional[0]);
  if (!f) return bad_input(io, "verify-cast", f.error().message);
  auto request = verify_request(*args);
  if (!request) return bad_input(io, "verify-cast", request.error().message);
  std::optional<ScopedSimdTarget> forced;
  if (auto v = args->value("target")) {
    std::string names;
    for (const auto& t : simd_targets()) {
      names += (names.empty() ? "" : ", ") + t.name;
      if (t.name == *v) forced.emplace(t);
    }
    if (!forced) return bad_input(io, "verify-cast", "option '--target " + *v + "': not available here (" + names + ")");
  }
  request->verify.progress = [&](std::uint64_t done, std::uint64_t total) {
    std::fprintf(stderr, "\rverify-cast %s: %5.1f%%", f->name().c_str(), 100.0 * static_cast<double>(done) / static_cast<double>(total));
    return true;
  };
  auto report = verify_cast(*f, request->cast, request->verify);
  std::fprintf(stderr, "\n");
  if (!report) return bad_input(io, "verify-cast", report.error().message);
  Provenance p = build_provenance();
  p.simd_target = report->simd_target;
  p.inputs = {{"format", f->name()}, {"seed", std::to_string(request->verify.seed)}};
  const int code = emit_table(io, "verify-cast", *args, verify_table(*f, *request, *report), p, {kVerifyColumns, ""});
  for (const auto& m : report->examples)
    io.err << "mismatch: input " << hex_code(m.input_bits, 32) << " simd " << hex_code(m.simd_code, f->bits())
           << " reference " << hex_code(m.reference_code, f->bits()) << "\n";
  if (code != kExitOk) return code;
  return report->mismatches == 0 ? kExitOk : kExitFailure;
}

}  // namespace mxlab::cli
