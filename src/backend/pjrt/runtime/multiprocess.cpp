#include "backend/pjrt/runtime/multiprocess.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "core/error.h"
#include "parallel/directory_store.h"

namespace lmt {

namespace {

// The plugin's value buffers: it copies a value, then hands it back to this deleter.
void delete_value(char* value) {
  delete[] value;
}

template <class Args>
void hand_out(Args* args, const std::string& value) {
  args->value = new char[value.size() + 1];
  std::memcpy(args->value, value.data(), value.size());
  args->value[value.size()] = '\0';
  args->value_size = value.size();
  args->value_deleter_callback = delete_value;
}

// An error made by the plugin's own constructor (PJRT_CallbackError), which it then owns.
template <class Args>
PJRT_Error* plugin_error(Args* args, PJRT_Error_Code code, const std::string& message) {
  return (*args->callback_error)(code, message.data(), message.size());
}

DirectoryStore& store_of(void* user_arg) {
  return *static_cast<DirectoryStore*>(user_arg);
}

// No exception may cross back into the plugin: each becomes the plugin's error.
PJRT_Error* kv_get(PJRT_KeyValueGetCallback_Args* args) {
  try {
    const auto limit = args->timeout_in_ms > 0 ? std::chrono::milliseconds(args->timeout_in_ms)
                                               : std::chrono::milliseconds::max();
    hand_out(args, store_of(args->user_arg).get(std::string(args->key, args->key_size), limit));
    return nullptr;
  } catch (const std::exception& e) {
    return plugin_error(args, PJRT_Error_Code_DEADLINE_EXCEEDED, e.what());
  }
}

PJRT_Error* kv_try_get(PJRT_KeyValueTryGetCallback_Args* args) {
  try {
    const std::string key(args->key, args->key_size);
    if (const std::optional<std::string> value = store_of(args->user_arg).try_get(key)) {
      hand_out(args, *value);
      return nullptr;
    }
    return plugin_error(args, PJRT_Error_Code_NOT_FOUND, "key '" + key + "' not found");
  } catch (const std::exception& e) {
    return plugin_error(args, PJRT_Error_Code_INTERNAL, e.what());
  }
}

PJRT_Error* kv_put(PJRT_KeyValuePutCallback_Args* args) {
  try {
    store_of(args->user_arg)
        .put(std::string(args->key, args->key_size), std::string(args->value, args->value_size));
    return nullptr;
  } catch (const std::exception& e) {
    return plugin_error(args, PJRT_Error_Code_INTERNAL, e.what());
  }
}

PJRT_NamedValue int64_value(const std::string& name, int64_t value) {
  PJRT_NamedValue v{};
  v.struct_size = PJRT_NamedValue_STRUCT_SIZE;
  v.name = name.c_str();
  v.name_size = name.size();
  v.type = PJRT_NamedValue_kInt64;
  v.int64_value = value;
  v.value_size = 1;
  return v;
}

// Why `client` is not one process's part of a run across `group` ("" when it is): a plugin that
// ignores node_id and num_nodes (XLA's CPU plugin takes any option name) makes a client of its
// own, process 0 with every device its own.
std::string not_spanning(const PjrtPlugin& plugin, PJRT_Client* client, const ProcessGroup& group) {
  const PJRT_Api* api = plugin.api();
  PJRT_Client_ProcessIndex_Args index{};
  index.struct_size = PJRT_Client_ProcessIndex_Args_STRUCT_SIZE;
  index.client = client;
  plugin.check(api->PJRT_Client_ProcessIndex(&index), "PJRT_Client_ProcessIndex");
  const size_t all = devices_by_process(plugin, client).size();
  PJRT_Client_AddressableDevices_Args own{};
  own.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
  own.client = client;
  plugin.check(api->PJRT_Client_AddressableDevices(&own), "PJRT_Client_AddressableDevices");
  if (index.process_index == group.rank && all > own.num_addressable_devices) return "";
  return fmt::format(
      "the plugin ignored node_id {} and num_nodes {}: its client is process {}, with {} devices, "
      "all of them its own",
      group.rank, group.count, index.process_index, all);
}

void destroy_client(const PjrtPlugin& plugin, PJRT_Client* client) {
  PJRT_Client_Destroy_Args args{};
  args.struct_size = PJRT_Client_Destroy_Args_STRUCT_SIZE;
  args.client = client;
  discard_error(plugin, plugin.api()->PJRT_Client_Destroy(&args));
}

[[noreturn]] void cannot_span(const PjrtPlugin& plugin, const ProcessGroup& group,
                              const std::string& why) {
  throw UserError(fmt::format(
      "PJRT plugin {} cannot run one program across processes: this run has {} ({}), and {}. "
      "The CUDA plugin takes node_id and num_nodes, XLA's CPU plugin does not, and libtpu finds "
      "the processes of a TPU slice itself (start lmtrain on each TPU VM, without a launcher)",
      plugin.path(), group.count, group.source, why));
}

}  // namespace

std::vector<ProcessDevice> devices_by_process(const PjrtPlugin& plugin, PJRT_Client* client) {
  const PJRT_Api* api = plugin.api();
  PJRT_Client_Devices_Args all{};
  all.struct_size = PJRT_Client_Devices_Args_STRUCT_SIZE;
  all.client = client;
  plugin.check(api->PJRT_Client_Devices(&all), "PJRT_Client_Devices");
  std::vector<ProcessDevice> devices;
  for (size_t i = 0; i < all.num_devices; ++i) {
    PJRT_DeviceDescription* description = description_of(plugin, all.devices[i]);
    PJRT_DeviceDescription_Id_Args id{};
    id.struct_size = PJRT_DeviceDescription_Id_Args_STRUCT_SIZE;
    id.device_description = description;
    plugin.check(api->PJRT_DeviceDescription_Id(&id), "PJRT_DeviceDescription_Id");
    PJRT_DeviceDescription_ProcessIndex_Args process{};
    process.struct_size = PJRT_DeviceDescription_ProcessIndex_Args_STRUCT_SIZE;
    process.device_description = description;
    plugin.check(api->PJRT_DeviceDescription_ProcessIndex(&process),
                 "PJRT_DeviceDescription_ProcessIndex");
    devices.push_back({all.devices[i], id.id, process.process_index});
  }
  std::stable_sort(
      devices.begin(), devices.end(),
      [](const ProcessDevice& a, const ProcessDevice& b) { return a.process < b.process; });
  return devices;
}

PJRT_Client* create_multiprocess_client(const PjrtPlugin& plugin, DirectoryStore& store) {
  const ProcessGroup& group = store.group();
  static const std::string kNodeId = "node_id", kNumNodes = "num_nodes";
  const PJRT_NamedValue options[] = {int64_value(kNodeId, group.rank),
                                     int64_value(kNumNodes, group.count)};
  PJRT_Client_Create_Args create{};
  create.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  create.create_options = options;
  create.num_options = 2;
  create.kv_get_callback = kv_get;
  create.kv_get_user_arg = &store;
  create.kv_try_get_callback = kv_try_get;
  create.kv_try_get_user_arg = &store;
  create.kv_put_callback = kv_put;
  create.kv_put_user_arg = &store;
  PJRT_Error* error = plugin.api()->PJRT_Client_Create(&create);
  if (!error) {
    std::string why;
    try {
      why = not_spanning(plugin, create.client, group);
    } catch (...) {
      destroy_client(plugin, create.client);
      throw;
    }
    if (why.empty()) return create.client;
    destroy_client(plugin, create.client);
    cannot_span(plugin, group, why);
  }

  std::string message;
  try {
    plugin.check(error, "PJRT_Client_Create");
  } catch (const UserError& e) {
    message = e.what();
  }
  if (const std::string failure = store.failure(); !failure.empty()) throw UserError(failure);
  if (message.find(kNodeId) != std::string::npos || message.find(kNumNodes) != std::string::npos)
    cannot_span(plugin, group, "the plugin refused node_id and num_nodes (" + message + ")");
  throw UserError(fmt::format("rank {} of {}: {}", group.rank, group.count, message));
}

}  // namespace lmt
