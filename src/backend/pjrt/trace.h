// The PJRT backend's pending program: what the kernels called since the last run, as StableHLO
// being built, over the memory of tensors.h.
//
// Within the program an allocation is a set of disjoint byte ranges, each holding the value last
// written there (a flat tensor), so an op reading what another op wrote is connected to it
// directly, without copying the allocation. A range nobody wrote yet reads the program's
// argument of the part that holds it: each described tensor is its own argument, of its own dtype
// and shape. At the end (finish) every part the program wrote is an output, again one per tensor,
// donated from its argument where the types agree; parts of discarded scratch are not outputs.
//
// Host data a program needs (the batch, per-step scalars) are arguments too, named; equal data
// under one name is one argument, so a value every layer reads (the learning rate, the document
// starts) is passed once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/pjrt/backend.h"
#include "backend/pjrt/hlo/builder.h"
#include "backend/pjrt/tensors.h"

namespace lmt {

class PjrtClient;

// Where an argument's value comes from: a part's contents at the program's start (a freed part's
// when its allocation was released while the program was pending), the host data of the
// program's n-th from_host, a constant of the program (Backend::keep's one), or a number a kernel
// computed on the host (a value of this step only). A replay (replay.h) supplies the first three
// anew; a program with the last cannot be replayed.
enum class PjrtArgSource { part, freed, write, constant, value };

// A program ready to run: its text, its arguments (device arrays or host data to upload), which
// arguments it may consume, and where each output goes.
struct PjrtAssembled {
  std::string text;
  struct Arg {
    PjrtBuffer* dev = nullptr;  // a part's (or a freed part's kept) device array, or
    const std::vector<uint8_t>* host = nullptr;  // host data uploaded when the program runs
    DType dtype = DType::u8;
    std::vector<int64_t> dims;
    TensorSharding sharding;  // how host data is split over the mesh when uploaded
    PjrtArgSource source = PjrtArgSource::part;
    uintptr_t alloc = 0;  // source part: the allocation and its part
    size_t part = 0;
    int write = -1;  // source write: which of `writes`
  };
  std::vector<Arg> args;
  std::vector<int> donate;
  struct Out {
    uintptr_t alloc = 0;
    size_t part = 0;
  };
  std::vector<Out> outs;
  std::vector<TensorSharding> out_shardings;  // outs[i]'s, as the module's results carry them
  std::vector<ProgramArgument> described_args;  // the arguments' names and types
  // The program's from_host calls, in order (where to, how many bytes), and whether one before
  // it depended on where the device held its destination (no program was pending: it patched
  // host copies, or started the program).
  struct Write {
    const void* at = nullptr;
    size_t bytes = 0;
  };
  std::vector<Write> writes;
  bool early_write = false;
  std::vector<uintptr_t> dead;  // allocations discarded and not written since: arrays dropped
};

// The sharding plan: how a named tensor (a described part, or host data under that name) of the
// given dims is split over the mesh; {} is whole on every device.
using ShardingPlan =
    std::function<TensorSharding(const std::string& name, const std::vector<int64_t>& dims)>;

class PjrtTrace {
 public:
  using Value = HloValue;
  using Dims = std::vector<int64_t>;

  // On a mesh of several devices `plan` splits the tensors it names (none: all whole).
  PjrtTrace(PjrtTensors& tensors, const PjrtClient& client, bool compile_only,
            ShardingPlan plan = {})
      : tensors_(tensors), client_(client), compile_only_(compile_only), plan_(std::move(plan)) {}

  bool pending() const { return builder_ != nullptr || !touched_.empty(); }
  StablehloBuilder& b();  // the pending program (started on first use)

  // ---- memory ops of the program ----
  // Copies host bytes into device memory: inside a program (or into a part the device holds) an
  // argument of the program, typed as the described part it fills exactly; before any program, a
  // patch of the host copies (uploaded on first use).
  void from_host(void* dst, const void* src, size_t bytes);
  void copy(void* dst, const void* src, size_t bytes);
  void zero(void* p, size_t bytes);
  void discard(void* p);
  // Backend::recompute_from: the contents of `sources` and `after` pass together through one
  // optimization barrier (no common-subexpression elimination across it), and each source then
  // depends on `after` through a term that adds zero (0 * its first element; non-finite values
  // propagate as the gradient would carry them anyway). The data dependence is what orders the
  // recomputation after `after`: XLA expands barriers before it schedules.
  void recompute_barrier(const std::vector<MemoryRange>& sources, const MemoryRange& after);
  // Backend::keep and Backend::assemble: the contents of `value` become one array of the
  // program. A residual stream on XLA:CPU, which expands optimization barriers before it fuses:
  // the result of a loop the compiler cannot see the trip count of (one, a runtime scalar), whose
  // body multiplies by that scalar's 1 (XLA's GPU compiler does not fuse the chain into every
  // reader; a barrier there only kept the residual addition from fusing with the next norm: one
  // kernel more a layer). An assembled gradient elsewhere than XLA:CPU: an optimization barrier,
  // which XLA's GPU compiler keeps through fusion. On a mesh with batch axes the value, as `rows`
  // rows, is constrained to rows split over them.
  enum class Kept { residual, assembled };
  void keep(const MemoryRange& value, int64_t rows, Kept kind);
  // How the plan splits a residual stream of `rows` x `cols` (Backend::keep's): its rows over the
  // batch axes; empty on one device or where they do not divide.
  TensorSharding residual_sharding(int64_t rows, int64_t cols) const {
    return sharding_of("activation.residual", {rows, cols});
  }
  // The output head [V, C] as the plan splits it (a tied embedding is split the same).
  TensorSharding head_sharding(int64_t V, int64_t C) const {
    return sharding_of("lm_head.weight", {V, C});
  }
  // The allocation p is freed: a pending program that reads it keeps its arrays until it runs.
  void release(void* p);
  // Whether bytes [p, p + bytes) hold zeros that this program wrote (zero()), so that a reader can
  // drop them from a sum.
  bool zeros(const void* p, size_t bytes);

