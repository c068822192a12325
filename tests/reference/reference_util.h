// Helpers of the C++ tests of the reference tier (ctest label `reference`): they run a Python
// script of scripts/ in the environment that scripts/setup.sh makes (LMT_PYTHON) to compute
// references at test time, then compare with lmtrain's own code. A missing or outdated
// environment fails the test with tests/run_reference.sh's message on how to make it.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "cli/cli_util.h"   // capture()
#include "cli/test_seed.h"  // fresh_seed(), for the tests that include this header

namespace lmt::test {

// Empty when the reference environment is ready; otherwise the message that says how to make it.
inline std::string reference_env_problem() {
  const Result r = capture("LMTRAIN_PYTHON='" + std::string(LMT_PYTHON) + "' bash '" +
                           std::string(LMT_SOURCE_DIR) + "/tests/run_reference.sh' --check");
  return r.code == 0 ? "" : r.out;
}

// Runs `script` (relative to the source root) with `args` in the reference environment; returns
// its output, failing the test (fatally for the caller's ASSERT_NO_FATAL_FAILURE) otherwise.
inline std::string run_reference_script(const std::string& script, const std::string& args) {
  const std::string problem = reference_env_problem();
  if (!problem.empty()) {
    ADD_FAILURE() << problem;
    return "";
  }
  const std::string cmd = "'" + std::string(LMT_PYTHON) + "' '" + std::string(LMT_SOURCE_DIR) +
                          "/" + script + "' " + args;
  const Result r = capture(cmd);
  if (r.code != 0) ADD_FAILURE() << cmd << " exited " << r.code << ":\n" << r.out;
  return r.out;
}

}  // namespace lmt::test
