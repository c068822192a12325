// Files lmtrain reads must be regular files: a FIFO (which would block a reader forever), a device
// such as /dev/zero (which never ends), a directory or a symlink loop is refused with one message
// naming the file, and never read. Files are opened non-blocking, so that even a FIFO is only
// looked at, and checked on the descriptor that is then read (no window between check and read).
#pragma once

#include <cstdint>
#include <string>

namespace lmt {

// Bounds per kind of file: what a real one of the kind is, many times over.
constexpr uint64_t kMaxConfigBytes = uint64_t{64} << 20;  // config.json, manifests, ...
// A run config is written by hand (a few KiB); yaml-cpp's nodes take ~50 times the text, so the
// bound is what keeps a stray large file from taking gigabytes before it is refused.
constexpr uint64_t kMaxYamlConfigBytes = uint64_t{4} << 20;
constexpr uint64_t kMaxTokenizerBytes = uint64_t{1} << 30;  // tokenizer.json, tokenizer.model
constexpr uint64_t kNoSizeLimit = 0;

// Opens `path` for reading, non-blocking, and returns the descriptor (O_CLOEXEC) of a regular file
// of at most max_bytes (0: any size), its size in *size. UserError naming `what` and the path
// otherwise (missing, unreadable, not a regular file, a symlink loop, too large).
int open_regular_file(const std::string& path, const std::string& what, uint64_t max_bytes,
                      uint64_t* size);

// The whole file, as open_regular_file checks it.
std::string read_regular_file(const std::string& path, const std::string& what, uint64_t max_bytes);

// Only the check, for a file a library opens itself (sentencepiece): its size.
uint64_t check_regular_file(const std::string& path, const std::string& what, uint64_t max_bytes);

}  // namespace lmt
