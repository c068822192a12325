// A checkpoint's state.json through read_checkpoint_state (what load_checkpoint returns beside
// the weights), then its loader state as a resume reads it.
#include "data/loader.h"
#include "fuzz_target.h"
#include "train/checkpoint.h"

namespace lmt::fuzz {

int checkpoint_state(const uint8_t* data, size_t size) {
  write_temp("state.json", data, size);
  return accept_user_error([&] {
    const CheckpointState s = read_checkpoint_state(temp_dir());
    expect(s.step >= 0 && s.optimizer_step >= 0 && s.tokens >= 0, "non-negative counters");
    s.loader.get<LoaderState>();
  });
}

}  // namespace lmt::fuzz

LMT_FUZZ_TARGET(checkpoint_state)
