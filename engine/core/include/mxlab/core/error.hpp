// Error values and a minimal expected type for engine functions that can fail on user input.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace mxlab {

/// What went wrong, phrased for the person who wrote the input: names the input and the problem.
struct Error {
  std::string message;
};

/// Holds either a value or an Error (std::expected is C++23; g++ 12 lacks it).
template <typename T>
class Result {
 public:
  Result(T value) : data_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Error error) : data_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool ok() const { return data_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(data_); }
  const T& value() const& { return std::get<0>(data_); }
  T&& value() && { return std::get<0>(std::move(data_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  [[nodiscard]] const Error& error() const { return std::get<1>(data_); }

 private:
  std::variant<T, Error> data_;
};

/// Builds an Error from a message.
Error make_error(std::string message);

}  // namespace mxlab
