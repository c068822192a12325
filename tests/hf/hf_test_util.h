// Helpers of the Hugging Face tests: fixture paths; the temporary directory and the UserError
// expectation are the io tests' (io/io_test_util.h).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "io/io_test_util.h"  // temp_dir(), expect_user_error()

namespace lmt::test {

inline std::string hf_fixture(const std::string& family) {
  return std::string(LMT_TEST_DATA) + "/hf/" + family;
}

}  // namespace lmt::test
