// A token store's manifest.json through read_manifest, as `lmtrain train` reads a store before
// opening its shards.
#include "data/manifest.h"
#include "fuzz_target.h"

namespace lmt::fuzz {

int store_manifest(const uint8_t* data, size_t size) {
  write_temp("manifest.json", data, size);
  return accept_user_error([&] {
    const Manifest m = read_manifest(temp_dir());
    m.tokens(false);
    m.tokens(true);
    m.documents(false);
  });
}

}  // namespace lmt::fuzz

LMT_FUZZ_TARGET(store_manifest)
