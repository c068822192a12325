// PjrtTrace: byte ranges of the pending program, typed reads and writes of them, and the
// program's arguments (see trace.h). Assembling and finishing a program is in
// trace_finish.cpp.
#include "backend/pjrt/trace.h"

#include <algorithm>
#include <cstring>

#include "backend/pjrt/hlo/lowering.h"
#include "backend/pjrt/runtime/client.h"
#include "core/error.h"

namespace lmt {
namespace {

using Dims = std::vector<int64_t>;

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

int64_t size_of(DType t) {
  return static_cast<int64_t>(dtype_size(t));
}

Dims prepend(int64_t d, const Dims& dims) {
  Dims r{d};
  r.insert(r.end(), dims.begin(), dims.end());
  return r;
}
Dims dense_strides(const Dims& dims) {
  Dims s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}
bool is_dense(const Dims& dims, const Dims& strides) {
  return strides == dense_strides(dims);
}
// Elements from the first to one past the last element of the view from dimension i on.
int64_t extent(const Dims& dims, const Dims& strides, size_t i) {
  int64_t e = 1;
  for (size_t j = i; j < dims.size(); ++j) e += (dims[j] - 1) * strides[j];
  return e;
}

}  // namespace

StablehloBuilder& PjrtTrace::b() {
  if (!builder_) {
    builder_ = std::make_unique<StablehloBuilder>();
    builder_->set_mesh(client_.mesh());
    // Tensor parallel: a product with the fused q|k|v (gate|up) weight is one product per
    // projection, each split by its own heads (features), not the concatenation split in halves.
    builder_->split_concatenations(client_.mesh().axis_size("tensor") > 1);
    if (hlo::wide_form(client_.platform_name()) != hlo::WideForm::f64) builder_->refuse_f64();
  }
  return *builder_;
}

TensorSharding PjrtTrace::sharding_of(const std::string& name, const Dims& dims) const {
  const Mesh& mesh = client_.mesh();
  if (mesh.single() || !plan_ || name.empty()) return {};
  TensorSharding s = plan_(name, dims);
  s.resize(std::min(s.size(), dims.size()));
  for (size_t d = 0; d < s.size(); ++d) {
    std::erase_if(s[d], [&](const std::string& axis) { return mesh.axis_size(axis) == 1; });
    if (dims[d] % shard_count(mesh, s, d) != 0) s[d].clear();  // not divisible: whole
  }
  return is_replicated(s) ? TensorSharding{} : s;
}

void PjrtTrace::touch(PjrtAlloc& a) {
  if (a.in_program) return;
  a.in_program = true;
  touched_.push_back(a.at);
}

// ---- memory ops ----

void PjrtTrace::from_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  int64_t lo = 0;
  PjrtAlloc& a = tensors_.find(dst, static_cast<int64_t>(bytes), &lo);
  const int64_t hi = lo + static_cast<int64_t>(bytes);
  bool on_device = false;
  for (size_t i = PjrtTensors::part_at(a, lo); i < a.parts.size() && a.parts[i].begin < hi; ++i)
    on_device |= a.parts[i].dev.valid();
  const auto* s = static_cast<const uint8_t*>(src);
  const bool started = builder_ != nullptr;
  if (started || on_device) {  // the data becomes an argument of the program
    const PjrtPart& p = a.parts[PjrtTensors::part_at(a, lo)];
    const auto w = PjrtArgSource::write;
    if (p.described() && p.begin == lo && p.end == hi) {
      const Value v = runtime(s, bytes, p.dtype, p.dims, p.name, false, w);
      write_bytes(a, lo, hi, b().reshape(v, {numel(p.dims)}));
    } else {
      write_bytes(a, lo, hi, runtime(s, bytes, DType::u8, {hi - lo}, "bytes", false, w));
    }
    early_write_ |= !started;  // an argument because the device held it: not a replay's
    writes_.push_back({dst, bytes});
    return;
  }
  early_write_ = true;
  for (size_t i = PjrtTensors::part_at(a, lo); i < a.parts.size() && a.parts[i].begin < hi; ++i) {
    PjrtPart& p = a.parts[i];
    const int64_t p0 = std::max(lo, p.begin), p1 = std::min(hi, p.end);
    PjrtTensors::patch_host(p, p0, s + (p0 - lo), p1 - p0);
  }
}

