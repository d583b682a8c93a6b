/* stallscope_rec.h — the C ABI of the phase recorder: libstallscope_rec.so.
 *
 * What the Python package (python/stallscope/_native.py) loads with ctypes, so that phase markers
 * work in every CPython (and any other process that can call C) without compiling anything
 * against a particular interpreter: no Python.h, plain C types only. The library carries its own
 * C++ runtime (-static-libstdc++) and exports nothing but the `stallscope_*` functions below.
 *
 * Thin wrappers over PhaseWriter / PhaseReader / PhaseAggregator (src/phase/README.md): the same
 * ring format and the same guarantees. The record calls (begin, end, step, counter) never block,
 * never allocate once the ring exists, make no system call, and never fail: a writer that cannot
 * create its ring turns itself off and stallscope_writer_error() says why.
 *
 * Thread-safety: every function may be called from any thread, except
 * stallscope_writer_after_fork_in_child (only in a freshly forked child) and the *_free
 * functions (no concurrent use of the object). A profiler is one thread's.
 *
 * Strings in: UTF-8 with an explicit length (no NUL needed). Strings out: copied into the
 * caller's buffer, NUL-terminated and cut to fit; the return value is the full length, so a
 * caller can retry with a bigger buffer.
 */
#ifndef STALLSCOPE_REC_H_
#define STALLSCOPE_REC_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libstallscope_rec.so (built with hidden visibility; a version script keeps
 * everything else local). */
#if defined(__GNUC__)
#define STALLSCOPE_REC_API __attribute__((visibility("default")))
#else
#define STALLSCOPE_REC_API
#endif

/* Bumped when a signature or a struct below changes; the Python side refuses a mismatch. */
#define STALLSCOPE_REC_ABI_VERSION 2

typedef struct stallscope_writer stallscope_writer;
typedef struct stallscope_profiler stallscope_profiler;

/* One row of a profiler window: a phase (count ended, total and max duration) or a counter
 * (count = increments, total_ns = sum of deltas, max_ns = 0). */
typedef struct stallscope_total {
  uint16_t id;
  uint16_t reserved0;
  uint32_t reserved1;
  uint64_t count;
  int64_t total_ns;
  int64_t max_ns;
} stallscope_total;

/* The ABI version this library implements (STALLSCOPE_REC_ABI_VERSION when it was built). */
STALLSCOPE_REC_API uint32_t stallscope_rec_abi_version(void);
/* The ring file format version it writes (src/phase/ring_format.h kRingVersion). */
STALLSCOPE_REC_API uint32_t stallscope_rec_ring_version(void);

/* A writer for `phases_dir` (length `dir_len`) with rank and world size from the environment
 * (RANK / LOCAL_RANK, WORLD_SIZE) and the ring size from STALLSCOPE_RING_RECORDS. With
 * dir_len == 0 the directory is $STALLSCOPE_RUN_DIR/phases; returns NULL when that is unset.
 * Creates no file: the ring appears on the first event. */
STALLSCOPE_REC_API stallscope_writer* stallscope_writer_from_env(const char* phases_dir,
                                                                 size_t dir_len);
/* A writer with explicit settings; capacity 0 = the default. An empty dir gives a writer that
 * is off (every call is a no-op). Never NULL except when out of memory. */
STALLSCOPE_REC_API stallscope_writer* stallscope_writer_new(const char* phases_dir, size_t dir_len,
                                                            int32_t rank, int32_t world_size,
                                                            uint32_t capacity);
STALLSCOPE_REC_API void stallscope_writer_free(stallscope_writer* w);

/* The id of a phase / mark / counter name (interned; ≤ 47 bytes kept). 0 when the table is full
 * (255 names): events with id 0 are counted as dropped. */
STALLSCOPE_REC_API uint16_t stallscope_name_id(stallscope_writer* w, const char* name, size_t len);

/* Records, on the calling thread. The *_at forms take an explicit CLOCK_MONOTONIC time in ns
 * (for a phase boundary observed earlier, e.g. when the last gradient was ready). */
