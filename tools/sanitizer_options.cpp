// Default options of the sanitizer runtimes, compiled into every program of a sanitizer build
// (KILN_SANITIZE, and scripts/fuzz.sh's own build). ASAN_OPTIONS and LSAN_OPTIONS from the
// environment are read after these, and win.
//
// intercept_tls_get_addr=0: up to GCC 13 and LLVM 16, the runtime's __tls_get_addr interceptor
// takes a dynamic TLS block whose address is 16 bytes past a page boundary for one with a glibc
// 2.19 header, and reads the two words before it as that block's bounds. Since glibc 2.25 there
// is no such header, and a malloc'd block lands there by chance; LeakSanitizer's tracer then
// dies at exit ("Tracer caught signal 11") after every test passed. Seen here once in 24 runs of
// one unit-test shard under clang 14 (Debian 12: glibc 2.36), and earlier in the CUDA mock-library
// tests, whose leak check was off for it. The cost: pointers held only in the dynamic TLS of a
// dlopen'ed library are not leak roots, and kiln keeps none there.

extern "C" const char* __asan_default_options() { return "intercept_tls_get_addr=0"; }
extern "C" const char* __lsan_default_options() { return "intercept_tls_get_addr=0"; }
