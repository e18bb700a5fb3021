// Memory measured, not read back from the plan: a program that runs a plan on the cpu backend while it
// watches the process from outside the runtime.
//
//   mpirun -np WORLD zrt_run_memory PLAN [--runs N] [--rss-bound BYTES]
//
// 1. Allocations. This program defines malloc, calloc, realloc, free, posix_memalign, aligned_alloc and
//    memalign, so every allocation of the process (libzrt, the kernels, OpenBLAS, MPI, the C++ runtime's
//    operator new) goes through it. After one warm-up run, it counts the allocations made during N more
//    runs: there must be none, since run() works inside the arenas and the scratch sized at load time.
//    Allocations that Open MPI makes inside its own collectives are counted apart and only reported.
// 2. Resident memory. It reads VmRSS before Session::open and the kernel's peak (VmHWM) after the runs:
//    the growth must stay within the plan's own figure for this rank (planned_peak_bytes, the arenas the
//    plan asks for) plus the runtime's load-time scratch plus --rss-bound, a stated allowance for what is
//    neither (the plan file and its decoded tables, weight staging, stacks); the default is 4 MiB. MPI is
//    started before the first reading, so that its own set-up is not counted.
//    The peak is reset (/proc/self/clear_refs) after open, and the growth during the runs alone must stay
//    within --rss-bound too: the runs touch nothing the open did not set up.
// Prints one line per rank; exits 1 on a failed check.
#include <execinfo.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <mpi.h>

#include "zrt/zrt.h"

extern "C" {
void *__libc_malloc(size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void __libc_free(void *);
void *__libc_memalign(size_t, size_t);
}

namespace {

std::atomic<bool> g_counting{false};
std::atomic<long> g_count{0};
std::atomic<size_t> g_bytes{0};
// The first few allocations seen while counting, by size, for the failure message (no allocation here).
std::atomic<size_t> g_first[4];

// ZRT_RUN_MEMORY_TRACE=1 prints the stack of every allocation counted (backtrace_symbols_fd does not
// allocate; backtrace() is called once before counting so that its own set-up is not counted).
bool g_trace = false;
thread_local bool t_in_note = false;
// Open MPI's collectives allocate their own temporaries (its recursive-doubling all-reduce mallocs one per
// call): memory of the library, not of the runtime. The MPI calls zrt makes are interposed below (through
// the PMPI profiling names) to count those apart.
thread_local int t_in_mpi = 0;
std::atomic<long> g_mpi_count{0};
std::atomic<size_t> g_mpi_bytes{0};

void note(size_t bytes) {
  if (!g_counting.load(std::memory_order_relaxed) || t_in_note) return;
  if (t_in_mpi) {
    g_mpi_count.fetch_add(1);
    g_mpi_bytes.fetch_add(bytes);
    return;
  }
  t_in_note = true;
  const long n = g_count.fetch_add(1);
  g_bytes.fetch_add(bytes);
  if (n < 4) g_first[n].store(bytes);
  if (g_trace) {
    void *frames[24];
    const int k = backtrace(frames, 24);
    dprintf(2, "--- allocation of %zu B\n", bytes);
    backtrace_symbols_fd(frames, k, 2);
  }
  t_in_note = false;
}

}  // namespace

extern "C" {
void *malloc(size_t n) {
  note(n);
  return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
  note(a * b);
  return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
  note(n);
  return __libc_realloc(p, n);
}
void free(void *p) { __libc_free(p); }
void *memalign(size_t align, size_t n) {
  note(n);
  return __libc_memalign(align, n);
}
void *aligned_alloc(size_t align, size_t n) {
  note(n);
  return __libc_memalign(align, n);
}
int posix_memalign(void **out, size_t align, size_t n) {
  note(n);
  void *p = __libc_memalign(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
}

struct InMpi {
  InMpi() { ++t_in_mpi; }
  ~InMpi() { --t_in_mpi; }
};

extern "C" {
int MPI_Allreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  InMpi in;
  return PMPI_Allreduce(s, r, n, t, op, c);
}
int MPI_Allgather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, MPI_Comm c) {
  InMpi in;
  return PMPI_Allgather(s, sn, st, r, rn, rt, c);
}
int MPI_Reduce_scatter_block(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  InMpi in;
  return PMPI_Reduce_scatter_block(s, r, n, t, op, c);
}
int MPI_Bcast(void *b, int n, MPI_Datatype t, int root, MPI_Comm c) {
  InMpi in;
  return PMPI_Bcast(b, n, t, root, c);
}
int MPI_Barrier(MPI_Comm c) {
  InMpi in;
  return PMPI_Barrier(c);
}
}

namespace {

/// A field of /proc/self/status in bytes ("VmRSS", "VmHWM").
size_t status_bytes(const char *field) {
  FILE *f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0;
  const size_t len = std::strlen(field);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, field, len) == 0 && line[len] == ':') kb = std::strtoull(line + len + 1, nullptr, 10);
  std::fclose(f);
  return kb * 1024;
}

