// Link-time compatibility with glibc older than the one we build on (Debian 12: 2.36), for what
// we ship to other machines: libstallscope_rec.so (the wheel, the bundle) and the bundle's
// binary (make dist). Linked with -Wl,--wrap=arc4random (src/base/CMakeLists.txt).
//
// GCC 12's static libstdc++ always links random.o (stdexcept.o → cow-string-inst.o →
// std::random_device::_M_init), and random.o calls arc4random, new in glibc 2.36. Nothing of
// ours uses std::random_device; the wrapper keeps that one reference from raising the whole
// library's minimum glibc from 2.34 to 2.36. getrandom(2) is glibc 2.25, Linux 3.17.

#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

extern "C" uint32_t __wrap_arc4random(void) {  // NOLINT(bugprone-reserved-identifier): ld --wrap
  uint32_t value = 0;
  for (;;) {
    ssize_t got = getrandom(&value, sizeof value, 0);
    if (got == static_cast<ssize_t>(sizeof value)) return value;
    // arc4random cannot fail; neither may this (interrupted reads are retried).
    if (got < 0 && errno != EINTR) std::abort();
  }
}