STALLSCOPE_REC_API void stallscope_begin(stallscope_writer* w, uint16_t id);
STALLSCOPE_REC_API void stallscope_end(stallscope_writer* w, uint16_t id);
STALLSCOPE_REC_API void stallscope_begin_at(stallscope_writer* w, uint16_t id, int64_t ts_ns);
STALLSCOPE_REC_API void stallscope_end_at(stallscope_writer* w, uint16_t id, int64_t ts_ns);
/* Marks the end of a training step; returns the process's step count (1-based). */
STALLSCOPE_REC_API int64_t stallscope_step(stallscope_writer* w);
STALLSCOPE_REC_API void stallscope_counter(stallscope_writer* w, uint16_t id, int64_t delta);
/* The GPU time (ns) of an instance of phase `id` that began on the host at begin_ts_ns. */
STALLSCOPE_REC_API void stallscope_gpu_span(stallscope_writer* w, uint16_t id, int64_t begin_ts_ns,
                                            int64_t gpu_ns);

/* A mark record plus a meta line with `json` (a JSON value; empty = {}). Returns 0, or -1 with
 * the reason copied into err (when err_cap > 0). */
STALLSCOPE_REC_API int stallscope_mark(stallscope_writer* w, uint16_t id, const char* json,
                                       size_t json_len, char* err, size_t err_cap);
/* An "info" meta line named `kind`. Returns 0, or -1 with the reason in err. */
STALLSCOPE_REC_API int stallscope_info(stallscope_writer* w, const char* kind, size_t kind_len,
                                       const char* json, size_t json_len, char* err,
                                       size_t err_cap);

/* Creates the ring now if it does not exist yet. Returns 1 when it exists, 0 when off. */
STALLSCOPE_REC_API int stallscope_writer_open(stallscope_writer* w);
/* In a forked child: forget the parent's ring (the child's first event makes its own). */
STALLSCOPE_REC_API void stallscope_writer_after_fork_in_child(stallscope_writer* w);
/* 1 while the writer records, 0 once it is off. */
STALLSCOPE_REC_API int stallscope_writer_enabled(const stallscope_writer* w);
/* Paths and the reason the writer is off; "" when not applicable. */
STALLSCOPE_REC_API size_t stallscope_writer_ring_path(const stallscope_writer* w, char* buf,
                                                      size_t cap);
STALLSCOPE_REC_API size_t stallscope_writer_meta_path(const stallscope_writer* w, char* buf,
                                                      size_t cap);
STALLSCOPE_REC_API size_t stallscope_writer_error(const stallscope_writer* w, char* buf,
                                                  size_t cap);

/* A reader of the writer's own ring that sums it into windows (STALLSCOPE_PROFILE summaries).
 * The writer must outlive it. */
STALLSCOPE_REC_API stallscope_profiler* stallscope_profiler_new(stallscope_writer* w);
STALLSCOPE_REC_API void stallscope_profiler_free(stallscope_profiler* p);
/* Reads new records into the current window; returns the records lost so far. */
STALLSCOPE_REC_API uint64_t stallscope_profiler_poll(stallscope_profiler* p);
/* Ends the window: copies up to `phases_cap` phase rows and `counters_cap` counter rows
 * (largest total first), and the window's step count, unmatched begin/ends and the records lost
 * so far. Returns the number of phase rows copied; *n_counters gets the counter rows copied. */
STALLSCOPE_REC_API size_t stallscope_profiler_take(stallscope_profiler* p, stallscope_total* phases,
                                                   size_t phases_cap, stallscope_total* counters,
                                                   size_t counters_cap, size_t* n_counters,
                                                   uint64_t* steps, uint64_t* unmatched,
                                                   uint64_t* lost);
/* The name of `id` in the ring the profiler reads. */
STALLSCOPE_REC_API size_t stallscope_profiler_name(stallscope_profiler* p, uint16_t id, char* buf,
                                                   size_t cap);
/* Forgets the ring and the window (a forked child, before its first poll). */
STALLSCOPE_REC_API void stallscope_profiler_reset(stallscope_profiler* p);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STALLSCOPE_REC_H_ */
