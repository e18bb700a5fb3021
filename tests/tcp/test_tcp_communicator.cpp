// The TCP communicator (runtime/src/tcp/) against arithmetic computed here: every collective, dtype,
// reduction and group of the meshes of 1 to 4 ranks, odd sizes and 0 bytes, in-place calls, the control
// plane, and the failures that must end with a clear error instead of a hang: a rank that exits in a
// collective, a stalled rank, a wrong port, a missing variable, ranks that disagree.
//
// Each test forks the ranks of a job from this process. Every rank makes its communicator with the same
// address and a free port, runs the test body and exits with the number of failed checks; the body's
// messages go to a pipe so that the parent can match them.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "zk/cpu_kernels.h"
#include "zrt/communicator.h"

namespace {

using zrt::Axis;
using zrt::DType;
using zrt::Reduction;

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

/// What one rank of a forked job did: its exit code and what it wrote.
struct RankResult {
  int code = -1;
  std::string text;
};

/// A rank's body gets its communicator (already made) and a place to write; it returns the failures.
using Body = std::function<int(zrt::Communicator &, std::string *)>;

/// Runs `world` ranks of a TCP job. `config` may change each rank's configuration (a wrong port); a rank
/// whose communicator cannot be made writes the error and exits 100. The parent kills every rank still
/// running after `limit_s`, so that a hang fails the test instead of stalling it.
std::vector<RankResult> run_job(int world, const Body &body, double timeout_s = 20, double limit_s = 60,
                                std::function<void(zrt::TcpConfig *)> config = nullptr,
                                std::function<void(int port)> meanwhile = nullptr) {
  const int port = free_port();
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int r = 0; r < world; ++r) {
    int p[2];
    if (pipe(p) != 0) std::abort();
    const pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      zrt::TcpConfig c;
      c.rank = r;
      c.world = world;
      c.master_addr = "127.0.0.1";
      c.master_port = port;
      c.timeout_s = timeout_s;
      if (config) config(&c);
      std::unique_ptr<zrt::Communicator> comm;
      std::string text;
      int code = 100;
      const zrt::Status s = zrt::make_tcp_communicator(c, &comm);
      if (!s.ok())
        text = "make: " + s.message();
      else
        code = body(*comm, &text);
      if (write(p[1], text.data(), text.size()) < 0) code = 101;
      close(p[1]);
      comm.reset();
      std::_Exit(code);
    }
    close(p[1]);
    pids.push_back(pid);
    pipes.push_back(p[0]);
  }
  if (meanwhile) meanwhile(port);
  std::vector<RankResult> out(static_cast<size_t>(world));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  for (int r = 0; r < world; ++r) {
    int st = 0;
    for (;;) {
      const pid_t w = waitpid(pids[static_cast<size_t>(r)], &st, WNOHANG);
      if (w == pids[static_cast<size_t>(r)]) break;
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t p : pids) kill(p, SIGKILL);
        waitpid(pids[static_cast<size_t>(r)], &st, 0);
        out[static_cast<size_t>(r)].text = "killed: the job did not end within the test's limit";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    out[static_cast<size_t>(r)].code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    char buf[4096];
    ssize_t n;
    while ((n = read(pipes[static_cast<size_t>(r)], buf, sizeof buf)) > 0)
      out[static_cast<size_t>(r)].text.append(buf, static_cast<size_t>(n));
    close(pipes[static_cast<size_t>(r)]);
  }
  return out;
}

void expect_all_ok(const std::vector<RankResult> &res) {
  for (size_t r = 0; r < res.size(); ++r)
    EXPECT_EQ(res[r].code, 0) << "rank " << r << ": " << res[r].text;
}

// --- the oracle: each rank's data is a function of (world rank, element, salt), so every rank can compute
// every member's contribution and fold it in group order, as the communicator promises.
uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}
double unit(int rank, size_t i, uint64_t salt) {
  return static_cast<double>(mix(salt * 1000003ULL + static_cast<uint64_t>(rank) * 7919ULL + i) >> 11) /
             9007199254740992.0 * 8.0 - 4.0;
}

