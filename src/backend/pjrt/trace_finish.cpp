// PjrtTrace: the end of a program. Every part the program wrote is an output (one per described
// tensor, in its dtype and shape), donated from its own argument where the two agree in type; the
// results become the parts' device arrays.
#include <algorithm>

#include "backend/pjrt/trace.h"
#include "core/error.h"

namespace lmt {

bool PjrtTrace::part_written(PjrtAlloc& a, const PjrtPart& part) {
  auto it = first_overlap(a, part.begin);
  return it != a.segments.end() && it->second.begin < part.end;
}

// A part as the program leaves it: a described tensor in its dtype and shape; an undescribed range
// flat, in the one element type all its pieces have (else bytes).
HloValue PjrtTrace::contents(PjrtAlloc& a, const PjrtPart& part) {
  if (part.described()) {
    const Value flat = read_bytes(a, part.begin, part.end, part.dtype);
    return part.dims.size() == 1 ? flat : b().reshape(flat, part.dims);
  }
  bool any = false;
  DType t = part.dev.valid() ? part.dev.dtype() : DType::f32;
  for (auto it = first_overlap(a, part.begin);
       it != a.segments.end() && it->second.begin < part.end; ++it) {
    const PjrtSegment& s = it->second;
    if (s.zeros) continue;
    if (any && s.v.dtype != t) t = DType::u8;
    if (!any) t = s.v.dtype;
    any = true;
  }
  if (part.input >= 0 && part.input_value.dtype != t) t = DType::u8;
  if (part.bytes() % static_cast<int64_t>(dtype_size(t)) != 0) t = DType::u8;
  return read_bytes(a, part.begin, part.end, t);
}

PjrtAssembled PjrtTrace::assemble() {
  PjrtAssembled out;
  std::vector<Value> values;
  std::vector<uintptr_t> order = touched_;  // outputs by address: whatever was touched first
  std::sort(order.begin(), order.end());
  for (uintptr_t at : order) {
    PjrtAlloc* a = tensors_.at(at);
    if (!a || !a->written) continue;
    for (size_t i = 0; i < a->parts.size(); ++i) {
      if (!part_written(*a, a->parts[i])) continue;
      const Value v = contents(*a, a->parts[i]);
      const PjrtPart& p = a->parts[i];  // contents() may have made it an argument
      if (p.input >= 0 && mlir_tensor_type(p.input_param) == mlir_tensor_type(v)) {
        b().donate(p.input_param, static_cast<int>(values.size()));
        out.donate.push_back(p.input);
      }
      values.push_back(v);
      out.outs.push_back({at, i});
      out.out_shardings.push_back(sharding_of(p.name, p.dims));  // undescribed: whole
    }
  }
  if (values.empty()) return out;  // nothing written: nothing to run
  b().shard_results(out.out_shardings);
  b().ret(values);
  out.text = b().text();
  for (Arg& arg : args_) {
    PjrtAssembled::Arg x;
    x.dtype = arg.dtype;
    x.dims = arg.dims;
    x.sharding = arg.sharding;
    x.source = arg.kept >= 0 ? PjrtArgSource::freed : arg.source;
    x.alloc = arg.alloc;
    x.part = arg.part;
    x.write = arg.write;
    if (arg.kept >= 0)
      x.dev = &keep_[static_cast<size_t>(arg.kept)];
    else if (arg.alloc)
      x.dev = &tensors_.at(arg.alloc)->parts[arg.part].dev;
    else
      x.host = &arg.host;
    out.args.push_back(x);
    out.described_args.push_back({arg.name, arg.dtype, arg.dims});
  }
  out.writes = writes_;
  out.early_write = early_write_;
  for (uintptr_t at : touched_)
    if (const PjrtAlloc* a = tensors_.at(at); a && a->dead) out.dead.push_back(at);
  return out;
}

void PjrtTrace::done(const PjrtAssembled& p, std::vector<PjrtBuffer> results) {
  LMT_CHECK(results.empty() || results.size() == p.outs.size(),
            "PjrtBackend: a program returned the wrong number of outputs");
  for (size_t i = 0; i < p.outs.size(); ++i) {
    PjrtPart& part = tensors_.at(p.outs[i].alloc)->parts[p.outs[i].part];
    if (results.empty())  // compiled only: the values are unspecified (zeros)
      PjrtTensors::drop(part);
    else
      PjrtTensors::hold(part, std::move(results[i]));
  }
  reset();
}

void PjrtTrace::reset() {
  for (uintptr_t at : touched_) {
    PjrtAlloc* a = tensors_.at(at);
    if (!a) continue;
    for (PjrtPart& part : a->parts) {
      part.input = -1;
      if (a->dead) PjrtTensors::drop(part);
    }
    a->in_program = a->written = a->dead = false;
    a->segments.clear();
  }
  touched_.clear();
  args_.clear();
  keep_.clear();
  shared_.clear();
  writes_.clear();
  early_write_ = false;
  builder_.reset();
}

}  // namespace lmt
