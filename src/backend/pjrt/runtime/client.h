// A PJRT client: one plugin's view of its devices, the thing that compiles StableHLO programs
// and moves arrays to and from the device. Programs run on the first addressable device.
// Buffers and executables keep the client alive, so they may outlive this object.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/pjrt/runtime/buffer.h"
#include "backend/pjrt/runtime/compile_options.h"
#include "backend/pjrt/runtime/executable.h"
#include "backend/pjrt/runtime/plugin.h"

namespace lmt {

class DirectoryStore;

// The allocator's account of a device's memory, in bytes (PJRT_Device_MemoryStats). Only
// bytes_in_use is always given; a plugin leaves out what it does not track.
struct DeviceMemory {
  int64_t bytes_in_use = 0;
  std::optional<int64_t> peak_bytes_in_use;
  std::optional<int64_t> bytes_limit;  // what the allocator may hand out in all
};

// The share of a GPU's memory the CUDA plugin's allocator takes for programs when its client is
// created without the memory_fraction option, as lmtrain creates it (XLA's GpuAllocatorConfig).
constexpr double kCudaPluginMemoryFraction = 0.75;

// How to create a client, beyond the plugin's defaults.
struct PjrtClientOptions {
  // > 0: the number of devices asked of a plugin that makes its devices on request (XLA's CPU
  // plugin, create option cpu_device_count; it makes 4 by default). A plugin that refuses the
  // option is created without it.
  int64_t cpu_device_count = 0;
  // The mesh programs run on (one device when single) and the ids of the devices it uses, in
  // mesh order (empty: the first mesh.size() addressable devices).
  Mesh mesh;
  std::vector<int64_t> devices;
  // One run across several processes (mpirun; parallel/process_group.h): the store where this
  // process and the others exchange the plugin's keys, which knows their ranks and count. The
  // client is created with node_id (this rank) and num_nodes (the count) and the store as its
  // key-value callbacks (multiprocess.h), and keeps the store while it lives. Null (one
  // process): none of that.
  std::shared_ptr<DirectoryStore> store;
};

// What a deviceless client compiles for: the plugin's topology of devices it does not have.
struct PjrtTarget {
  // The topology's name where the plugin takes one (libtpu: "v5e:2x2"; "" for the CUDA plugin)
  // and its create options (the CUDA plugin: target_config and topology).
  std::string name;
  std::vector<TopologyOption> options;
  std::string cuda_data_dir;  // where ptxas and libdevice are (xla_gpu_cuda_data_dir); "" for none
  bool count_launches = false;  // count each program's kernel launches (XLA's GPU thunk sequence)
};

class PjrtClient {
 public:
  // Loads the plugin (load_pjrt_plugin) and creates a client.
  explicit PjrtClient(const std::string& plugin_path, const PjrtClientOptions& options = {});
  // Loads the plugin and creates, instead of a client, its topology for `target`
  // (PJRT_TopologyDescription_Create): programs are compiled for those devices (PJRT_Compile
  // without a client) and never run; each compile counts the collectives of XLA's optimized
  // program (PjrtExecutable::collectives) and, for a GPU, its kernel launches
  // (PjrtExecutable::launches) from XLA's dump. A target the plugin cannot read is a UserError
  // carrying its diagnostic.
  PjrtClient(const std::string& plugin_path, const PjrtTarget& target,
             const PjrtClientOptions& options);
  bool deviceless() const;

  const PjrtPlugin& plugin() const;
  // As the plugin reports them (PJRT_Client_PlatformName; PJRT_DeviceDescription_Kind of the
  // device programs run on): "cpu", "cuda", "tpu"; "cpu", "NVIDIA H100 80GB HBM3", "TPU v5 lite".
  const std::string& platform_name() const { return platform_name_; }
  const std::string& device_kind() const { return device_kind_; }
  size_t device_count() const { return device_count_; }  // addressable devices
  // What the allocator of a topology's device may hand out (libtpu's device attribute
  // device_memory_bytes_limit), bytes; 0 where the plugin does not say or for a real client.
  int64_t topology_memory_limit() const { return topology_memory_limit_; }
  // The addressable devices' ids (PJRT_DeviceDescription_Id), in the plugin's order: what a
  // compiled program's device assignment names.
  const std::vector<int64_t>& device_ids() const { return device_ids_; }

  // The mesh programs run on, and its devices' ids in mesh order.
  const Mesh& mesh() const;
  const std::vector<int64_t>& mesh_device_ids() const { return mesh_device_ids_; }

  // Compiles a StableHLO module given as MLIR text (`module { func.func @main(...) ... }`) for
  // the mesh: one device, or SPMD over its devices from the shardings the module carries. A
  // program the plugin refuses is a UserError carrying its diagnostic.
  PjrtExecutable compile(const std::string& mlir, const CompileSettings& settings = {}) const;

  // The memory of the device programs run on, now; nullopt for a plugin that does not track it
  // (XLA's CPU plugin answers "GetAllocatorStats is not supported").
  std::optional<DeviceMemory> device_memory() const;

  // Copies a dense row-major host array to the mesh's devices, each its piece as `sharding` says
  // (empty: the whole array on each), and waits for the copies. In a run across processes, to
  // this process's devices only: the other pieces of `data` are not read (a batch holds only
  // this process's rows).
  PjrtBuffer to_device(const void* data, DType dtype, std::vector<int64_t> dims,
                       const TensorSharding& sharding = {}) const;

 private:
  void choose_mesh_devices(const PjrtClientOptions& options);
  void choose_process_mesh_devices(const PjrtClientOptions& options);
  PjrtExecutable compile_deviceless(const std::string& mlir, CompileSettings settings) const;

  std::shared_ptr<PjrtSession> session_;
  PjrtTarget target_;
  std::string platform_name_, device_kind_;
  size_t device_count_ = 0;
  int64_t topology_memory_limit_ = 0;
  std::vector<int64_t> device_ids_;
  std::vector<int64_t> mesh_device_ids_;
};

}  // namespace lmt
