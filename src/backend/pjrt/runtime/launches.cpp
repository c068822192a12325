// Counting a GPU program's kernel launches from XLA's dump (see launches.h). The thunk sequence
// looks like
//   099: kCustomKernel [source | next=100 (1)] loop_broadcast_fusion grid: ...
//   100: kWhile        [prev=099 (1) | next=115 (1)]
//   condition:
//       101: kCustomKernel [source | sink] loop_compare_fusion grid: ...
//     body:
//       102: kDynamicSliceFusion [source | next=104 (1)] params=1, results=1
//           103: kCopy [source | sink] kCopy
// with a thunk's id first (the thunk_id of its metadata). A thunk is counted when it stands at the
// top or directly in a container (a loop's condition or body, a sequence, a command buffer); what
// stands below any other thunk is a part of it, launched with it.
#include "backend/pjrt/runtime/launches.h"

#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace lmt {

namespace {

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

bool is_container(const std::string& kind) {
  return kind == "kWhile" || kind == "kSequential" || kind == "kCommandBuffer" ||
         kind == "kConditional";
}

// thunk id -> the HLO instruction it runs (profile_annotation), from the metadata's blocks.
std::map<int64_t, std::string> thunk_names(const std::string& metadata) {
  std::map<int64_t, std::string> names;
  static const std::regex kAnnotation(R"re(profile_annotation:\s*"([^"]*)")re");
  static const std::regex kId(R"(thunk_id:\s*([0-9]+))");
  size_t at = 0;
  while ((at = metadata.find("thunk_metadata {", at)) != std::string::npos) {
    const size_t end = metadata.find("thunk_metadata {", at + 1);
    const std::string block = metadata.substr(at, end == std::string::npos ? end : end - at);
    std::smatch name, id;
    if (std::regex_search(block, name, kAnnotation)) {
      const int64_t n = std::regex_search(block, id, kId) ? std::stoll(id[1].str()) : 0;
      names[n] = name[1].str();
    }
    at = end;
  }
  return names;
}

// Each while instruction's known trip count, by its name (without the %).
std::map<std::string, int64_t> trip_counts(const std::string& hlo) {
  std::map<std::string, int64_t> trips;
  // The name is matched on the text before the '=' only: a loop's line carries its whole state's
  // shape, and libstdc++'s regex matcher recurses once a character it spans.
  static const std::regex kName(R"re(^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=$)re");
  static const std::regex kTrips(R"re("known_trip_count":\{"n":"([0-9]+)")re");
  std::istringstream in(hlo);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos || line.find(" while(") == std::string::npos) continue;
    const std::string head = line.substr(0, eq + 1);
    std::smatch w, t;
    if (std::regex_search(head, w, kName) && std::regex_search(line, t, kTrips))
      trips[w[1].str()] = std::stoll(t[1].str());
  }
  return trips;
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The one file of `dir` whose name ends with `suffix`.
std::filesystem::path file_ending(const std::filesystem::path& dir, const std::string& suffix) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (ends_with(e.path().filename().string(), suffix)) return e.path();
  throw UserError("XLA's dump in " + dir.string() + " has no *" + suffix +
                  " (the compile wrote no thunk sequence: is the plugin a GPU one?)");
}

}  // namespace

std::string launch_kind(const std::string& thunk_kind, const std::string& name) {
  if (thunk_kind == "kCopy") return "copy";
  if (thunk_kind == "kCuDnn") return "cudnn";
  if (thunk_kind == "kGemm" || thunk_kind == "kCublasLtMatmul" ||
      name.rfind("gemm_fusion", 0) == 0 || name.find("cublas") != std::string::npos)
    return "matmul";
  if (thunk_kind != "kCustomKernel" && thunk_kind != "kKernel" && thunk_kind != "kTriton")
    return thunk_kind.size() > 1 && thunk_kind[0] == 'k' ? thunk_kind.substr(1) : thunk_kind;
  // A fusion by its kind and root: XLA numbers repeats with _N or .N.
  static const std::regex kNumbered(R"([._][0-9]+$)");
  std::string kind = name;
  while (std::regex_search(kind, kNumbered)) kind = std::regex_replace(kind, kNumbered, "");
  return kind.empty() ? "kernel" : kind;
}

KernelLaunches kernel_launches(const std::string& thunk_sequence, const std::string& thunk_metadata,
                               const std::string& optimized_hlo) {
  const std::map<int64_t, std::string> names = thunk_names(thunk_metadata);
  const std::map<std::string, int64_t> trips = trip_counts(optimized_hlo);
  struct Frame {
    size_t indent;
    std::string kind;
    int64_t trips;
  };
  std::vector<Frame> stack;
  KernelLaunches out;
  static const std::regex kThunk(R"(^(\s*)([0-9]+):\s+(k\w+)\s*\[[^\]]*\]\s*(\S*))");
  std::istringstream in(thunk_sequence);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, kThunk)) continue;  // "condition:", "body:", blank
    const size_t indent = m[1].length();
    const int64_t id = std::stoll(m[2].str());
    const std::string kind = m[3].str(), name = m[4].str();
    while (!stack.empty() && stack.back().indent >= indent) stack.pop_back();
    const bool part_of_a_thunk = !stack.empty() && !is_container(stack.back().kind);
    int64_t times = 1;
    for (const Frame& f : stack) times *= f.trips;
    int64_t loop_trips = 1;
    if (kind == "kWhile") {
      const auto n = names.find(id);
      const auto t = n == names.end() ? trips.end() : trips.find(n->second);
      if (t != trips.end())
        loop_trips = t->second;
      else if (!part_of_a_thunk)
        ++out.loops_without_trip_count;
    }
    stack.push_back({indent, kind, loop_trips});
    if (part_of_a_thunk || is_container(kind) || ends_with(kind, "Done")) continue;
    out.total += times;
    ++out.static_thunks;
    out.by_kind[launch_kind(kind, name)] += times;
  }
  return out;
}

KernelLaunches kernel_launches_in(const std::filesystem::path& dump_dir) {
  return kernel_launches(read_text(file_ending(dump_dir, ".thunk_sequence.txt")),
                         read_text(file_ending(dump_dir, ".thunk_metadata.txt")),
                         read_text(file_ending(dump_dir, "_gpu_after_optimizations.txt")));
}

}  // namespace lmt
