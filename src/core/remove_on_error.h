// A directory being written in a temporary place before a rename publishes it: removed when the
// scope is left by an exception, kept once disarm() says it was published. Token stores and
// checkpoints are both built this way, so a failed write leaves nothing behind.
#pragma once

#include <filesystem>

namespace lmt {

class RemoveOnError {
 public:
  explicit RemoveOnError(std::filesystem::path dir) : dir_(std::move(dir)) {}
  ~RemoveOnError() {
    std::error_code ec;
    if (armed_) std::filesystem::remove_all(dir_, ec);
  }
  RemoveOnError(const RemoveOnError&) = delete;
  RemoveOnError& operator=(const RemoveOnError&) = delete;
  void disarm() { armed_ = false; }

 private:
  std::filesystem::path dir_;
  bool armed_ = true;
};

}  // namespace lmt
