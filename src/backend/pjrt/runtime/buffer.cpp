// Device arrays: freeing them and copying them back to the host, gathered from their pieces.
#include "backend/pjrt/runtime/buffer.h"

#include <set>

#include "backend/pjrt/runtime/c_api.h"
#include "core/error.h"

namespace lmt {

void PjrtBuffer::reset() noexcept {
  for (PJRT_Buffer* shard : shards_) {
    if (!shard) continue;
    PJRT_Buffer_Destroy_Args args{};
    args.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
    args.buffer = shard;
    discard_error(session_->plugin, session_->plugin.api()->PJRT_Buffer_Destroy(&args));
  }
  shards_.clear();
  session_.reset();
}

namespace {

void shard_to_host(const PjrtPlugin& plugin, PJRT_Buffer* shard, void* dst, size_t bytes) {
  PJRT_Buffer_ToHostBuffer_Args args{};
  args.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
  args.src = shard;
  args.dst = dst;
  args.dst_size = bytes;
  plugin.check(plugin.api()->PJRT_Buffer_ToHostBuffer(&args), "PJRT_Buffer_ToHostBuffer");
  await_event(plugin, args.event, "PJRT_Buffer_ToHostBuffer (waiting for the copy)");
}

}  // namespace

void PjrtBuffer::to_host(void* dst, size_t bytes) const {
  LMT_CHECK(valid(), "to_host on an empty or donated PJRT buffer");
  LMT_CHECK(bytes == byte_size(), "to_host: " + std::to_string(bytes) + " bytes for a buffer of " +
                                      std::to_string(byte_size()));
  const PjrtPlugin& plugin = session_->plugin;
  if (is_replicated(sharding_)) return shard_to_host(plugin, shards_[0], dst, bytes);
  // Each distinct piece once, from the first device that holds it. In a run across processes
  // this process holds only its devices' pieces: a whole copy of every parameter (the client
  // keeps fsdp x tensor within a process), not of a batch, which is never read back.
  const Mesh& mesh = session_->mesh;
  const std::vector<int64_t> piece_dims = shard_dims(mesh, sharding_, dims_);
  int64_t piece_elements = 1;
  for (int64_t d : piece_dims) piece_elements *= d;
  std::vector<uint8_t> piece(static_cast<size_t>(piece_elements) * dtype_size(dtype_));
  std::set<std::vector<int64_t>> copied, every;
  for (int64_t position = 0; position < mesh.size(); ++position)
    every.insert(shard_offset(mesh, sharding_, dims_, position));
  for (size_t d = 0; d < shards_.size(); ++d) {
    const int64_t position = session_->mesh_positions[d];
    if (!copied.insert(shard_offset(mesh, sharding_, dims_, position)).second) continue;
    shard_to_host(plugin, shards_[d], piece.data(), piece.size());
    insert_shard(mesh, sharding_, dims_, dtype_size(dtype_), position, piece.data(), dst);
  }
  LMT_CHECK(copied.size() == every.size(),
            "to_host: this process holds " + std::to_string(copied.size()) + " of the " +
                std::to_string(every.size()) + " pieces of the array");
}

}  // namespace lmt
