// A checkpoint's save and load on the GPT-2 124M shape (configs/bench/gpt2-124m.yaml: f32 weights
// and AdamW's two moments, 1.5 GB in all), and what its checksums cost beside them: the
// hashing of every file alone (an upper bound on what it adds; during a save it runs on a thread
// of its own while the next file is written, during a load while the weights are read), with the
// page cache warm (the files just written or read) and cold (evicted with posix_fadvise before
// each iteration). For docs/performance.md.
//   lmtrain_bench --benchmark_filter=Checkpoint
// LMT_CKPT_BENCH_DIR: where the run directory goes (default the system's temporary directory).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "io/dir_checksums.h"
#include "train/checkpoint.h"
#include "train/run_config.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

struct BenchRun {
  std::unique_ptr<Backend> be = make_backend("cpu");
  std::unique_ptr<Transformer> model;
  std::vector<float> m, v;
  std::vector<StateBuffer> state;
  fs::path dir;
  std::string checkpoint;
  BenchRun() {
    const RunConfig cfg =
        load_run_config(std::string(LMT_SOURCE_DIR) + "/configs/bench/gpt2-124m.yaml", {});
    model = std::make_unique<Transformer>(be.get(), cfg.model);
    model->init_weights(1);
    const int64_t n = model->trainable_flat_size();
    std::mt19937 rng(1);
    std::normal_distribution<float> g(0, 1e-3f);
    m.resize(static_cast<size_t>(n));
    v.resize(static_cast<size_t>(n));
    for (size_t i = 0; i < m.size(); ++i) {
      m[i] = g(rng);
      const float x = g(rng);
      v[i] = x * x;
    }
    state = {{"exp_avg.", m.data(), n, model->trainable_params()},
             {"exp_avg_sq.", v.data(), n, model->trainable_params()}};
    const char* root = std::getenv("LMT_CKPT_BENCH_DIR");
    dir = fs::path(root ? root : fs::temp_directory_path().string()) /
          ("lmt_ckpt_bench_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    checkpoint = save();
  }
  ~BenchRun() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string save() {
    CheckpointState s;
    s.step = 1;
    s.loader = nlohmann::json::object();
    s.tokenizer = "bytes";
    return save_checkpoint(dir.string(), *model, state, s, "", 1);
  }
  uint64_t bytes() const {
    uint64_t b = 0;
    for (const auto& e : fs::directory_iterator(checkpoint)) b += e.file_size();
    return b;
  }
  void evict() const {
    for (const auto& e : fs::directory_iterator(checkpoint)) {
      const int fd = ::open(e.path().c_str(), O_RDONLY);
      ::fdatasync(fd);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
  }
};

BenchRun& bench_run() {
  static BenchRun r;
  return r;
}

void report(benchmark::State& st) {
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * bench_run().bytes()));
}

// Argument: checksums recorded (0/1); without them (LMT_BENCH_SKIP_CHECKSUMS) the checkpoint is
// one a load would refuse, so the last save is always with them.
void BM_CheckpointSave(benchmark::State& st) {
  BenchRun& r = bench_run();
  const bool record = st.range(0);
  if (!record) ::setenv("LMT_BENCH_SKIP_CHECKSUMS", "1", 1);
  for (auto _ : st) r.save();
  ::unsetenv("LMT_BENCH_SKIP_CHECKSUMS");
  if (!record) r.save();
  st.SetLabel(record ? "checksums recorded" : "no checksums");
  report(st);
}

// Arguments: cold cache (0/1), checksums verified (0/1).
void BM_CheckpointLoad(benchmark::State& st) {
  BenchRun& r = bench_run();
  const bool cold = st.range(0), verify = st.range(1);
  for (auto _ : st) {
    if (cold) {
      st.PauseTiming();
      r.evict();
      st.ResumeTiming();
    }
    if (verify)
      load_checkpoint(r.checkpoint, *r.model, r.state);
    else
      load_checkpoint_unverified(r.checkpoint, *r.model, r.state);
  }
  st.SetLabel(std::string(cold ? "cold cache" : "warm cache") +
              (verify ? ", checksums verified" : ", no checksums"));
  report(st);
}

void BM_CheckpointChecksumsAlone(benchmark::State& st) {
  BenchRun& r = bench_run();
  const bool cold = st.range(0);
  for (auto _ : st) {
    if (cold) {
      st.PauseTiming();
      r.evict();
      st.ResumeTiming();
    }
    verify_checksums(r.checkpoint);
  }
  st.SetLabel(cold ? "cold cache" : "warm cache");
  report(st);
}

BENCHMARK(BM_CheckpointSave)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(5);
BENCHMARK(BM_CheckpointLoad)
    ->Args({0, 0})
    ->Args({0, 1})
    ->Args({1, 0})
    ->Args({1, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(5);
BENCHMARK(BM_CheckpointChecksumsAlone)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(5);

}  // namespace
}  // namespace lmt
