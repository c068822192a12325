// Counting a program's collectives from XLA's optimized HLO text (see collectives.h). The text is
// a list of computations,
//   %body.3 (p: (s32[], bf16[8,64])) -> (s32[], bf16[8,64]) {
//     %all-gather.1 = bf16[16,64]{1,0} all-gather(bf16[8,64]{1,0} %x), channel_id=1, ...
//   }
//   ENTRY %main.9 (...) -> ... {
//     %while.2 = (s32[], bf16[8,64]) while(...), condition=%cond.4, body=%body.3,
//         backend_config={"known_trip_count":{"n":"8"}}
//   }
// each instruction one line. A computation runs as often as the instructions that call it: a
// loop's body and condition its trip count times, anything else (fusions, async wrappers, calls,
// a conditional's branches: each counted) once per call.
//
// A collective is one channel_id. libtpu's asynchronous collective fusions repeat the collective
// they carry, channel and all, in its start's fusion, its done's and every fusion that runs while
// it is in flight (one all-gather of the demo's fsdp x tensor step written in 38 computations):
// a channel already counted in a run of a computation, by itself or by another computation it
// calls, is not counted again there.
#include "backend/pjrt/runtime/collectives.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace lmt {

namespace {

// The kinds counted, by the opcode of the instruction that completes them: a synchronous
// collective, or an asynchronous pair's -done (its -start is not counted).
std::string collective_kind(const std::string& opcode) {
  static const char* const kKinds[] = {
      "all-gather",         "all-reduce",           "reduce-scatter",   "all-to-all",
      "collective-permute", "collective-broadcast", "ragged-all-to-all"};
  for (const char* k : kKinds) {
    const std::string kind = k;
    if (opcode == kind || opcode == kind + "-done") return kind;
  }
  return "";
}

// The devices in each group of a collective's replica_groups: "[2,2]<=[4]" (an iota: groups x
// size), "mesh['fsdp'=2,'tensor'=2] {'fsdp'}" (the named axes), "{{0,1},{2,3}}" (listed); all
// of the program's `devices` for none or "{}". 0 for a line without replica_groups.
int64_t group_size(const std::string& line, int64_t devices) {
  const size_t at = line.find("replica_groups=");
  if (at == std::string::npos) return 0;
  const std::string g = line.substr(at + 15, 600);
  std::smatch m;
  static const std::regex kIota(R"re(^\[([0-9]+),([0-9]+)\])re");
  if (std::regex_search(g, m, kIota)) return std::stoll(m[2].str());
  if (g.rfind("mesh[", 0) == 0) {
    const size_t close = g.find(']'), open = g.find('{', close), end = g.find('}', open);
    if (close == std::string::npos || open == std::string::npos || end == std::string::npos)
      return devices;
    std::map<std::string, int64_t> axes;
    static const std::regex kAxis(R"re('([^']+)'=([0-9]+))re");
    const std::string list = g.substr(0, close);
    for (auto it = std::sregex_iterator(list.begin(), list.end(), kAxis);
         it != std::sregex_iterator(); ++it)
      axes[(*it)[1].str()] = std::stoll((*it)[2].str());
    static const std::regex kName(R"re('([^']+)')re");
    const std::string names = g.substr(open, end - open);
    int64_t n = 1;
    for (auto it = std::sregex_iterator(names.begin(), names.end(), kName);
         it != std::sregex_iterator(); ++it)
      n *= axes.count((*it)[1].str()) ? axes[(*it)[1].str()] : 1;
    return n;
  }
  if (g.rfind("{{", 0) == 0) {
    const std::string first = g.substr(2, g.find('}') - 2);
    return static_cast<int64_t>(std::count(first.begin(), first.end(), ',')) + 1;
  }
  return devices;
}

// What a device sends of a collective writing `bytes` in groups of n (Collectives::Kind).
int64_t ring_sent(const std::string& kind, int64_t bytes, int64_t n) {
  if (n <= 1) return kind == "collective-permute" || kind == "collective-broadcast" ? bytes : 0;
  if (kind == "all-gather" || kind == "all-to-all" || kind == "ragged-all-to-all")
    return bytes * (n - 1) / n;
  if (kind == "all-reduce") return 2 * bytes * (n - 1) / n;
  if (kind == "reduce-scatter") return bytes * (n - 1);
  return bytes;
}

struct Instruction {
  std::string kind;  // a collective's, or ""
  int64_t channel = -1;  // its channel_id, -1 for none
  int64_t bytes = 0;
  int64_t sent = 0;
  std::vector<std::pair<std::string, int64_t>> calls;  // computations called, times per call
  bool loop_without_trip_count = false;
};

// One instruction line: its result shape and opcode ("%x = bf16[2]{0} all-gather(...), ..."),
// the shape a tuple in parentheses where it is one. False for a line that is none.
bool parse_instruction(const std::string& line, std::string* shape, std::string* opcode) {
  const size_t eq = line.find(" = ");
  if (eq == std::string::npos) return false;
  size_t at = eq + 3, end = at;
  if (at < line.size() && line[at] == '(') {  // a tuple: to its closing parenthesis
    int depth = 0;
    for (; end < line.size(); ++end) {
      if (line[end] == '(') ++depth;
      if (line[end] == ')' && --depth == 0) break;
    }
    ++end;
  } else {
    end = line.find(' ', at);
  }
  if (end == std::string::npos || end >= line.size()) return false;
  *shape = line.substr(at, end - at);
  size_t op = end + 1, paren = line.find('(', op);
  if (paren == std::string::npos) return false;
  *opcode = line.substr(op, paren - op);
  return !opcode->empty() && opcode->find(' ') == std::string::npos;
}

// The groups of the asynchronous collectives started so far, by the start's name: its -done,
// which counts, names the start as its operand.
using StartGroups = std::map<std::string, int64_t>;

Instruction read_instruction(const std::string& line, int64_t devices, StartGroups& starts) {
  Instruction ins;
  std::string shape, opcode;
  if (!parse_instruction(line, &shape, &opcode)) return ins;
  ins.kind = collective_kind(opcode);
  static const std::regex kName(R"re(^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=)re");
  std::smatch name;
  if (opcode.size() > 6 && opcode.compare(opcode.size() - 6, 6, "-start") == 0 &&
      std::regex_search(line, name, kName))
    starts[name[1].str()] = group_size(line, devices);
  if (!ins.kind.empty()) {
    if (const size_t c = line.find(", channel_id="); c != std::string::npos)
      ins.channel = std::strtoll(line.c_str() + c + 13, nullptr, 10);
    ins.bytes = hlo_shape_bytes(shape);
    int64_t n = group_size(line, devices);
    if (n == 0) {  // a -done: its start's, the %name of its operand
      const size_t done = line.find("-done(");
      const size_t at = done == std::string::npos ? done : line.find('%', done);
      if (at != std::string::npos) {
        size_t end = at + 1;
        while (end < line.size() && (std::isalnum(static_cast<unsigned char>(line[end])) ||
                                     line[end] == '_' || line[end] == '.' || line[end] == '-'))
          ++end;
        const auto it = starts.find(line.substr(at + 1, end - at - 1));
        if (it != starts.end()) n = it->second;
      }
    }
    if (n == 0 && ins.kind != "collective-permute") n = devices;
    ins.sent = ring_sent(ins.kind, ins.bytes, n);
  }
  int64_t trips = 1;
  if (opcode == "while") {
    static const std::regex kTrips(R"re("known_trip_count":\{"n":"([0-9]+)")re");
    std::smatch t;
    if (std::regex_search(line, t, kTrips))
      trips = std::stoll(t[1].str());
    else
      ins.loop_without_trip_count = true;
  }
  static const std::regex kCall(
      R"re((condition|body|calls|to_apply|true_computation|false_computation)=%?([\w.\-]+))re");
  static const std::regex kCallList(R"re((?:calls|branch_computations)=\{([^}]*)\})re");
  static const std::regex kCallee(R"re(%?([\w.\-]+))re");
  const bool calls =
      line.find("condition=") != std::string::npos || line.find("calls=") != std::string::npos ||
      line.find("to_apply=") != std::string::npos || line.find("_computation") != std::string::npos;
  if (!calls) return ins;
  for (auto it = std::sregex_iterator(line.begin(), line.end(), kCall);
       it != std::sregex_iterator(); ++it) {
    const std::string role = (*it)[1].str();
    ins.calls.emplace_back((*it)[2].str(), role == "body" || role == "condition" ? trips : 1);
  }
  for (auto it = std::sregex_iterator(line.begin(), line.end(), kCallList);
       it != std::sregex_iterator(); ++it) {
    const std::string list = (*it)[1].str();
    for (auto n = std::sregex_iterator(list.begin(), list.end(), kName);
         n != std::sregex_iterator(); ++n)
      ins.calls.emplace_back((*n)[1].str(), 1);
  }
  return ins;
}

struct Module {
  std::map<std::string, std::vector<Instruction>> computations;
  std::string entry;
};

// The name of the computation a line opens ("ENTRY %main (p: f32[8]) -> f32[8] {", "%body.3
// (...) -> (...) {"), "" for any other line. By hand, not by a regular expression: the entry's
// header of a large model lists thousands of parameters on one line, and libstdc++'s regex
// matcher recurses once a character there (a stack overflow).
std::string computation_header(const std::string& line, bool* entry) {
  if (line.empty() || line[0] == ' ' || line[0] == '}') return "";
  size_t last = line.find_last_not_of(" \t\r");
  if (last == std::string::npos || line[last] != '{') return "";
  size_t at = 0;
  *entry = line.compare(0, 6, "ENTRY ") == 0;
  if (*entry) at = line.find_first_not_of(' ', 6);
  if (at < line.size() && line[at] == '%') ++at;
  size_t end = at;
  while (end < line.size() && (std::isalnum(static_cast<unsigned char>(line[end])) ||
                               line[end] == '_' || line[end] == '.' || line[end] == '-'))
    ++end;
  const size_t paren = line.find_first_not_of(' ', end);
  if (end == at || end == line.size() || line[end] != ' ' || paren == std::string::npos ||
      line[paren] != '(')
    return "";
  return line.substr(at, end - at);
}

Module read_module(const std::string& hlo) {
  Module m;
  static const std::regex kPartitions(R"re(num_partitions=([0-9]+))re");
  std::smatch p;
  const std::string header = hlo.substr(0, hlo.find('\n'));
  const int64_t devices = std::regex_search(header, p, kPartitions) ? std::stoll(p[1].str()) : 1;
  StartGroups starts;
  std::istringstream in(hlo);
  std::vector<Instruction>* current = nullptr;
  for (std::string line; std::getline(in, line);) {
    bool entry = false;
    if (const std::string name = computation_header(line, &entry); !name.empty()) {
      current = &m.computations[name];
      if (entry) m.entry = name;
      continue;
    }
    if (line == "}") {
      current = nullptr;
      continue;
    }
    if (current) current->push_back(read_instruction(line, devices, starts));
  }
  return m;
}

// What one run of a computation and all it calls performs: the collectives without a channel
// summed, and those with one by channel (each counted once a run, however many computations
// repeat it).
struct Run {
  Collectives unchanneled;
  struct Channel {
    std::string kind;
    Collectives::Kind k;
  };
  std::map<int64_t, Channel> channels;
};

void add(Collectives::Kind& to, const Collectives::Kind& k, int64_t times) {
  to.count += times * k.count;
  to.bytes += times * k.bytes;
  to.sent_bytes += times * k.sent_bytes;
}

// One run of computation `name` (memoized by name).
const Run& run_of(const Module& m, const std::string& name, std::map<std::string, Run>& memo,
                  int depth) {
  if (const auto it = memo.find(name); it != memo.end()) return it->second;
  Run r;
  LMT_CHECK(depth < 1000, "HLO computations call each other too deeply at " + name);
  if (const auto comp = m.computations.find(name); comp != m.computations.end()) {
    for (const Instruction& ins : comp->second) {
      if (!ins.kind.empty()) {
        const Collectives::Kind k{1, ins.bytes, 0, ins.sent};
        if (ins.channel < 0)
          add(r.unchanneled.by_kind[ins.kind], k, 1);
        else
          r.channels.try_emplace(ins.channel, Run::Channel{ins.kind, k});
      }
      r.unchanneled.loops_without_trip_count += ins.loop_without_trip_count;
      for (const auto& [callee, times] : ins.calls) {
        const Run& sub = run_of(m, callee, memo, depth + 1);
        for (const auto& [kind, k] : sub.unchanneled.by_kind)
          add(r.unchanneled.by_kind[kind], k, times);
        for (const auto& [channel, c] : sub.channels) {
          if (r.channels.count(channel)) continue;
          Run::Channel scaled{c.kind, {}};
          add(scaled.k, c.k, times);
          r.channels.emplace(channel, std::move(scaled));
        }
        r.unchanneled.loops_without_trip_count += sub.unchanneled.loops_without_trip_count;
      }
    }
  }
  return memo[name] = std::move(r);
}

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

}  // namespace

