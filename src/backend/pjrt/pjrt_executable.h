// A program compiled for a PJRT device (a PJRT_LoadedExecutable), owned. Running it takes device
// buffers and returns device buffers; nothing passes through the host unless asked.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "backend/pjrt/pjrt_buffer.h"

struct PJRT_LoadedExecutable;

namespace lmt {

class PjrtExecutable {
 public:
  PjrtExecutable(const PjrtExecutable&) = delete;
  PjrtExecutable& operator=(const PjrtExecutable&) = delete;
  PjrtExecutable(PjrtExecutable&& o) noexcept
      : session_(std::move(o.session_)),
        executable_(std::exchange(o.executable_, nullptr)),
        num_outputs_(o.num_outputs_) {}
  PjrtExecutable& operator=(PjrtExecutable&& o) noexcept;
  ~PjrtExecutable() { reset(); }

  size_t num_outputs() const { return num_outputs_; }

  // Runs the program on the client's device and waits for it. args: one buffer per parameter of
  // @main, in order. Buffers whose index is in `donate` are given to the program, which may write
  // its outputs into their memory (a parameter marked `tf.aliasing_output = N` in the module);
  // they are invalid afterwards. Every other argument is left untouched, whatever the program
  // says. Returns the outputs in the order @main returns them. The plugin refuses a wrong number
  // of arguments or one of the wrong byte size (XLA's CPU plugin compares sizes, not dims).
  std::vector<PjrtBuffer> execute(std::span<PjrtBuffer* const> args,
                                  std::span<const int> donate = {});

 private:
  friend class PjrtClient;
  PjrtExecutable(std::shared_ptr<PjrtSession> session, PJRT_LoadedExecutable* executable,
                 size_t num_outputs)
      : session_(std::move(session)), executable_(executable), num_outputs_(num_outputs) {}
  void reset() noexcept;

  std::shared_ptr<PjrtSession> session_;  // keeps the client alive while the program lives
  PJRT_LoadedExecutable* executable_ = nullptr;
  size_t num_outputs_ = 0;
};

}  // namespace lmt
