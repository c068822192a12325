#include "core/timer.h"

#include <fstream>
#include <string>

namespace lmt {

int64_t peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

ProcessMemory process_memory() {
  ProcessMemory m;
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {  // "VmRSS:\t  123456 kB"
    if (line.rfind("VmRSS:", 0) == 0) m.rss_bytes = std::stoll(line.substr(6)) * 1024;
    if (line.rfind("VmHWM:", 0) == 0) m.peak_rss_bytes = std::stoll(line.substr(6)) * 1024;
  }
  return m;
}

}  // namespace lmt
