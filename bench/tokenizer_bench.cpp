// Encode throughput (MB/s of UTF-8 text) of every tokenizer kind through the Tokenizer interface,
// on one thread and on all threads at once (an OpenMP loop over the documents, wall-clock time).
// The corpus is generated: the lines of tests/data/tokenizers/train.txt in a seeded random order,
// with random numbers and a few non-ASCII words mixed in, cut into documents of 1-4 KB, about 4 MB
// in all. Before timing, each tokenizer's ids are checked: in range, and decoding to the text where
// the tokenizer is lossless.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "data/tokenizer/tokenizer.h"

namespace lmt {
namespace {

// Run from the repository root, or set LMT_TEST_DATA to the tests/data folder.
std::string fixture(const std::string& name) {
  const char* dir = std::getenv("LMT_TEST_DATA");
  return std::string(dir ? dir : "tests/data") + "/tokenizers/" + name;
}

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> docs = [] {
    std::ifstream in(fixture("train.txt"));
    if (!in) throw std::runtime_error("tokenizer_bench: cannot open " + fixture("train.txt"));
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);)
      if (!l.empty()) lines.push_back(l);
    std::mt19937_64 rng(42);
    const char* extras[] = {" naïve", " café", " 中文", " Ελληνικά", " 🙂", "\t", "  ", "\n\n"};
    std::vector<std::string> docs;
    std::string doc;
    size_t total = 0, target = 1024 + rng() % 3072;
    while (total < (4u << 20)) {
      doc += lines[rng() % lines.size()];
      if (rng() % 4 == 0) doc += " " + std::to_string(rng() % 100000);
      if (rng() % 8 == 0) doc += extras[rng() % 8];
      doc += '\n';
      if (doc.size() >= target) {
        total += doc.size();
        docs.push_back(std::move(doc));
        doc.clear();
        target = 1024 + rng() % 3072;
      }
    }
    return docs;
  }();
  return docs;
}

const Tokenizer& tokenizer(const std::string& spec) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  auto& t = cache[spec];
  if (!t) {
    t = load_tokenizer(spec == "bytes" ? spec : fixture(spec));
    const bool lossless = t->kind() != "sentencepiece";
    for (size_t i = 0; i < corpus().size(); i += 97) {
      const auto ids = t->encode(corpus()[i]);
      for (int32_t id : ids)
        if (id < 0 || id >= t->vocab_size())
          throw std::runtime_error("tokenizer_bench: " + spec + ": id out of range");
      if (lossless && t->decode(ids) != corpus()[i])
        throw std::runtime_error("tokenizer_bench: " + spec + ": decode(encode(doc)) != doc");
    }
  }
  return *t;
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Encodes the whole corpus once per iteration on `state.range(0)` OpenMP threads (a persistent
// pool, as data preparation uses, so per-thread caches stay warm across iterations); wall-clock
// time. cpu_MB/s divides the bytes by the CPU time all threads spent, which a busy shared machine
// disturbs far less than the wall-clock rate: if it holds from 1 to N threads, the encoders scale.
void BM_TokenizerEncode(benchmark::State& state, const std::string& spec) {
  const Tokenizer& tok = tokenizer(spec);
  const auto& docs = corpus();
  const int threads = static_cast<int>(state.range(0));
  const int64_t n = static_cast<int64_t>(docs.size());
  int64_t bytes = 0, tokens = 0;
  double cpu = 0;
  for (auto _ : state) {
    int64_t iter_tokens = 0;
    double iter_cpu = 0;
#pragma omp parallel num_threads(threads) reduction(+ : iter_tokens, iter_cpu)
    {
      const double c0 = thread_cpu_seconds();
#pragma omp for schedule(dynamic, 4)
      for (int64_t i = 0; i < n; ++i)
        iter_tokens += static_cast<int64_t>(tok.encode(docs[i]).size());
      iter_cpu += thread_cpu_seconds() - c0;
    }
    tokens += iter_tokens;
    cpu += iter_cpu;
    for (const auto& d : docs) bytes += static_cast<int64_t>(d.size());
  }
  state.SetBytesProcessed(bytes);
  state.counters["threads"] = threads;
  state.counters["bytes_per_token"] = static_cast<double>(bytes) / std::max<int64_t>(tokens, 1);
  state.counters["cpu_MB/s"] = static_cast<double>(bytes) / 1e6 / std::max(cpu, 1e-9);
}

const int kAllThreads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

// The first iteration warms the caches of every thread; MinWarmUpTime runs it untimed.
#define LMT_TOKENIZER_BENCH(name, spec)                          \
  BENCHMARK_CAPTURE(BM_TokenizerEncode, name, std::string(spec)) \
      ->Unit(benchmark::kMillisecond)                            \
      ->UseRealTime()                                            \
      ->MinWarmUpTime(0.5)                                       \
      ->MinTime(1.5)                                             \
      ->Arg(1)                                                   \
      ->Arg(kAllThreads)

LMT_TOKENIZER_BENCH(gpt2_style_bpe, "bytelevel_bpe.json");
LMT_TOKENIZER_BENCH(llama3_style_bpe, "llama3_style_bpe.json");
LMT_TOKENIZER_BENCH(llama2_style_json_bpe, "llama2_style_bpe.json");  // sp_bpe's vocab, HF rules
LMT_TOKENIZER_BENCH(sentencepiece_bpe, "sp_bpe.model");
LMT_TOKENIZER_BENCH(sentencepiece_unigram, "sp_unigram.model");

}  // namespace
}  // namespace lmt