/// Element i of world rank `rank`'s buffer of `d`, written at p.
void make_element(DType d, int rank, size_t i, uint64_t salt, uint8_t *p) {
  const double u = unit(rank, i, salt);
  switch (d) {
    case DType::f32: { const float v = static_cast<float>(u); std::memcpy(p, &v, 4); break; }
    case DType::bf16: { const uint16_t v = zk::f32_to_bf16(static_cast<float>(u)); std::memcpy(p, &v, 2); break; }
    case DType::f16: { const uint16_t v = zk::f32_to_f16(static_cast<float>(u)); std::memcpy(p, &v, 2); break; }
    case DType::i32: { const int32_t v = static_cast<int32_t>(std::floor(u * 1e8)); std::memcpy(p, &v, 4); break; }
    case DType::i64: {
      const int64_t v = static_cast<int64_t>(std::floor(u * 1e17));
      std::memcpy(p, &v, 8);
      break;
    }
    case DType::bool8: *p = static_cast<uint8_t>(u > 0); break;
  }
}

std::vector<uint8_t> make_buffer(DType d, int rank, size_t n, uint64_t salt) {
  const size_t es = zrt::dtype_size(d);
  std::vector<uint8_t> v(n * es);
  for (size_t i = 0; i < n; ++i) make_element(d, rank, i, salt, v.data() + i * es);
  return v;
}

/// a op b for one element, as the communicator defines it (16-bit floats: decoded, summed in fp32 and
/// rounded back; max/min keep the bits of the larger/smaller value).
void combine(DType d, Reduction red, uint8_t *a, const uint8_t *b) {
  auto pick = [&](double x, double y) { return red == Reduction::max ? y > x : y < x; };
  switch (d) {
    case DType::f32: {
      float x, y;
      std::memcpy(&x, a, 4);
      std::memcpy(&y, b, 4);
      const float r = red == Reduction::sum ? x + y : pick(x, y) ? y : x;
      std::memcpy(a, &r, 4);
      return;
    }
    case DType::bf16:
    case DType::f16: {
      uint16_t x, y;
      std::memcpy(&x, a, 2);
      std::memcpy(&y, b, 2);
      const bool bf = d == DType::bf16;
      const float fx = bf ? zk::bf16_to_f32(x) : zk::f16_to_f32(x), fy = bf ? zk::bf16_to_f32(y) : zk::f16_to_f32(y);
      uint16_t r = x;
      if (red == Reduction::sum)
        r = bf ? zk::f32_to_bf16(fx + fy) : zk::f32_to_f16(fx + fy);
      else if (pick(fx, fy))
        r = y;
      std::memcpy(a, &r, 2);
      return;
    }
    case DType::i32: {
      int32_t x, y;
      std::memcpy(&x, a, 4);
      std::memcpy(&y, b, 4);
      const int32_t r = red == Reduction::sum ? static_cast<int32_t>(static_cast<int64_t>(x) + y) : pick(x, y) ? y : x;
      std::memcpy(a, &r, 4);
      return;
    }
    case DType::i64: {
      int64_t x, y;
      std::memcpy(&x, a, 8);
      std::memcpy(&y, b, 8);
      const int64_t r = red == Reduction::sum ? x + y : (red == Reduction::max ? y > x : y < x) ? y : x;
      std::memcpy(a, &r, 8);
      return;
    }
    case DType::bool8: return;
  }
}

/// The world ranks of rank r's group over `a` in a tp x dp mesh (docs/design.md), in group order.
std::vector<int> group_of(int r, int tp, int dp, Axis a) {
  std::vector<int> m;
  if (a == Axis::tp)
    for (int k = 0; k < tp; ++k) m.push_back(r / tp * tp + k);
  else if (a == Axis::dp)
    for (int k = 0; k < dp; ++k) m.push_back(r % tp + k * tp);
  else if (a == Axis::world)
    for (int k = 0; k < tp * dp; ++k) m.push_back(k);
  else
    m.push_back(r);
  return m;
}

