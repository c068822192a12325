// A PJRT plugin for lmtrain's tests: XLA's CPU plugin with a few answers changed. It loads the real
// plugin, copies its PJRT_Api table and replaces a handful of entries, so programs compile and run
// for real while a test chooses what the plugin says about itself and sees what lmtrain sends it.
//
//   LMT_TEST_PLUGIN_WRAP=PATH         the plugin wrapped (read once, at GetPjrtApi); default: the
//                                     CPU plugin CMake found (LMT_TEST_PLUGIN_DEFAULT_WRAP)
//   LMT_TEST_PLUGIN_PLATFORM=NAME     PJRT_Client_PlatformName answers NAME (say "cuda")
//   LMT_TEST_PLUGIN_DEVICE_KIND=KIND  PJRT_DeviceDescription_Kind answers KIND
//   LMT_TEST_PLUGIN_RECORD=DIR        PJRT_Client_Compile writes the program to DIR/program_N.mlir
//                                     and the serialized compile options to DIR/options_N.pb (N:
//                                     0, 1, ... the first free number); a program for another
//                                     platform than the real one, or one that calls a cuDNN custom
//                                     call (@__cudnn...), is then refused with "lmtrain test
//                                     plugin: recorded, not compiled": XLA here could not build it
//   LMT_TEST_PLUGIN_RECORD_ONLY=1     with RECORD, every program is refused so after recording it
//                                     (a test that only reads the program skips XLA's compile)
//   LMT_TEST_PLUGIN_RECORD_POSED=1    with RECORD, a program for the platform posed (PLATFORM) is
//                                     compiled all the same, by XLA:CPU as it runs without
//                                     RECORD (a cuDNN call is still refused): a whole run is then
//                                     recorded as it would be sent to that platform
//   LMT_TEST_PLUGIN_MEMORY=U,P,L      PJRT_Device_MemoryStats answers bytes_in_use U, peak P and
//                                     limit L (P or L empty: reported as not set)
//   LMT_TEST_PLUGIN_DEVICES=N         PJRT_Client_AddressableDevices answers the first N devices
//   LMT_TEST_PLUGIN_MULTIPROCESS=DIR  PJRT_Client_Create takes node_id and num_nodes (as the CUDA
//                                     plugin does; XLA's CPU plugin ignores them) and uses the
//                                     key-value callbacks as the CUDA plugin does: puts its own key
//                                     lmt_test:node/<id> and gets every other node's, then makes
//                                     the real client without those options. It writes
//                                     DIR/node_<id>.pid on entry and DIR/node_<id>.txt (the options
//                                     and callbacks it was given, what it got) at the end. The
//                                     client stands in for one process's part of a run across
//                                     num_nodes processes: the real client has the devices of
//                                     every node (LMT_TEST_PLUGIN_NODE_DEVICES each, default 1),
//                                     of which node <id>'s block is addressable, each device
//                                     answering its node as its process index, and the client
//                                     process index <id>. A program over every node's devices
//                                     run with this node's argument lists runs on all of them,
//                                     the other nodes' devices fed copies of this node's
//                                     arguments (what the other processes would feed is not
//                                     here), and hands back this node's outputs
//   LMT_TEST_PLUGIN_HOLD_NODE=N       with MULTIPROCESS, node N sleeps 300 s before its put (a
//                                     test kills it meanwhile)
//
// The others are read at every call, so one loaded plugin serves tests that set them differently.
// The version reported is the real plugin's. The main choice: the real plugin's PJRT_Error cannot
// be made from outside it, so the errors made here are this file's own PJRT_Error, and the three
// error entries are replaced too, telling the two kinds apart by a registry of the ones made here.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "pjrt_c_api.h"

// This plugin's own errors. The header leaves PJRT_Error incomplete: each plugin defines it.
struct PJRT_Error {
  PJRT_Error_Code code;
  std::string message;
};

