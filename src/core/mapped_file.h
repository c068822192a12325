// A read-only memory map of a whole file, for readers that walk a file front to back. Reading a
// source through a map keeps memory bounded whatever the file size: release_before() hands the
// pages already read back to the kernel (they are re-read from the file if touched again), so
// resident memory stays at the size of the part being worked on, not the file.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/truncation_guard.h"

namespace lmt {

class MappedFile {
 public:
  // Throws UserError "<key>: cannot read 'PATH': reason" when the file cannot be opened or mapped.
  MappedFile(const std::string& path, const std::string& key);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view text() const { return {data_, size_}; }
  size_t size() const { return size_; }
  // A file truncated while it is read: the pages past its new end read as zeros (no SIGBUS), and
  // check() is a UserError naming the file. Readers call it before they pass on what they read.
  void check() const { guard_.check(); }
  // Drops the resident pages wholly before `p` (a pointer into text()), at most once per few MB.
  void release_before(const char* p);

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
  size_t released_ = 0;  // bytes already handed back
  std::string path_;
  TruncationGuard guard_;
  bool truncated_for_test_ = false;
};

}  // namespace lmt
