// Starting a run from directories other tools wrote: train.init_from (a Hugging Face model
// directory) gives the model section and, unless the config names one, the tokenizer;
// lora.init_from (a PEFT adapter directory) gives the lora section. The import runs once per
// config: load_run_config does it as it reads a file; a config built in code with train.init_from
// set calls import_init_from(cfg) itself before build_model, which refuses one that did not
// (RunConfig::imported_init_from).
#pragma once

#include <string>
#include <vector>

#include "train/run_config.h"

namespace lmt {

// train.init_from: sets cfg.model from DIR/config.json (DIR: the newest checkpoint's when the
// directory is gone and the run has one to resume), and cfg.imported_init_from. `given_model_keys`:
// the model keys the user gave (names without "model."); each must agree with DIR's value
// (num_key_value_heads and head_dim compared resolved), else one UserError naming the key and
// both values. When `tokenizer_given` is false or data.tokenizer is empty, DIR's tokenizer.json /
// tokenizer.model becomes data.tokenizer (DIR itself); an empty data.tokenizer with none in DIR is
// an error. `where`: the config file, for messages. Does nothing when train.init_from is empty.
void import_init_from(RunConfig& cfg, const std::vector<std::string>& given_model_keys,
                      bool tokenizer_given, const std::string& where);
// The same for a config built in code: every model key and data.tokenizer count as given, so the
// whole model section must agree with DIR's config.json.
void import_init_from(RunConfig& cfg);

// lora.init_from: fills the lora section from DIR/adapter_config.json when lora.rank is 0, else
// checks that rank, alpha, use_rslora and the adapted modules agree with it (one UserError naming
// the key and both values). Does nothing when lora.init_from is empty.
void import_lora_init_from(RunConfig& cfg);

}  // namespace lmt