namespace {

const PJRT_Api* real = nullptr;  // the wrapped plugin's table
PJRT_Api wrapped;                // the table handed out: real's, with the entries below replaced

std::mutex mutex;                  // guards the two sets and the record numbering
std::set<const PJRT_Error*> ours;  // errors made here and not yet destroyed
std::set<std::string> answers;     // strings handed out; they must outlive any client

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

PJRT_Error* make_error(PJRT_Error_Code code, std::string message) {
  auto* error = new PJRT_Error{code, std::move(message)};
  std::lock_guard<std::mutex> lock(mutex);
  ours.insert(error);
  return error;
}

bool is_ours(const PJRT_Error* error) {
  std::lock_guard<std::mutex> lock(mutex);
  return ours.count(error) != 0;
}

// A string that stays valid for the life of the process: the C API hands out borrowed pointers
// that live as long as the client.
const std::string& keep(const char* s) {
  std::lock_guard<std::mutex> lock(mutex);
  return *answers.insert(s).first;
}

void error_destroy(PJRT_Error_Destroy_Args* args) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (ours.erase(args->error)) {
      delete args->error;
      return;
    }
  }
  real->PJRT_Error_Destroy(args);
}

void error_message(PJRT_Error_Message_Args* args) {
  if (!is_ours(args->error)) return real->PJRT_Error_Message(args);
  args->message = args->error->message.data();
  args->message_size = args->error->message.size();
}

PJRT_Error* error_get_code(PJRT_Error_GetCode_Args* args) {
  if (!is_ours(args->error)) return real->PJRT_Error_GetCode(args);
  args->code = args->error->code;
  return nullptr;
}

PJRT_Error* client_platform_name(PJRT_Client_PlatformName_Args* args) {
  const char* name = env("LMT_TEST_PLUGIN_PLATFORM");
  if (!name) return real->PJRT_Client_PlatformName(args);
  const std::string& kept = keep(name);
  args->platform_name = kept.data();
  args->platform_name_size = kept.size();
  return nullptr;
}

PJRT_Error* device_description_kind(PJRT_DeviceDescription_Kind_Args* args) {
  const char* kind = env("LMT_TEST_PLUGIN_DEVICE_KIND");
  if (!kind) return real->PJRT_DeviceDescription_Kind(args);
  const std::string& kept = keep(kind);
  args->device_kind = kept.data();
  args->device_kind_size = kept.size();
  return nullptr;
}

// Writes program_N.mlir and options_N.pb into `dir` under the first N not taken. Returns what
// went wrong, or "".
std::string record(const std::filesystem::path& dir, std::string_view program,
                   std::string_view options) {
  std::lock_guard<std::mutex> lock(mutex);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  int n = 0;
  while (std::filesystem::exists(dir / ("program_" + std::to_string(n) + ".mlir"), ec)) ++n;
  auto write = [&](const std::string& name, std::string_view bytes) {
    std::ofstream out(dir / name, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return static_cast<bool>(out.flush());
  };
  const std::string program_file = "program_" + std::to_string(n) + ".mlir";
  const std::string options_file = "options_" + std::to_string(n) + ".pb";
  if (!write(program_file, program)) return "cannot write " + (dir / program_file).string();
  if (!write(options_file, options)) return "cannot write " + (dir / options_file).string();
  return "";
}

// Why XLA here should not see the program ("" when it may).
std::string refusal(PJRT_Client* client, std::string_view program) {
  if (env("LMT_TEST_PLUGIN_RECORD_ONLY")) return "LMT_TEST_PLUGIN_RECORD_ONLY";
  const char* platform = env("LMT_TEST_PLUGIN_PLATFORM");
  if (platform && !env("LMT_TEST_PLUGIN_RECORD_POSED")) {
    PJRT_Client_PlatformName_Args name{};
    name.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE;
    name.client = client;
    if (PJRT_Error* error = real->PJRT_Client_PlatformName(&name)) {
      PJRT_Error_Destroy_Args destroy{};
      destroy.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
      destroy.error = error;
      real->PJRT_Error_Destroy(&destroy);
      return "the real platform is unknown";
    }
    if (std::string_view(name.platform_name, name.platform_name_size) != platform) {
      return std::string("a program for platform ") + platform;
    }
  }
  if (program.find("custom_call @__cudnn") != std::string_view::npos) {
    return "the program calls a cuDNN custom call";
  }
  return "";
}

PJRT_Error* client_compile(PJRT_Client_Compile_Args* args) {
  const char* dir = env("LMT_TEST_PLUGIN_RECORD");
  if (!dir) return real->PJRT_Client_Compile(args);
  std::string_view program(args->program->code, args->program->code_size);
  std::string_view options(args->compile_options, args->compile_options_size);
  if (std::string failure = record(dir, program, options); !failure.empty()) {
    return make_error(PJRT_Error_Code_INTERNAL, "lmtrain test plugin: " + failure);
  }
  std::string why = refusal(args->client, program);
  if (why.empty()) return real->PJRT_Client_Compile(args);
  return make_error(PJRT_Error_Code_UNIMPLEMENTED,
                    "lmtrain test plugin: recorded, not compiled (" + why + ")");
}

// "123" -> 123; false for anything but digits.
bool parse_bytes(const std::string& s, int64_t& out) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return false;
  out = std::strtoll(s.c_str(), nullptr, 10);
  return true;
}

