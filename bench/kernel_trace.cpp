// A kernel tracer for any CUDA program, lmtrain and its Python peers alike: the CUDA driver loads
// it at start-up (CUDA_INJECTION64_PATH=.../liblmtrain_kernel_trace.so) and it records, through
// CUPTI's activity API, every kernel's start and end on the GPU, its stream and its name, one CSV
// line each, into the file KERNEL_TRACE_OUT names (default kernel_trace.csv; a "%p" in it becomes
// the process id, for programs whose helper processes use CUDA too):
//   start_ns,end_ns,stream,name
// What XLA calls a fusion is a kernel named after it, so a step's time can be read kernel by
// kernel against XLA's optimized program. Asynchronous and lightweight (what profilers built on
// CUPTI use); no kernel is replayed or serialized. bench/kernel_trace.py summarizes a trace.
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include <unistd.h>

namespace {

constexpr size_t kBufferBytes = 8 << 20;
constexpr size_t kAlign = 8;
FILE* out = nullptr;
std::mutex out_mutex;

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  std::fprintf(stderr, "kernel_trace: %s: %s\n", what, msg ? msg : "unknown CUPTI error");
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

// A kernel's name as one CSV field: quoted, its quotes doubled.
void write_name(const char* name) {
  std::fputc('"', out);
  for (const char* p = name ? name : "?"; *p; ++p) {
    if (*p == '"') std::fputc('"', out);
    std::fputc(*p, out);
  }
  std::fputs("\"\n", out);
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  {
    std::lock_guard<std::mutex> lock(out_mutex);
    CUpti_Activity* record = nullptr;
    while (out && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
      if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
          record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
        continue;
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      std::fprintf(out, "%llu,%llu,%u,", static_cast<unsigned long long>(k->start),
                   static_cast<unsigned long long>(k->end), k->streamId);
      write_name(k->name);
    }
    size_t dropped = 0;
    cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
    if (dropped) std::fprintf(stderr, "kernel_trace: %zu records dropped\n", dropped);
  }
  std::free(buffer);
}

void flush_at_exit() {
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush");
  std::lock_guard<std::mutex> lock(out_mutex);
  if (out) std::fclose(out);
  out = nullptr;
}

}  // namespace

// Called by the CUDA driver when CUDA_INJECTION64_PATH names this library.
extern "C" int InitializeInjection(void) {
  const char* env = std::getenv("KERNEL_TRACE_OUT");
  std::string path = env && *env ? env : "kernel_trace.csv";
  if (const size_t p = path.find("%p"); p != std::string::npos)
    path.replace(p, 2, std::to_string(getpid()));
  out = std::fopen(path.c_str(), "w");
  if (!out) {
    std::perror("kernel_trace: KERNEL_TRACE_OUT");
    return 0;
  }
  std::fputs("start_ns,end_ns,stream,name\n", out);
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "callbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernels");
  std::atexit(flush_at_exit);
  return 1;
}
