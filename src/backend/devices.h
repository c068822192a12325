// The devices lmtrain knows by their published figures, in one table (devices.cpp): the dense
// peaks MFU divides by (train/flops; sources in docs/mfu.md), the memory and link bandwidth that
// `lmtrain info --mesh --device` plans with (train/mesh_plan; sources in docs/parallel.md), and
// the row a backend's device description names (Backend::device). A figure here is a
// datasheet's, not a measurement.
//
// And that description: what a backend computes on and what it counted of its programs, so that
// callers (MFU, bench, the training log) ask the backend instead of branching on its name.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"

namespace lmt {

struct DeviceSpec {
  // What --device takes (h100, h200, a100, v4, v5e, v5p, v6e); "" for a device known here only
  // by its peaks (the H100 PCIe), which info --mesh does not plan for.
  std::string key;
  // Parts of the device kind PJRT reports that name this device; the first row (in the table's
  // order) with a part the kind contains is the device's (the PCIe H100 before the SXM one).
  std::vector<std::string> kinds;
  std::string name;  // "NVIDIA H100 SXM", "Cloud TPU v5p"; memory and link are this part's
  // Whose peaks these are: the name, or the chip's where every part of it has the same peaks
  // ("NVIDIA A100": PCIe and SXM, 40 and 80 GB).
  std::string chip;
  // Dense peaks per chip, TFLOP/s (no structured sparsity): bf16, and what an f32 product runs
  // as there (f32_as: TF32 on NVIDIA GPUs, XLA's default for f32 products; bf16 passes on TPUs).
  double bf16_tflops = 0, f32_tflops = 0;
  std::string f32_as;
  double bf16_flops = 0;  // bf16_tflops in FLOP/s
  uint64_t memory = 0;    // HBM per chip, bytes (0: not given here)
  double link_bytes = 0;  // bytes/s a ring collective moves per chip, one direction
  std::string link_what;  // how link_bytes follows from the published figure
  // The target config lmtrain ships for compiling for this device without it
  // (src/backend/targets/<target>.txtpb; "" for none): what --target <key> compiles for.
  std::string target;
};

const std::vector<DeviceSpec>& device_specs();
// The spec of --device `key` (case-insensitive; "tpu-v5p" and "v5p" alike), or a UserError
// naming `flag` and the keys there are.
const DeviceSpec& device_spec(const std::string& key, const std::string& flag);
// The row naming the device PJRT reports as `device_kind`; nullptr for a device not in the table.
const DeviceSpec* device_spec_of_kind(const std::string& device_kind);

// A value of a topology's create option (PJRT_NamedValue): a string, an integer or a list of
// integers.
struct TopologyOption {
  std::string name;
  std::variant<std::string, int64_t, std::vector<int64_t>> value;
};

// Hardware to compile for without having it (deviceless compilation, as MaxText's
// train_compile.py checks a run before renting the hardware): GPUs through the CUDA PJRT plugin,
// which takes XLA's target config in place of a device, or a TPU slice through libtpu, which
// takes a topology name and its create options.
struct CompileTarget {
  std::string name;  // what --target named: "h200", "2xh100x8", "v5e:2x2", or the file
  std::string platform =
      "cuda";          // the plugin that compiles for it: "cuda" (XLA's) or "tpu" (libtpu)
  std::string config;  // cuda: a text stream_executor.GpuTargetConfigProto
  // The plugin's topology. cuda: "<slices>x<hosts a slice>x<GPUs a host>", or "" for as many
  // GPUs on one host as the mesh names (a bare h100, h200 or file); tpu: its name ("v5e:2x2",
  // "v4:2x2x1").
  std::string topology;
  std::vector<TopologyOption>
      options;                   // tpu: the topology's create options (chip_config_name, ...)
  std::string accelerator_type;  // tpu: Cloud TPU's name of the slice ("v5litepod-4", "v4-8")
  int64_t devices = 0;           // the topology's devices (0: as many as the mesh names)
  std::string device_kind;       // cuda: its device_description_str, as PJRT reports a real one
  int64_t device_memory = 0;  // cuda: its gpu_device_info.device_memory_size, bytes (0: not given;
                              // a TPU's comes from libtpu's topology)
};
// --target: a GPU of the table with a target config (h100, h200), several on one host (h100x8)
// or on several hosts of 8 (2xh100x8); a TPU slice by its Cloud name (v4-8, v4-32, v5e-8,
// v5p-64, v6e-8: TensorCores for v4 and v5p, chips for v5e and v6e) or by its topology (v4:2x2x1,
// v5:2x2x1 for v5p, v5e:2x2, v6e:2x2); or a FILE holding a GpuTargetConfigProto in text form
// (XLA's xla/backends/gpu/target_config/specs/, or what xla_dump_to writes on a real GPU as
// *.gpu_target_config.pbtxt). One UserError naming `flag` for a name that is none of those, a
// file that cannot be read or is not a target config.
CompileTarget compile_target(const std::string& target, const std::string& flag);

// Kernel launches of one run of a compiled program, as XLA's GPU thunk sequence lists them: each
// thunk once, a loop's thunks times its trip count; loops (kWhile) and the completion of
// asynchronous work (*Done) launch nothing themselves; copies count.
struct KernelLaunches {
  int64_t total = 0;                     // per run of the program
  int64_t static_thunks = 0;             // every launching thunk once, loops' as written
  int64_t loops_without_trip_count = 0;  // counted as one trip (XLA did not know theirs)
  // Per kind: "matmul" (GEMM fusions, cuBLAS), "cudnn", "copy", and each other fusion by XLA's
  // kind and root ("loop_convert_fusion", "input_reduce_fusion", "wrapped_concatenate", ...).
  std::map<std::string, int64_t> by_kind;
};

// The collectives of one run of a compiled program, as XLA's optimized program (after SPMD
// partitioning) holds them, per device: each instruction once, one in a loop's body times the
// loop's trip count. Asynchronous pairs count once (their -done); bytes are what each writes
// (its result's shape).
struct Collectives {
  struct Kind {
    int64_t count = 0;         // per run
    int64_t bytes = 0;         // per run and device
    int64_t static_count = 0;  // every instruction once, loops' as written
    // What each device sends per run by ring algorithms over its group of n (the model of
    // train/mesh_plan.h): all-gather and all-to-all (n-1)/n of the result, all-reduce twice
    // that, reduce-scatter n-1 results, a permute or broadcast its result.
    int64_t sent_bytes = 0;
  };
  // "all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute",
  // "collective-broadcast", "ragged-all-to-all"
  std::map<std::string, Kind> by_kind;
  int64_t loops_without_trip_count = 0;  // counted as one trip (XLA did not know theirs)
};

// What XLA planned for one run of a program, in bytes (PJRT's compiled-memory statistics):
// argument + temp is what the program needs of the device beside the outputs it does not write
// into its donated arguments (output - alias).
struct ProgramMemory {
  int64_t argument = 0, output = 0, alias = 0, temp = 0;
};

// One argument of a program: a described tensor's name (or what the host data is), its type.
struct ProgramArgument {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> dims;
};

// What a backend that compiles programs counted of them (for the tests and the benchmark).
struct ProgramReport {
  int64_t run = 0;       // executions
  int64_t replayed = 0;  // of them, recorded steps run again without building them (replay)
  int64_t compiled = 0;  // distinct program texts compiled
  double compile_seconds = 0;
  // How the last attention traced is computed: "cudnn" (cuDNN's fused kernel) or "xla: " and why
  // XLA's lowering is; "" before any attention.
  std::string attention;
  size_t last_chars = 0;                        // size of the last program's text
  std::string last_text;                        // the last program's text
  std::vector<ProgramArgument> last_arguments;  // the last program's arguments, in order
  // The last program's compiled memory, and that of the compiled program needing the most
  // (argument + temp); absent where the compiler does not say.
  std::optional<ProgramMemory> last_memory, largest_memory;
  // The last program's kernel launches, where the backend counts them (a deviceless compile for
  // a GPU target).
  std::optional<KernelLaunches> last_launches;
  // The last program's collectives, where the backend counts them (a deviceless compile).
  std::optional<Collectives> last_collectives;
};

// The device a backend computes on (Backend::device).
struct DeviceInfo {
  std::string platform;  // as PJRT names it ("cpu", "cuda", "tpu"); the CPU backend: "cpu"
  std::string kind;      // the device kind PJRT reports ("NVIDIA H100 80GB HBM3"); "" for none
  int64_t devices = 1;   // the devices a step runs on (a mesh's)
  const DeviceSpec* spec = nullptr;  // the table's row for `kind` (its nominal peaks), or none
  bool compiles = false;             // whether it compiles programs (`programs` counts them)
  // The device's peak memory in use so far, where its allocator keeps statistics (the CUDA
  // plugin does; XLA's CPU plugin and the CPU backend do not).
  std::optional<int64_t> peak_bytes;
  // The device's memory for programs (0: not known): a compile target's, with the share of it the
  // plugin's allocator takes (the CUDA plugin's default, which lmtrain does not change); or the
  // limit a real device's allocator reports, with share 1.
  int64_t memory_bytes = 0;
  double allocator_fraction = 0;
  ProgramReport programs;
};

}  // namespace lmt