PJRT_Error* device_memory_stats(PJRT_Device_MemoryStats_Args* args) {
  const char* spec = env("LMT_TEST_PLUGIN_MEMORY");
  if (!spec) return real->PJRT_Device_MemoryStats(args);
  std::string s = spec;
  size_t a = s.find(','), b = a == std::string::npos ? a : s.find(',', a + 1);
  int64_t in_use = 0, peak = 0, limit = 0;
  std::string peak_text = b == std::string::npos ? "" : s.substr(a + 1, b - a - 1);
  std::string limit_text = b == std::string::npos ? "" : s.substr(b + 1);
  if (b == std::string::npos || !parse_bytes(s.substr(0, a), in_use) ||
      (!peak_text.empty() && !parse_bytes(peak_text, peak)) ||
      (!limit_text.empty() && !parse_bytes(limit_text, limit))) {
    return make_error(PJRT_Error_Code_INVALID_ARGUMENT,
                      "lmtrain test plugin: LMT_TEST_PLUGIN_MEMORY=" + s +
                          " is not \"in_use,peak,limit\" (bytes; peak and limit may be empty)");
  }
  if (args->struct_size < PJRT_Device_MemoryStats_Args_STRUCT_SIZE) {
    return make_error(PJRT_Error_Code_INVALID_ARGUMENT,
                      "lmtrain test plugin: PJRT_Device_MemoryStats_Args is too small");
  }
  PJRT_Device_MemoryStats_Args answer{};  // every statistic not named here: not set
  answer.struct_size = args->struct_size;
  answer.extension_start = args->extension_start;
  answer.device = args->device;
  answer.bytes_in_use = in_use;
  answer.peak_bytes_in_use = peak;
  answer.peak_bytes_in_use_is_set = !peak_text.empty();
  answer.bytes_limit = limit;
  answer.bytes_limit_is_set = !limit_text.empty();
  *args = answer;
  return nullptr;
}

// ---- several processes (LMT_TEST_PLUGIN_MULTIPROCESS) ----

// What PJRT_CallbackError makes: this plugin's own error.
PJRT_Error* callback_error(PJRT_Error_Code code, const char* message, size_t size) {
  return make_error(code, std::string(message, size));
}

std::string take_message(PJRT_Error* error) {
  std::string message = error->message;
  PJRT_Error_Destroy_Args destroy{};
  destroy.error = error;
  error_destroy(&destroy);
  return message;
}

// The exchange the CUDA plugin makes at client creation, with keys of our own: put this node's
// key, get every other node's (and try_get its own back). Returns what it got, one line each, or
// sets `error`.
std::string exchange(const PJRT_Client_Create_Args* args, int64_t node, int64_t nodes,
                     PJRT_Error** error) {
  PJRT_CallbackError make = callback_error;
  const std::string own_key = "lmt_test:node/" + std::to_string(node);
  const std::string own_value = "hello from node " + std::to_string(node);
  const char* hold = env("LMT_TEST_PLUGIN_HOLD_NODE");
  if (hold && std::to_string(node) == hold) sleep(300);
  PJRT_KeyValuePutCallback_Args put{};
  put.struct_size = PJRT_KeyValuePutCallback_Args_STRUCT_SIZE;
  put.key = own_key.data(), put.key_size = own_key.size();
  put.value = own_value.data(), put.value_size = own_value.size();
  put.callback_error = &make;
  put.user_arg = args->kv_put_user_arg;
  if ((*error = args->kv_put_callback(&put))) return "";
  std::string got;
  for (int64_t other = 0; other < nodes; ++other) {
    if (other == node) continue;
    const std::string key = "lmt_test:node/" + std::to_string(other);
    PJRT_KeyValueGetCallback_Args get{};
    get.struct_size = PJRT_KeyValueGetCallback_Args_STRUCT_SIZE;
    get.key = key.data(), get.key_size = key.size();
    get.timeout_in_ms = 120000;
    get.callback_error = &make;
    get.user_arg = args->kv_get_user_arg;
    if (PJRT_Error* failed = args->kv_get_callback(&get)) {
      const PJRT_Error_Code code = failed->code;
      *error = make_error(
          code, "lmtrain test plugin: kv_get of '" + key + "' failed: " + take_message(failed));
      return "";
    }
    got += "got " + key + " = " + std::string(get.value, get.value_size) + "\n";
    get.value_deleter_callback(get.value);
  }
  PJRT_KeyValueTryGetCallback_Args try_get{};
  try_get.struct_size = PJRT_KeyValueTryGetCallback_Args_STRUCT_SIZE;
  try_get.key = own_key.data(), try_get.key_size = own_key.size();
  try_get.callback_error = &make;
  try_get.user_arg = args->kv_try_get_user_arg;
  if (PJRT_Error* failed = args->kv_try_get_callback(&try_get)) {
    got += "try_get own key failed: " + take_message(failed) + "\n";
  } else {
    got += "try_get own key = " + std::string(try_get.value, try_get.value_size) + "\n";
    try_get.value_deleter_callback(try_get.value);
  }
  return got;
}

