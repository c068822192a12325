#include "core/truncation_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "core/error.h"

namespace lmt {

namespace {

constexpr int kSlots = 1024;

// Lock-free, so that the handler may read it whatever the interrupted thread holds.
struct Slot {
  std::atomic<uintptr_t> begin{0}, end{0};
  std::atomic<bool> used{false}, truncated{false};
};
Slot g_slots[kSlots];
struct sigaction g_previous;

extern "C" void on_sigbus(int sig, siginfo_t* info, void* context) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& s : g_slots) {
    const uintptr_t b = s.begin.load(), e = s.end.load();
    if (b == 0 || addr < b || addr >= e) continue;
    // Zero pages from the faulting page to the mapping's end: the read goes on, and the reader's
    // check() reports the file.
    const long page = ::sysconf(_SC_PAGESIZE);
    const uintptr_t from = addr & ~static_cast<uintptr_t>(page - 1);
    void* p = ::mmap(reinterpret_cast<void*>(from), e - from, PROT_READ,
                     MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
      s.truncated.store(true);
      return;
    }
    break;
  }
  // Not ours (or the zero pages could not be had): as if no handler were installed.
  ::sigaction(SIGBUS, &g_previous, nullptr);
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
  }
  // Returning re-runs the faulting access, which now meets the previous disposition.
}

void install_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous);
  });
}

}  // namespace

void TruncationGuard::watch(const void* base, size_t size, std::string path) {
  path_ = std::move(path);
  if (!base || size == 0) return;
  install_once();
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (!g_slots[i].used.compare_exchange_strong(expected, true)) continue;
    g_slots[i].truncated.store(false);
    g_slots[i].end.store(reinterpret_cast<uintptr_t>(base) + size);
    g_slots[i].begin.store(reinterpret_cast<uintptr_t>(base));
    slot_ = i;
    return;
  }
}

TruncationGuard::~TruncationGuard() {
  if (slot_ < 0) return;
  g_slots[slot_].begin.store(0);
  g_slots[slot_].end.store(0);
  g_slots[slot_].used.store(false);
}

bool TruncationGuard::truncated() const {
  return slot_ >= 0 && g_slots[slot_].truncated.load();
}

void TruncationGuard::check() const {
  if (truncated())
    throw UserError("'" + path_ +
                    "' was truncated while lmtrain was reading it (another program changed it?); "
                    "what was read past its new end is not used: stopping. Files written before "
                    "(checkpoints) are intact");
}

}  // namespace lmt
