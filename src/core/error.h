// Two kinds of failure. UserError: something the user can fix (a config key, a file, line N of a
// dataset); its message names the thing, and the CLI turns it into exit code 2. LMT_CHECK: an
// internal invariant; a failure is a bug in lmtrain and names the source line.
#pragma once

#include <stdexcept>
#include <string>

namespace lmt {

class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& msg) : std::runtime_error(msg) {}
};

class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& msg) : std::logic_error(msg) {}
};

[[noreturn]] void check_failed(const char* expr, const char* file, int line,
                               const std::string& msg);

constexpr int kExitUserError = 2;

// User text quoted in a message: whole up to `max` bytes, else its start (never cut inside a UTF-8
// character) and "... (N bytes)", so a megabyte of input does not become a megabyte of message.
std::string excerpt(const std::string& text, size_t max = 60);

}  // namespace lmt

#define LMT_CHECK(cond, ...)                                                               \
  do {                                                                                     \
    if (!(cond)) ::lmt::check_failed(#cond, __FILE__, __LINE__, std::string{__VA_ARGS__}); \
  } while (0)
