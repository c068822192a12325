// A .safetensors file through SafetensorsFile::from_bytes (the header and its offsets); every
// tensor of a file it accepts must then read, as the gtest fuzzer tests/io/ checks.
#include "io/safetensors.h"

#include <vector>

#include "fuzz_target.h"

namespace lmt::fuzz {

int safetensors(const uint8_t* data, size_t size) {
  return accept_user_error([&] {
    const SafetensorsFile f =
        SafetensorsFile::from_bytes(std::vector<uint8_t>(data, data + size), "fuzz.safetensors");
    for (const std::string& name : f.names()) {
      const SafetensorsMeta& m = f.meta(name);
      expect(m.begin <= m.end, "a tensor's begin <= end");
      if (m.dtype) {
        const HostTensor t = f.read(name);
        expect(t.nbytes() == m.nbytes(), "a tensor read to have its size");
        if (*m.dtype == DType::bf16 || *m.dtype == DType::f16) f.read_as(name, DType::f32);
      }
      volatile uint8_t last =
          m.nbytes() ? static_cast<const uint8_t*>(f.raw(name))[m.nbytes() - 1] : 0;
      (void)last;
    }
  });
}

}  // namespace lmt::fuzz

LMT_FUZZ_TARGET(safetensors)
