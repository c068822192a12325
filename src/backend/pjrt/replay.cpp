// PjrtReplays: recording a step's program and running it again (see replay.h).
#include "backend/pjrt/replay.h"

#include <cstring>

#include "backend/pjrt/runtime/client.h"
#include "core/error.h"

namespace lmt {

void PjrtReplays::arm(int key, bool pending) {
  armed_ = Armed{key, !pending, pending ? PjrtLayout{} : tensors_.layout()};
}

// Every argument is a part's contents at the start, a write's data or a constant: nothing a
// kernel computed on the host, and no array of an allocation freed while it was pending.
bool PjrtReplays::replayable(const PjrtAssembled& p) {
  if (p.early_write) return false;
  for (const PjrtAssembled::Arg& a : p.args)
    if (a.source == PjrtArgSource::freed || a.source == PjrtArgSource::value) return false;
  return true;
}

// The allocations now are those of the layout: the step made none that outlives it (a buffer
// made on first use is in the program but not in the layout the step started from).
bool PjrtReplays::same_allocations(const PjrtLayout& l) const {
  const PjrtLayout now = tensors_.layout();
  if (now.allocs.size() != l.allocs.size()) return false;
  for (size_t i = 0; i < l.allocs.size(); ++i)
    if (now.allocs[i].at != l.allocs[i].at || now.allocs[i].bytes != l.allocs[i].bytes)
      return false;
  return true;
}

void PjrtReplays::ran(const PjrtAssembled& p, PjrtPrograms::Compiled* c, bool step_end) {
  if (!armed_) return;
  Armed armed = std::move(*armed_);
  armed_.reset();
  if (!step_end || !armed.clean || !c || !replayable(p) || !same_allocations(armed.layout)) return;
  Recording r;
  r.program = c;
  r.layout = std::move(armed.layout);
  r.args = p.args;
  r.constants.resize(p.args.size());
  for (size_t i = 0; i < p.args.size(); ++i) {
    PjrtAssembled::Arg& a = r.args[i];
    if (a.source == PjrtArgSource::constant) r.constants[i] = *a.host;
    a.dev = nullptr;  // the trace's, valid while it was pending
    a.host = nullptr;
  }
  r.writes = p.writes;
  r.data.resize(p.writes.size());
  r.donate = p.donate;
  r.outs = p.outs;
  r.out_shardings = p.out_shardings;
  r.arguments = p.described_args;
  r.dead = p.dead;
  recordings_[armed.key] = std::move(r);
}

bool PjrtReplays::capture(const void* dst, const void* src, size_t bytes) {
  if (!capturing_) return false;
  Recording& r = *capturing_;
  LMT_CHECK(captured_ < r.writes.size() && r.writes[captured_].at == dst &&
                r.writes[captured_].bytes == bytes,
            "PjrtBackend::replay: write " + std::to_string(captured_) +
                " of the step differs from the recorded step's");
  const auto* s = static_cast<const uint8_t*>(src);
  r.data[captured_++].assign(s, s + bytes);
  return true;
}

bool PjrtReplays::replay(int key, const std::function<void()>& writes) {
  auto found = recordings_.find(key);
  if (found == recordings_.end()) return false;
  Recording& r = found->second;
  if (!tensors_.has_layout(r.layout)) return false;
  capturing_ = &r;
  captured_ = 0;
  struct Stop {
    Recording*& capturing;
    ~Stop() { capturing = nullptr; }
  } stop{capturing_};
  writes();
  LMT_CHECK(captured_ == r.writes.size(),
            "PjrtBackend::replay: the step made " + std::to_string(captured_) +
                " writes, the recorded step " + std::to_string(r.writes.size()));
  capturing_ = nullptr;
  run(r);
  return true;
}

// The program on the parts' arrays and the new data, its outputs held as the trace holds them
// (PjrtTrace::done), its dead scratch dropped.
void PjrtReplays::run(Recording& r) {
  std::vector<PjrtBuffer> uploads;
  uploads.reserve(r.args.size());
  std::vector<PjrtBuffer*> args;
  args.reserve(r.args.size());
  for (size_t i = 0; i < r.args.size(); ++i) {
    const PjrtAssembled::Arg& a = r.args[i];
    if (a.source == PjrtArgSource::part) {
      PjrtPart& part = tensors_.at(a.alloc)->parts[a.part];
      if (!part.dev.valid()) {  // uploaded first, typed as its reader read it: as the trace does
        part.dtype = a.dtype;
        part.dims = a.dims;
        PjrtTensors::upload(part, client_, a.sharding);
      }
      args.push_back(&part.dev);
      continue;
    }
    const std::vector<uint8_t>& data =
        a.source == PjrtArgSource::write ? r.data[static_cast<size_t>(a.write)] : r.constants[i];
    uploads.push_back(client_.to_device(data.data(), a.dtype, a.dims, a.sharding));
    args.push_back(&uploads.back());
  }
  std::vector<PjrtBuffer> results =
      programs_.run(*r.program, args, r.donate, r.out_shardings, r.arguments, true);
  LMT_CHECK(results.size() == r.outs.size(), "PjrtBackend: a replay returned the wrong outputs");
  for (size_t i = 0; i < r.outs.size(); ++i)
    PjrtTensors::hold(tensors_.at(r.outs[i].alloc)->parts[r.outs[i].part], std::move(results[i]));
  for (uintptr_t at : r.dead)
    for (PjrtPart& part : tensors_.at(at)->parts) PjrtTensors::drop(part);
}

}  // namespace lmt
