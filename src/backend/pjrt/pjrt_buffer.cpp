// Device arrays: freeing them and copying them back to the host.
#include "backend/pjrt/pjrt_buffer.h"

#include "backend/pjrt/pjrt_internal.h"
#include "core/error.h"

namespace lmt {

void PjrtBuffer::reset() noexcept {
  if (buffer_) {
    PJRT_Buffer_Destroy_Args args{};
    args.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
    args.buffer = buffer_;
    discard_error(session_->plugin, session_->plugin.api()->PJRT_Buffer_Destroy(&args));
    buffer_ = nullptr;
  }
  session_.reset();
}

void PjrtBuffer::to_host(void* dst, size_t bytes) const {
  LMT_CHECK(valid(), "to_host on an empty or donated PJRT buffer");
  LMT_CHECK(bytes == byte_size(), "to_host: " + std::to_string(bytes) + " bytes for a buffer of " +
                                      std::to_string(byte_size()));
  const PjrtPlugin& plugin = session_->plugin;
  PJRT_Buffer_ToHostBuffer_Args args{};
  args.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
  args.src = buffer_;
  args.dst = dst;
  args.dst_size = bytes;
  plugin.check(plugin.api()->PJRT_Buffer_ToHostBuffer(&args), "PJRT_Buffer_ToHostBuffer");
  await_event(plugin, args.event, "PJRT_Buffer_ToHostBuffer (waiting for the copy)");
}

}  // namespace lmt
