// PjrtTensors: allocations and their described parts (see tensors.h).
#include "backend/pjrt/tensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/pjrt/runtime/client.h"
#include "core/error.h"

namespace lmt {
namespace {

// Allocations are 256-byte aligned with a gap between them, so a pointer one past an
// allocation's end is not the next one's start.
constexpr uintptr_t kAlign = 256;

PjrtPart whole(int64_t begin, int64_t end) {
  PjrtPart p;
  p.begin = begin;
  p.end = end;
  return p;
}

// Part p cut to [lo, hi) (within it), its host bytes with it; it must hold its contents on the
// host.
PjrtPart cut(const PjrtPart& p, int64_t lo, int64_t hi) {
  PjrtPart r = whole(lo, hi);
  r.dtype = DType::u8;
  r.dims = {hi - lo};
  if (!p.host.empty())
    r.host.assign(p.host.begin() + (lo - p.begin), p.host.begin() + (hi - p.begin));
  return r;
}

}  // namespace

void* PjrtTensors::alloc(size_t bytes) {
  const uintptr_t at = next_;
  next_ += (bytes + 2 * kAlign - 1) / kAlign * kAlign;
  PjrtAlloc& a = allocs_[at];
  a.at = at;
  a.bytes = static_cast<int64_t>(bytes);
  a.parts.push_back(whole(0, a.bytes));
  a.parts.back().dims = {a.bytes};
  return reinterpret_cast<void*>(at);
}

PjrtAlloc PjrtTensors::release(void* p) {
  auto it = allocs_.find(reinterpret_cast<uintptr_t>(p));
  LMT_CHECK(it != allocs_.end(), "PjrtBackend::free: not an allocation of this backend");
  PjrtAlloc a = std::move(it->second);
  allocs_.erase(it);
  return a;
}

PjrtAlloc& PjrtTensors::find(const void* p, int64_t bytes, int64_t* offset) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = allocs_.upper_bound(addr);
  LMT_CHECK(it != allocs_.begin(), "PjrtBackend: a pointer that is not this backend's");
  --it;
  PjrtAlloc& a = it->second;
  *offset = static_cast<int64_t>(addr - it->first);
  LMT_CHECK(*offset + bytes <= a.bytes, "PjrtBackend: an access past the end of an allocation");
  return a;
}

PjrtAlloc* PjrtTensors::find_exact(const void* p) {
  auto it = allocs_.find(reinterpret_cast<uintptr_t>(p));
  return it == allocs_.end() ? nullptr : &it->second;
}

PjrtAlloc* PjrtTensors::at(uintptr_t address) {
  auto it = allocs_.find(address);
  return it == allocs_.end() ? nullptr : &it->second;
}

size_t PjrtTensors::part_at(const PjrtAlloc& a, int64_t offset) {
  auto it = std::upper_bound(a.parts.begin(), a.parts.end(), offset,
                             [](int64_t o, const PjrtPart& p) { return o < p.begin; });
  LMT_CHECK(it != a.parts.begin(), "PjrtTensors: an offset before the first part");
  return static_cast<size_t>(it - a.parts.begin() - 1);
}

namespace {

PjrtLayout::Part layout_of(const PjrtPart& p) {
  const bool dev = p.dev.valid();
  return {p.begin, p.end, p.name, p.dtype, p.dims, dev, dev ? p.dev.sharding() : TensorSharding{}};
}

// Whether the device holds a described tensor (and how it splits it: as the plan says, either
// way) builds the same program: a read of it is its argument in its type and shape, uploaded
// first where the host holds it. An undescribed range's type and shape follow its history, and
// where the device holds it, its array's.
bool same(const PjrtLayout::Part& l, const PjrtPart& p) {
  if (l.begin != p.begin || l.end != p.end || l.dtype != p.dtype || l.dims != p.dims ||
      l.name != p.name)
    return false;
  const bool dev = p.dev.valid();
  return p.described() ||
         (l.on_device == dev && (dev ? l.sharding == p.dev.sharding() : l.sharding.empty()));
}

}  // namespace