void PjrtTrace::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  const auto n = static_cast<int64_t>(bytes);
  int64_t so = 0, d_off = 0;
  PjrtAlloc& s = tensors_.find(src, n, &so);
  const Value v = read_bytes(s, so, so + n, natural_type(s, so, so + n));
  PjrtAlloc& d = tensors_.find(dst, n, &d_off);
  write_bytes(d, d_off, d_off + n, v);
}

void PjrtTrace::zero(void* p, size_t bytes) {
  if (bytes == 0) return;
  int64_t off = 0;
  PjrtAlloc& a = tensors_.find(p, static_cast<int64_t>(bytes), &off);
  b();  // a program is pending from here on, though no op is in it yet
  put(a, PjrtSegment{off, off + static_cast<int64_t>(bytes), Value{}, true});
}

void PjrtTrace::recompute_barrier(const std::vector<MemoryRange>& sources,
                                  const MemoryRange& after) {
  std::vector<MemoryRange> ranges = sources;
  ranges.push_back(after);
  std::vector<Value> values;
  for (const MemoryRange& r : ranges) {
    const auto n = static_cast<int64_t>(r.bytes);
    int64_t lo = 0;
    PjrtAlloc& a = tensors_.find(r.p, n, &lo);
    values.push_back(read_bytes(a, lo, lo + n, natural_type(a, lo, lo + n)));
  }
  std::vector<Value> shaped;  // each in the shape it was made in, so that its split shows
  for (const Value& v : values) shaped.push_back(b().unflattened(v));
  std::vector<Value> out = b().optimization_barrier(shaped);
  for (size_t i = 0; i < out.size(); ++i) out[i] = b().reshape(out[i], values[i].dims);
  const Value& last = out.back();
  const Value first = b().reshape(b().slice(last, {0}, {1}), {});
  const bool numeric = last.dtype != DType::u8 && last.dtype != DType::i32;
  for (size_t i = 0; i + 1 < out.size(); ++i) {
    Value v = out[i];
    if (numeric && v.dtype != DType::u8 && v.dtype != DType::i32) {
      const Value f = first.dtype == v.dtype ? first : b().convert(first, v.dtype);
      const Value zero = b().multiply(f, b().constant(0.0, v.dtype));
      v = b().add(v, b().broadcast_in_dim(zero, v.dims, {}));
    }
    int64_t lo = 0;
    PjrtAlloc& a = tensors_.find(ranges[i].p, static_cast<int64_t>(ranges[i].bytes), &lo);
    write_bytes(a, lo, lo + static_cast<int64_t>(ranges[i].bytes), v);
  }
}

void PjrtTrace::keep(const MemoryRange& value, int64_t rows, Kept kind) {
  const auto n = static_cast<int64_t>(value.bytes);
  int64_t lo = 0;
  PjrtAlloc& a = tensors_.find(value.p, n, &lo);
  const DType t = natural_type(a, lo, lo + n);
  if (t != DType::f32 && t != DType::bf16 && t != DType::f64) return;  // not a residual stream
  const Value flat = read_bytes(a, lo, lo + n, t);
  Value v = b().unflattened(flat);  // in the shape it was made in, so that its split shows
  // Split as the plan splits "activation.residual" (rows over the batch axes, as the batch is):
  // without it the partitioner may split a layer's activations by features instead, as the
  // FSDP-split weights they meet are, and move them between devices to change it.
  if (rows > 0 && flat.dims[0] % rows == 0) {
    const Dims dims = {rows, flat.dims[0] / rows};
    if (const TensorSharding s = sharding_of("activation.residual", dims); !s.empty()) {
      v = b().reshape(flat, dims);
      v = b().sharding_constraint(v, s);
    }
  }
  const bool cpu = client_.platform_name() == "cpu";
  if (!cpu && kind == Kept::assembled) {
    v = b().optimization_barrier({v})[0];
  } else if (cpu && kind == Kept::residual) {
    const Value one = runtime_scalar(1.0, DType::f32, "keep.one", PjrtArgSource::constant);
    const std::vector<Value> out = b().while_loop(
        {b().constant(0.0, DType::i32), v},
        [&](StablehloBuilder& lb, const std::vector<Value>& x) {
          return lb.compare(lb.convert(x[0], DType::f32), one, CompareDir::lt);
        },
        [&](StablehloBuilder& lb, const std::vector<Value>& x) {
          const Value s = t == DType::f32 ? one : lb.convert(one, t);
          return std::vector<Value>{lb.add(x[0], lb.constant(1.0, DType::i32)),
                                    lb.multiply(x[1], lb.broadcast_in_dim(s, x[1].dims, {}))};
        });
    v = out[1];
  }
  write_bytes(a, lo, lo + n, b().reshape(v, flat.dims));
}