/// The expected reduction of n elements starting at element `first` of each member's buffer.
std::vector<uint8_t> fold_expected(DType d, Reduction red, const std::vector<int> &members, size_t first, size_t n,
                                   uint64_t salt) {
  const size_t es = zrt::dtype_size(d);
  std::vector<uint8_t> acc(n * es), x(es);
  for (size_t i = 0; i < n; ++i) {
    make_element(d, members[0], first + i, salt, acc.data() + i * es);
    for (size_t k = 1; k < members.size(); ++k) {
      make_element(d, members[k], first + i, salt, x.data());
      combine(d, red, acc.data() + i * es, x.data());
    }
  }
  return acc;
}

int check_bytes(const std::vector<uint8_t> &got, const std::vector<uint8_t> &want, const std::string &what,
                std::string *log) {
  if (got.size() == want.size() && std::memcmp(got.data(), want.data(), got.size()) == 0) return 0;
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  *log += what + ": differs at byte " + std::to_string(i) + " of " + std::to_string(want.size()) + "\n";
  return 1;
}

/// Every data-plane collective over every axis of the mesh, checked bit for bit against the oracle.
int data_plane(zrt::Communicator &c, int tp, int dp, std::string *log) {
  int fails = 0;
  const int r = c.rank();
  auto ok = [&](const zrt::Status &s, const std::string &what) {
    if (s.ok()) return true;
    *log += what + ": " + s.message() + "\n";
    ++fails;
    return false;
  };
  if (!ok(c.set_mesh(tp, dp), "set_mesh")) return fails;
  uint64_t salt = 1;
  for (Axis axis : {Axis::tp, Axis::dp, Axis::world, Axis::none}) {
    const std::vector<int> m = group_of(r, tp, dp, axis);
    const int g = static_cast<int>(m.size());
    int me = 0;
    while (m[static_cast<size_t>(me)] != r) ++me;
    if (c.group_size(axis) != g || c.group_rank(axis) != me) {
      *log += std::string("group of ") + axis_name(axis) + " is wrong\n";
      ++fails;
    }
    for (DType d : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64}) {
      const size_t es = zrt::dtype_size(d);
      for (Reduction red : {Reduction::sum, Reduction::max, Reduction::min}) {
        for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{7}, size_t{1000}, size_t{4099}}) {
          ++salt;
          const std::string what = std::string(axis_name(axis)) + " " + zrt::dtype_name(d) + " red " +
                                   std::to_string(static_cast<int>(red)) + " n " + std::to_string(n);
          // all_reduce, out of place and in place.
          std::vector<uint8_t> in = make_buffer(d, r, n, salt), out(n * es);
          if (ok(c.all_reduce(axis, in.data(), out.data(), n, d, nullptr, red), "all_reduce " + what))
            fails += check_bytes(out, fold_expected(d, red, m, 0, n, salt), "all_reduce " + what, log);
          if (ok(c.all_reduce(axis, in.data(), in.data(), n, d, nullptr, red), "all_reduce in place " + what))
            fails += check_bytes(in, out, "all_reduce in place " + what, log);
          // reduce_scatter: g blocks of n elements; member `me` keeps block me.
          ++salt;
          std::vector<uint8_t> rin = make_buffer(d, r, n * static_cast<size_t>(g), salt), rout(n * es);
          if (ok(c.reduce_scatter(axis, rin.data(), rout.data(), n, d, nullptr, red), "reduce_scatter " + what))
            fails += check_bytes(rout, fold_expected(d, red, m, n * static_cast<size_t>(me), n, salt),
                                 "reduce_scatter " + what, log);
        }
      }
    }
    // all_gather of odd byte counts, out of place and in place (the send block is this member's slot).
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{13}, size_t{4101}, size_t{300007}}) {
      ++salt;
      std::vector<uint8_t> want(bytes * static_cast<size_t>(g));
      for (int k = 0; k < g; ++k) {
        const std::vector<uint8_t> b = make_buffer(DType::bool8, m[static_cast<size_t>(k)], bytes, salt);
        if (bytes) std::memcpy(want.data() + static_cast<size_t>(k) * bytes, b.data(), bytes);
      }
      const std::vector<uint8_t> mine = make_buffer(DType::bool8, r, bytes, salt);
      std::vector<uint8_t> got(want.size());
      const std::string what = std::string("all_gather ") + axis_name(axis) + " " + std::to_string(bytes) + " B";
      if (ok(c.all_gather(axis, mine.data(), got.data(), bytes, nullptr), what)) fails += check_bytes(got, want, what, log);
      std::vector<uint8_t> inplace(want.size());
      if (bytes) std::memcpy(inplace.data() + static_cast<size_t>(me) * bytes, mine.data(), bytes);
      if (ok(c.all_gather(axis, inplace.data() + static_cast<size_t>(me) * bytes, inplace.data(), bytes, nullptr),
             what + " in place"))
        fails += check_bytes(inplace, want, what + " in place", log);
      // broadcast from every root of the group.
      for (int root = 0; root < g; ++root) {
        std::vector<uint8_t> buf = r == m[static_cast<size_t>(root)] ? mine : std::vector<uint8_t>(bytes, 0xee);
        const std::vector<uint8_t> bwant = make_buffer(DType::bool8, m[static_cast<size_t>(root)], bytes, salt);
        const std::string bw = std::string("broadcast ") + axis_name(axis) + " root " + std::to_string(root) + " " +
                               std::to_string(bytes) + " B";
        if (ok(c.broadcast(axis, buf.data(), bytes, root, nullptr), bw)) fails += check_bytes(buf, bwant, bw, log);
      }
    }
    ok(c.barrier(axis), std::string("barrier ") + axis_name(axis));
  }
  return fails;
}