  // ---- typed views ----
  // The tensor of shape dims at p, element (i, j, ...) at sum index * stride elements from p
  // (strides: row-major dense when empty; the last stride must be 1).
  Value view(const void* p, DType t, Dims dims, Dims strides = {});
  // Writes v (its dims) at p with the given strides (dense when empty).
  void set(void* p, const Value& v, Dims strides = {});
  void accumulate_into(void* y, DType dt, const Value& x);

  // ---- host data as arguments ----
  // `shared`: equal data under this name earlier in the program is the same argument (for values
  // whose equality is a property of the program, never of the data: a step's learning rate read by
  // every parameter's update, a dropout mask's key read again by a recomputation).
  // `source`: value (a number of this step a kernel computed) or constant (the same in every
  // program that has it); from_host's own data are writes.
  Value runtime(const void* data, size_t bytes, DType dt, Dims dims, const std::string& name,
                bool shared, PjrtArgSource source = PjrtArgSource::value);
  Value runtime_scalar(double v, DType dt, const std::string& name,  // f32 or f64; shared
                       PjrtArgSource source = PjrtArgSource::value);

  // ---- the end of the program ----
  // The program as it stands, with its outputs chosen and donations marked; the trace stays
  // pending until done() (after the run, with the outputs stored).
  PjrtAssembled assemble();
  // The program ran (results: its outputs, in order; empty when it was only compiled).
  void done(const PjrtAssembled& p, std::vector<PjrtBuffer> results);
  // Throws the pending program away (nothing was written).
  void reset();

 private:
  // An argument: a part's contents at the program's start, or host data.
  struct Arg {
    uintptr_t alloc = 0;
    size_t part = 0;
    int kept = -1;  // the allocation was freed: its array is keep_[kept]
    std::vector<uint8_t> host;
    DType dtype = DType::u8;
    Dims dims;
    std::string name;
    Value param;
    TensorSharding sharding;
    PjrtArgSource source = PjrtArgSource::part;
    int write = -1;
  };

  // A part's sharding: the plan's for a described tensor, whole for anything else. A part's
  // device array always has its part's sharding, so programs never reshard their arguments.
  TensorSharding sharding_of(const std::string& name, const Dims& dims) const;

  void touch(PjrtAlloc& a);
  const Value& input(PjrtAlloc& a, size_t part, DType hint);
  void upload(PjrtPart& part, DType hint);
  Value read_bytes(PjrtAlloc& a, int64_t lo, int64_t hi, DType t);
  void read_inputs(PjrtAlloc& a, int64_t lo, int64_t hi, DType t, std::vector<Value>& pieces);
  void write_bytes(PjrtAlloc& a, int64_t lo, int64_t hi, const Value& v);
  void put(PjrtAlloc& a, PjrtSegment seg);
  PjrtSegment part_of(const PjrtSegment& s, int64_t p0, int64_t p1);
  Value zeros_of(int64_t bytes, DType t);
  Value contents(PjrtAlloc& a, const PjrtPart& part);
  DType natural_type(PjrtAlloc& a, int64_t lo, int64_t hi);
  std::map<int64_t, PjrtSegment>::iterator first_overlap(PjrtAlloc& a, int64_t lo);
  bool part_written(PjrtAlloc& a, const PjrtPart& part);

  // Byte-level reshaping of flat values.
  Value bytes_of(const Value& v, int64_t vb, int64_t b0, int64_t b1, DType t);
  Value slice1(const Value& x, int64_t lo, int64_t hi);
  Value as_bytes(const Value& v);
  Value retype(const Value& v, DType t);
  // Strided views and writes.
  Value write_rows(const Value& r, const Dims& dims, const Dims& strides, size_t i, const Value& x);
  Value fit_last(const Value& r, int64_t n);
  struct Rows {
    int64_t R = 0, S = 0, w = 1, c = 0;  // rows, their stride, the region's width and column
    int64_t base = 0, end = 0;           // the bytes of the block of whole rows
  };
  std::optional<Rows> rows_of(PjrtAlloc& a, int64_t off, DType t, const Dims& dims,
                              const Dims& strides);

  PjrtTensors& tensors_;
  const PjrtClient& client_;
  bool compile_only_;
  ShardingPlan plan_;
  std::unique_ptr<StablehloBuilder> builder_;
  std::vector<uintptr_t> touched_;  // allocations the pending program uses, first use first
  std::vector<Arg> args_;
  std::vector<PjrtBuffer> keep_;
  std::unordered_multimap<std::string, size_t> shared_;  // name -> index in args_
  std::vector<PjrtAssembled::Write> writes_;             // the pending program's from_host calls
  bool early_write_ = false;  // a from_host before the pending program started (early_write)
};

}  // namespace lmt
