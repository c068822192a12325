// A program compiled for a PJRT device (a PJRT_LoadedExecutable), owned. Running it takes device
// buffers and returns device buffers; nothing passes through the host unless asked. A program
// compiled for a target without its devices (a deviceless compile) is a PJRT_Executable: its
// memory and kernel launches can be asked, it cannot run.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "backend/devices.h"
#include "backend/pjrt/runtime/buffer.h"

struct PJRT_Event;
struct PJRT_Executable;
struct PJRT_LoadedExecutable;

namespace lmt {

// What the compiler planned for one run of a program, in bytes (XLA's CompiledMemoryStats). The
// device's memory (HBM on a GPU; on XLA:CPU, host memory that XLA owns) first, then the program's
// buffers in the host memory space of an accelerator. On XLA:CPU a program with several results
// returns them as a tuple, whose table of pointers (8 bytes a result) counts among the outputs.
struct CompiledMemory {
  int64_t argument = 0;        // the parameters' buffers
  int64_t output = 0;          // the results' buffers, those aliased to parameters included
  int64_t alias = 0;           // parameter bytes the results reuse (tf.aliasing_output)
  int64_t temp = 0;            // scratch the program allocates while it runs
  int64_t generated_code = 0;  // 0 where the plugin does not count it (XLA:CPU)
  int64_t peak = 0;            // the most live at once, arguments included; 0 when not computed
  int64_t host_argument = 0, host_output = 0, host_alias = 0, host_temp = 0;
  int64_t host_generated_code = 0;
};

struct PjrtSession;

// A program run that has been queued on the devices and not waited for: its completion events.
// wait() awaits them (an error of the run is a UserError there); the destructor awaits them too,
// and drops an error (an output read since has reported it).
class PjrtPendingRun {
 public:
  PjrtPendingRun() = default;
  PjrtPendingRun(const PjrtPendingRun&) = delete;
  PjrtPendingRun& operator=(const PjrtPendingRun&) = delete;
  PjrtPendingRun(PjrtPendingRun&& o) noexcept { *this = std::move(o); }
  PjrtPendingRun& operator=(PjrtPendingRun&& o) noexcept;
  ~PjrtPendingRun();
  void wait();

 private:
  friend class PjrtExecutable;
  std::shared_ptr<PjrtSession> session_;
  std::vector<PJRT_Event*> events_;
};

class PjrtExecutable {
 public:
  PjrtExecutable(const PjrtExecutable&) = delete;
  PjrtExecutable& operator=(const PjrtExecutable&) = delete;
  PjrtExecutable(PjrtExecutable&& o) noexcept
      : session_(std::move(o.session_)),
        executable_(std::exchange(o.executable_, nullptr)),
        unloaded_(std::exchange(o.unloaded_, nullptr)),
        num_outputs_(o.num_outputs_),
        launches_(std::move(o.launches_)),
        collectives_(std::move(o.collectives_)) {}
  PjrtExecutable& operator=(PjrtExecutable&& o) noexcept;
  ~PjrtExecutable() { reset(); }

  size_t num_outputs() const { return num_outputs_; }
  // The kernels one run launches, where the compile counted them (a deviceless GPU compile).
  const std::optional<KernelLaunches>& launches() const { return launches_; }
  // The collectives of XLA's optimized program, where the compile counted them (deviceless).
  const std::optional<Collectives>& collectives() const { return collectives_; }

  // The plugin's account of the program's memory (PJRT_Executable_GetCompiledMemoryStats), or
  // nullopt for a plugin that has none (the entry point missing, or an error in its place).
  std::optional<CompiledMemory> compiled_memory() const;

  // Runs the program on the client's devices (one, or each device of the mesh its piece) and waits
  // for it. args: one buffer per parameter of @main, in order, each with a piece on every device.
  // Buffers whose index is in `donate` are given to the program, which may write its outputs into
  // their memory (a parameter marked `tf.aliasing_output = N` in the module); they are invalid
  // afterwards. Every other argument is left untouched, whatever the program says. Returns the
  // outputs in the order @main returns them, output i split as out_shardings[i] says (the shardings
  // the module gives its results; none: whole on each device). The plugin refuses a wrong number of
  // arguments or one of the wrong byte size (XLA's CPU plugin compares sizes, not dims).
  // With `pending`, returns as soon as the run is queued, its completion events in *pending: the
  // outputs are then arrays the devices are still computing, which later runs may take as
  // arguments and reads wait for (PJRT orders them).
  std::vector<PjrtBuffer> execute(std::span<PjrtBuffer* const> args,
                                  std::span<const int> donate = {},
                                  std::span<const TensorSharding> out_shardings = {},
                                  PjrtPendingRun* pending = nullptr);

 private:
  friend class PjrtClient;
  PjrtExecutable(std::shared_ptr<PjrtSession> session, PJRT_LoadedExecutable* executable,
                 size_t num_outputs)
      : session_(std::move(session)), executable_(executable), num_outputs_(num_outputs) {}
  PjrtExecutable(std::shared_ptr<PjrtSession> session, PJRT_Executable* unloaded,
                 size_t num_outputs)
      : session_(std::move(session)), unloaded_(unloaded), num_outputs_(num_outputs) {}
  void reset() noexcept;

  std::shared_ptr<PjrtSession> session_;  // keeps the client alive while the program lives
  PJRT_LoadedExecutable* executable_ = nullptr;
  PJRT_Executable* unloaded_ = nullptr;  // a deviceless compile's, instead
  size_t num_outputs_ = 0;
  std::optional<KernelLaunches> launches_;
  std::optional<Collectives> collectives_;
};

}  // namespace lmt