class Meshes : public ::testing::TestWithParam<std::pair<int, int>> {};

// Tests that every collective over every group of a tp x dp mesh equals the group-order fold of the members'
// data, bit for bit, on every rank.
TEST_P(Meshes, CollectivesEqualTheGroupOrderFold) {
  const int tp = GetParam().first, dp = GetParam().second;
  expect_all_ok(run_job(tp * dp, [&](zrt::Communicator &c, std::string *log) { return data_plane(c, tp, dp, log); },
                        30, 240));
}

INSTANTIATE_TEST_SUITE_P(Tcp, Meshes,
                         ::testing::Values(std::make_pair(1, 1), std::make_pair(1, 2), std::make_pair(2, 1),
                                           std::make_pair(1, 3), std::make_pair(3, 1), std::make_pair(2, 2),
                                           std::make_pair(4, 1), std::make_pair(1, 4)),
                         [](const auto &info) {
                           return "tp" + std::to_string(info.param.first) + "_dp" + std::to_string(info.param.second);
                         });

// Tests the control plane against its definition: agree's min/max over per-rank values, broadcast_host
// from every rank, gather_host with uneven (and empty) counts.
TEST(Tcp, ControlPlane) {
  const int world = 4;
  expect_all_ok(run_job(world, [&](zrt::Communicator &c, std::string *log) {
    int fails = 0;
    const int r = c.rank();
    uint64_t in[3] = {static_cast<uint64_t>(r) * 10 + 5, ~uint64_t{0} - static_cast<uint64_t>(r), 42}, mn[3], mx[3];
    zrt::Status s = c.agree(in, mn, mx, 3);
    if (!s.ok() || mn[0] != 5 || mx[0] != 35 || mn[1] != ~uint64_t{0} - 3 || mx[1] != ~uint64_t{0} || mn[2] != 42 ||
        mx[2] != 42) {
      *log += "agree: " + s.message() + "\n";
      ++fails;
    }
    for (int root = 0; root < world; ++root) {
      std::vector<uint8_t> b = make_buffer(DType::bool8, r, 70001, 9);
      s = c.broadcast_host(b.data(), b.size(), root);
      if (!s.ok()) *log += s.message() + "\n";
      fails += !s.ok() + check_bytes(b, make_buffer(DType::bool8, root, 70001, 9), "broadcast_host", log);
    }
    const size_t counts[world] = {3, 0, 50000, 1};
    std::vector<uint8_t> mine = make_buffer(DType::bool8, r, counts[r], 11), all(50004, 0xee), want;
    for (int k = 0; k < world; ++k) {
      const std::vector<uint8_t> b = make_buffer(DType::bool8, k, counts[k], 11);
      want.insert(want.end(), b.begin(), b.end());
    }
    s = c.gather_host(mine.data(), all.data(), counts, 2);
    if (!s.ok()) *log += "gather_host: " + s.message() + "\n";
    fails += !s.ok();
    if (r == 2) fails += check_bytes(all, want, "gather_host", log);
    return fails;
  }));
}

