#pragma once
// STALLSCOPE_ASAN is defined in an AddressSanitizer build: g++ defines __SANITIZE_ADDRESS__,
// clang answers __has_feature (build-asan may be either).

#if defined(__SANITIZE_ADDRESS__)
#define STALLSCOPE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STALLSCOPE_ASAN 1
#endif
#endif
