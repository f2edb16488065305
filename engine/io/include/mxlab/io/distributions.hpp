// Generated tensors: seeded random distributions with fixed algorithms, and their text specs.
//
// Spec syntax (names and keys are case-insensitive, spaces around items are ignored):
//
//   spec := name [ ':' arg { ',' arg } ]        arg := value | key '=' value
//
// Positional values fill the parameters in the order listed; key=value may follow them in any order.
// Parameters not given take the default shown; student_t has no default for dof.
//
//   normal:mean,std                  mean 0, std 1                   "normal:0,1"
//   laplace:loc,scale                loc 0, scale 1                  "laplace:0,1"
//   student_t:dof                    dof required (> 0)              "student_t:3"
//   lognormal:mu,sigma,sign          mu 0, sigma 1, sign positive    "lognormal:0,2,sign=random"
//       |x| = exp(mu + sigma * Z); sign = positive | random (each value negated with probability 1/2)
//   uniform:lo,hi                    lo -1, hi 1                     "uniform:-1,1"
//   outliers:rate,mag,mean,std       rate 0.001, mag 100, mean 0, std 1
//       mean + std * Z, the deviation multiplied by mag with probability rate
//                                                                    "outliers:rate=0.001,mag=100"
//   blockexp:block,lo,hi             block 32, lo -20, hi 20         "blockexp:block=32,lo=-20,hi=20"
//       consecutive runs of `block` elements (C order) share an exponent e drawn uniformly from the
//       integers lo..hi; each value is Z * 2^e
//
// Z is a standard normal variate. Shapes are written "1024x1024", "4096", "2x3x4" or "scalar".
//
// Reproducibility: every draw comes from mxlab::Rng(seed) in a fixed order with the fixed algorithms
// documented in distributions.cpp (no std::*_distribution, whose output differs between standard
// libraries). The float32 tensor is the float64 tensor of the same seed rounded to nearest. The
// transforms use std::log, std::sqrt, std::exp and std::pow; a libm that does not round these
// correctly could in principle change the last bit of a value on another machine.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/io/tensor.hpp"

namespace mxlab {

/// Normal(mean, stddev^2).
struct NormalDist {
  double mean = 0.0;
  double stddev = 1.0;
};
/// Laplace with density exp(-|x - loc| / scale) / (2 scale).
struct LaplaceDist {
  double loc = 0.0;
  double scale = 1.0;
};
/// Student's t with `dof` degrees of freedom.
struct StudentTDist {
  double dof = 3.0;
};
/// Log-normal magnitude exp(mu + sigma Z), optionally with a random sign.
struct LogNormalDist {
  double mu = 0.0;
  double sigma = 1.0;
  bool random_sign = false;
};
/// Uniform on [lo, hi).
struct UniformDist {
  double lo = -1.0;
  double hi = 1.0;
};
/// Normal(mean, stddev^2) whose deviation from the mean is multiplied by `mag` with probability `rate`.
struct OutlierDist {
  double rate = 0.001;
  double mag = 100.0;
  double mean = 0.0;
  double stddev = 1.0;
};
/// Standard normal values times 2^e, e uniform in lo..hi and shared by each run of `block` elements.
struct BlockExpDist {
  std::int64_t block = 32;
  int lo = -20;
  int hi = 20;
};

/// One of the generated distributions.
using Distribution =
    std::variant<NormalDist, LaplaceDist, StudentTDist, LogNormalDist, UniformDist, OutlierDist, BlockExpDist>;

/// Parses a distribution spec (syntax above); errors name the spec and the problem.
Result<Distribution> parse_distribution(std::string_view text);

/// Canonical spec text with every parameter named, e.g. "normal:mean=0,std=1"; parses back to `d`.
std::string distribution_text(const Distribution& d);

/// Checks the parameters (positive scales, lo < hi, rate in [0, 1], ...); `name` names the spec.
Result<Distribution> validate_distribution(const Distribution& d, std::string_view name);

/// Parses "1024x1024", "4096", "2x3x4" or "scalar"; every dimension is a positive integer.
Result<std::vector<std::int64_t>> parse_shape(std::string_view text);

/// Generates a tensor of this shape from the distribution and seed; dtype F64 keeps the float64 draws,
/// F32 rounds them to nearest. F16 and BF16 are rejected (cast with the formats module instead).
Result<Tensor> generate(const Distribution& d, const std::vector<std::int64_t>& shape, std::uint64_t seed,
                        DType dtype = DType::F32);

/// parse_distribution + parse_shape + generate.
Result<Tensor> generate(std::string_view spec, std::string_view shape, std::uint64_t seed, DType dtype = DType::F32);

}  // namespace mxlab