// Tests a large all-reduce (12 MB per rank, more than the sockets buffer, so that every rank sends and
// receives at once) against the fold, and that the result is the same bits on every rank.
TEST(Tcp, LargeAllReduce) {
  expect_all_ok(run_job(4, [&](zrt::Communicator &c, std::string *log) {
    const size_t n = 3 * 1000 * 1000 + 1;
    std::vector<uint8_t> in = make_buffer(DType::f32, c.rank(), n, 77), out(n * 4);
    const zrt::Status s = c.all_reduce(Axis::world, in.data(), out.data(), n, DType::f32, nullptr, Reduction::sum);
    if (!s.ok()) {
      *log += s.message();
      return 1;
    }
    return check_bytes(out, fold_expected(DType::f32, Reduction::sum, {0, 1, 2, 3}, 0, n, 77), "large", log);
  }, 60, 240));
}

// Tests that a barrier waits for the last rank to arrive.
TEST(Tcp, BarrierWaits) {
  expect_all_ok(run_job(3, [&](zrt::Communicator &c, std::string *log) {
    if (c.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(400));
    const auto t0 = std::chrono::steady_clock::now();
    const zrt::Status s = c.barrier(Axis::world);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!s.ok()) *log += s.message();
    if (c.rank() != 2 && ms < 300) *log += "rank " + std::to_string(c.rank()) + " left the barrier early\n";
    return !s.ok() || (c.rank() != 2 && ms < 300);
  }));
}

/// Expects every listed rank to fail with a message matching `pattern` (a substring).
void expect_failed(const std::vector<RankResult> &res, std::vector<int> ranks, const std::string &pattern) {
  for (int r : ranks) {
    EXPECT_NE(res[static_cast<size_t>(r)].code, 0) << "rank " << r << " succeeded";
    EXPECT_NE(res[static_cast<size_t>(r)].text.find(pattern), std::string::npos)
        << "rank " << r << " says: " << res[static_cast<size_t>(r)].text << "\nexpected: " << pattern;
  }
}

/// Runs a collective and writes its error; the surviving ranks stay up a moment, so that each one's error
/// names the rank that failed rather than another survivor that exited first.
int collective_then_linger(zrt::Communicator &c, std::string *log) {
  std::vector<float> a(100000, 1.0f), b(a.size());
  zrt::Status s = c.all_reduce(Axis::world, a.data(), b.data(), a.size(), DType::f32, nullptr, Reduction::sum);
  *log += s.message();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  return s.ok() ? 0 : 1;
}

// Tests that a rank that exits in the middle of a job makes the others' collective fail at once (well
// within the timeout), naming it.
TEST(Tcp, ExitedRankIsNamed) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto res = run_job(3, [&](zrt::Communicator &c, std::string *log) {
    if (c.rank() == 1) std::_Exit(3);
    return collective_then_linger(c, log);
  }, 30);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(res[1].code, 3);
  expect_failed(res, {0, 2}, "rank 1 closed its connection during all_reduce over world");
  EXPECT_LT(s, 10.0) << "the failure took the timeout (30 s) instead of being seen at once";
}

// Tests that a rank stalled outside the collective makes the others fail after the timeout, naming it.
TEST(Tcp, StalledRankTimesOut) {
  const auto res = run_job(3, [&](zrt::Communicator &c, std::string *log) {
    if (c.rank() == 2) {
      std::this_thread::sleep_for(std::chrono::seconds(4));
      return 0;
    }
    return collective_then_linger(c, log);
  }, 1, 60);
  expect_failed(res, {0, 1}, "timed out after 1 s in all_reduce over world waiting for rank 2");
}