// Dead scratch is not an output of the program (an input it was stays one, unchanged).
void PjrtTrace::discard(void* p) {
  PjrtAlloc* a = tensors_.find_exact(p);
  LMT_CHECK(a, "PjrtBackend::discard: not an allocation of this backend");
  touch(*a);  // so that its arrays are dropped when the program ends
  a->segments.clear();
  a->written = false;
  a->dead = true;
}

void PjrtTrace::release(void* p) {
  PjrtAlloc a = tensors_.release(p);
  for (PjrtPart& part : a.parts) {
    if (part.input < 0) continue;  // the pending program does not read it
    keep_.push_back(std::move(part.dev));
    args_[static_cast<size_t>(part.input)].kept = static_cast<int>(keep_.size()) - 1;
  }
}

bool PjrtTrace::zeros(const void* p, size_t bytes) {
  if (!pending() || bytes == 0) return false;
  int64_t lo = 0;
  PjrtAlloc& a = tensors_.find(p, static_cast<int64_t>(bytes), &lo);
  const int64_t hi = lo + static_cast<int64_t>(bytes);
  int64_t at = lo;
  for (auto it = first_overlap(a, lo); it != a.segments.end() && it->second.begin < hi; ++it) {
    if (it->second.begin > at || !it->second.zeros) return false;
    at = it->second.end;
  }
  return at >= hi;
}

// ---- arguments ----

void PjrtTrace::upload(PjrtPart& part, DType hint) {
  if (part.dev.valid()) return;
  if (!part.described()) {  // typed as its first reader reads it, where the size allows
    const DType t = part.bytes() % size_of(hint) == 0 ? hint : DType::u8;
    part.dtype = t;
    part.dims = {part.bytes() / size_of(t)};
  }
  if (compile_only_) return;  // the program is not run: nothing to upload
  PjrtTensors::upload(part, client_, sharding_of(part.name, part.dims));
}

// The contents of part i at the program's start, as an argument (uploaded to the device first if
// only the host holds them).
const HloValue& PjrtTrace::input(PjrtAlloc& a, size_t i, DType hint) {
  PjrtPart& p = a.parts[i];
  if (p.input >= 0) return p.input_value;
  touch(a);
  upload(p, hint);
  Arg arg;
  arg.alloc = a.at;
  arg.part = i;
  arg.dtype = p.dtype;
  arg.dims = p.dims;
  arg.name = p.name;
  arg.param = b().param(p.dtype, p.dims);
  arg.sharding = p.dev.valid() ? p.dev.sharding() : sharding_of(p.name, p.dims);
  b().shard_param(arg.param, arg.sharding);
  p.input = static_cast<int>(args_.size());
  p.input_param = arg.param;
  p.input_value = p.dims.size() == 1 ? arg.param : b().reshape(arg.param, {numel(p.dims)});
  args_.push_back(std::move(arg));
  return p.input_value;
}

HloValue PjrtTrace::runtime(const void* data, size_t bytes, DType dt, Dims dims,
                            const std::string& name, bool shared, PjrtArgSource source) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (shared) {
    auto [from, to] = shared_.equal_range(name);
    for (auto it = from; it != to; ++it) {
      const Arg& a = args_[it->second];
      if (a.dtype == dt && a.dims == dims && a.host.size() == bytes &&
          std::memcmp(a.host.data(), p, bytes) == 0)
        return a.param;
    }
  }
  Arg arg;
  arg.host.assign(p, p + bytes);
  arg.dtype = dt;
  arg.dims = dims;
  arg.name = name;
  arg.sharding = sharding_of(name, dims);
  arg.source = source;
  if (source == PjrtArgSource::write) arg.write = static_cast<int>(writes_.size());  // from_host's
  arg.param = b().param(dt, std::move(dims));
  b().shard_param(arg.param, arg.sharding);
  if (shared) shared_.emplace(name, args_.size());
  args_.push_back(std::move(arg));
  return args_.back().param;
}

HloValue PjrtTrace::runtime_scalar(double v, DType dt, const std::string& name,
                                   PjrtArgSource source) {
  if (dt == DType::f64) return runtime(&v, sizeof v, dt, {}, name, true, source);
  LMT_CHECK(dt == DType::f32, "PjrtBackend: runtime scalars are f32 or f64");
  const float f = static_cast<float>(v);
  return runtime(&f, sizeof f, dt, {}, name, true, source);
}

