// Creating a PJRT client, compiling StableHLO text for it, copying arrays to its device, and
// asking after the device's memory. Programs are handed over as MLIR text (PJRT_Program format
// "mlir"), which every XLA plugin parses; compile options are the hand-written single-device
// message of compile_options.cpp.
#include "backend/pjrt/runtime/client.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <variant>

#include "backend/pjrt/runtime/c_api.h"
#include "backend/pjrt/runtime/collectives.h"
#include "backend/pjrt/runtime/compile_options.h"
#include "backend/pjrt/runtime/launches.h"
#include "backend/pjrt/runtime/multiprocess.h"
#include "core/error.h"
#include "parallel/directory_store.h"

namespace lmt {

namespace {

std::string description_kind(const PjrtPlugin& plugin, PJRT_DeviceDescription* description) {
  PJRT_DeviceDescription_Kind_Args kind{};
  kind.struct_size = PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE;
  kind.device_description = description;
  plugin.check(plugin.api()->PJRT_DeviceDescription_Kind(&kind), "PJRT_DeviceDescription_Kind");
  return std::string(kind.device_kind, kind.device_kind_size);
}

int64_t description_id(const PjrtPlugin& plugin, PJRT_DeviceDescription* description) {
  PJRT_DeviceDescription_Id_Args id{};
  id.struct_size = PJRT_DeviceDescription_Id_Args_STRUCT_SIZE;
  id.device_description = description;
  plugin.check(plugin.api()->PJRT_DeviceDescription_Id(&id), "PJRT_DeviceDescription_Id");
  return id.id;
}

std::string describe_device(const PjrtPlugin& plugin, PJRT_Device* device) {
  return description_kind(plugin, description_of(plugin, device));
}

int64_t device_id(const PjrtPlugin& plugin, PJRT_Device* device) {
  return description_id(plugin, description_of(plugin, device));
}

// A create option as the C API takes it; it points into `o`, which must outlive it.
PJRT_NamedValue named_value(const TopologyOption& o) {
  PJRT_NamedValue v{};
  v.struct_size = PJRT_NamedValue_STRUCT_SIZE;
  v.name = o.name.c_str();
  v.name_size = o.name.size();
  if (const auto* text = std::get_if<std::string>(&o.value)) {
    v.type = PJRT_NamedValue_kString;
    v.string_value = text->c_str();
    v.value_size = text->size();
  } else if (const auto* n = std::get_if<int64_t>(&o.value)) {
    v.type = PJRT_NamedValue_kInt64;
    v.int64_value = *n;
    v.value_size = 1;
  } else {
    const auto& list = std::get<std::vector<int64_t>>(o.value);
    v.type = PJRT_NamedValue_kInt64List;
    v.int64_array_value = list.data();
    v.value_size = list.size();
  }
  return v;
}

// A device description's integer attribute `name` (libtpu's device_memory_bytes_limit), or 0.
int64_t description_int(const PjrtPlugin& plugin, PJRT_DeviceDescription* description,
                        std::string_view name) {
  PJRT_DeviceDescription_Attributes_Args args{};
  args.struct_size = PJRT_DeviceDescription_Attributes_Args_STRUCT_SIZE;
  args.device_description = description;
  plugin.check(plugin.api()->PJRT_DeviceDescription_Attributes(&args),
               "PJRT_DeviceDescription_Attributes");
  for (size_t i = 0; i < args.num_attributes; ++i) {
    const PJRT_NamedValue& a = args.attributes[i];
    if (std::string_view(a.name, a.name_size) == name && a.type == PJRT_NamedValue_kInt64)
      return a.int64_value;
  }
  return 0;
}

// A directory of its own for XLA's dump of one compile, removed with this object; under
// $LMTRAIN_XLA_DUMP instead, and kept there, where that names a directory (for reading XLA's
// optimized program, buffer assignment and thunk sequence).
class DumpDir {
 public:
  DumpDir() {
    const char* keep = std::getenv("LMTRAIN_XLA_DUMP");
    keep_ = keep && *keep;
    const std::filesystem::path under =
        keep_ ? std::filesystem::path(keep) : std::filesystem::temp_directory_path();
    std::error_code ec;
    std::filesystem::create_directories(under, ec);
    std::string pattern = (under / "lmtrain-xla-XXXXXX").string();
    if (!mkdtemp(pattern.data()))
      throw UserError("cannot make a directory for XLA's dump under " + under.string());
    path_ = pattern;
  }
  ~DumpDir() {
    std::error_code ec;
    if (!keep_) std::filesystem::remove_all(path_, ec);
  }
  DumpDir(const DumpDir&) = delete;
  DumpDir& operator=(const DumpDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  bool keep_ = false;
};

// PJRT_Client_Create with cpu_device_count where asked; a plugin that refuses the option is
// created without it (XLA's CPU plugin takes it; plugins that check their options' names refuse
// it before they start anything; one that ignores unknown options ignores it).
PJRT_Client* create_client(const PjrtPlugin& plugin, const PjrtClientOptions& options) {
  const PJRT_Api* api = plugin.api();
  PJRT_Client_Create_Args create{};
  create.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  if (options.cpu_device_count > 0) {
    static const std::string kName = "cpu_device_count";
    PJRT_NamedValue count{};
    count.struct_size = PJRT_NamedValue_STRUCT_SIZE;
    count.name = kName.c_str();
    count.name_size = kName.size();
    count.type = PJRT_NamedValue_kInt64;
    count.int64_value = options.cpu_device_count;
    count.value_size = 1;
    create.create_options = &count;
    create.num_options = 1;
    PJRT_Error* error = api->PJRT_Client_Create(&create);
    if (!error) return create.client;
    discard_error(plugin, error);
    create.create_options = nullptr;
    create.num_options = 0;
  }
  plugin.check(api->PJRT_Client_Create(&create), "PJRT_Client_Create");
  return create.client;
}

// MLIR text as a PJRT_Program; it points into `code`, which must outlive it.
PJRT_Program mlir_program(std::string& code) {
  static constexpr char kFormat[] = "mlir";
  PJRT_Program program{};
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  program.code = code.data();
  program.code_size = code.size();
  program.format = kFormat;
  program.format_size = sizeof(kFormat) - 1;
  return program;
}

size_t num_outputs(const PjrtPlugin& plugin, PJRT_Executable* executable) {
  PJRT_Executable_NumOutputs_Args outputs{};
  outputs.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE;
  outputs.executable = executable;
  plugin.check(plugin.api()->PJRT_Executable_NumOutputs(&outputs), "PJRT_Executable_NumOutputs");
  return outputs.num_outputs;
}

}  // namespace

PjrtClient::PjrtClient(const std::string& plugin_path, const PjrtClientOptions& options) {
  const PjrtPlugin& plugin = load_pjrt_plugin(plugin_path);
  const PJRT_Api* api = plugin.api();
  session_ = std::make_shared<PjrtSession>(plugin);
  session_->store = options.store;
  session_->client = options.store ? create_multiprocess_client(plugin, *options.store)
                                   : create_client(plugin, options);

  PJRT_Client_PlatformName_Args name{};
  name.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE;
  name.client = session_->client;
  plugin.check(api->PJRT_Client_PlatformName(&name), "PJRT_Client_PlatformName");
  platform_name_.assign(name.platform_name, name.platform_name_size);

  PJRT_Client_AddressableDevices_Args devices{};
  devices.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
  devices.client = session_->client;
  plugin.check(api->PJRT_Client_AddressableDevices(&devices), "PJRT_Client_AddressableDevices");
  if (devices.num_addressable_devices == 0) {
    throw UserError("PJRT plugin " + plugin.path() + " (platform " + platform_name_ +
                    ") has no addressable device");
  }
  device_count_ = devices.num_addressable_devices;
  session_->devices.assign(devices.addressable_devices,
                           devices.addressable_devices + devices.num_addressable_devices);
  session_->device = session_->devices[0];
  for (PJRT_Device* d : session_->devices) device_ids_.push_back(device_id(plugin, d));
  if (options.store)
    choose_process_mesh_devices(options);
  else
    choose_mesh_devices(options);
  device_kind_ = describe_device(plugin, session_->device);
}

PjrtClient::PjrtClient(const std::string& plugin_path, const PjrtTarget& target,
                       const PjrtClientOptions& options)
    : target_(target) {
  const PjrtPlugin& plugin = load_pjrt_plugin(plugin_path);
  const PJRT_Api* api = plugin.api();
  session_ = std::make_shared<PjrtSession>(plugin);
  std::vector<PJRT_NamedValue> opts;
  for (const TopologyOption& o : target_.options) opts.push_back(named_value(o));
  PJRT_TopologyDescription_Create_Args create{};
  create.struct_size = PJRT_TopologyDescription_Create_Args_STRUCT_SIZE;
  create.topology_name = target_.name.c_str();
  create.topology_name_size = target_.name.size();
  create.create_options = opts.data();
  create.num_options = opts.size();
  plugin.check(api->PJRT_TopologyDescription_Create(&create), "PJRT_TopologyDescription_Create");
  session_->topology = create.topology;

  PJRT_TopologyDescription_PlatformName_Args name{};
  name.struct_size = PJRT_TopologyDescription_PlatformName_Args_STRUCT_SIZE;
  name.topology = session_->topology;
  plugin.check(api->PJRT_TopologyDescription_PlatformName(&name),
               "PJRT_TopologyDescription_PlatformName");
  platform_name_.assign(name.platform_name, name.platform_name_size);

  PJRT_TopologyDescription_GetDeviceDescriptions_Args devices{};
  devices.struct_size = PJRT_TopologyDescription_GetDeviceDescriptions_Args_STRUCT_SIZE;
  devices.topology = session_->topology;
  plugin.check(api->PJRT_TopologyDescription_GetDeviceDescriptions(&devices),
               "PJRT_TopologyDescription_GetDeviceDescriptions");
  if (devices.num_descriptions == 0)
    throw UserError("PJRT plugin " + plugin.path() + ": the topology " + target.name +
                    " has no device");
  device_count_ = devices.num_descriptions;
  for (size_t i = 0; i < devices.num_descriptions; ++i)
    device_ids_.push_back(description_id(plugin, devices.descriptions[i]));
  device_kind_ = description_kind(plugin, devices.descriptions[0]);
  topology_memory_limit_ =
      description_int(plugin, devices.descriptions[0], "device_memory_bytes_limit");
  choose_mesh_devices(options);
}

bool PjrtClient::deviceless() const {
  return session_->topology != nullptr;
}

// The mesh's devices: those parallel.devices names, else the first ones. Too few, or an id the
// plugin does not have, is one message.
void PjrtClient::choose_mesh_devices(const PjrtClientOptions& options) {
  const Mesh& mesh = options.mesh;
  const auto n = static_cast<size_t>(mesh.size());
  if (n > device_ids_.size())
    throw UserError("parallel: the mesh data x fsdp x tensor needs " + std::to_string(n) +
                    " devices, but PJRT plugin " + plugin().path() + " (platform " +
                    platform_name_ + ") has " + std::to_string(device_ids_.size()));
  session_->mesh = mesh;
  for (size_t i = 0; i < n; ++i) {
    size_t at = i;
    if (!options.devices.empty()) {
      const int64_t id = options.devices[i];
      at = static_cast<size_t>(std::find(device_ids_.begin(), device_ids_.end(), id) -
                               device_ids_.begin());
      if (at == device_ids_.size())
        throw UserError("parallel.devices: PJRT plugin " + plugin().path() +
                        " has no device with id " + std::to_string(id));
    }
    if (!deviceless()) {
      session_->mesh_devices.push_back(session_->devices[at]);
      session_->mesh_positions.push_back(static_cast<int64_t>(i));
    }
    mesh_device_ids_.push_back(device_ids_[at]);
  }
  if (!deviceless()) session_->device = session_->mesh_devices[0];
}

// A run across processes: the mesh is every device of every process, by process
// (devices_by_process); this process feeds and runs its own block of it. Each process must hold
// a whole copy of every parameter (fsdp x tensor within its devices, data across processes):
// reading a parameter for a checkpoint then needs no other process's piece.
void PjrtClient::choose_process_mesh_devices(const PjrtClientOptions& options) {
  const Mesh& mesh = options.mesh;
  const int rank = options.store->group().rank, count = options.store->group().count;
  if (!options.devices.empty())
    throw UserError(
        "parallel.devices: a run across processes uses every device of every "
        "process; leave it empty");
  const std::vector<ProcessDevice> all = devices_by_process(plugin(), session_->client);
  const int64_t replica = mesh.axis_size("fsdp") * mesh.axis_size("tensor");
  if (mesh.size() != static_cast<int64_t>(all.size()))
    throw UserError(fmt::format(
        "parallel: a run across {} processes spans every device of every process: the mesh data "
        "{} x fsdp {} x tensor {} is {} devices, and the processes have {} in all",
        count, mesh.axis_size("data"), mesh.axis_size("fsdp"), mesh.axis_size("tensor"),
        mesh.size(), all.size()));
  if (static_cast<int64_t>(device_count_) % replica != 0)
    throw UserError(fmt::format(
        "parallel: fsdp x tensor is {}, which does not divide the {} devices of one process: a "
        "parameter split across processes would need their pieces gathered for a checkpoint, "
        "which lmtrain does not do yet; split across processes by parallel.data",
        replica, device_count_));
  session_->mesh = mesh;
  for (size_t i = 0; i < all.size(); ++i) {
    mesh_device_ids_.push_back(all[i].id);
    if (all[i].process != rank) continue;
    session_->mesh_devices.push_back(all[i].device);
    session_->mesh_positions.push_back(static_cast<int64_t>(i));
  }
  LMT_CHECK(session_->mesh_devices.size() == device_count_,
            "PJRT client: process " + std::to_string(rank) + " has " +
                std::to_string(device_count_) + " devices, of which " +
                std::to_string(session_->mesh_devices.size()) + " are listed as its own");
  session_->device = session_->mesh_devices[0];
}

const Mesh& PjrtClient::mesh() const {
  return session_->mesh;
}

const PjrtPlugin& PjrtClient::plugin() const {
  return session_->plugin;
}

PjrtExecutable PjrtClient::compile(const std::string& mlir, const CompileSettings& settings) const {
  if (deviceless()) return compile_deviceless(mlir, settings);
  const PjrtPlugin& plugin = session_->plugin;
  const PJRT_Api* api = plugin.api();
  std::string code = mlir;  // PJRT_Program.code is not const
  PJRT_Program program = mlir_program(code);

  CompileSettings spmd = settings;
  spmd.devices = mesh_device_ids_;
  const std::string options = compile_options(spmd);
  PJRT_Client_Compile_Args args{};
  args.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE;
  args.client = session_->client;
  args.program = &program;
  args.compile_options = options.data();
  args.compile_options_size = options.size();
  plugin.check(api->PJRT_Client_Compile(&args), "PJRT_Client_Compile");
  PjrtExecutable result(session_, args.executable, 0);

  result.num_outputs_ = num_outputs(plugin, ExecutableView(plugin, args.executable).get());
  return result;
}

// PJRT_Compile for the topology, XLA dumping what it compiled (the optimized program; for a GPU
// the thunk sequence) into a directory of its own, from which the collectives and the launches
// are counted; the CUDA plugin finds ptxas and libdevice in the target's CUDA data directory.
PjrtExecutable PjrtClient::compile_deviceless(const std::string& mlir,
                                              CompileSettings settings) const {
  const PjrtPlugin& plugin = session_->plugin;
  const PJRT_Api* api = plugin.api();
  std::string code = mlir;  // PJRT_Program.code is not const
  PJRT_Program program = mlir_program(code);

  const DumpDir dump;
  settings.devices = mesh_device_ids_;
  if (!target_.cuda_data_dir.empty())
    settings.xla_strings.emplace_back("xla_gpu_cuda_data_dir", target_.cuda_data_dir);
  settings.xla_strings.emplace_back("xla_dump_to", dump.path().string());
  const std::string options = compile_options(settings);
  PJRT_Compile_Args args{};
  args.struct_size = PJRT_Compile_Args_STRUCT_SIZE;
  args.topology = session_->topology;
  args.program = &program;
  args.compile_options = options.data();
  args.compile_options_size = options.size();
  args.client = nullptr;  // no client: deviceless
  plugin.check(api->PJRT_Compile(&args), "PJRT_Compile");
  PjrtExecutable result(session_, args.executable, 0);

  result.num_outputs_ = num_outputs(plugin, args.executable);
  if (target_.count_launches) result.launches_ = kernel_launches_in(dump.path());
  result.collectives_ = collectives_in(dump.path());
  return result;
}

std::optional<DeviceMemory> PjrtClient::device_memory() const {
  if (deviceless()) return std::nullopt;
  const PjrtPlugin& plugin = session_->plugin;
  if (!plugin.api()->PJRT_Device_MemoryStats) return std::nullopt;
  PJRT_Device_MemoryStats_Args args{};
  args.struct_size = PJRT_Device_MemoryStats_Args_STRUCT_SIZE;
  args.device = session_->device;
  if (PJRT_Error* error = plugin.api()->PJRT_Device_MemoryStats(&args)) {
    discard_error(plugin, error);  // the plugin's allocator keeps no statistics
    return std::nullopt;
  }
  DeviceMemory m;
  m.bytes_in_use = args.bytes_in_use;
  if (args.peak_bytes_in_use_is_set) m.peak_bytes_in_use = args.peak_bytes_in_use;
  if (args.bytes_limit_is_set) m.bytes_limit = args.bytes_limit;
  return m;
}

PjrtBuffer PjrtClient::to_device(const void* data, DType dtype, std::vector<int64_t> dims,
                                 const TensorSharding& sharding) const {
  LMT_CHECK(!deviceless(), "to_device on a deviceless client (a compile target)");
  const PjrtPlugin& plugin = session_->plugin;
  const Mesh& mesh = session_->mesh;
  const bool whole = is_replicated(sharding);
  std::vector<int64_t> piece_dims = whole ? dims : shard_dims(mesh, sharding, dims);
  int64_t piece_elements = 1;
  for (int64_t d : piece_dims) piece_elements *= d;
  std::vector<uint8_t> piece(whole ? 0 : static_cast<size_t>(piece_elements) * dtype_size(dtype));
  PjrtBuffer buffer(session_, {}, dtype, dims, whole ? TensorSharding{} : sharding);
  for (size_t i = 0; i < session_->mesh_devices.size(); ++i) {
    if (!whole)
      extract_shard(mesh, sharding, dims, dtype_size(dtype), session_->mesh_positions[i], data,
                    piece.data());
    PJRT_Client_BufferFromHostBuffer_Args args{};
    args.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
    args.client = session_->client;
    args.data = whole ? data : piece.data();
    args.type = to_pjrt_type(dtype);
    args.dims = piece_dims.data();
    args.num_dims = piece_dims.size();
    args.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
    args.device = session_->mesh_devices[i];
    plugin.check(plugin.api()->PJRT_Client_BufferFromHostBuffer(&args),
                 "PJRT_Client_BufferFromHostBuffer");
    buffer.shards_.push_back(args.buffer);
    await_event(plugin, args.done_with_host_buffer,
                "PJRT_Client_BufferFromHostBuffer (waiting for the copy)");
  }
  return buffer;
}

}  // namespace lmt