// Tests that the ranks fail with a message naming both sides when they issue different collectives with
// the order check off (the message headers disagree), and with the order check's message when it is on.
TEST(Tcp, DifferentCollectivesAreNamed) {
  auto res = run_job(2, [&](zrt::Communicator &c, std::string *log) {
    std::vector<uint8_t> b(64), g(128);
    zrt::Status s = c.rank() == 0 ? c.all_gather(Axis::world, b.data(), g.data(), 64, nullptr)
                                  : c.broadcast(Axis::world, b.data(), 32, 0, nullptr);
    *log += s.message();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return s.ok() ? 0 : 1;
  }, 5);
  expect_failed(res, {1}, "rank 0 sent all_gather data of 64 B where rank 1 expects broadcast data of 32 B");
  res = run_job(2, [&](zrt::Communicator &c, std::string *log) {
    c.set_check_collectives(true);
    std::vector<uint8_t> b(64), g(128);
    zrt::Status s = c.rank() == 0 ? c.all_gather(Axis::world, b.data(), g.data(), 64, nullptr)
                                  : c.broadcast(Axis::world, b.data(), 32, 0, nullptr);
    *log += s.message();
    return s.ok() ? 0 : 1;
  }, 5);
  expect_failed(res, {0, 1},
                "collective order check: the ranks would issue different collectives: rank 0 issues all_gather over "
                "world of 64 B (collective #0), rank 1 issues broadcast over world of 32 B from group rank 0");
}

// Tests the rendezvous' errors: a rank given another port than rank 0 cannot reach it, and rank 0 names
// the rank that never came; a rank with another WORLD_SIZE is refused.
TEST(Tcp, RendezvousErrors) {
  const int wrong = free_port();
  auto res = run_job(2, [](zrt::Communicator &, std::string *) { return 0; }, 1, 30,
                     [wrong](zrt::TcpConfig *c) {
                       if (c->rank == 1) c->master_port = wrong;
                     });
  EXPECT_EQ(res[1].code, 100);
  EXPECT_NE(res[1].text.find("rank 1 could not reach rank 0 at 127.0.0.1:" + std::to_string(wrong) +
                             " (MASTER_ADDR:MASTER_PORT) within 1 s (ZRT_TCP_TIMEOUT_S)"),
            std::string::npos)
      << res[1].text;
  EXPECT_EQ(res[0].code, 100);
  EXPECT_NE(res[0].text.find("rank 1 did not connect to 127.0.0.1:"), std::string::npos) << res[0].text;
  res = run_job(2, [](zrt::Communicator &, std::string *) { return 0; }, 5, 30, [](zrt::TcpConfig *c) {
    if (c->rank == 1) c->world = 3;
  });
  for (int r : {0, 1}) {
    EXPECT_EQ(res[static_cast<size_t>(r)].code, 100);
    EXPECT_NE(res[static_cast<size_t>(r)].text.find("rank 1 has WORLD_SIZE=3 but rank 0 has 2"), std::string::npos)
        << res[static_cast<size_t>(r)].text;
  }
}

// Tests that a connection to the rendezvous port that is not a rank (a port probe sending other bytes) is
// dropped, and the job meets as usual.
TEST(Tcp, StrangerAtTheRendezvousIsIgnored) {
  expect_all_ok(run_job(3, [](zrt::Communicator &c, std::string *log) {
    const zrt::Status s = c.barrier(Axis::world);
    *log += s.message();
    return s.ok() ? 0 : 1;
  }, 20, 60, nullptr, [](int port) {
    // Before or among the ranks: retried until rank 0 listens.
    for (int i = 0; i < 200; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(port));
      if (connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0) {
        const char probe[] = "GET / HTTP/1.0\r\n\r\n";
        if (write(fd, probe, sizeof probe - 1) < 0) std::perror("write");
        close(fd);
        return;
      }
      close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }));
}

