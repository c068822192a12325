// The PJRT backend (see backend.h): memory, running the pending program, and the kernels of
// dense algebra, elementwise ops, embeddings, norms and RoPE.
#include "backend/pjrt/backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>

#include "backend/pjrt/backend_impl.h"
#include "core/error.h"

namespace lmt {

namespace {

CompileSettings settings_for(const PjrtClient& client, const PjrtOptions& options) {
  CompileSettings s;
  s.deterministic = options.deterministic;
  s.xnnpack = client.platform_name() != "cpu";  // see CompileSettings::xnnpack
  return s;
}

// The mesh's devices (XLA's CPU plugin makes as many as the mesh names, ids 0 to its size - 1:
// parallel.devices names some of those, never more of them) and, when a launcher started
// several processes, the store where they met.
PjrtClientOptions client_options(const PjrtOptions& options) {
  PjrtClientOptions c;
  if (!options.mesh.single()) c.cpu_device_count = options.mesh.size();
  c.mesh = options.mesh;
  c.devices = options.devices;
  c.store = options.store;
  return c;
}

// A target that names its devices must hold the mesh; a bare GPU (h100, h200, a file) is as
// many of it on one host as the mesh names.
void check_mesh_fits(const CompileTarget& t, const Mesh& mesh) {
  if (t.devices > 0 && mesh.size() > t.devices)
    throw UserError(fmt::format(
        "parallel: the mesh data {} x fsdp {} x tensor {} needs {} devices; --target {} has {}",
        mesh.axis_size("data"), mesh.axis_size("fsdp"), mesh.axis_size("tensor"), mesh.size(),
        t.name, t.devices));
}

// A compile target's topology for its plugin.
PjrtTarget topology_of(const CompileTarget& t, const Mesh& mesh, const std::string& plugin) {
  PjrtTarget target;
  if (t.platform == "tpu") {
    target.name = t.topology;
    target.options = t.options;
    return target;
  }
  target.options = {
      {"target_config", t.config},
      {"topology", t.topology.empty() ? "1x1x" + std::to_string(mesh.size()) : t.topology}};
  target.cuda_data_dir = resolve_cuda_data_dir(plugin);
  target.count_launches = true;
  return target;
}

// The client: on the plugin's devices, or (a compile target) on the topology of the target's
// devices in its plugin (the CUDA plugin's, libtpu).
PjrtClient make_client(const std::string& plugin_path, const PjrtOptions& options) {
  if (!options.target)
    return PjrtClient(resolve_pjrt_plugin_path(plugin_path), client_options(options));
  const CompileTarget& t = *options.target;
  const bool tpu = t.platform == "tpu";
  check_mesh_fits(t, options.mesh);  // before looking for the plugin
  const std::string plugin =
      tpu ? resolve_tpu_plugin_path(plugin_path, t.name) : resolve_cuda_plugin_path(plugin_path);
  // The plugins log each deviceless compile at INFO level; a user who wants it sets the level.
  setenv("TF_CPP_MIN_LOG_LEVEL", "1", /*overwrite=*/0);
  // Without a TPU here, libtpu would wait for the cloud's metadata server to describe the host
  // (TPU_SKIP_MDS_QUERY), and warns unless told the slice and this host's place in it. It also
  // takes /tmp/libtpu_lockfile, which guards a host's TPUs, so that a second process loading it
  // (a compile beside another, a test beside another) fails: a compile touches no TPU.
  if (tpu) {
    setenv("TPU_SKIP_MDS_QUERY", "1", /*overwrite=*/1);
    setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1", /*overwrite=*/1);
    setenv("TPU_ACCELERATOR_TYPE", t.accelerator_type.c_str(), /*overwrite=*/1);
    setenv("TPU_WORKER_HOSTNAMES", "localhost", /*overwrite=*/1);
    setenv("TPU_WORKER_ID", "0", /*overwrite=*/1);
  }
  PjrtClientOptions c;
  c.mesh = options.mesh;
  c.devices = options.devices;
  try {
    return PjrtClient(plugin, topology_of(t, options.mesh, plugin), c);
  } catch (const UserError& e) {
    throw UserError("--target " + t.name + ": " + e.what());
  }
}

// LMTRAIN_PJRT_TRACE_EVERY_STEP=1 builds every training step's program from the model's calls
// instead of replaying the step recorded (tests compare the two).
bool trace_every_step() {
  const char* v = std::getenv("LMTRAIN_PJRT_TRACE_EVERY_STEP");
  return v && std::string(v) == "1";
}

}  // namespace

PjrtBackend::PjrtBackend(const std::string& plugin_path, const PjrtOptions& options)
    : client_(make_client(plugin_path, options)),
      target_(options.target),
      wide_(hlo::wide_form(client_.platform_name())),
      tensors_(wide_ == hlo::WideForm::f32_pair),
      trace_(tensors_, client_, options.compile_only, options.sharding),
      programs_(client_, settings_for(client_, options), options.compile_only),
      replays_(tensors_, programs_, client_),
      replay_(!options.compile_only && !trace_every_step()),
      deterministic_(options.deterministic) {}

DeviceInfo PjrtBackend::device() const {
  DeviceInfo d;
  d.platform = client_.platform_name();
  d.kind = client_.device_kind();
  d.devices = client_.mesh().size();
  d.spec = device_spec_of_kind(d.kind);
  d.compiles = true;
  if (const std::optional<DeviceMemory> m = client_.device_memory()) {
    d.peak_bytes = m->peak_bytes_in_use ? *m->peak_bytes_in_use : m->bytes_in_use;
    if (m->bytes_limit) {  // what the plugin's allocator may hand out
      d.memory_bytes = *m->bytes_limit;
      d.allocator_fraction = 1.0;
    }
  }
  d.programs = programs_.report();
  d.programs.attention = attention_;
  if (target_ && target_->platform == "tpu") {  // what libtpu's allocator may hand out
    d.memory_bytes = client_.topology_memory_limit();
    d.allocator_fraction = 1.0;
  } else if (target_) {  // what the CUDA plugin's allocator takes by default (GpuAllocatorConfig)
    d.memory_bytes = target_->device_memory;
    d.allocator_fraction = kCudaPluginMemoryFraction;
  }
  return d;
}

std::optional<DeviceMemoryUse> PjrtBackend::device_memory() const {
  const std::optional<DeviceMemory> m = client_.device_memory();
  if (!m) return std::nullopt;
  return DeviceMemoryUse{m->bytes_in_use, m->peak_bytes_in_use};
}

// ---- memory ----

void PjrtBackend::to_host(void* host_dst, const void* src, size_t bytes) {
  building("to_host");
  if (bytes == 0) return;
  int64_t lo = 0;
  PjrtAlloc* a = &tensors_.find(src, static_cast<int64_t>(bytes), &lo);
  if (a->in_program) {
    flush();
    a = &tensors_.find(src, static_cast<int64_t>(bytes), &lo);
  }
  const int64_t hi = lo + static_cast<int64_t>(bytes);
  auto* dst = static_cast<uint8_t*>(host_dst);
  for (size_t i = PjrtTensors::part_at(*a, lo); i < a->parts.size() && a->parts[i].begin < hi;
       ++i) {
    PjrtPart& p = a->parts[i];
    PjrtTensors::to_host(p);
    const int64_t p0 = std::max(lo, p.begin), p1 = std::min(hi, p.end);
    if (p.host.empty())
      std::memset(dst + (p0 - lo), 0, static_cast<size_t>(p1 - p0));
    else
      std::memcpy(dst + (p0 - lo), p.host.data() + (p0 - p.begin), static_cast<size_t>(p1 - p0));
    if (p.pairs) PjrtTensors::pairs_to_doubles(p, p0, dst + (p0 - lo), p1 - p0);
  }
}

void PjrtBackend::from_host(void* dst, const void* host_src, size_t bytes) {
  std::vector<uint8_t> paired;  // host_src with its doubles as pairs, where dst holds pairs
  const void* src = tensors_.as_held(dst, host_src, bytes, paired);
  if (!replays_.capture(dst, src, bytes)) trace_.from_host(dst, src, bytes);
}

void PjrtBackend::describe(const void* p, const TensorDesc& t) {
  building("describe");
  int64_t off = 0;
  if (tensors_.find(p, static_cast<int64_t>(t.bytes()), &off).in_program) flush();
  tensors_.describe(p, t);
}

void PjrtBackend::flush(bool step_end) {
  if (!trace_.pending()) {
    if (step_end) replays_.ran({}, nullptr, false);  // a step of no program: nothing kept
    return;
  }
  PjrtAssembled p = trace_.assemble();
  if (p.outs.empty()) {  // nothing written: nothing to run
    trace_.reset();
    replays_.ran(p, nullptr, false);
    return;
  }
  std::vector<PjrtBuffer> results = programs_.run(p);
  replays_.ran(p, results.empty() ? nullptr : programs_.last(), step_end);
  trace_.done(p, std::move(results));
}

void PjrtBackend::record(int key) {
  if (replay_) replays_.arm(key, trace_.pending());
}

bool PjrtBackend::replay(int key, const std::function<void()>& writes) {
  return replay_ && !trace_.pending() && replays_.replay(key, writes);
}

std::vector<int64_t> PjrtBackend::shape_of(const void* p, DType t, int64_t n) {
  int64_t off = 0;
  const int64_t bytes = n * static_cast<int64_t>(dtype_size(t));
  const PjrtAlloc& a = tensors_.find(p, bytes, &off);
  const PjrtPart& part = a.parts[PjrtTensors::part_at(a, off)];
  if (part.described() && part.dtype == t && part.begin == off && part.end == off + bytes)
    return part.dims;
  return {n};
}

// A described tensor starting at p ends where it ends; else the allocation's end does.
// ---- dense algebra ----

void PjrtBackend::gemm(DType dt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                       double alpha, const void* A, int64_t lda, const void* B, int64_t ldb,
                       double beta, void* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const size_t c_bytes = static_cast<size_t>(M * N) * dtype_size(dt);
  const bool add_c = beta != 0.0 && !(ldc == N && trace_.zeros(C, c_bytes));
  // bf16 and f16 operands stay narrow (the device's fast products, accumulated in f32 inside the
  // dot); the result is narrow too unless it is added to C, which is then summed in f32.
  const DType result = add_c ? compute_type(dt) : dt;
  Value r;
  if (K == 0) {
    r = b().constant(0.0, result, {M, N});
  } else {
    const Value a = view(A, dt, trans_a ? Dims{K, M} : Dims{M, K}, {lda, 1});
    const Value bb = view(B, dt, trans_b ? Dims{N, K} : Dims{K, N}, {ldb, 1});
    r = b().dot_general(a, bb, {}, {}, {trans_a ? 0 : 1}, {trans_b ? 1 : 0}, result);
  }
  if (alpha != 1.0) r = b().multiply(r, b().constant(alpha, r.dtype, r.dims));
  if (add_c) {
    Value c = up(view(C, dt, {M, N}, {ldc, 1}));
    if (beta != 1.0) c = b().multiply(c, b().constant(beta, c.dtype, c.dims));
    r = b().add(r, c);
  }
  set(C, down(r, dt), {ldc, 1});
}

void PjrtBackend::add_bias(DType dt, void* out, const void* bias, int64_t N, int64_t O) {
  if (N == 0 || O == 0) return;
  const Value x = view(out, dt, {N, O});
  set(out, b().add(x, b().broadcast_in_dim(view(bias, dt, {O}), {N, O}, {1})));
}

void PjrtBackend::bias_backward(DType dt, void* dbias, const void* dout, int64_t N, int64_t O) {
  if (N == 0 || O == 0) return;
  accumulate_into(dbias, dt, b().reduce_sum(view(dout, dt, {N, O}), {0}));
}

// ---- elementwise ----

void PjrtBackend::add(DType dt, void* out, const void* a, const void* bb, int64_t n) {
  if (n == 0) return;
  set(out, b().add(view(a, dt, {n}), view(bb, dt, {n})));
}

void PjrtBackend::accumulate(DType dt, void* y, const void* x, int64_t n) {
  if (n == 0) return;
  accumulate_into(y, dt, view(x, dt, {n}));
}

void PjrtBackend::scale(DType dt, void* x, double s, int64_t n) {
  if (n == 0) return;
  const Value v = view(x, dt, {n});
  set(x, b().multiply(v, b().constant(s, dt, {n})));
}

void PjrtBackend::add_wide(double* acc, const Value& s) {
  check_wide(acc);
  if (trace_.zeros(acc, sizeof(double)))  // += on zeros this program wrote: just s
    set(acc, s);
  else
    set(acc, hlo::wide_add(b(), wide_at(acc), s));
}

void PjrtBackend::sum(DType dt, double* acc, const void* x, int64_t n) {
  if (n == 0) return;
  add_wide(acc, hlo::wide_sum(b(), view(x, dt, {n}), wide_));
}

// On an accelerator the squares are rounded to f32 (each within 2^-24 of its value, so their sum
// too: they are positive) and summed with compensation. On XLA:CPU they are summed in f64, as
// the CPU backend sums them; XLA:CPU fuses no product into a reduction of more than 32 elements
// (it splits one into a tree of windows first), so there the tensor's squares are summed in f32
// over runs of at most 32 elements, a reduction the product fuses into, and those partial sums in
// f64: in f64 throughout, XLA:CPU wrote every gradient out again at twice its size before
// reducing it (about 1 GB a GPT-2 step, a tenth of its time), and one f32 sum over a whole
// tensor drifts the run away from the CPU backend's within a hundred steps.
void PjrtBackend::sum_squares(DType dt, double* acc, const void* x, int64_t n) {
  if (n == 0) return;
  const Value v = view(x, dt, shape_of(x, dt, n));
  if (wide_ == hlo::WideForm::f32_pair) {
    const Value w = up(v);
    add_wide(acc, hlo::wide_sum(b(), b().multiply(w, w), wide_));
    return;
  }
  // The last axis split into runs (the others kept whole, so that a sharded tensor stays so).
  Dims dims = v.dims.empty() ? Dims{1} : v.dims;
  const int64_t last = dims.back();
  int64_t run = 32;
  while (last % run != 0) --run;
  dims.back() = last / run;
  dims.push_back(run);
  Value r = b().reshape(v, dims);
  if (r.dtype != DType::f32 && r.dtype != DType::f64) r = b().convert(r, DType::f32);
  const Value sq = b().convert(b().reduce_sum(b().multiply(r, r), {r.rank() - 1}), DType::f64);
  Dims all(sq.dims.size());
  std::iota(all.begin(), all.end(), int64_t{0});
  add_wide(acc, b().reduce_sum(sq, all));
}

// The key is the device array the caller wrote (a new one every step); `stream` picks one mask
// under it: xor'ed into its stream's words, as the CPU kernel does.
void PjrtBackend::dropout(DType dt, void* out, const void* x, int64_t n, double p,
                          const uint64_t* key, uint64_t stream) {
  if (n == 0) return;
  Value k = view(key, DType::i32, {4});
  if (stream != 0) {
    const int32_t lo = static_cast<int32_t>(static_cast<uint32_t>(stream));
    const int32_t hi = static_cast<int32_t>(static_cast<uint32_t>(stream >> 32));
    const Value mix = b().concatenate(
        {b().constant(0.0, DType::i32, {2}), b().constant(double(lo), DType::i32, {1}),
         b().constant(double(hi), DType::i32, {1})},
        0);
    k = b().bit_xor(k, mix);
  }
  set(out, hlo::dropout(b(), view(x, dt, {n}), p, k));
}

void PjrtBackend::convert(DType dst_dt, void* dst, DType src_dt, const void* src, int64_t n) {
  if (n == 0) return;
  const Value v = view(src, src_dt, {n});
  set(dst, src_dt == dst_dt ? v : b().convert(v, dst_dt));
}

// ---- embedding ----

// The table's row count is not an argument of the forward: the gather reads the rows up to the
// largest id, so the view spans the whole allocation from `table` on, cut to whole rows.
void PjrtBackend::embedding_forward(DType dt, void* out, const int32_t* ids, const void* table,
                                    int64_t N, int64_t C, int64_t V) {
  if (N == 0) return;
  set(out, hlo::embedding_forward(b(), view(ids, DType::i32, {N}), view(table, dt, {V, C})));
}

void PjrtBackend::embedding_backward(DType dt, void* dtable, const void* dout, const int32_t* ids,
                                     int64_t N, int64_t C, int64_t V) {
  if (N == 0) return;
  accumulate_into(
      dtable, dt,
      down(hlo::embedding_backward(b(), up(view(dout, dt, {N, C})), view(ids, DType::i32, {N}), V),
           dt));
}

// ---- normalisation ----

void PjrtBackend::rmsnorm_forward(DType dt, void* out, void* rstd, const void* x, const void* w,
                                  int64_t N, int64_t C, double eps, double w_offset) {
  if (N == 0) return;
  const hlo::NormOut o =
      hlo::rmsnorm_forward(b(), up(view(x, dt, {N, C})), up(view(w, dt, {C})), eps, w_offset);
  set(out, down(o.out, dt));
  set(rstd, stat(o.rstd, dt));
}

void PjrtBackend::rmsnorm_backward(DType dt, void* dx, void* dw, const void* dout, const void* x,
                                   const void* w, const void* rstd, int64_t N, int64_t C,
                                   double w_offset) {
  if (N == 0) return;
  const hlo::NormGrads g =
      hlo::rmsnorm_backward(b(), up(view(dout, dt, {N, C})), up(view(x, dt, {N, C})),
                            up(view(w, dt, {C})), up(view(rstd, stat_type(dt), {N})), w_offset);
  accumulate_into(dx, dt, down(g.dx, dt));
  if (dw) accumulate_into(dw, dt, down(g.dw, dt));
}

void PjrtBackend::layernorm_forward(DType dt, void* out, void* mean, void* rstd, const void* x,
                                    const void* w, const void* bias, int64_t N, int64_t C,
                                    double eps) {
  if (N == 0) return;
  const hlo::LayerNormOut o = hlo::layernorm_forward(
      b(), up(view(x, dt, {N, C})), up(view(w, dt, {C})), up(view(bias, dt, {C})), eps);
  set(out, down(o.out, dt));
  set(mean, stat(o.mean, dt));
  set(rstd, stat(o.rstd, dt));
}

void PjrtBackend::layernorm_backward(DType dt, void* dx, void* dw, void* db, const void* dout,
                                     const void* x, const void* w, const void* mean,
                                     const void* rstd, int64_t N, int64_t C) {
  if (N == 0) return;
  const hlo::LayerNormGrads g = hlo::layernorm_backward(
      b(), up(view(dout, dt, {N, C})), up(view(x, dt, {N, C})), up(view(w, dt, {C})),
      up(view(mean, stat_type(dt), {N})), up(view(rstd, stat_type(dt), {N})));
  accumulate_into(dx, dt, down(g.dx, dt));
  if (dw) accumulate_into(dw, dt, down(g.dw, dt));
  if (db) accumulate_into(db, dt, down(g.db, dt));
}

void PjrtBackend::head_rmsnorm_forward(DType dt, void* out, void* rstd, const void* x,
                                       const void* w, int64_t N, int64_t row_stride, int heads,
                                       int head_dim, double eps, double w_offset) {
  if (N == 0) return;
  const hlo::NormOut o =
      hlo::head_rmsnorm_forward(b(), up(head_rows(x, dt, N, row_stride, heads, head_dim)),
                                up(view(w, dt, {head_dim})), eps, w_offset);
  set_head_rows(out, down(o.out, dt), row_stride);
  set(rstd, stat(o.rstd, dt));
}

void PjrtBackend::head_rmsnorm_backward(DType dt, void* dx, void* dw, const void* dout,
                                        const void* x, const void* w, const void* rstd, int64_t N,
                                        int64_t row_stride, int heads, int head_dim,
                                        double w_offset) {
  if (N == 0) return;
  const hlo::NormGrads g = hlo::head_rmsnorm_backward(
      b(), up(head_rows(dout, dt, N, row_stride, heads, head_dim)),
      up(head_rows(x, dt, N, row_stride, heads, head_dim)), up(view(w, dt, {head_dim})),
      up(view(rstd, stat_type(dt), {N, heads})), w_offset);
  set_head_rows(dx, down(g.dx, dt), row_stride);
  if (dw) accumulate_into(dw, dt, down(g.dw, dt));
}

// ---- rotary position embedding ----

void PjrtBackend::rope(DType dt, void* x, const int32_t* pos, const float* inv_freq, int64_t N,
                       int64_t row_stride, int heads, int head_dim, int rotary_dim,
                       double attn_factor, bool inverse) {
  if (N == 0) return;
  const Value r = hlo::rope(
      b(), up(head_rows(x, dt, N, row_stride, heads, head_dim)), view(pos, DType::i32, {N}),
      view(inv_freq, DType::f32, {rotary_dim / 2}), rotary_dim, attn_factor, inverse);
  set_head_rows(x, down(r, dt), row_stride);
}

HloValue PjrtBackend::head_rows(const void* p, DType dt, int64_t N, int64_t row_stride, int64_t H,
                                int64_t D) {
  return b().reshape(view(p, dt, {N, H * D}, {row_stride, 1}), {N, H, D});
}

void PjrtBackend::set_head_rows(void* p, const Value& v, int64_t row_stride) {
  set(p, b().reshape(v, {v.dims[0], v.dims[1] * v.dims[2]}), {row_stride, 1});
}

std::unique_ptr<Backend> make_pjrt_backend(const std::string& plugin_path,
                                           const PjrtOptions& options) {
  return std::make_unique<PjrtBackend>(plugin_path, options);
}

}  // namespace lmt
