// The PJRT backend's memory: allocations at addresses no real memory uses, and within each the
// tensors the model described (Backend::describe: a parameter, its gradient, an optimizer moment,
// a batch array), each kept as its own typed array on the device and, while the host holds it, as
// its own host copy. What no one described is one untyped part per gap, so a buffer the model never
// describes (scratch, the activation arena) is one flat part, as a plain allocation.
//
// On an accelerator (f64_as_pairs) a described f64 tensor is held as f32 [shape..., 2], each
// double as the pair {hi, lo} of f32 whose sum is it (hlo::WideForm::f32_pair): the same bytes,
// converted where host data comes in (as_held) and goes out (pairs_to_doubles), so that no
// program for the device needs f64 and the host still reads and writes doubles.
//
// This file knows nothing of programs: the pending program's state per allocation (what it wrote
// where, which parts it reads as arguments) lives here only as data, kept by trace.h.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/pjrt/hlo/builder.h"
#include "backend/pjrt/runtime/buffer.h"

namespace lmt {

class PjrtClient;

// One tensor of an allocation: bytes [begin, end), named and typed when described.
struct PjrtPart {
  int64_t begin = 0, end = 0;
  std::string name;                // empty: an undescribed range
  DType dtype = DType::u8;         // described: its dtype; else the type it was last held in
  std::vector<int64_t> dims;       // described: its shape; else flat
  PjrtBuffer dev;                  // the contents on the device, when valid
  std::vector<uint8_t> host;       // the contents on the host when host_valid (empty: zeros)
  bool host_valid = true;          // a new allocation is zeros, which the host "holds"
  // The pending program: the argument that holds this part's contents at its start, once read.
  int input = -1;
  HloValue input_param;  // that argument, as the part's dtype and dims
  HloValue input_value;  // the same, flat
  bool pairs = false;    // a described f64 tensor held as f32 pairs (f64_as_pairs)

  bool described() const { return !name.empty(); }
  int64_t bytes() const { return end - begin; }
};

// A byte range of an allocation and the value the pending program last wrote there: a flat
// tensor covering exactly [begin, end), or zeros (Backend::zero), which take the type of whatever
// reads them.
struct PjrtSegment {
  int64_t begin = 0, end = 0;
  HloValue v;
  bool zeros = false;
};

struct PjrtAlloc {
  uintptr_t at = 0;  // its address
  int64_t bytes = 0;
  std::vector<PjrtPart> parts;  // sorted by begin, tiling [0, bytes)
  // The pending program:
  bool in_program = false, written = false;
  bool dead = false;  // discarded and not written since: its arrays are dropped after the program
  std::map<int64_t, PjrtSegment> segments;  // by begin; disjoint
};

// What a program built over the tensors depends on of them: every allocation (address, size)
// and its parts (bytes, name, type, shape, whether the device holds them and how they are split).
// Two moments with the same layout see the same calls build the same program (replay.h).
struct PjrtLayout {
  struct Part {
    int64_t begin = 0, end = 0;
    std::string name;
    DType dtype = DType::u8;
    std::vector<int64_t> dims;
    bool on_device = false;
    TensorSharding sharding;
  };
  struct Alloc {
    uintptr_t at = 0;
    int64_t bytes = 0;
    std::vector<Part> parts;
  };
  std::vector<Alloc> allocs;
};

class PjrtTensors {
 public:
  // Where allocations live: far above anything a 64-bit process maps, so a PJRT address is never
  // mistaken for host memory.
  static constexpr uintptr_t kAddressBase = uintptr_t{1} << 56;

  explicit PjrtTensors(bool f64_as_pairs = false) : f64_as_pairs_(f64_as_pairs) {}

  void* alloc(size_t bytes);
  // Removes the allocation; the caller keeps whatever of its arrays a pending program still needs.
  PjrtAlloc release(void* p);
  // The allocation holding [p, p + bytes) and p's offset in it.
  PjrtAlloc& find(const void* p, int64_t bytes, int64_t* offset);
  PjrtAlloc* find_exact(const void* p);  // the allocation that starts at p, or null
  PjrtAlloc* at(uintptr_t address);      // by its address, or null (freed)

  // Splits the parts of p's allocation so that [p, p + bytes of t) is one part described as t
  // (an f64 tensor as pairs, with f64_as_pairs). The contents stay what they were (parts that
  // held them on the device are brought to the host first); a tensor held as pairs is described
  // before anything is written to it.
  void describe(const void* p, const TensorDesc& t);

  // Host data for [p, p + bytes) as the parts hold it: src, or where the range covers parts held
  // as pairs, a copy in `held` with those doubles made pairs.
  const void* as_held(const void* p, const void* src, size_t bytes, std::vector<uint8_t>& held);
  // Whether p is an element of a part held as pairs.
  bool holds_pairs(const void* p);
  // Bytes [lo, lo + n) of a part held as pairs (offsets within the allocation; whole elements),
  // read back into data, made doubles in place.
  static void pairs_to_doubles(const PjrtPart& part, int64_t lo, uint8_t* data, int64_t n);

  // Index of the part holding byte `offset` of a.
  static size_t part_at(const PjrtAlloc& a, int64_t offset);

  PjrtLayout layout() const;
  bool has_layout(const PjrtLayout& l) const;  // compared in place, nothing copied

  // Host copies: brings a part's contents to the host (if only the device holds them).
  static void to_host(PjrtPart& part);
  // Patches bytes [lo, hi) of a part (offsets within the allocation) on the host; the device
  // array, if any, is out of date and dropped.
  static void patch_host(PjrtPart& part, int64_t lo, const uint8_t* src, int64_t n);
  // The host's copy of a part (zeros where it holds none) to the device, in the part's type and
  // shape, split as `sharding` says; the device holds it from now on.
  static void upload(PjrtPart& part, const PjrtClient& client, const TensorSharding& sharding);
  // A part's contents are the device array b from now on (a program's output).
  static void hold(PjrtPart& part, PjrtBuffer b);
  // A part's contents are dead (discarded scratch after its program): its arrays are dropped.
  static void drop(PjrtPart& part);

 private:
  bool f64_as_pairs_;
  std::map<uintptr_t, PjrtAlloc> allocs_;
  uintptr_t next_ = kAddressBase;
};

}  // namespace lmt
