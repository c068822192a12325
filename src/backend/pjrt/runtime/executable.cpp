// Running a compiled program on one device, and what the plugin says about its memory. Every
// argument not named in `donate` is listed as non-donatable, so a program's aliasing attributes
// can only consume what the caller gave away. execute() waits for the device to finish: the
// caller reads results next anyway, and a failure is reported by the call that caused it.
#include "backend/pjrt/runtime/executable.h"

#include <algorithm>
#include <exception>

#include "backend/pjrt/runtime/c_api.h"
#include "core/error.h"

namespace lmt {

PjrtExecutable& PjrtExecutable::operator=(PjrtExecutable&& o) noexcept {
  if (this != &o) {
    reset();
    session_ = std::move(o.session_);
    executable_ = std::exchange(o.executable_, nullptr);
    unloaded_ = std::exchange(o.unloaded_, nullptr);
    num_outputs_ = o.num_outputs_;
    launches_ = std::move(o.launches_);
    collectives_ = std::move(o.collectives_);
  }
  return *this;
}

void PjrtExecutable::reset() noexcept {
  if (executable_) {
    PJRT_LoadedExecutable_Destroy_Args args{};
    args.struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE;
    args.executable = executable_;
    discard_error(session_->plugin, session_->plugin.api()->PJRT_LoadedExecutable_Destroy(&args));
    executable_ = nullptr;
  }
  if (unloaded_) {
    PJRT_Executable_Destroy_Args args{};
    args.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
    args.executable = unloaded_;
    discard_error(session_->plugin, session_->plugin.api()->PJRT_Executable_Destroy(&args));
    unloaded_ = nullptr;
  }
  session_.reset();
}

std::optional<CompiledMemory> PjrtExecutable::compiled_memory() const {
  LMT_CHECK(executable_ || unloaded_, "compiled_memory on an empty PJRT executable");
  const PjrtPlugin& plugin = session_->plugin;
  const PJRT_Api* api = plugin.api();
  if (!api->PJRT_Executable_GetCompiledMemoryStats) return std::nullopt;
  std::optional<ExecutableView> view;
  if (executable_) view.emplace(plugin, executable_);
  PJRT_Executable_GetCompiledMemoryStats_Args args{};
  args.struct_size = PJRT_Executable_GetCompiledMemoryStats_Args_STRUCT_SIZE;
  args.executable = view ? view->get() : unloaded_;
  if (PJRT_Error* error = api->PJRT_Executable_GetCompiledMemoryStats(&args)) {
    discard_error(plugin, error);  // "not implemented" by another name: no numbers to give
    return std::nullopt;
  }
  CompiledMemory m;
  m.argument = args.argument_size_in_bytes;
  m.output = args.output_size_in_bytes;
  m.alias = args.alias_size_in_bytes;
  m.temp = args.temp_size_in_bytes;
  m.generated_code = args.generated_code_size_in_bytes;
  m.peak = args.peak_memory_in_bytes;
  m.host_argument = args.host_argument_size_in_bytes;
  m.host_output = args.host_output_size_in_bytes;
  m.host_alias = args.host_alias_size_in_bytes;
  m.host_temp = args.host_temp_size_in_bytes;
  m.host_generated_code = args.host_generated_code_size_in_bytes;
  return m;
}

namespace {

// The element type and dims of a buffer the plugin made.
void describe_output(const PjrtPlugin& plugin, PJRT_Buffer* out, DType* dtype,
                     std::vector<int64_t>* dims) {
  PJRT_Buffer_ElementType_Args type{};
  type.struct_size = PJRT_Buffer_ElementType_Args_STRUCT_SIZE;
  type.buffer = out;
  plugin.check(plugin.api()->PJRT_Buffer_ElementType(&type), "PJRT_Buffer_ElementType");
  *dtype = from_pjrt_type(plugin, type.type);
  PJRT_Buffer_Dimensions_Args d{};
  d.struct_size = PJRT_Buffer_Dimensions_Args_STRUCT_SIZE;
  d.buffer = out;
  plugin.check(plugin.api()->PJRT_Buffer_Dimensions(&d), "PJRT_Buffer_Dimensions");
  dims->assign(d.dims, d.dims + d.num_dims);
}

}  // namespace

std::vector<PjrtBuffer> PjrtExecutable::execute(std::span<PjrtBuffer* const> args,
                                                std::span<const int> donate,
                                                std::span<const TensorSharding> out_shardings,
                                                PjrtPendingRun* pending) {
  LMT_CHECK(executable_, "execute on an empty PJRT executable");
  const PjrtPlugin& plugin = session_->plugin;
  const size_t devices = session_->mesh_devices.size();
  std::vector<std::vector<PJRT_Buffer*>> raw_args(devices);
  std::vector<int64_t> keep;  // non-donatable argument indices
  for (size_t i = 0; i < args.size(); ++i) {
    LMT_CHECK(args[i] && args[i]->valid() && args[i]->device_count() == devices,
              "execute: argument " + std::to_string(i) + " is empty or was donated before");
    for (size_t d = 0; d < devices; ++d) raw_args[d].push_back(args[i]->raw(d));
    if (std::find(donate.begin(), donate.end(), static_cast<int>(i)) == donate.end()) {
      keep.push_back(static_cast<int64_t>(i));
    }
  }
  for (int d : donate) {
    LMT_CHECK(d >= 0 && static_cast<size_t>(d) < args.size(),
              "execute: donated index " + std::to_string(d) + " is not an argument");
  }

  PJRT_ExecuteOptions options{};
  options.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  options.non_donatable_input_indices = keep.data();
  options.num_non_donatable_input_indices = keep.size();
  std::vector<std::vector<PJRT_Buffer*>> outputs(devices,
                                                 std::vector<PJRT_Buffer*>(num_outputs_, nullptr));
  std::vector<PJRT_Buffer* const*> arg_lists;
  std::vector<PJRT_Buffer**> output_lists;
  for (size_t d = 0; d < devices; ++d) {
    arg_lists.push_back(raw_args[d].data());
    output_lists.push_back(outputs[d].data());
  }
  std::vector<PJRT_Event*> done(devices, nullptr);
  PJRT_LoadedExecutable_Execute_Args exec{};
  exec.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  exec.executable = executable_;
  exec.options = &options;
  exec.argument_lists = arg_lists.data();
  exec.num_devices = devices;
  exec.num_args = args.size();
  exec.output_lists = output_lists.data();
  exec.device_complete_events = done.data();
  plugin.check(plugin.api()->PJRT_LoadedExecutable_Execute(&exec), "PJRT_LoadedExecutable_Execute");

  // Own every output before anything else can throw, so none leaks.
  std::vector<PjrtBuffer> result;
  for (size_t o = 0; o < num_outputs_; ++o) {
    std::vector<PJRT_Buffer*> shards;
    for (size_t d = 0; d < devices; ++d) shards.push_back(outputs[d][o]);
    TensorSharding s = o < out_shardings.size() ? out_shardings[o] : TensorSharding{};
    result.push_back(PjrtBuffer(session_, std::move(shards), DType::f32, {}, std::move(s)));
  }
  for (int d : donate) args[d]->reset();
  if (pending) {
    pending->wait();  // a run it held before: its errors are not lost
    pending->session_ = session_;
    pending->events_ = std::move(done);
  } else {
    for (PJRT_Event* event : done)
      await_event(plugin, event, "PJRT_LoadedExecutable_Execute (running the program)");
  }
  for (PjrtBuffer& out : result) {
    describe_output(plugin, out.shards_[0], &out.dtype_, &out.dims_);
    // The whole array's dims: a split dimension's piece times its pieces.
    for (size_t d = 0; d < out.dims_.size(); ++d)
      out.dims_[d] *= shard_count(session_->mesh, out.sharding_, d);
  }
  return result;
}

PjrtPendingRun& PjrtPendingRun::operator=(PjrtPendingRun&& o) noexcept {
  if (this != &o) {
    try {
      wait();
    } catch (const std::exception&) {  // dropped, as in the destructor
    }
    session_ = std::move(o.session_);
    events_ = std::exchange(o.events_, {});
  }
  return *this;
}

PjrtPendingRun::~PjrtPendingRun() {
  try {
    wait();
  } catch (const std::exception&) {  // an output read since has reported it, or none will
  }
}

void PjrtPendingRun::wait() {
  std::vector<PJRT_Event*> events = std::exchange(events_, {});
  if (events.empty()) return;
  // Every event is awaited and destroyed; the first error is thrown after.
  std::exception_ptr first;
  for (PJRT_Event* event : events) {
    try {
      await_event(session_->plugin, event, "PJRT_LoadedExecutable_Execute (running the program)");
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace lmt
