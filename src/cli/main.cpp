#include <cstdio>
int main() { std::puts("qforge"); return 0; }
