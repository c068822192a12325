// The shared pieces of the PJRT wrappers: the client's lifetime, a loaded program's executable,
// event waits, element types.
#include <string>

#include "backend/pjrt/runtime/c_api.h"
#include "core/error.h"

namespace lmt {

PjrtSession::~PjrtSession() {
  if (topology) {
    PJRT_TopologyDescription_Destroy_Args args{};
    args.struct_size = PJRT_TopologyDescription_Destroy_Args_STRUCT_SIZE;
    args.topology = topology;
    discard_error(plugin, plugin.api()->PJRT_TopologyDescription_Destroy(&args));
  }
  if (!client) return;
  PJRT_Client_Destroy_Args args{};
  args.struct_size = PJRT_Client_Destroy_Args_STRUCT_SIZE;
  args.client = client;
  discard_error(plugin, plugin.api()->PJRT_Client_Destroy(&args));
}

ExecutableView::ExecutableView(const PjrtPlugin& plugin, PJRT_LoadedExecutable* loaded)
    : plugin_(plugin) {
  PJRT_LoadedExecutable_GetExecutable_Args args{};
  args.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
  args.loaded_executable = loaded;
  plugin.check(plugin.api()->PJRT_LoadedExecutable_GetExecutable(&args),
               "PJRT_LoadedExecutable_GetExecutable");
  executable_ = args.executable;
}

ExecutableView::~ExecutableView() {
  PJRT_Executable_Destroy_Args args{};
  args.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
  args.executable = executable_;
  discard_error(plugin_, plugin_.api()->PJRT_Executable_Destroy(&args));
}

PJRT_DeviceDescription* description_of(const PjrtPlugin& plugin, PJRT_Device* device) {
  PJRT_Device_GetDescription_Args get{};
  get.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
  get.device = device;
  plugin.check(plugin.api()->PJRT_Device_GetDescription(&get), "PJRT_Device_GetDescription");
  return get.device_description;
}

void discard_error(const PjrtPlugin& plugin, PJRT_Error* error) noexcept {
  if (!error) return;
  PJRT_Error_Destroy_Args args{};
  args.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  args.error = error;
  plugin.api()->PJRT_Error_Destroy(&args);
}

void await_event(const PjrtPlugin& plugin, PJRT_Event* event, const char* call) {
  if (!event) return;  // a plugin that finished synchronously may hand back no event
  const PJRT_Api* api = plugin.api();
  PJRT_Event_Await_Args wait{};
  wait.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  wait.event = event;
  PJRT_Error* error = api->PJRT_Event_Await(&wait);
  PJRT_Event_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
  destroy.event = event;
  discard_error(plugin, api->PJRT_Event_Destroy(&destroy));
  plugin.check(error, call);
}

PJRT_Buffer_Type to_pjrt_type(DType t) {
  switch (t) {
    case DType::f32:
      return PJRT_Buffer_Type_F32;
    case DType::f64:
      return PJRT_Buffer_Type_F64;
    case DType::bf16:
      return PJRT_Buffer_Type_BF16;
    case DType::f16:
      return PJRT_Buffer_Type_F16;
    case DType::i32:
      return PJRT_Buffer_Type_S32;
    case DType::u16:
      return PJRT_Buffer_Type_U16;
    case DType::u8:
      return PJRT_Buffer_Type_U8;
  }
  LMT_CHECK(false, "unknown DType");
  return PJRT_Buffer_Type_INVALID;
}

DType from_pjrt_type(const PjrtPlugin& plugin, PJRT_Buffer_Type t) {
  switch (t) {
    case PJRT_Buffer_Type_F32:
      return DType::f32;
    case PJRT_Buffer_Type_F64:
      return DType::f64;
    case PJRT_Buffer_Type_BF16:
      return DType::bf16;
    case PJRT_Buffer_Type_F16:
      return DType::f16;
    case PJRT_Buffer_Type_S32:
      return DType::i32;
    case PJRT_Buffer_Type_U16:
      return DType::u16;
    case PJRT_Buffer_Type_U8:
      return DType::u8;
    default:
      break;
  }
  throw UserError("PJRT plugin " + plugin.path() + ": a program output has element type " +
                  std::to_string(static_cast<int>(t)) +
                  " (PJRT_Buffer_Type), which lmtrain cannot hold; return f32, f64, bf16, f16, "
                  "i32, u16 or u8");
}

}  // namespace lmt