/// Sets the variables for the scope of a test and restores the environment after.
class Env {
 public:
  Env(std::initializer_list<std::pair<const char *, const char *>> vars) {
    for (const char *v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "ZRT_TCP_PORT", "ZRT_TCP_TIMEOUT_S",
                          "TORCHELASTIC_USE_AGENT_STORE", "ZRT_COMM"}) {
      const char *old = std::getenv(v);
      saved_.emplace_back(v, old ? std::string(old) : std::string("\x01"));
      unsetenv(v);
    }
    for (const auto &kv : vars) setenv(kv.first, kv.second, 1);
  }
  ~Env() {
    for (const auto &kv : saved_)
      if (kv.second == "\x01")
        unsetenv(kv.first.c_str());
      else
        setenv(kv.first.c_str(), kv.second.c_str(), 1);
  }

 private:
  std::vector<std::pair<std::string, std::string>> saved_;
};

// Tests that torchrun's variables are read, and that a missing or malformed one is named.
TEST(Tcp, ConfigFromEnvironment) {
  zrt::TcpConfig c;
  {
    Env e({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "localhost"}, {"MASTER_PORT", "29500"},
           {"ZRT_TCP_TIMEOUT_S", "2.5"}});
    ASSERT_TRUE(zrt::tcp_config_from_env(&c).ok());
    EXPECT_EQ(c.rank, 1);
    EXPECT_EQ(c.world, 4);
    EXPECT_EQ(c.master_addr, "localhost");
    EXPECT_EQ(c.master_port, 29500);
    EXPECT_EQ(c.timeout_s, 2.5);
  }
  {
    // torchrun's agent store holds MASTER_PORT: the rendezvous takes the next port; ZRT_TCP_PORT wins.
    Env e({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"},
           {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
    ASSERT_TRUE(zrt::tcp_config_from_env(&c).ok());
    EXPECT_EQ(c.master_port, 29501);
    setenv("ZRT_TCP_PORT", "4000", 1);
    ASSERT_TRUE(zrt::tcp_config_from_env(&c).ok());
    EXPECT_EQ(c.master_port, 4000);
  }
  struct Bad {
    std::vector<std::pair<const char *, const char *>> vars;
    const char *message;
  };
  const std::vector<Bad> bad = {
      {{{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, "RANK is not set"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}, "MASTER_ADDR is not set"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, "MASTER_PORT is not set"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
       "RANK='2' is not a rank of WORLD_SIZE=2"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "two"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
       "WORLD_SIZE='two' is not a positive integer"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}},
       "MASTER_PORT='70000' is not a port"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}, {"ZRT_TCP_TIMEOUT_S", "-1"}},
       "ZRT_TCP_TIMEOUT_S='-1' is not a positive number"},
  };
  for (const Bad &b : bad) {
    Env e(std::initializer_list<std::pair<const char *, const char *>>{});
    for (const auto &kv : b.vars) setenv(kv.first, kv.second, 1);
    const zrt::Status s = zrt::tcp_config_from_env(&c);
    EXPECT_EQ(s.code(), zrt::Code::invalid_argument);
    EXPECT_NE(s.message().find(b.message), std::string::npos) << s.message();
  }
}

// Tests the launcher selection: ZRT_COMM must name a communicator, and torchrun's variables with a wrong
// one fail through the TCP path with the variable's name (no MPI is started for them).
TEST(Tcp, SelectionFromEnvironment) {
  std::unique_ptr<zrt::Communicator> c;
  {
    Env e({{"ZRT_COMM", "gloo"}});
    const zrt::Status s = zrt::make_communicator_from_env(&c);
    EXPECT_NE(s.message().find("ZRT_COMM='gloo': expected mpi or tcp"), std::string::npos) << s.message();
  }
  {
    Env e({{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_ADDR", "127.0.0.1"}});
    const zrt::Status s = zrt::make_communicator_from_env(&c);
    EXPECT_NE(s.message().find("the TCP communicator (torchrun's environment): MASTER_PORT is not set"),
              std::string::npos)
        << s.message();
  }
}

}  // namespace