// ---- byte ranges ----

std::map<int64_t, PjrtSegment>::iterator PjrtTrace::first_overlap(PjrtAlloc& a, int64_t lo) {
  auto it = a.segments.upper_bound(lo);
  if (it != a.segments.begin()) {
    auto prev = std::prev(it);
    if (prev->second.end > lo) return prev;
  }
  return it;
}

// Bytes [lo, hi) of the parts' inputs, as pieces of type t.
void PjrtTrace::read_inputs(PjrtAlloc& a, int64_t lo, int64_t hi, DType t,
                            std::vector<Value>& pieces) {
  for (size_t i = PjrtTensors::part_at(a, lo); i < a.parts.size() && a.parts[i].begin < hi; ++i) {
    const int64_t p0 = std::max(lo, a.parts[i].begin), p1 = std::min(hi, a.parts[i].end);
    const Value& in = input(a, i, t);
    pieces.push_back(bytes_of(in, a.parts[i].begin, p0, p1, t));
  }
}

// Bytes [lo, hi) of an allocation as they are at this point of the program, as a flat tensor of
// type t: pieces of the segments written so far, the rest from the program's inputs.
HloValue PjrtTrace::read_bytes(PjrtAlloc& a, int64_t lo, int64_t hi, DType t) {
  touch(a);
  std::vector<Value> pieces;
  int64_t at = lo;
  for (auto it = first_overlap(a, lo); it != a.segments.end() && it->second.begin < hi; ++it) {
    const PjrtSegment& s = it->second;
    if (s.begin > at) read_inputs(a, at, s.begin, t, pieces);
    const int64_t p0 = std::max(at, s.begin), p1 = std::min(hi, s.end);
    pieces.push_back(s.zeros ? retype(zeros_of(p1 - p0, t), t) : bytes_of(s.v, s.begin, p0, p1, t));
    at = p1;
  }
  if (at < hi) read_inputs(a, at, hi, t, pieces);
  return pieces.size() == 1 ? pieces[0] : b().concatenate(pieces, 0);
}

// The program writes v (flat) to bytes [lo, hi) of an allocation.
void PjrtTrace::write_bytes(PjrtAlloc& a, int64_t lo, int64_t hi, const Value& v) {
  LMT_CHECK(v.rank() == 1 && v.dims[0] * size_of(v.dtype) == hi - lo,
            "PjrtBackend: a write of the wrong size");
  put(a, PjrtSegment{lo, hi, v});
}

void PjrtTrace::put(PjrtAlloc& a, PjrtSegment seg) {
  touch(a);
  a.written = true;
  a.dead = false;
  std::vector<PjrtSegment> keep;
  for (auto it = first_overlap(a, seg.begin);
       it != a.segments.end() && it->second.begin < seg.end;) {
    const PjrtSegment s = it->second;
    it = a.segments.erase(it);
    if (s.begin < seg.begin) keep.push_back(part_of(s, s.begin, seg.begin));
    if (s.end > seg.end) keep.push_back(part_of(s, seg.end, s.end));
  }
  for (PjrtSegment& s : keep) a.segments[s.begin] = std::move(s);
  a.segments[seg.begin] = std::move(seg);
}

// Bytes [p0, p1) of a segment, in its own type where they are whole elements of it.
PjrtSegment PjrtTrace::part_of(const PjrtSegment& s, int64_t p0, int64_t p1) {
  if (s.zeros) return PjrtSegment{p0, p1, Value{}, true};
  const int64_t sz = size_of(s.v.dtype);
  const DType t = (p0 - s.begin) % sz == 0 && (p1 - s.begin) % sz == 0 ? s.v.dtype : DType::u8;
  return PjrtSegment{p0, p1, bytes_of(s.v, s.begin, p0, p1, t)};
}

// `bytes` zero bytes as type t (bytes where they are not whole elements of t).
HloValue PjrtTrace::zeros_of(int64_t bytes, DType t) {
  if (bytes % size_of(t) != 0) return b().constant(0.0, DType::u8, {bytes});
  return b().constant(0.0, t, {bytes / size_of(t)});
}

