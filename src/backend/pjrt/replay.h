// The PJRT backend's recorded steps (Backend::record, Backend::replay): a training step's program
// kept with where each of its arguments comes from and where each output goes, and run again
// with the step's new host data instead of being built again.
//
// A replay must be exactly the program that building the step would give. Building is a function
// of the calls (the caller promises the same ones, only the data of its from_host calls changing),
// of the tensors' layout (tensors.h: every allocation and part, its type and shape, whether the
// device holds it) and of numbers a kernel fixes in the program. So a step is kept only when it
// is one program, every argument of it is a part's contents, one of its from_host calls' data or
// a constant (a kernel's per-step number, a `value` argument, makes it a step that cannot be
// kept), and it allocated nothing that outlives it; and it is replayed only where the layout is
// the one it was built in, its writes the same destinations in the same order.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "backend/pjrt/programs.h"
#include "backend/pjrt/tensors.h"
#include "backend/pjrt/trace.h"

namespace lmt {

class PjrtClient;

class PjrtReplays {
 public:
  PjrtReplays(PjrtTensors& tensors, PjrtPrograms& programs, const PjrtClient& client)
      : tensors_(tensors), programs_(programs), client_(client) {}

  // Backend::record: the calls from here to the step's end are one step, kept under key if they
  // are one program (`pending`: a program was pending already, so they are not).
  void arm(int key, bool pending);
  // A program ran (p, compiled as c): kept under the armed key if it is the whole armed step
  // (step_end: the step's synchronize) and can be replayed. Any run ends the armed step.
  void ran(const PjrtAssembled& p, PjrtPrograms::Compiled* c, bool step_end);
  // Backend::replay.
  bool replay(int key, const std::function<void()>& writes);
  // During a replay's writes, takes a from_host call as the replay's data (true); else false.
  bool capture(const void* dst, const void* src, size_t bytes);
  bool capturing() const { return capturing_ != nullptr; }

 private:
  struct Recording {
    PjrtPrograms::Compiled* program = nullptr;
    PjrtLayout layout;                     // the tensors' when the step started
    std::vector<PjrtAssembled::Arg> args;  // sources (part, write or constant), types, shardings
    std::vector<std::vector<uint8_t>> constants;  // a constant argument's data, by argument
    std::vector<PjrtAssembled::Write> writes;
    std::vector<std::vector<uint8_t>> data;  // the replay's data of each write
    std::vector<int> donate;
    std::vector<PjrtAssembled::Out> outs;
    std::vector<TensorSharding> out_shardings;
    std::vector<ProgramArgument> arguments;
    std::vector<uintptr_t> dead;
  };
  struct Armed {
    int key = 0;
    bool clean = false;
    PjrtLayout layout;
  };

  static bool replayable(const PjrtAssembled& p);
  bool same_allocations(const PjrtLayout& l) const;
  void run(Recording& r);

  PjrtTensors& tensors_;
  PjrtPrograms& programs_;
  const PjrtClient& client_;
  std::map<int, Recording> recordings_;
  std::optional<Armed> armed_;
  Recording* capturing_ = nullptr;
  size_t captured_ = 0;
};

}  // namespace lmt
