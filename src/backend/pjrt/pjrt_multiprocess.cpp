#include "backend/pjrt/pjrt_multiprocess.h"

#include <fmt/format.h>

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

}  // namespace

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
  if (!error) return create.client;

  std::string message;
  try {
    plugin.check(error, "PJRT_Client_Create");
  } catch (const UserError& e) {
    message = e.what();
  }
  if (const std::string failure = store.failure(); !failure.empty()) throw UserError(failure);
  if (message.find(kNodeId) != std::string::npos || message.find(kNumNodes) != std::string::npos)
    throw UserError(fmt::format(
        "PJRT plugin {} cannot run one program across processes: this run has {} ({}), and the "
        "plugin refused the options node_id and num_nodes that tell it which one this is. The "
        "CUDA plugin takes them, XLA's CPU plugin does not, and libtpu finds the processes of a "
        "TPU slice itself (start lmtrain on each TPU VM, without a launcher). ({})",
        plugin.path(), group.count, group.source, message));
  throw UserError(fmt::format("rank {} of {}: {}", group.rank, group.count, message));
}

}  // namespace lmt