/// Resets VmHWM to the current RSS (Linux 4.0+: "5" > /proc/self/clear_refs).
bool reset_peak() {
  FILE *f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: zrt_run_memory PLAN [--runs N] [--rss-bound BYTES]\n");
    return 2;
  }
  const std::string plan = argv[1];
  int runs = 5;
  size_t bound = size_t{4} << 20;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--runs") == 0) runs = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--rss-bound") == 0) bound = std::strtoull(argv[i + 1], nullptr, 10);
  }

  // MPI is started here, before the first reading, so that its own set-up (shared-memory segments, its
  // libraries' state) is not counted as the session's; zrt then finds it started.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  const size_t rss_before = status_bytes("VmRSS");
  zrt::Options opts;
  opts.init = zrt::InitMode::random;
  std::unique_ptr<zrt::Session> s;
  zrt::Status st = zrt::Session::open(plan, opts, &s);
  if (!st.ok()) {
    std::fprintf(stderr, "zrt_run_memory: error: %s\n", st.message().c_str());
    MPI_Finalize();
    return 1;
  }
  const int rank = s->rank_info().rank;
  auto die = [&](const std::string &m) {
    std::fprintf(stderr, "zrt_run_memory: rank %d: error: %s\n", rank, m.c_str());
    zrt::abort_job(1);
  };
  st = s->bind_random_inputs(7);
  if (!st.ok()) die(st.message());
  // The first run may make what is made once per session (a BLAS thread pool, MPI's connections).
  st = s->run();
  if (!st.ok()) die(st.message());
  const size_t rss_open = status_bytes("VmRSS");
  if (!reset_peak()) die("cannot reset the peak RSS through /proc/self/clear_refs");

  g_trace = std::getenv("ZRT_RUN_MEMORY_TRACE") != nullptr;
  if (g_trace) {
    void *frames[4];
    backtrace(frames, 4);
  }
  g_count = 0;
  g_bytes = 0;
  g_counting = true;
  for (int r = 0; r < runs && st.ok(); ++r) st = s->run();
  g_counting = false;
  if (!st.ok()) die(st.message());
  const long allocs = g_count.load();
  const long mpi_allocs = g_mpi_count.load();
  const size_t alloc_bytes = g_bytes.load();
  const size_t hwm_runs = status_bytes("VmHWM");

  const zrt::MemoryReport m = s->memory_report();
  const size_t planned = m.planned_peak_bytes;
  const size_t scratch = m.runtime_scratch_bytes;
  // The whole session: the peak since before open is at least the peak during the runs; before the reset
  // it was at least rss_open. Both are compared with the plan.
  const size_t peak = std::max(hwm_runs, rss_open);
  const size_t growth = peak > rss_before ? peak - rss_before : 0;
  const size_t run_growth = hwm_runs > rss_open ? hwm_runs - rss_open : 0;
  std::printf(
      "zrt_run_memory: rank %d: %d runs made %ld allocations (%zu B) outside MPI, %ld inside MPI's collectives "
      "(%zu B); RSS before open %zu B, after open and a "
      "warm-up run %zu B, peak during the runs %zu B: session growth %zu B <= planned %zu B + scratch %zu B + bound "
      "%zu B: %s; growth during the runs %zu B <= bound: %s\n",
      rank, runs, allocs, alloc_bytes, mpi_allocs, g_mpi_bytes.load(), rss_before, rss_open, hwm_runs, growth, planned, scratch, bound,
      growth <= planned + scratch + bound ? "ok" : "FAILED", run_growth, run_growth <= bound ? "ok" : "FAILED");
  std::fflush(stdout);
  bool ok = true;
  if (allocs != 0) {
    std::fprintf(stderr, "zrt_run_memory: rank %d: run() allocated %ld times (%zu B); first sizes %zu %zu %zu %zu\n",
                 rank, allocs, alloc_bytes, g_first[0].load(), g_first[1].load(), g_first[2].load(),
                 g_first[3].load());
    ok = false;
  }
  if (growth > planned + scratch + bound || run_growth > bound) ok = false;
  // Both measurements must be able to fail. /proc/self/status unread gives zeros, and zero growth; a counter
  // that libzrt's allocations did not reach (malloc not interposed for the shared library) counts none.
  // The probe: an error Status that libzrt builds, whose message it allocates inside the library.
  if (rss_before == 0 || hwm_runs == 0) {
    std::fprintf(stderr, "zrt_run_memory: rank %d: VmRSS / VmHWM not read from /proc/self/status\n", rank);
    ok = false;
  }
  g_count = 0;
  g_counting = true;
  char probe_buf[4];
  const bool probe_failed =
      !s->read_state("zrt_run_memory's probe: a state that no plan holds", probe_buf, sizeof probe_buf).ok();
  g_counting = false;
  if (!probe_failed || g_count.load() == 0) {
    std::fprintf(stderr, "zrt_run_memory: rank %d: the allocation counter missed libzrt's allocation (probe: %ld)\n",
                 rank, g_count.load());
    ok = false;
  }
  s.reset();
  MPI_Finalize();
  return ok ? 0 : 1;
}