int64_t hlo_shape_bytes(const std::string& shape) {
  static const std::regex kArray(R"re(\b([a-z]+)([0-9]*)(?:[a-z][a-z0-9]*)?\[([0-9,]*)\])re");
  int64_t total = 0;
  for (auto it = std::sregex_iterator(shape.begin(), shape.end(), kArray);
       it != std::sregex_iterator(); ++it) {
    const std::string type = (*it)[1].str(), bits_text = (*it)[2].str(), dims = (*it)[3].str();
    int64_t bits = 8;  // pred
    if (!bits_text.empty()) bits = std::stoll(bits_text);
    if (type == "token") continue;
    int64_t elements = 1;
    std::istringstream d(dims);
    for (std::string x; std::getline(d, x, ',');)
      if (!x.empty()) elements *= std::stoll(x);
    total += (elements * bits + 7) / 8;
  }
  return total;
}

Collectives collectives(const std::string& optimized_hlo) {
  const Module m = read_module(optimized_hlo);
  std::map<std::string, Run> memo;
  Collectives c;
  if (!m.entry.empty()) {
    const Run& r = run_of(m, m.entry, memo, 0);
    c = r.unchanneled;
    for (const auto& [channel, ch] : r.channels) add(c.by_kind[ch.kind], ch.k, 1);
  }
  std::map<int64_t, bool> seen;  // each channel once, as each unchanneled instruction
  for (const auto& [name, instructions] : m.computations)
    for (const Instruction& ins : instructions)
      if (!ins.kind.empty() && (ins.channel < 0 || !seen[ins.channel]))
        ++c.by_kind[ins.kind].static_count, seen[ins.channel] = true;
  return c;
}

Collectives collectives_in(const std::filesystem::path& dump_dir) {
  std::error_code ec;
  std::filesystem::path best;
  uintmax_t best_size = 0;
  for (const auto& e : std::filesystem::directory_iterator(dump_dir, ec)) {
    if (!ends_with(e.path().filename().string(), "after_optimizations.txt")) continue;
    const uintmax_t size = e.file_size(ec);
    if (!ec && size >= best_size) best = e.path(), best_size = size;
  }
  if (best.empty())
    throw UserError("XLA's dump in " + dump_dir.string() +
                    " has no *after_optimizations.txt (the optimized program)");
  std::ifstream f(best, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return collectives(s.str());
}

}  // namespace lmt
