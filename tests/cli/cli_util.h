// Running the lmtrain binary from tests: exit code and output of one command line.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

struct Result {
  int code = -1;
  std::string out;  // stdout and stderr together
};

// Runs a shell command line, capturing stdout and stderr together.
Result capture(const std::string& cmd) {
  Result r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

Result run(const std::string& args) { return capture(std::string(LMT_BINARY) + " " + args); }
Result run_shell(const std::string& script) { return capture("bash -c '" + script + "'"); }

}  // namespace
