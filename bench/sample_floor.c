/* The floor under `record`'s CPU per sample on this machine: a C loop that does only what a
 * sample cannot avoid (wake from a sleep, pread the same kept-open /proc files, write one line)
 * and nothing of stallscope (no NVML, no parsing, no JSON). bench/overhead.sh runs it beside
 * `record` and prints both: stallscope's own cost is the difference.
 *   sample_floor INTERVAL_MS COUNT FILE...   prints "<µs of CPU per iteration>"            */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: sample_floor INTERVAL_MS COUNT FILE...\n");
    return 2;
  }
  const long interval_ms = atol(argv[1]);
  const long count = atol(argv[2]);
  const int nfiles = argc - 3;
  int* fds = calloc((size_t)nfiles + 1, sizeof *fds);
  for (int i = 0; i < nfiles; ++i) {
    fds[i] = open(argv[i + 3], O_RDONLY | O_CLOEXEC);
    if (fds[i] < 0) {
      fprintf(stderr, "sample_floor: %s: cannot open\n", argv[i + 3]);
      return 1;
    }
  }
  const int out = open("/dev/null", O_WRONLY | O_CLOEXEC);
  static char buf[65536], line[4096];
  memset(line, 'x', sizeof line);
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  for (long k = 0; k < count; ++k) {
    next.tv_nsec += interval_ms * 1000000L;
    while (next.tv_nsec >= 1000000000L) next.tv_nsec -= 1000000000L, ++next.tv_sec;
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    for (int i = 0; i < nfiles; ++i) {
      if (pread(fds[i], buf, sizeof buf, 0) < 0) return 1;
    }
    if (write(out, line, sizeof line) < 0) return 1;
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  const double us = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
                    (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  printf("%.1f\n", count > 0 ? us / (double)count : 0.0);
  free(fds);
  return 0;
}