PjrtLayout PjrtTensors::layout() const {
  PjrtLayout l;
  l.allocs.reserve(allocs_.size());
  for (const auto& [at, a] : allocs_) {
    PjrtLayout::Alloc x{at, a.bytes, {}};
    x.parts.reserve(a.parts.size());
    for (const PjrtPart& p : a.parts) x.parts.push_back(layout_of(p));
    l.allocs.push_back(std::move(x));
  }
  return l;
}

bool PjrtTensors::has_layout(const PjrtLayout& l) const {
  if (l.allocs.size() != allocs_.size()) return false;
  auto it = l.allocs.begin();
  for (const auto& [at, a] : allocs_) {
    const PjrtLayout::Alloc& x = *it++;
    if (x.at != at || x.bytes != a.bytes || x.parts.size() != a.parts.size()) return false;
    for (size_t i = 0; i < a.parts.size(); ++i)
      if (!same(x.parts[i], a.parts[i])) return false;
  }
  return true;
}

void PjrtTensors::describe(const void* p, const TensorDesc& t) {
  int64_t lo = 0;
  const int64_t n = static_cast<int64_t>(t.bytes());
  PjrtAlloc& a = find(p, n, &lo);
  LMT_CHECK(!a.in_program, "PjrtBackend::describe: " + t.name + " inside a pending program");
  LMT_CHECK(n > 0 && !t.name.empty(), "PjrtBackend::describe: an empty tensor or name");
  const int64_t hi = lo + n;
  std::vector<PjrtPart> out;
  for (PjrtPart& q : a.parts) {
    if (q.end <= lo || q.begin >= hi) {
      out.push_back(std::move(q));
      continue;
    }
    LMT_CHECK(!q.described() || (q.begin == lo && q.end == hi) || (q.begin >= lo && q.end <= hi),
              "PjrtBackend::describe: " + t.name + " overlaps " + q.name + " in part");
    to_host(q);
    if (q.begin < lo) out.push_back(cut(q, q.begin, lo));
    if (q.begin <= lo) {  // the described part starts here, its bytes gathered below
      PjrtPart d = whole(lo, hi);
      d.name = t.name;
      d.dtype = t.dtype;
      d.dims = t.shape;
      d.pairs = f64_as_pairs_ && t.dtype == DType::f64;
      if (d.pairs) {
        d.dtype = DType::f32;
        d.dims.push_back(2);
      }
      out.push_back(std::move(d));
    }
    PjrtPart& d = *std::find_if(out.begin(), out.end(), [&](const PjrtPart& x) {
      return x.begin == lo && x.described();
    });
    if (!q.host.empty()) {
      if (d.host.empty()) d.host.assign(static_cast<size_t>(n), 0);
      const int64_t b0 = std::max(q.begin, lo), b1 = std::min(q.end, hi);
      std::memcpy(d.host.data() + (b0 - lo), q.host.data() + (b0 - q.begin),
                  static_cast<size_t>(b1 - b0));
    }
    if (q.end > hi) out.push_back(cut(q, hi, q.end));
  }
  std::sort(out.begin(), out.end(),
            [](const PjrtPart& x, const PjrtPart& y) { return x.begin < y.begin; });
  a.parts = std::move(out);
}

namespace {

// The elements of bytes [lo, lo + n) of a part held as pairs: whole ones.
int64_t pair_elements(const PjrtPart& part, int64_t lo, int64_t n) {
  LMT_CHECK(part.pairs && (lo - part.begin) % 8 == 0 && n % 8 == 0,
            "PjrtBackend: " + part.name +
                " (f64, held as f32 pairs) read or written in part of an element");
  return n / 8;
}

// The 8 bytes at `at`, a double, made the pair {hi, lo} of f32 that sum to it (hi the f32
// nearest it; lo 0 beyond f32's range), and back.
void to_pair(uint8_t* at) {
  double v = 0;
  std::memcpy(&v, at, 8);
  const float hi = static_cast<float>(v);
  const float pair[2] = {hi, std::isfinite(hi) ? static_cast<float>(v - double{hi}) : 0.0f};
  std::memcpy(at, pair, 8);
}

void to_double(uint8_t* at) {
  float pair[2];
  std::memcpy(pair, at, 8);
  const double v = double{pair[0]} + double{pair[1]};
  std::memcpy(at, &v, 8);
}

}  // namespace