// The client made with node_id and num_nodes, those two, and the devices of each node.
PJRT_Client* multiprocess_client = nullptr;
int64_t client_node = 0, node_devices = 1;
std::vector<PJRT_DeviceDescription*> described;  // the real client's devices', every node's

PJRT_Error* client_process_index(PJRT_Client_ProcessIndex_Args* args) {
  if (!multiprocess_client || args->client != multiprocess_client)
    return real->PJRT_Client_ProcessIndex(args);
  args->process_index = static_cast<int>(client_node);
  return nullptr;
}

PJRT_Error* description_process_index(PJRT_DeviceDescription_ProcessIndex_Args* args) {
  const auto at = std::find(described.begin(), described.end(), args->device_description);
  if (at == described.end()) return real->PJRT_DeviceDescription_ProcessIndex(args);
  args->process_index = static_cast<int>((at - described.begin()) / node_devices);
  return nullptr;
}

// LMT_TEST_PLUGIN_DEVICES=N: the client has only its first N devices (a plugin with fewer devices
// than a mesh needs, or with one). A node of a run across processes: its block of devices.
PJRT_Error* client_addressable_devices(PJRT_Client_AddressableDevices_Args* args) {
  if (PJRT_Error* error = real->PJRT_Client_AddressableDevices(args)) return error;
  if (multiprocess_client && args->client == multiprocess_client) {
    args->addressable_devices += client_node * node_devices;
    args->num_addressable_devices = static_cast<size_t>(node_devices);
  }
  if (const char* n = env("LMT_TEST_PLUGIN_DEVICES"))
    args->num_addressable_devices =
        std::min(args->num_addressable_devices, static_cast<size_t>(std::atoll(n)));
  return nullptr;
}

void destroy_buffer(PJRT_Buffer* buffer) {
  PJRT_Buffer_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
  destroy.buffer = buffer;
  if (PJRT_Error* error = real->PJRT_Buffer_Destroy(&destroy)) take_message(error);
}

void await_and_destroy(PJRT_Event* event) {
  if (!event) return;
  PJRT_Event_Await_Args wait{};
  wait.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  wait.event = event;
  if (PJRT_Error* error = real->PJRT_Event_Await(&wait)) take_message(error);
  PJRT_Event_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
  destroy.event = event;
  if (PJRT_Error* error = real->PJRT_Event_Destroy(&destroy)) take_message(error);
}

size_t outputs_of(PJRT_LoadedExecutable* loaded) {
  PJRT_LoadedExecutable_GetExecutable_Args get{};
  get.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
  get.loaded_executable = loaded;
  if (PJRT_Error* error = real->PJRT_LoadedExecutable_GetExecutable(&get)) {
    take_message(error);
    return 0;
  }
  PJRT_Executable_NumOutputs_Args outputs{};
  outputs.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE;
  outputs.executable = get.executable;
  if (PJRT_Error* error = real->PJRT_Executable_NumOutputs(&outputs)) take_message(error);
  PJRT_Executable_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
  destroy.executable = get.executable;
  if (PJRT_Error* error = real->PJRT_Executable_Destroy(&destroy)) take_message(error);
  return outputs.num_outputs;
}