// The element type bytes [lo, hi) hold now: that of every segment and typed part covering them,
// where they agree and the range is whole elements of it, else bytes.
DType PjrtTrace::natural_type(PjrtAlloc& a, int64_t lo, int64_t hi) {
  bool any = false;
  DType t = DType::u8;
  auto see = [&](DType d) {
    if (any && d != t) t = DType::u8;
    if (!any) t = d;
    any = true;
  };
  for (auto it = first_overlap(a, lo); it != a.segments.end() && it->second.begin < hi; ++it)
    if (!it->second.zeros) see(it->second.v.dtype);
  for (size_t i = PjrtTensors::part_at(a, lo); i < a.parts.size() && a.parts[i].begin < hi; ++i) {
    const PjrtPart& p = a.parts[i];
    if (p.described() || p.dev.valid() || p.input >= 0) see(p.dtype);
  }
  const int64_t sz = size_of(t);
  return lo % sz == 0 && hi % sz == 0 ? t : DType::u8;
}

// ---- byte-level reshaping ----

// Bytes [b0, b1) of a value v covering bytes [vb, ...) of its allocation, as type t.
HloValue PjrtTrace::bytes_of(const Value& v, int64_t vb, int64_t b0, int64_t b1, DType t) {
  const int64_t s = size_of(v.dtype);
  const int64_t lo = b0 - vb, hi = b1 - vb;
  if (lo % s != 0 || hi % s != 0) return retype(slice1(as_bytes(v), lo, hi), t);
  return retype(slice1(v, lo / s, hi / s), t);
}

HloValue PjrtTrace::slice1(const Value& x, int64_t lo, int64_t hi) {
  if (lo == 0 && hi == x.dims[0]) return x;
  return b().slice(x, {lo}, {hi});
}

HloValue PjrtTrace::as_bytes(const Value& v) {
  if (v.dtype == DType::u8) return v;
  const int64_t n = v.dims[0] * size_of(v.dtype);
  return b().reshape(b().bitcast_convert(v, DType::u8), {n});
}

// A flat value as another element type of the same total size.
HloValue PjrtTrace::retype(const Value& v, DType t) {
  if (v.dtype == t) return v;
  const int64_t sv = size_of(v.dtype), st = size_of(t);
  const int64_t bytes = v.dims[0] * sv;
  LMT_CHECK(bytes % st == 0, "PjrtBackend: a byte range read as " + std::string(dtype_name(t)) +
                                 " is not a whole number of elements");
  if (sv == st) return b().bitcast_convert(v, t);
  const Value u = as_bytes(v);
  if (t == DType::u8) return u;
  return b().bitcast_convert(b().reshape(u, {bytes / st, st}), t);
}

// ---- typed views ----

HloValue PjrtTrace::view(const void* p, DType t, Dims dims, Dims strides) {
  if (strides.empty()) strides = dense_strides(dims);
  int64_t off = 0;
  const int64_t span = extent(dims, strides, 0);
  PjrtAlloc& a = tensors_.find(p, span * size_of(t), &off);
  if (is_dense(dims, strides))
    return b().reshape(read_bytes(a, off, off + span * size_of(t), t), dims);
  if (const std::optional<Rows> rows = rows_of(a, off, t, dims, strides)) {
    const Value block = b().reshape(read_bytes(a, rows->base, rows->end, t), {rows->R, rows->S});
    return b().reshape(b().slice(block, {0, rows->c}, {rows->R, rows->c + rows->w}), dims);
  }
  Value r = b().reshape(read_bytes(a, off, off + span * size_of(t), t), {1, span});
  int64_t P = 1;
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    r = fit_last(r, dims[i] * strides[i]);
    P *= dims[i];
    r = b().reshape(r, {P, strides[i]});
    r = fit_last(r, extent(dims, strides, i + 1));
  }
  return b().reshape(r, dims);
}

