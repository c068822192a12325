// Host-side arithmetic of shardings: which block of a tensor a device holds, and copying blocks
// between a dense array and its pieces.
#include "backend/mesh.h"

#include <cstring>

#include "core/error.h"

namespace lmt {

std::vector<int64_t> shard_dims(const Mesh& mesh, const TensorSharding& s,
                                const std::vector<int64_t>& dims) {
  std::vector<int64_t> out = dims;
  for (size_t d = 0; d < dims.size(); ++d) {
    const int64_t n = shard_count(mesh, s, d);
    LMT_CHECK(dims[d] % n == 0, "a sharded dimension of " + std::to_string(dims[d]) +
                                    " elements does not split into " + std::to_string(n));
    out[d] = dims[d] / n;
  }
  return out;
}

std::vector<int64_t> shard_offset(const Mesh& mesh, const TensorSharding& s,
                                  const std::vector<int64_t>& dims, int64_t device) {
  const std::vector<int64_t> piece = shard_dims(mesh, s, dims);
  std::vector<int64_t> out(dims.size(), 0);
  for (size_t d = 0; d < dims.size(); ++d) out[d] = shard_index(mesh, s, d, device) * piece[d];
  return out;
}

bool is_replicated(const TensorSharding& s) {
  for (const auto& axes : s)
    if (!axes.empty()) return false;
  return true;
}

namespace {

// Copies the block at `offset` (dims `block`) of the dense array `whole` (dims `dims`) to or from
// the dense array `piece`, dimension by dimension; the innermost runs are one memcpy each.
void copy_block(uint8_t* whole, const std::vector<int64_t>& dims, uint8_t* piece,
                const std::vector<int64_t>& block, const std::vector<int64_t>& offset,
                size_t element, bool to_piece) {
  if (dims.empty()) {
    to_piece ? std::memcpy(piece, whole, element) : std::memcpy(whole, piece, element);
    return;
  }
  const size_t rank = dims.size();
  std::vector<int64_t> stride(rank, 1), piece_stride(rank, 1);
  for (size_t d = rank - 1; d-- > 0;) {
    stride[d] = stride[d + 1] * dims[d + 1];
    piece_stride[d] = piece_stride[d + 1] * block[d + 1];
  }
  const size_t run = static_cast<size_t>(block[rank - 1]) * element;
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < rank; ++d) rows *= block[d];
  std::vector<int64_t> at(rank, 0);  // the row's index within the block
  for (int64_t r = 0; r < rows; ++r) {
    int64_t w = offset[rank - 1], p = 0;
    for (size_t d = 0; d + 1 < rank; ++d) {
      w += (offset[d] + at[d]) * stride[d];
      p += at[d] * piece_stride[d];
    }
    uint8_t* wp = whole + static_cast<size_t>(w) * element;
    uint8_t* pp = piece + static_cast<size_t>(p) * element;
    to_piece ? std::memcpy(pp, wp, run) : std::memcpy(wp, pp, run);
    for (size_t d = rank - 1; d-- > 0;) {  // next row: the odometer over the outer dims
      if (++at[d] < block[d]) break;
      at[d] = 0;
    }
  }
}

}  // namespace

void extract_shard(const Mesh& mesh, const TensorSharding& s, const std::vector<int64_t>& dims,
                   size_t element, int64_t device, const void* whole, void* piece) {
  copy_block(static_cast<uint8_t*>(const_cast<void*>(whole)), dims, static_cast<uint8_t*>(piece),
             shard_dims(mesh, s, dims), shard_offset(mesh, s, dims, device), element, true);
}

void insert_shard(const Mesh& mesh, const TensorSharding& s, const std::vector<int64_t>& dims,
                  size_t element, int64_t device, const void* piece, void* whole) {
  copy_block(static_cast<uint8_t*>(whole), dims, static_cast<uint8_t*>(const_cast<void*>(piece)),
             shard_dims(mesh, s, dims), shard_offset(mesh, s, dims, device), element, false);
}

}  // namespace lmt