// A program over every node's devices, run with this node's argument lists: the other nodes'
// devices get copies of the arguments of this node's device of the same place in its block, and
// their outputs are waited for and dropped.
PJRT_Error* loaded_executable_execute(PJRT_LoadedExecutable_Execute_Args* args) {
  PJRT_LoadedExecutable_AddressableDevices_Args devices{};
  devices.struct_size = PJRT_LoadedExecutable_AddressableDevices_Args_STRUCT_SIZE;
  devices.executable = args->executable;
  if (!multiprocess_client || args->execute_device)
    return real->PJRT_LoadedExecutable_Execute(args);
  if (PJRT_Error* error = real->PJRT_LoadedExecutable_AddressableDevices(&devices)) return error;
  const size_t all = devices.num_addressable_devices;
  if (args->num_devices == all) return real->PJRT_LoadedExecutable_Execute(args);
  const size_t first = static_cast<size_t>(client_node * node_devices);
  if (args->num_devices != static_cast<size_t>(node_devices) || first + args->num_devices > all)
    return make_error(PJRT_Error_Code_INVALID_ARGUMENT,
                      "lmtrain test plugin: a program over " + std::to_string(all) +
                          " devices run with " + std::to_string(args->num_devices) +
                          " argument lists, not node " + std::to_string(client_node) + "'s " +
                          std::to_string(node_devices));
  const size_t outputs = outputs_of(args->executable);
  std::vector<std::vector<PJRT_Buffer*>> copies(all), dropped(all);
  std::vector<PJRT_Buffer* const*> arguments(all);
  std::vector<PJRT_Buffer**> results(all);
  std::vector<PJRT_Event*> events(all, nullptr);
  for (size_t d = 0; d < all; ++d) {
    const bool ours = d >= first && d < first + args->num_devices;
    if (ours) {
      arguments[d] = args->argument_lists[d - first];
      results[d] = args->output_lists[d - first];
      continue;
    }
    for (size_t a = 0; a < args->num_args; ++a) {
      PJRT_Buffer_CopyToDevice_Args copy{};
      copy.struct_size = PJRT_Buffer_CopyToDevice_Args_STRUCT_SIZE;
      copy.buffer = args->argument_lists[d % args->num_devices][a];
      copy.dst_device = devices.addressable_devices[d];
      if (PJRT_Error* error = real->PJRT_Buffer_CopyToDevice(&copy)) return error;
      copies[d].push_back(copy.dst_buffer);
    }
    arguments[d] = copies[d].data();
    dropped[d].assign(outputs, nullptr);
    results[d] = dropped[d].data();
  }
  PJRT_LoadedExecutable_Execute_Args run = *args;
  run.argument_lists = arguments.data();
  run.num_devices = all;
  run.output_lists = results.data();
  run.device_complete_events = events.data();
  PJRT_Error* error = real->PJRT_LoadedExecutable_Execute(&run);
  for (size_t d = 0; d < all; ++d) {
    const bool ours = d >= first && d < first + args->num_devices;
    if (ours && args->device_complete_events) {
      args->device_complete_events[d - first] = events[d];
      continue;
    }
    await_and_destroy(events[d]);
    for (PJRT_Buffer* b : dropped[d])
      if (b) destroy_buffer(b);
    for (PJRT_Buffer* b : copies[d]) destroy_buffer(b);
  }
  return error;
}

