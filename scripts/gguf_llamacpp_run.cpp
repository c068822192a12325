// scripts/gguf_llamacpp_check.py's driver: run MODEL.gguf "text" id id ... prints llama.cpp's ids
// for the text (special tokens added), then its logits at every position of the given ids.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llama.h"
int main(int argc, char** argv) {
  llama_backend_init();
  auto mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) {
    printf("LOADFAIL\n");
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  std::string text = argv[2];
  std::vector<llama_token> tk(256);
  int n = llama_tokenize(vocab, text.c_str(), text.size(), tk.data(), tk.size(), true, true);
  printf("TOK");
  for (int i = 0; i < n; i++) printf(" %d", tk[i]);
  printf("\n");
  std::vector<llama_token> ids;
  for (int i = 3; i < argc; i++) ids.push_back(atoi(argv[i]));
  auto cp = llama_context_default_params();
  cp.n_ctx = 64;
  cp.n_batch = 64;
  cp.n_ubatch = 64;
  cp.n_threads = 1;
  llama_context* ctx = llama_init_from_model(model, cp);
  llama_batch b = llama_batch_init(ids.size(), 0, 1);
  for (size_t i = 0; i < ids.size(); i++) {
    b.token[i] = ids[i];
    b.pos[i] = i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = 1;
  }
  b.n_tokens = ids.size();
  if (llama_decode(ctx, b)) {
    printf("DECODEFAIL\n");
    return 1;
  }
  int nv = llama_vocab_n_tokens(vocab);
  for (size_t i = 0; i < ids.size(); i++) {
    float* l = llama_get_logits_ith(ctx, i);
    printf("LOGITS");
    for (int j = 0; j < nv; j++) printf(" %.6g", l[j]);
    printf("\n");
  }
  return 0;
}