const void* PjrtTensors::as_held(const void* p, const void* src, size_t bytes,
                                 std::vector<uint8_t>& held) {
  if (!f64_as_pairs_ || bytes == 0) return src;
  int64_t lo = 0;
  PjrtAlloc& a = find(p, static_cast<int64_t>(bytes), &lo);
  const int64_t hi = lo + static_cast<int64_t>(bytes);
  const auto* s = static_cast<const uint8_t*>(src);
  for (size_t i = part_at(a, lo); i < a.parts.size() && a.parts[i].begin < hi; ++i) {
    const PjrtPart& q = a.parts[i];
    if (!q.pairs) continue;
    if (held.empty()) held.assign(s, s + bytes);
    const int64_t p0 = std::max(lo, q.begin), p1 = std::min(hi, q.end);
    for (int64_t e = 0; e < pair_elements(q, p0, p1 - p0); ++e) to_pair(&held[p0 - lo + 8 * e]);
  }
  return held.empty() ? src : held.data();
}

bool PjrtTensors::holds_pairs(const void* p) {
  int64_t off = 0;
  const PjrtAlloc& a = find(p, 8, &off);
  const PjrtPart& part = a.parts[part_at(a, off)];
  return part.pairs && (off - part.begin) % 8 == 0;
}

void PjrtTensors::pairs_to_doubles(const PjrtPart& part, int64_t lo, uint8_t* data, int64_t n) {
  for (int64_t e = 0; e < pair_elements(part, lo, n); ++e) to_double(data + 8 * e);
}

void PjrtTensors::to_host(PjrtPart& part) {
  if (part.host_valid) return;
  LMT_CHECK(part.dev.valid(), "PjrtTensors: a part held nowhere");
  part.host.assign(static_cast<size_t>(part.bytes()), 0);
  LMT_CHECK(part.dev.byte_size() == part.host.size(), "PjrtTensors: a device array of the wrong size");
  part.dev.to_host(part.host.data(), part.host.size());
  part.host_valid = true;
}

void PjrtTensors::upload(PjrtPart& part, const PjrtClient& client, const TensorSharding& sharding) {
  std::vector<uint8_t> zeros;
  if (part.host.empty()) zeros.assign(static_cast<size_t>(part.bytes()), 0);
  part.dev = client.to_device(part.host.empty() ? zeros.data() : part.host.data(), part.dtype,
                              part.dims, sharding);
  part.host = {};
  part.host_valid = false;  // the device holds it now
}

void PjrtTensors::hold(PjrtPart& part, PjrtBuffer b) {
  part.host = {};
  part.dev = std::move(b);
  part.dtype = part.dev.dtype();
  part.dims = part.dev.dims();
  part.host_valid = false;
}

void PjrtTensors::drop(PjrtPart& part) {
  part.dev = PjrtBuffer();
  part.host = {};
  part.host_valid = true;
}

void PjrtTensors::patch_host(PjrtPart& part, int64_t lo, const uint8_t* src, int64_t n) {
  LMT_CHECK(lo >= part.begin && lo + n <= part.end, "PjrtTensors: a patch outside its part");
  if (n < part.bytes()) to_host(part);  // the rest stays as it is
  part.host.resize(static_cast<size_t>(part.bytes()), 0);
  std::memcpy(part.host.data() + (lo - part.begin), src, static_cast<size_t>(n));
  part.host_valid = true;
  part.dev = PjrtBuffer();  // the host now holds the only up-to-date copy
}

}  // namespace lmt
