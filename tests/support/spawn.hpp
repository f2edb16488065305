// Runs the mxlab binary (MXLAB_BINARY, defined by the test's CMake target) as a child process, for tests that
// need a real process: SIGKILL at random moments, an environment read once at start-up.
#pragma once

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace mxlab_test {

/// What the child sees besides its arguments: where its standard error goes (empty: discarded, like its
/// standard output) and environment variables set (a value) or removed (nullopt) before it starts.
struct SpawnOptions {
  std::string stderr_file;
  std::vector<std::pair<std::string, std::optional<std::string>>> env;
};

/// Starts mxlab with the arguments; returns the child's pid.
inline pid_t spawn_mxlab(const std::vector<std::string>& args, const SpawnOptions& options = {}) {
  const std::string binary = MXLAB_BINARY;
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int devnull = ::open("/dev/null", O_WRONLY);
    const int err =
        options.stderr_file.empty() ? devnull : ::open(options.stderr_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(devnull, 1);
    ::dup2(err, 2);
    for (const auto& [name, value] : options.env) {
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

/// Runs mxlab with the arguments; returns the exit code, or -1 when killed by a signal. With kill_after > 0 the
/// process gets SIGKILL after that long unless it has finished; *killed then says whether it did.
inline int run_mxlab(const std::vector<std::string>& args, std::chrono::microseconds kill_after = {},
                     bool* killed = nullptr, const SpawnOptions& options = {}) {
  const pid_t pid = spawn_mxlab(args, options);
  REQUIRE(pid > 0);
  int status = 0;
  if (killed != nullptr) *killed = false;
  if (kill_after.count() > 0) {
    std::this_thread::sleep_for(kill_after);
    if (::waitpid(pid, &status, WNOHANG) == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      if (killed != nullptr) *killed = true;
      return -1;
    }
  } else {
    REQUIRE(::waitpid(pid, &status, 0) == pid);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace mxlab_test