// A strided region that is R rows of w contiguous elements, S apart (its dimensions merged where
// they are dense), inside the [R, S] block of whole rows from byte `base` on, at column c, where
// that block lies in one value this program wrote: q, k and v in the fused q|k|v rows, say.
// Reading and writing such a region as that block and its columns, XLA sees the rows the program
// wrote, so a value split by rows over a mesh stays split; the flat span padded to whole rows
// (the general way) has the partitioner gather it first, and a strided write that way leaves the
// block in pieces that every later read concatenates.
std::optional<PjrtTrace::Rows> PjrtTrace::rows_of(PjrtAlloc& a, int64_t off, DType t,
                                                  const Dims& dims, const Dims& strides) {
  size_t i = dims.size();
  Rows r;
  while (i > 0 && strides[i - 1] == r.w) r.w *= dims[--i];
  if (i == 0) return std::nullopt;
  r.S = strides[i - 1];
  r.R = dims[i - 1];
  for (size_t j = i - 1; j-- > 0;) {
    if (strides[j] != dims[j + 1] * strides[j + 1]) return std::nullopt;
    r.R *= dims[j];
  }
  // The value this program last wrote there, its rows taken to start where it starts.
  const auto seg = first_overlap(a, off);
  if (r.S <= r.w || seg == a.segments.end() || seg->second.zeros || seg->second.begin > off ||
      seg->second.v.dtype != t)
    return std::nullopt;
  const int64_t es = size_of(t), from = seg->second.begin;
  if ((off - from) % es != 0) return std::nullopt;
  r.c = (off - from) / es % r.S;
  r.base = off - r.c * es;
  r.end = r.base + r.R * r.S * es;
  if (r.c + r.w > r.S || r.end > seg->second.end) return std::nullopt;
  return r;
}

void PjrtTrace::set(void* p, const Value& v, Dims strides) {
  const Dims& dims = v.dims;
  if (strides.empty()) strides = dense_strides(dims);
  const int64_t es = size_of(v.dtype);
  const int64_t span = extent(dims, strides, 0);
  int64_t off = 0;
  PjrtAlloc& a = tensors_.find(p, span * es, &off);
  if (is_dense(dims, strides)) {
    write_bytes(a, off, off + span * es, b().reshape(v, {numel(dims)}));
    return;
  }
  if (const std::optional<Rows> r = rows_of(a, off, v.dtype, dims, strides)) {
    const Value block = b().reshape(read_bytes(a, r->base, r->end, v.dtype), {r->R, r->S});
    std::vector<Value> cols;
    if (r->c > 0) cols.push_back(b().slice(block, {0, 0}, {r->R, r->c}));
    cols.push_back(b().reshape(v, {r->R, r->w}));
    if (r->c + r->w < r->S) cols.push_back(b().slice(block, {0, r->c + r->w}, {r->R, r->S}));
    write_bytes(a, r->base, r->end, b().reshape(b().concatenate(cols, 1), {r->R * r->S}));
    return;
  }
  const Value old = b().reshape(read_bytes(a, off, off + span * es, v.dtype), {1, span});
  const Value r = write_rows(old, dims, strides, 0, b().reshape(v, prepend(1, dims)));
  write_bytes(a, off, off + span * es, b().reshape(r, {span}));
}

void PjrtTrace::accumulate_into(void* y, DType dt, const Value& x) {
  const size_t bytes = static_cast<size_t>(numel(x.dims)) * dtype_size(dt);
  if (zeros(y, bytes)) {  // y += x on zeros this program wrote: just x
    set(y, x.dtype == dt ? x : b().convert(x, dt));
    return;
  }
  set(y, b().add(view(y, dt, x.dims), x));
}

// r [P, L] holds P rows of the strided region from dimension i on; x [P, dims[i:]] the values.
// Returns r with x written in.
HloValue PjrtTrace::write_rows(const Value& r, const Dims& dims, const Dims& strides, size_t i,
                               const Value& x) {
  const int64_t P = r.dims[0], L = r.dims[1];
  if (i + 1 == dims.size()) {
    const Value x2 = b().reshape(x, {P, dims[i]});
    if (L == dims[i]) return x2;
    return b().concatenate({x2, b().slice(r, {0, dims[i]}, {P, L})}, 1);
  }
  const Value padded = fit_last(r, dims[i] * strides[i]);
  const Value rows = b().reshape(padded, {P * dims[i], strides[i]});
  Dims inner(dims.begin() + static_cast<int64_t>(i) + 1, dims.end());
  const Value xi = b().reshape(x, prepend(P * dims[i], inner));
  const Value w = write_rows(rows, dims, strides, i + 1, xi);
  return fit_last(b().reshape(w, {P, dims[i] * strides[i]}), L);
}

// r [P, L] cut or padded with zeros to [P, n].
HloValue PjrtTrace::fit_last(const Value& r, int64_t n) {
  const int64_t P = r.dims[0], L = r.dims[1];
  if (L == n) return r;
  if (L > n) return b().slice(r, {0, 0}, {P, n});
  return b().concatenate({r, b().constant(0.0, r.dtype, {P, n - L})}, 1);
}

}  // namespace lmt
