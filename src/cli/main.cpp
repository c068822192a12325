#include <cstdio>
int main() { std::puts("lmtrain: under construction"); return 0; }
