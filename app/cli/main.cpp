// mxlab command-line entry point.
#include <iostream>

#include "cli/cli.hpp"

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  std::vector<std::string> args(argv, argv + argc);
  return mxlab::cli::run(args, {std::cin, std::cout, std::cerr});
}
