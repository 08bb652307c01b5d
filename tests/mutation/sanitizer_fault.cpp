// A program with a deliberate memory error, built with AddressSanitizer and
// UndefinedBehaviorSanitizer whatever the build: check_error_paths.py runs it in place of a
// failing kiln's exit, as a kiln that printed its diagnostic and then read freed memory (or
// overflowed an int) would end. The error-path tests must fail on it, which they do only when
// the sanitizers exit with their own codes (tests/lit/lit.cfg.py: 86 and 87), not with 1.
//
// Usage: kiln_sanitizer_fault asan|ubsan
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kiln_sanitizer_fault asan|ubsan\n");
    return 2;
  }
  if (std::strcmp(argv[1], "ubsan") == 0) {
    volatile int large = INT_MAX;
    volatile int sum = large + argc;  // signed overflow
    return sum == 0 ? 0 : 1;
  }
  int* freed = nullptr;
  {
    auto owner = std::make_unique<int[]>(4);
    owner[0] = argc;
    freed = owner.get();
  }
  volatile int read = freed[0];  // heap-use-after-free
  // Without AddressSanitizer the read goes unnoticed: exit 1 like a kiln error, which the
  // check then reports as "the sanitizer exited 1".
  return read == 12345 ? 0 : 1;
}
