// A mesh of devices: named axes, major to minor, with their sizes (parallel.data / fsdp / tensor).
// Device i of the mesh (0 <= i < size()) sits at the coordinates of i in row-major order over the
// axes, as in JAX's and Shardy's meshes. A tensor's sharding names, for each of its dimensions,
// the axes that split it (major to minor); a dimension that names none is whole on every device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lmt {

struct MeshAxis {
  std::string name;
  int64_t size = 1;
};

struct Mesh {
  std::vector<MeshAxis> axes;

  int64_t size() const {
    int64_t n = 1;
    for (const MeshAxis& a : axes) n *= a.size;
    return n;
  }
  bool single() const { return size() == 1; }
  // The size of the named axis; 1 for an axis the mesh does not have.
  int64_t axis_size(const std::string& name) const {
    for (const MeshAxis& a : axes)
      if (a.name == name) return a.size;
    return 1;
  }
  // Device `device`'s coordinate along the named axis (0 for an axis the mesh does not have).
  int64_t coordinate(int64_t device, const std::string& name) const {
    for (size_t i = axes.size(); i-- > 0;) {
      if (axes[i].name == name) return device % axes[i].size;
      device /= axes[i].size;
    }
    return 0;
  }
};

// Per dimension of a tensor, the mesh axes that split it, major to minor.
using TensorSharding = std::vector<std::vector<std::string>>;

// How many pieces dimension `dim` of a tensor with sharding s is cut into.
inline int64_t shard_count(const Mesh& mesh, const TensorSharding& s, size_t dim) {
  int64_t n = 1;
  if (dim < s.size())
    for (const std::string& a : s[dim]) n *= mesh.axis_size(a);
  return n;
}

// Which piece of dimension `dim` device `device` holds.
inline int64_t shard_index(const Mesh& mesh, const TensorSharding& s, size_t dim, int64_t device) {
  int64_t k = 0;
  if (dim < s.size())
    for (const std::string& a : s[dim]) k = k * mesh.axis_size(a) + mesh.coordinate(device, a);
  return k;
}

}  // namespace lmt

namespace lmt {

// The dims of one device's piece of a tensor of `dims` sharded as s (each split dim must divide).
std::vector<int64_t> shard_dims(const Mesh& mesh, const TensorSharding& s,
                                const std::vector<int64_t>& dims);
// Where device `device`'s piece starts, per dimension.
std::vector<int64_t> shard_offset(const Mesh& mesh, const TensorSharding& s,
                                  const std::vector<int64_t>& dims, int64_t device);
// No dimension split: every device holds the whole tensor.
bool is_replicated(const TensorSharding& s);
// Copies device `device`'s piece out of the dense row-major array `whole` into `piece` (dense,
// shard_dims), or back.
void extract_shard(const Mesh& mesh, const TensorSharding& s, const std::vector<int64_t>& dims,
                   size_t element, int64_t device, const void* whole, void* piece);
void insert_shard(const Mesh& mesh, const TensorSharding& s, const std::vector<int64_t>& dims,
                  size_t element, int64_t device, const void* piece, void* whole);

}  // namespace lmt