PJRT_Error* client_create(PJRT_Client_Create_Args* args) {
  const char* dir = env("LMT_TEST_PLUGIN_MULTIPROCESS");
  if (!dir) return real->PJRT_Client_Create(args);
  std::vector<PJRT_NamedValue> passed;  // every option but the two taken here
  int64_t node = -1, nodes = -1;
  for (size_t i = 0; i < args->num_options; ++i) {
    const PJRT_NamedValue& o = args->create_options[i];
    const std::string_view name(o.name, o.name_size);
    if (name == "node_id" && o.type == PJRT_NamedValue_kInt64) {
      node = o.int64_value;
    } else if (name == "num_nodes" && o.type == PJRT_NamedValue_kInt64) {
      nodes = o.int64_value;
    } else {
      passed.push_back(o);
    }
  }
  if (node < 0 || nodes < 1) return real->PJRT_Client_Create(args);
  const char* per_node = env("LMT_TEST_PLUGIN_NODE_DEVICES");
  node_devices = per_node ? std::max(1LL, std::atoll(per_node)) : 1;
  static const std::string kCount = "cpu_device_count";
  PJRT_NamedValue count{};
  count.struct_size = PJRT_NamedValue_STRUCT_SIZE;
  count.name = kCount.c_str();
  count.name_size = kCount.size();
  count.type = PJRT_NamedValue_kInt64;
  count.int64_value = nodes * node_devices;
  count.value_size = 1;
  std::erase_if(passed, [](const PJRT_NamedValue& o) {
    return std::string_view(o.name, o.name_size) == kCount;
  });
  passed.push_back(count);
  const std::filesystem::path base = std::filesystem::path(dir) / ("node_" + std::to_string(node));
  std::filesystem::create_directories(dir);
  std::ofstream(base.string() + ".pid") << getpid() << "\n";
  std::string record =
      "node_id " + std::to_string(node) + "\nnum_nodes " + std::to_string(nodes) + "\n";
  record += std::string("kv_get ") + (args->kv_get_callback ? "yes\n" : "no\n");
  record += std::string("kv_try_get ") + (args->kv_try_get_callback ? "yes\n" : "no\n");
  record += std::string("kv_put ") + (args->kv_put_callback ? "yes\n" : "no\n");
  PJRT_Error* error = nullptr;
  if (args->kv_get_callback && args->kv_try_get_callback && args->kv_put_callback)
    record += exchange(args, node, nodes, &error);
  std::ofstream(base.string() + ".txt")
      << record << (error ? "error " + error->message + "\n" : "");
  if (error) return error;
  PJRT_Client_Create_Args plain{};
  plain.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  plain.create_options = passed.data();
  plain.num_options = passed.size();
  if (PJRT_Error* failed = real->PJRT_Client_Create(&plain)) return failed;
  args->client = multiprocess_client = plain.client;
  client_node = node;
  PJRT_Client_Devices_Args all{};
  all.struct_size = PJRT_Client_Devices_Args_STRUCT_SIZE;
  all.client = plain.client;
  if (PJRT_Error* failed = real->PJRT_Client_Devices(&all)) return failed;
  for (size_t i = 0; i < all.num_devices; ++i) {
    PJRT_Device_GetDescription_Args get{};
    get.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
    get.device = all.devices[i];
    if (PJRT_Error* failed = real->PJRT_Device_GetDescription(&get)) return failed;
    described.push_back(get.device_description);
  }
  return nullptr;
}

const PJRT_Api* make_api() {
  const char* path = env("LMT_TEST_PLUGIN_WRAP");
  if (!path) path = LMT_TEST_PLUGIN_DEFAULT_WRAP;
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    std::fprintf(stderr, "lmtrain test plugin: cannot load %s: %s\n", path, dlerror());
    return nullptr;
  }
  using GetPjrtApiFn = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetPjrtApiFn>(dlsym(handle, "GetPjrtApi"));
  real = get_api ? get_api() : nullptr;
  if (!real) {
    std::fprintf(stderr, "lmtrain test plugin: %s gives no PJRT API\n", path);
    return nullptr;
  }
  // A table shorter than this header's (an older plugin) keeps its size; lmtrain's version check
  // refuses such a plugin before using any entry.
  const size_t size = std::min(real->struct_size, sizeof(PJRT_Api));
  std::memcpy(&wrapped, real, size);
  wrapped.struct_size = size;
  wrapped.PJRT_Error_Destroy = error_destroy;
  wrapped.PJRT_Error_Message = error_message;
  wrapped.PJRT_Error_GetCode = error_get_code;
  wrapped.PJRT_Client_PlatformName = client_platform_name;
  wrapped.PJRT_DeviceDescription_Kind = device_description_kind;
  wrapped.PJRT_Client_Compile = client_compile;
  wrapped.PJRT_Device_MemoryStats = device_memory_stats;
  wrapped.PJRT_Client_Create = client_create;
  wrapped.PJRT_Client_ProcessIndex = client_process_index;
  wrapped.PJRT_Client_AddressableDevices = client_addressable_devices;
  wrapped.PJRT_DeviceDescription_ProcessIndex = description_process_index;
  wrapped.PJRT_LoadedExecutable_Execute = loaded_executable_execute;
  return &wrapped;
}

}  // namespace

extern "C" const PJRT_Api* GetPjrtApi() {
  static const PJRT_Api* api = make_api();
  return api;
}
