// hello_zrt: load a plan, bind the first input from a .npy file, run, read the first output on rank 0,
// optionally compare it with an expected .npy, and print the memory report.
#include <zrt/npy.h>
#include <zrt/zrt.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: hello_zrt PLAN INPUT.npy [EXPECTED.npy]\n");
    return 2;
  }
  std::unique_ptr<zrt::Session> s;
  zrt::Status st = zrt::Session::open(argv[1], zrt::Options{}, &s);
  if (!st.ok()) {
    std::fprintf(stderr, "hello_zrt: %s\n", st.message().c_str());
    zrt::shutdown();
    return 1;
  }
  const int rank = s->rank_info().rank;
  auto fail = [&](const zrt::Status &e) {
    std::fprintf(stderr, "hello_zrt: rank %d: %s\n", rank, e.message().c_str());
    zrt::abort_job(1);
  };
  zrt::NpyArray x;
  if (!(st = zrt::read_npy(argv[2], &x)).ok()) fail(st);
  if (!(st = s->bind_input(s->inputs()[0].name, x.data.data(), x.data.size())).ok()) fail(st);
  if (!(st = s->run()).ok()) fail(st);
  const zrt::IOInfo &out = s->outputs()[0];
  std::vector<float> y(rank == 0 ? out.global_bytes() / 4 : 0);
  if (!(st = s->read_output(out.name, y.data(), y.size() * 4)).ok()) fail(st);
  int rc = 0;
  if (rank == 0 && argc > 3) {
    zrt::NpyArray e;
    if (!(st = zrt::read_npy(argv[3], &e)).ok()) fail(st);
    const float *w = reinterpret_cast<const float *>(e.data.data());
    double worst = 0;
    for (size_t i = 0; i < y.size(); ++i) worst = std::fmax(worst, std::fabs(y[i] - w[i]));
    std::printf("hello_zrt: output '%s' max abs error %.3g\n", out.name.c_str(), worst);
    rc = worst <= 1e-5 ? 0 : 1;
  }
  const zrt::MemoryReport m = s->memory_report();
  std::printf("hello_zrt: rank %d planned %llu B measured %llu B\n", rank,
              static_cast<unsigned long long>(m.planned_arena_bytes[0]),
              static_cast<unsigned long long>(m.measured_arena_bytes[0]));
  s.reset();
  zrt::shutdown();
  return rc;
}
