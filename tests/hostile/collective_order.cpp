// The collective order check under fault: every rank of a 4-rank job (mesh tp 2 x dp 2) issues the same
// sequence of real MPI collectives through zrt's communicator, except that, by MODE, one rank skips or
// changes one of them. The fault is made here, in the test's own program, so that nothing in the library
// can inject it in a normal run.
//
//   mpirun -np 4 hostile_collective_order MODE [--no-check]
//     ok      every rank issues the sequence; the sums are checked against their formula; exit 0
//     skip    rank 1 skips step 1 (the second of two identical all-reduces over tp)
//     change  rank 3 gathers 512 bytes at step 2 where the others gather 256
//     axis    rank 2 reduce-scatters over dp at step 3 where the others do it over tp
// With the check on, a faulty run must end on every rank with the check's message (tests/hostile/
// check_order.sh bounds the time); --no-check shows what the check prevents (a hang, or wrong data).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "zrt/communicator.h"

namespace {

[[noreturn]] void fail(zrt::Communicator &c, const std::string &msg) {
  std::fprintf(stderr, "collective_order: rank %d: error: %s\n", c.rank(), msg.c_str());
  std::fflush(stderr);
  c.abort(1);
  std::_Exit(1);
}

}  // namespace

int main(int argc, char **argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool check = !(argc > 2 && std::strcmp(argv[2], "--no-check") == 0);
  if (mode != "ok" && mode != "skip" && mode != "change" && mode != "axis") {
    std::fprintf(stderr, "usage: hostile_collective_order ok|skip|change|axis [--no-check]\n");
    return 2;
  }
  std::unique_ptr<zrt::Communicator> c;
  // MPI under mpirun, TCP under torchrun's variables (tests/tcp runs these cases over TCP).
  zrt::Status st = zrt::make_communicator_from_env(&c);
  if (!st.ok()) {
    std::fprintf(stderr, "collective_order: error: %s\n", st.message().c_str());
    return 1;
  }
  if (c->world_size() != 4) fail(*c, "run it on 4 ranks (mesh tp 2 x dp 2)");
  st = c->set_mesh(2, 2);
  if (!st.ok()) fail(*c, st.message());
  c->set_check_collectives(check);
  const int r = c->rank();

  std::vector<float> a(1024), b(1024), rs(256);
  std::vector<uint8_t> g8(512), gathered(2 * 512), bc(64);
  auto run = [&](uint64_t step, zrt::Status s) {
    if (!s.ok()) fail(*c, "step " + std::to_string(step) + ": " + s.message());
  };
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(r + 1) * static_cast<float>(i % 7);

  // Step 0 and step 1 are the same all-reduce over tp: only the plan step in the header tells them apart.
  c->set_step(0);
  run(0, c->all_reduce(zrt::Axis::tp, a.data(), b.data(), a.size(), zrt::DType::f32, nullptr));
  if (!(mode == "skip" && r == 1)) {
    c->set_step(1);
    run(1, c->all_reduce(zrt::Axis::tp, b.data(), b.data(), b.size(), zrt::DType::f32, nullptr));
  }
  c->set_step(2);
  std::memset(g8.data(), r, g8.size());
  const size_t gbytes = mode == "change" && r == 3 ? 512 : 256;
  run(2, c->all_gather(zrt::Axis::dp, g8.data(), gathered.data(), gbytes, nullptr));
  c->set_step(3);
  const zrt::Axis rs_axis = mode == "axis" && r == 2 ? zrt::Axis::dp : zrt::Axis::tp;
  run(3, c->reduce_scatter(rs_axis, a.data(), rs.data(), rs.size(), zrt::DType::f32, nullptr));
  c->set_step(4);
  std::memset(bc.data(), r == 0 ? 0x5a : 0, bc.size());
  run(4, c->broadcast(zrt::Axis::world, bc.data(), bc.size(), 0, nullptr));
  c->set_step(5);
  run(5, c->barrier(zrt::Axis::world));

  // Reached only when the sequence matched (or the check was off). The tp group of rank r is {r, r ^ 1}
  // (tp index r % 2); after two all-reduces b[i] = 2 * (sum over the group of (rank + 1)) * (i % 7).
  const float group = static_cast<float>((r & ~1) + 1 + (r | 1) + 1);
  for (size_t i = 0; i < b.size(); ++i)
    if (b[i] != 2 * group * static_cast<float>(i % 7))
      fail(*c, "all_reduce gave " + std::to_string(b[i]) + " at " + std::to_string(i) + ", the formula " +
                   std::to_string(2 * group * static_cast<float>(i % 7)));
  for (size_t i = 0; i < bc.size(); ++i)
    if (bc[i] != 0x5a) fail(*c, "broadcast did not deliver rank 0's bytes");
  std::printf("collective_order: rank %d: %llu collectives issued, order check %s, results match\n", r,
              static_cast<unsigned long long>(c->collectives_issued()), check ? "on" : "off");
  c.reset();
  zrt::finalize_mpi();
  return 0;
}
