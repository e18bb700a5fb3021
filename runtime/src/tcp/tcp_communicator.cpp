// The TCP communicator: the whole Communicator interface over plain POSIX sockets, for jobs whose launcher
// gives no MPI world (torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT and nothing else).
//
// Start-up (the rendezvous):
//  1. Every rank but 0 opens its own listening socket on an ephemeral port, then connects to rank 0 at
//     MASTER_ADDR:MASTER_PORT (retrying until the timeout, since rank 0 may start later) and announces its
//     rank, the world size and its listening port.
//  2. Rank 0 listens there, accepts one connection per other rank, checks the announcements (world sizes
//     agree, no rank twice) and sends every rank the table of listening addresses (each rank's address as
//     rank 0 saw it, with the announced port), or the reason it refuses.
//  3. The links between ranks 1..world-1 form a full mesh: rank i connects to every rank j in [1, i) and
//     accepts a connection from every rank above it. Rank 0's links are the rendezvous connections.
//  4. A barrier over the world confirms that every link works before make_tcp_communicator returns.
//
// The data plane moves host memory over one connection per pair of ranks. Every message carries a 16-byte
// header (a magic, what the sender is doing, the payload bytes), so that two ranks that disagree on a
// collective fail with a message naming both sides instead of misreading each other's bytes. All transfers
// of one step progress together through poll() on non-blocking sockets, so that no pair of ranks can block
// each other by both sending first; the longest wait is the configured timeout, after which the error names
// the ranks still awaited, and a peer whose connection closes is named at once.
//
// Algorithms, over a group of g members in group order (communicator.h):
//  - reduce_scatter: member j receives block j from every member and reduces the g contributions in group
//    order (((c0 op c1) op c2) ...): one rank computes each block, in one fixed order;
//  - all_reduce: the same reduce-scatter over g near-equal segments of the buffer, then an all-gather of
//    the reduced segments. Each element is reduced by exactly one rank in group order, so every rank holds
//    bit-identical results, whatever the number of ranks or the launch;
//  - all_gather: every member sends its block to every other member (direct exchange);
//  - broadcast: the root sends to every other member; barrier: an empty message from every member to
//    every other member.
// bf16 and f16 sums round to their type after each addition, as the MPI communicator's reductions do.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "zk/cpu_kernels.h"
#include "zrt/communicator.h"

namespace zrt {
namespace {

using Clock = std::chrono::steady_clock;

// Message kinds: the data-plane collectives keep their CollectiveOp values; the control plane and the
// rendezvous follow.
enum Kind : uint8_t {
  kAgree = 16,
  kBroadcastHost,
  kGatherHost,
  kHello,
  kTable,
};
constexpr uint32_t kMagic = 0x5a545450;  // "ZTTP"
constexpr char kHelloMagic[8] = {'Z', 'R', 'T', 'T', 'C', 'P', '0', '1'};
constexpr size_t kHeaderBytes = 16;

const char *kind_name(uint8_t k) {
  switch (k) {
    case kAgree: return "agree";
    case kBroadcastHost: return "broadcast_host";
    case kGatherHost: return "gather_host";
    case kHello: return "rendezvous";
    case kTable: return "rendezvous";
  }
  if (k >= static_cast<uint8_t>(CollectiveOp::all_reduce) && k <= static_cast<uint8_t>(CollectiveOp::barrier))
    return collective_name(static_cast<CollectiveOp>(k));
  return "unknown message";
}

void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}
uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = v << 8 | p[i];
  return v;
}
void put64(uint8_t *p, uint64_t v) {
  put32(p, static_cast<uint32_t>(v >> 32));
  put32(p + 4, static_cast<uint32_t>(v));
}
uint64_t get64(const uint8_t *p) { return static_cast<uint64_t>(get32(p)) << 32 | get32(p + 4); }

std::string errno_text(int e) { return std::string(std::strerror(e)); }

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 1000000 ? 1000000 : static_cast<int>(left);
}

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string seconds_text(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", s);
  return b;
}

/// Sockets of the data plane are non-blocking (poll decides when to move bytes), unbuffered by Nagle
/// (collectives are latency-bound at small sizes), and raise no SIGPIPE (a closed peer is an error return).
Status tune(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    return error(Code::comm_error, "tcp: setsockopt(TCP_NODELAY): " + errno_text(errno));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  const int fl = fcntl(fd, F_GETFL, 0);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0)
    return error(Code::comm_error, "tcp: fcntl(O_NONBLOCK): " + errno_text(errno));
  return {};
}

std::string address_text(const sockaddr_storage &a) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (a.ss_family == AF_INET) {
    const auto *s = reinterpret_cast<const sockaddr_in *>(&a);
    inet_ntop(AF_INET, &s->sin_addr, host, sizeof host);
    port = ntohs(s->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto *s = reinterpret_cast<const sockaddr_in6 *>(&a);
    inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof host);
    port = ntohs(s->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

void set_port(sockaddr_storage *a, int port) {
  if (a->ss_family == AF_INET) reinterpret_cast<sockaddr_in *>(a)->sin_port = htons(static_cast<uint16_t>(port));
  if (a->ss_family == AF_INET6) reinterpret_cast<sockaddr_in6 *>(a)->sin6_port = htons(static_cast<uint16_t>(port));
}

socklen_t address_len(const sockaddr_storage &a) {
  return a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

/// A listening socket on every local address at `port` (0: any free port): IPv6 accepting IPv4 too
/// (dual stack), or IPv4 alone where the host has no IPv6. MASTER_ADDR may name either family ("localhost"
/// resolves to ::1 or 127.0.0.1 depending on the host), and the peers' addresses come from accept().
Status listen_on(int port, int backlog, int *fd_out, int *port_out) {
  int e = 0;
  for (int family : {AF_INET6, AF_INET}) {
    const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      e = errno;
      continue;
    }
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_storage a{};
    a.ss_family = static_cast<sa_family_t>(family);
    if (family == AF_INET) reinterpret_cast<sockaddr_in *>(&a)->sin_addr.s_addr = htonl(INADDR_ANY);
    if (family == AF_INET6) reinterpret_cast<sockaddr_in6 *>(&a)->sin6_addr = in6addr_any;
    set_port(&a, port);
    if (bind(fd, reinterpret_cast<sockaddr *>(&a), address_len(a)) != 0 || listen(fd, backlog) != 0) {
      e = errno;
      close(fd);
      // Address in use is final; an unsupported family falls back to IPv4.
      if (e == EADDRINUSE || e == EACCES) break;
      continue;
    }
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
    *port_out = a.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6 *>(&a)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in *>(&a)->sin_port);
    *fd_out = fd;
    return {};
  }
  return error(Code::comm_error, "tcp: cannot listen on port " + std::to_string(port) + ": " + errno_text(e));
}

/// One connect attempt, bounded by the deadline. Returns the socket, or -1 with *err set.
int connect_once(const sockaddr_storage &a, Clock::time_point deadline, int *err) {
  const int fd = socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  // Table entries of IPv4 peers seen by a dual-stack rank 0 are IPv4-mapped IPv6 addresses.
  int zero = 0;
  if (a.ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  if (connect(fd, reinterpret_cast<const sockaddr *>(&a), address_len(a)) != 0) {
    if (errno != EINPROGRESS) {
      *err = errno;
      close(fd);
      return -1;
    }
    pollfd p{fd, POLLOUT, 0};
    const int n = poll(&p, 1, remaining_ms(deadline));
    int so = 0;
    socklen_t len = sizeof so;
    if (n <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len) != 0 || so != 0) {
      *err = n == 0 ? ETIMEDOUT : so ? so : errno;
      close(fd);
      return -1;
    }
  }
  return fd;
}

/// Accepts one connection before the deadline; -1 when the deadline passed.
int accept_before(int listener, Clock::time_point deadline, sockaddr_storage *peer) {
  for (;;) {
    pollfd p{listener, POLLIN, 0};
    const int n = poll(&p, 1, remaining_ms(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    socklen_t len = sizeof *peer;
    const int fd = accept4(listener, reinterpret_cast<sockaddr *>(peer), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) return fd;
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) return -1;
  }
}

/// Reads or writes exactly `n` bytes of a non-blocking socket before the deadline (the rendezvous' small
/// messages; the data plane uses Link transfers). Returns 0, or an errno (ETIMEDOUT; EPIPE for a close).
int move_exact(int fd, uint8_t *p, size_t n, bool write, Clock::time_point deadline) {
  size_t done = 0;
  while (done < n) {
    const ssize_t k = write ? send(fd, p + done, n - done, MSG_NOSIGNAL) : recv(fd, p + done, n - done, 0);
    if (k > 0) {
      done += static_cast<size_t>(k);
      continue;
    }
    if (k == 0) return EPIPE;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    pollfd q{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    const int r = poll(&q, 1, remaining_ms(deadline));
    if (r == 0) return ETIMEDOUT;
  }
  return 0;
}

// --- reductions: acc = acc op x, element-wise, so that folding the members in group order gives
// (((c0 op c1) op c2) ...).
template <typename T>
void fold_plain(Reduction red, uint8_t *acc, const uint8_t *x, size_t n) {
  auto *a = reinterpret_cast<T *>(acc);
  const auto *b = reinterpret_cast<const T *>(x);
  for (size_t i = 0; i < n; ++i) {
    T u, v;
    std::memcpy(&u, a + i, sizeof(T));
    std::memcpy(&v, b + i, sizeof(T));
    if (red == Reduction::sum) {
      if constexpr (std::is_integral_v<T>) {
        // Two's complement wrap-around, as MPI's integer sums do, without signed overflow.
        using U = std::make_unsigned_t<T>;
        u = static_cast<T>(static_cast<U>(u) + static_cast<U>(v));
      } else {
        u = u + v;
      }
    } else if (red == Reduction::max ? v > u : v < u) {
      u = v;
    }
    std::memcpy(a + i, &u, sizeof(T));
  }
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void fold_half(Reduction red, uint8_t *acc, const uint8_t *x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t u, v;
    std::memcpy(&u, acc + 2 * i, 2);
    std::memcpy(&v, x + 2 * i, 2);
    const float fu = Load(u), fv = Load(v);
    // Max and min compare the decoded values (the bit patterns do not order negatives) and keep the bits.
    if (red == Reduction::sum)
      u = Store(fu + fv);
    else if (red == Reduction::max ? fv > fu : fv < fu)
      u = v;
    std::memcpy(acc + 2 * i, &u, 2);
  }
}

using FoldFn = void (*)(Reduction, uint8_t *, const uint8_t *, size_t);

Status fold_of(DType d, FoldFn *out) {
  switch (d) {
    case DType::f32: *out = &fold_plain<float>; return {};
    case DType::i64: *out = &fold_plain<int64_t>; return {};
    case DType::i32: *out = &fold_plain<int32_t>; return {};
    case DType::bf16: *out = &fold_half<zk::bf16_to_f32, zk::f32_to_bf16>; return {};
    case DType::f16: *out = &fold_half<zk::f16_to_f32, zk::f32_to_f16>; return {};
    default: return error(Code::comm_error, std::string("no reduction for dtype ") + dtype_name(d));
  }
}

/// One message to send to, or receive from, a peer (a world rank) in one exchange.
struct Xfer {
  int peer = 0;
  bool send = false;
  const uint8_t *src = nullptr;  // send
  uint8_t *dst = nullptr;        // receive
  size_t bytes = 0;
  uint8_t header[kHeaderBytes] = {};
  size_t header_done = 0;
  size_t done = 0;
  bool finished() const { return header_done == kHeaderBytes && done == bytes; }
};

class TcpCommunicator final : public Communicator {
 public:
  TcpCommunicator(const TcpConfig &c) : cfg_(c), rank_(c.rank), world_(c.world), fd_(c.world, -1) {}
  ~TcpCommunicator() override {
    for (int &fd : fd_)
      if (fd >= 0) close(fd);
  }

  Status connect_all();

  const char *name() const override { return "tcp"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  Status set_mesh(int tp, int dp) override {
    ZRT_RETURN_IF_ERROR(check_mesh(tp, dp, world_));
    tp_size_ = tp;
    dp_size_ = dp;
    return {};
  }

  int group_size(Axis a) const override { return a == Axis::world ? world_ : mesh_group_size(a, tp_size_, dp_size_); }
  int group_rank(Axis a) const override { return mesh_group_rank(a, rank_, tp_size_); }

  Status all_reduce(Axis axis, const void *send, void *recv, size_t count, DType dtype, void *,
                    Reduction red) override {
    ZRT_RETURN_IF_ERROR(check_order(CollectiveOp::all_reduce, axis, count * dtype_size(dtype), dtype, -1));
    FoldFn fold;
    ZRT_RETURN_IF_ERROR(fold_of(dtype, &fold));
    ZRT_RETURN_IF_ERROR(usable());
    const uint8_t kind = static_cast<uint8_t>(CollectiveOp::all_reduce);
    const std::vector<int> m = members(axis);
    const int g = static_cast<int>(m.size()), me = group_rank(axis);
    const size_t es = dtype_size(dtype);
    const auto *in = static_cast<const uint8_t *>(send);
    auto *out = static_cast<uint8_t *>(recv);
    // Segment k is elements [count * k / g, count * (k + 1) / g): near-equal, some empty when count < g.
    auto seg = [&](int k) { return count * static_cast<size_t>(k) / static_cast<size_t>(g); };
    const size_t mine = (seg(me + 1) - seg(me)) * es;
    // Phase 1 (reduce-scatter): segment j of this rank's input to member j; every member's segment `me`
    // into slot k of the scratch.
    scratch_.resize(static_cast<size_t>(g + 1) * mine);
    std::vector<Xfer> xs;
    for (int k = 0; k < g; ++k) {
      if (k == me) continue;
      xs.push_back(send_to(m[k], in + seg(k) * es, (seg(k + 1) - seg(k)) * es, kind));
      xs.push_back(recv_from(m[k], scratch_.data() + static_cast<size_t>(k) * mine, mine, kind));
    }
    if (mine) std::memcpy(scratch_.data() + static_cast<size_t>(me) * mine, in + seg(me) * es, mine);
    ZRT_RETURN_IF_ERROR(exchange(&xs, kind, axis));
    uint8_t *acc = scratch_.data() + static_cast<size_t>(g) * mine;
    if (mine) std::memcpy(acc, scratch_.data(), mine);
    for (int k = 1; k < g; ++k) fold(red, acc, scratch_.data() + static_cast<size_t>(k) * mine, mine / es);
    // Phase 2 (all-gather of the reduced segments). The input is no longer read, so recv may equal send.
    xs.clear();
    for (int k = 0; k < g; ++k) {
      if (k == me) continue;
      xs.push_back(send_to(m[k], acc, mine, kind));
      xs.push_back(recv_from(m[k], out + seg(k) * es, (seg(k + 1) - seg(k)) * es, kind));
    }
    ZRT_RETURN_IF_ERROR(exchange(&xs, kind, axis));
    if (mine) std::memcpy(out + seg(me) * es, acc, mine);
    return {};
  }

  Status all_gather(Axis axis, const void *send, void *recv, size_t bytes, void *) override {
    ZRT_RETURN_IF_ERROR(check_order(CollectiveOp::all_gather, axis, bytes, DType::bool8, -1));
    ZRT_RETURN_IF_ERROR(usable());
    const uint8_t kind = static_cast<uint8_t>(CollectiveOp::all_gather);
    const std::vector<int> m = members(axis);
    const int g = static_cast<int>(m.size()), me = group_rank(axis);
    auto *out = static_cast<uint8_t *>(recv);
    // The send block may lie inside recv (in place): keep a copy, since receiving overwrites recv.
    scratch_.assign(static_cast<const uint8_t *>(send), static_cast<const uint8_t *>(send) + bytes);
    std::vector<Xfer> xs;
    for (int k = 0; k < g; ++k) {
      if (k == me) continue;
      xs.push_back(send_to(m[k], scratch_.data(), bytes, kind));
      xs.push_back(recv_from(m[k], out + static_cast<size_t>(k) * bytes, bytes, kind));
    }
    ZRT_RETURN_IF_ERROR(exchange(&xs, kind, axis));
    if (bytes) std::memcpy(out + static_cast<size_t>(me) * bytes, scratch_.data(), bytes);
    return {};
  }

  Status reduce_scatter(Axis axis, const void *send, void *recv, size_t count, DType dtype, void *,
                        Reduction red) override {
    ZRT_RETURN_IF_ERROR(check_order(CollectiveOp::reduce_scatter, axis, count * dtype_size(dtype) * group_size(axis),
                                    dtype, -1));
    FoldFn fold;
    ZRT_RETURN_IF_ERROR(fold_of(dtype, &fold));
    ZRT_RETURN_IF_ERROR(usable());
    const uint8_t kind = static_cast<uint8_t>(CollectiveOp::reduce_scatter);
    const std::vector<int> m = members(axis);
    const int g = static_cast<int>(m.size()), me = group_rank(axis);
    const size_t block = count * dtype_size(dtype);
    const auto *in = static_cast<const uint8_t *>(send);
    scratch_.resize(static_cast<size_t>(g + 1) * block);
    std::vector<Xfer> xs;
    for (int k = 0; k < g; ++k) {
      if (k == me) continue;
      xs.push_back(send_to(m[k], in + static_cast<size_t>(k) * block, block, kind));
      xs.push_back(recv_from(m[k], scratch_.data() + static_cast<size_t>(k) * block, block, kind));
    }
    if (block) std::memcpy(scratch_.data() + static_cast<size_t>(me) * block, in + static_cast<size_t>(me) * block, block);
    ZRT_RETURN_IF_ERROR(exchange(&xs, kind, axis));
    // Folded in scratch and copied last: recv may overlap send, which the sends above read until done.
    uint8_t *acc = scratch_.data() + static_cast<size_t>(g) * block;
    if (block) std::memcpy(acc, scratch_.data(), block);
    for (int k = 1; k < g; ++k) fold(red, acc, scratch_.data() + static_cast<size_t>(k) * block, count);
    if (block) std::memcpy(recv, acc, block);
    return {};
  }

  Status broadcast(Axis axis, void *buf, size_t bytes, int root, void *) override {
    ZRT_RETURN_IF_ERROR(check_order(CollectiveOp::broadcast, axis, bytes, DType::bool8, root));
    ZRT_RETURN_IF_ERROR(usable());
    const std::vector<int> m = members(axis);
    if (root < 0 || root >= static_cast<int>(m.size()))
      return error(Code::comm_error, "broadcast: root " + std::to_string(root) + " is not a member of the " +
                                         axis_name(axis) + " group of " + std::to_string(m.size()));
    return bcast(m, group_rank(axis), static_cast<uint8_t *>(buf), bytes, root,
                 static_cast<uint8_t>(CollectiveOp::broadcast), axis);
  }

  Status barrier(Axis axis) override {
    ZRT_RETURN_IF_ERROR(check_order(CollectiveOp::barrier, axis, 0, DType::bool8, -1));
    ZRT_RETURN_IF_ERROR(usable());
    return barrier_over(members(axis), group_rank(axis), static_cast<uint8_t>(CollectiveOp::barrier), axis);
  }

  Status agree(const uint64_t *in, uint64_t *mn, uint64_t *mx, int n) override {
    ZRT_RETURN_IF_ERROR(usable());
    const size_t bytes = static_cast<size_t>(n) * sizeof(uint64_t);
    std::vector<uint64_t> all(static_cast<size_t>(world_) * static_cast<size_t>(n));
    std::vector<Xfer> xs;
    for (int r = 0; r < world_; ++r) {
      if (r == rank_) continue;
      xs.push_back(send_to(r, reinterpret_cast<const uint8_t *>(in), bytes, kAgree));
      xs.push_back(recv_from(r, reinterpret_cast<uint8_t *>(all.data() + static_cast<size_t>(r) * n), bytes, kAgree));
    }
    if (bytes) std::memcpy(all.data() + static_cast<size_t>(rank_) * n, in, bytes);
    ZRT_RETURN_IF_ERROR(exchange(&xs, kAgree, Axis::world));
    for (int i = 0; i < n; ++i) {
      uint64_t lo = all[static_cast<size_t>(i)], hi = lo;
      for (int r = 1; r < world_; ++r) {
        const uint64_t v = all[static_cast<size_t>(r) * n + i];
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      mn[i] = lo;
      mx[i] = hi;
    }
    return {};
  }

  Status broadcast_host(void *buf, size_t bytes, int root) override {
    ZRT_RETURN_IF_ERROR(usable());
    if (root < 0 || root >= world_)
      return error(Code::comm_error, "broadcast_host: root " + std::to_string(root) + " is not a rank of the " +
                                         std::to_string(world_) + " of the job");
    std::vector<int> all(static_cast<size_t>(world_));
    for (int r = 0; r < world_; ++r) all[static_cast<size_t>(r)] = r;
    return bcast(all, rank_, static_cast<uint8_t *>(buf), bytes, root, kBroadcastHost, Axis::world);
  }

  Status gather_host(const void *send, void *recv, const size_t *counts, int root) override {
    ZRT_RETURN_IF_ERROR(usable());
    if (root < 0 || root >= world_)
      return error(Code::comm_error, "gather_host: root " + std::to_string(root) + " is not a rank of the " +
                                         std::to_string(world_) + " of the job");
    std::vector<Xfer> xs;
    if (rank_ == root) {
      size_t at = 0;
      for (int r = 0; r < world_; ++r) {
        auto *dst = static_cast<uint8_t *>(recv) + at;
        if (r == rank_) {
          if (counts[r]) std::memmove(dst, send, counts[r]);
        } else {
          xs.push_back(recv_from(r, dst, counts[r], kGatherHost));
        }
        at += counts[r];
      }
    } else {
      xs.push_back(send_to(root, static_cast<const uint8_t *>(send), counts[rank_], kGatherHost));
    }
    return exchange(&xs, kGatherHost, Axis::world);
  }

  void abort(int code) override {
    // Closing every link makes each peer's next (or current) wait fail at once, naming this rank.
    for (int &fd : fd_)
      if (fd >= 0) shutdown(fd, SHUT_RDWR);
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(code);
  }

 private:
  /// The world ranks of this rank's group over `a`, in group order (communicator.h).
  std::vector<int> members(Axis a) const {
    std::vector<int> m;
    switch (a) {
      case Axis::tp:
        for (int k = 0; k < tp_size_; ++k) m.push_back(rank_ / tp_size_ * tp_size_ + k);
        break;
      case Axis::dp:
        for (int k = 0; k < dp_size_; ++k) m.push_back(rank_ % tp_size_ + k * tp_size_);
        break;
      case Axis::world:
        for (int k = 0; k < world_; ++k) m.push_back(k);
        break;
      default: m.push_back(rank_);
    }
    return m;
  }

  Status usable() const { return broken_; }

  Xfer send_to(int peer, const uint8_t *src, size_t bytes, uint8_t kind) const {
    Xfer x;
    x.peer = peer;
    x.send = true;
    x.src = src;
    x.bytes = bytes;
    put32(x.header, kMagic);
    x.header[4] = kind;
    put64(x.header + 8, bytes);
    return x;
  }
  Xfer recv_from(int peer, uint8_t *dst, size_t bytes, uint8_t kind) const {
    Xfer x;
    x.peer = peer;
    x.dst = dst;
    x.bytes = bytes;
    x.header[4] = kind;  // what this rank expects; the received header replaces it
    return x;
  }

  Status bcast(const std::vector<int> &m, int me, uint8_t *buf, size_t bytes, int root, uint8_t kind, Axis axis) {
    std::vector<Xfer> xs;
    if (me == root) {
      for (size_t k = 0; k < m.size(); ++k)
        if (static_cast<int>(k) != me) xs.push_back(send_to(m[k], buf, bytes, kind));
    } else {
      xs.push_back(recv_from(m[static_cast<size_t>(root)], buf, bytes, kind));
    }
    return exchange(&xs, kind, axis);
  }

  Status barrier_over(const std::vector<int> &m, int me, uint8_t kind, Axis axis) {
    std::vector<Xfer> xs;
    for (size_t k = 0; k < m.size(); ++k) {
      if (static_cast<int>(k) == me) continue;
      xs.push_back(send_to(m[k], nullptr, 0, kind));
      xs.push_back(recv_from(m[k], nullptr, 0, kind));
    }
    return exchange(&xs, kind, axis);
  }

  /// Moves every transfer of one step to completion, or fails naming the peer. A failure leaves the
  /// links in an unknown state, so every later call returns the same error.
  Status exchange(std::vector<Xfer> *xs, uint8_t kind, Axis axis);
  Status progress(Xfer *x, uint8_t kind, Axis axis);
  Status fail(Status s) {
    broken_ = s;
    return s;
  }

  TcpConfig cfg_;
  int rank_, world_, tp_size_ = 1, dp_size_ = 1;
  std::vector<int> fd_;  // the link to each world rank; -1 for this rank
  std::vector<uint8_t> scratch_;
  Status broken_;
};

Status TcpCommunicator::progress(Xfer *x, uint8_t kind, Axis axis) {
  const int fd = fd_[static_cast<size_t>(x->peer)];
  auto closed = [&](int e) {
    std::string what = std::string(kind_name(kind));
    if (kind < kAgree) what += std::string(" over ") + axis_name(axis);
    return error(Code::comm_error,
                 "tcp: rank " + std::to_string(x->peer) + " closed its connection during " + what +
                     (e ? " (" + errno_text(e) + ")" : std::string()) + ": it exited or failed (see its own error)");
  };
  for (;;) {
    if (x->finished()) return {};
    ssize_t k;
    if (x->send) {
      iovec v[2];
      int nv = 0;
      if (x->header_done < kHeaderBytes) v[nv++] = {x->header + x->header_done, kHeaderBytes - x->header_done};
      if (x->done < x->bytes) v[nv++] = {const_cast<uint8_t *>(x->src) + x->done, x->bytes - x->done};
      msghdr mh{};
      mh.msg_iov = v;
      mh.msg_iovlen = static_cast<size_t>(nv);
      k = sendmsg(fd, &mh, MSG_NOSIGNAL);
      if (k > 0) {
        size_t n = static_cast<size_t>(k);
        const size_t h = std::min(n, kHeaderBytes - x->header_done);
        x->header_done += h;
        x->done += n - h;
        continue;
      }
    } else if (x->header_done < kHeaderBytes) {
      k = recv(fd, x->header + x->header_done, kHeaderBytes - x->header_done, 0);
      if (k > 0) {
        x->header_done += static_cast<size_t>(k);
        if (x->header_done == kHeaderBytes) {
          // The header says what the peer is doing; it must be the same collective with the same size.
          const uint8_t got = x->header[4];
          const uint64_t bytes = get64(x->header + 8);
          if (get32(x->header) != kMagic)
            return error(Code::comm_error, "tcp: rank " + std::to_string(x->peer) +
                                               " sent bytes that are no zplan message (the stream lost its framing)");
          if (got != kind || bytes != x->bytes)
            return error(Code::comm_error,
                         "tcp: rank " + std::to_string(x->peer) + " sent " + kind_name(got) + " data of " +
                             std::to_string(bytes) + " B where rank " + std::to_string(rank_) + " expects " +
                             kind_name(kind) + " data of " + std::to_string(x->bytes) +
                             " B: the ranks issue different collectives (run with ZRT_CHECK_COLLECTIVES=1 to "
                             "name them)");
        }
        continue;
      }
    } else {
      k = recv(fd, x->dst + x->done, x->bytes - x->done, 0);
      if (k > 0) {
        x->done += static_cast<size_t>(k);
        continue;
      }
    }
    if (k == 0) return closed(0);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {};
    return closed(errno);
  }
}

Status TcpCommunicator::exchange(std::vector<Xfer> *xs, uint8_t kind, Axis axis) {
  const Clock::time_point deadline = deadline_after(cfg_.timeout_s);
  std::vector<pollfd> pf;
  std::vector<int> peers;
  for (;;) {
    // For each peer, its first unfinished send and first unfinished receive move; later ones wait their turn,
    // so that messages on one link keep their order.
    pf.clear();
    peers.clear();
    for (Xfer &x : *xs) {
      if (x.finished()) continue;
      const short ev = x.send ? POLLOUT : POLLIN;
      size_t i = 0;
      while (i < peers.size() && peers[i] != x.peer) ++i;
      if (i == peers.size()) {
        peers.push_back(x.peer);
        pf.push_back(pollfd{fd_[static_cast<size_t>(x.peer)], 0, 0});
      }
      pf[i].events |= ev;
    }
    if (pf.empty()) return {};
    const int n = poll(pf.data(), pf.size(), remaining_ms(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(error(Code::comm_error, "tcp: poll(): " + errno_text(errno)));
    if (n == 0) {
      std::string who;
      for (size_t i = 0; i < peers.size(); ++i) who += (i ? ", " : "") + std::to_string(peers[i]);
      std::string what = kind_name(kind);
      if (kind < kAgree) what += std::string(" over ") + axis_name(axis);
      return fail(error(Code::comm_error, "tcp: rank " + std::to_string(rank_) + " timed out after " +
                                              seconds_text(cfg_.timeout_s) + " s in " + what + " waiting for rank" +
                                              (peers.size() > 1 ? "s " : " ") + who +
                                              " (ZRT_TCP_TIMEOUT_S; a peer may have stalled)"));
    }
    for (size_t i = 0; i < pf.size(); ++i) {
      if (!pf[i].revents) continue;
      bool did_send = false, did_recv = false;
      for (Xfer &x : *xs) {
        if (x.peer != peers[i] || x.finished()) continue;
        if (x.send ? did_send : did_recv) continue;
        (x.send ? did_send : did_recv) = true;
        const Status s = progress(&x, kind, axis);
        if (!s.ok()) return fail(s);
        // A finished transfer lets the next one on the same link start in this round.
        if (x.finished()) (x.send ? did_send : did_recv) = false;
      }
    }
  }
}

Status TcpCommunicator::connect_all() {
  const Clock::time_point deadline = deadline_after(cfg_.timeout_s);
  const std::string where = cfg_.master_addr + ":" + std::to_string(cfg_.master_port);
  const std::string window = seconds_text(cfg_.timeout_s) + " s (ZRT_TCP_TIMEOUT_S)";
  if (world_ == 1) return {};
  // Every address MASTER_ADDR resolves to, tried in order at each attempt.
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = AF_UNSPEC;
  const int gai = getaddrinfo(cfg_.master_addr.c_str(), std::to_string(cfg_.master_port).c_str(), &hints, &res);
  if (gai != 0 || !res)
    return error(Code::comm_error,
                 "tcp: cannot resolve MASTER_ADDR '" + cfg_.master_addr + "': " + std::string(gai_strerror(gai)));
  std::vector<sockaddr_storage> masters;
  for (addrinfo *a = res; a; a = a->ai_next) {
    sockaddr_storage m{};
    std::memcpy(&m, a->ai_addr, a->ai_addrlen);
    masters.push_back(m);
  }
  freeaddrinfo(res);
  const int n = world_;

  if (rank_ == 0) {
    int lfd = -1, port = 0;
    Status s = listen_on(cfg_.master_port, n + 16, &lfd, &port);
    if (!s.ok())
      return error(Code::comm_error, "tcp: rank 0 cannot hold the rendezvous at port " +
                                         std::to_string(cfg_.master_port) + " (MASTER_PORT): " + s.message());
    std::vector<sockaddr_storage> addr(static_cast<size_t>(n));
    std::vector<int> ports(static_cast<size_t>(n), 0);
    std::vector<int> pending;  // accepted connections whose announcement is unread or invalid
    std::string refusal;
    int joined = 1;
    while (joined < n && refusal.empty()) {
      sockaddr_storage peer{};
      const int fd = accept_before(lfd, deadline, &peer);
      if (fd < 0) break;
      // A rank sends its announcement as soon as it connects: a connection that stays silent for 10 s is not
      // one (a port probe), and must not hold up the others.
      uint8_t hello[20];
      const Clock::time_point hello_by = std::min(deadline, deadline_after(10.0));
      if (move_exact(fd, hello, sizeof hello, false, hello_by) != 0 ||
          std::memcmp(hello, kHelloMagic, sizeof kHelloMagic) != 0) {
        // Not a rank of a zplan job (a port probe, another program): ignore it.
        close(fd);
        continue;
      }
      const int r = static_cast<int>(get32(hello + 8)), w = static_cast<int>(get32(hello + 12));
      const int p = static_cast<int>(get32(hello + 16));
      if (w != n)
        refusal = "rank " + std::to_string(r) + " has WORLD_SIZE=" + std::to_string(w) + " but rank 0 has " +
                  std::to_string(n);
      else if (r <= 0 || r >= n)
        refusal = "a process announced rank " + std::to_string(r) + ", outside 1.." + std::to_string(n - 1);
      else if (fd_[static_cast<size_t>(r)] >= 0)
        refusal = "two processes announced rank " + std::to_string(r) + " (RANK must be unique)";
      if (!refusal.empty()) {
        pending.push_back(fd);
        break;
      }
      fd_[static_cast<size_t>(r)] = fd;
      addr[static_cast<size_t>(r)] = peer;
      set_port(&addr[static_cast<size_t>(r)], p);
      ports[static_cast<size_t>(r)] = p;
      ++joined;
    }
    close(lfd);
    if (refusal.empty() && joined < n) {
      std::string missing;
      for (int r = 1; r < n; ++r)
        if (fd_[static_cast<size_t>(r)] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      refusal = "rank" + std::string(n - joined > 1 ? "s " : " ") + missing + " did not connect to " + where +
                " within " + window;
    }
    // The table (or the refusal) goes to every connected rank: status, message, then per rank its family,
    // port and 16 address bytes.
    std::vector<uint8_t> table(8 + refusal.size() + static_cast<size_t>(n) * 24);
    put32(table.data(), refusal.empty() ? 0 : 1);
    put32(table.data() + 4, static_cast<uint32_t>(refusal.size()));
    std::memcpy(table.data() + 8, refusal.data(), refusal.size());
    for (int r = 0; r < n; ++r) {
      uint8_t *e = table.data() + 8 + refusal.size() + static_cast<size_t>(r) * 24;
      const sockaddr_storage &a = addr[static_cast<size_t>(r)];
      put32(e, a.ss_family == AF_INET6 ? 6 : 4);
      put32(e + 4, static_cast<uint32_t>(ports[static_cast<size_t>(r)]));
      if (a.ss_family == AF_INET6)
        std::memcpy(e + 8, &reinterpret_cast<const sockaddr_in6 *>(&a)->sin6_addr, 16);
      else
        std::memcpy(e + 8, &reinterpret_cast<const sockaddr_in *>(&a)->sin_addr, 4);
    }
    uint8_t len[8];
    put64(len, table.size());
    const Clock::time_point send_by = deadline_after(std::min(cfg_.timeout_s, 10.0));
    for (int fd : fd_)
      if (fd >= 0 && (move_exact(fd, len, 8, true, send_by) != 0 ||
                      move_exact(fd, table.data(), table.size(), true, send_by) != 0) &&
          refusal.empty())
        refusal = "a rank closed its connection during the rendezvous";
    for (int fd : pending) {
      move_exact(fd, len, 8, true, send_by);
      move_exact(fd, table.data(), table.size(), true, send_by);
      close(fd);
    }
    if (!refusal.empty()) return error(Code::comm_error, "tcp rendezvous at " + where + ": " + refusal);
  } else {
    // This rank's own listener first, so that the address rank 0 publishes is already accepting.
    int lfd = -1, lport = 0;
    ZRT_RETURN_IF_ERROR(listen_on(0, n + 16, &lfd, &lport));
    int fd = -1, last = 0;
    while (fd < 0) {
      for (const sockaddr_storage &m : masters)
        if (fd < 0) fd = connect_once(m, deadline, &last);
      if (fd >= 0 || Clock::now() >= deadline) break;
      // Rank 0 may not listen yet: try again shortly, until the window closes.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (fd < 0) {
      close(lfd);
      return error(Code::comm_error, "tcp: rank " + std::to_string(rank_) + " could not reach rank 0 at " + where +
                                         " (MASTER_ADDR:MASTER_PORT) within " + window + ": " + errno_text(last));
    }
    fd_[0] = fd;
    uint8_t hello[20];
    std::memcpy(hello, kHelloMagic, sizeof kHelloMagic);
    put32(hello + 8, static_cast<uint32_t>(rank_));
    put32(hello + 12, static_cast<uint32_t>(n));
    put32(hello + 16, static_cast<uint32_t>(lport));
    uint8_t len[8];
    int e = move_exact(fd, hello, sizeof hello, true, deadline);
    if (!e) e = move_exact(fd, len, 8, false, deadline);
    const uint64_t tlen = e ? 0 : get64(len);
    if (!e && (tlen < 8 || tlen > (1u << 20))) e = EPROTO;
    std::vector<uint8_t> table(static_cast<size_t>(tlen));
    if (!e) e = move_exact(fd, table.data(), table.size(), false, deadline);
    if (e) {
      close(lfd);
      return error(Code::comm_error, "tcp: rank " + std::to_string(rank_) + ": the rendezvous with rank 0 at " + where +
                                         " failed: " +
                                         (e == ETIMEDOUT ? "no answer within " + window
                                                         : e == EPIPE ? "rank 0 closed the connection"
                                                                      : errno_text(e)));
    }
    const uint32_t mlen = get32(table.data() + 4);
    if (get32(table.data()) != 0) {
      close(lfd);
      return error(Code::comm_error, "tcp rendezvous at " + where + ": rank 0 refused: " +
                                         std::string(reinterpret_cast<const char *>(table.data() + 8),
                                                     std::min<size_t>(mlen, table.size() - 8)));
    }
    if (table.size() != 8 + mlen + static_cast<size_t>(n) * 24) {
      close(lfd);
      return error(Code::comm_error, "tcp rendezvous at " + where + ": rank 0 sent a table of another world size");
    }
    auto entry = [&](int r) {
      const uint8_t *p = table.data() + 8 + mlen + static_cast<size_t>(r) * 24;
      sockaddr_storage a{};
      if (get32(p) == 6) {
        a.ss_family = AF_INET6;
        std::memcpy(&reinterpret_cast<sockaddr_in6 *>(&a)->sin6_addr, p + 8, 16);
      } else {
        a.ss_family = AF_INET;
        std::memcpy(&reinterpret_cast<sockaddr_in *>(&a)->sin_addr, p + 8, 4);
      }
      set_port(&a, static_cast<int>(get32(p + 4)));
      return a;
    };
    // The mesh: connect down to ranks 1..rank-1, accept from the ranks above.
    uint8_t me[12];
    std::memcpy(me, kHelloMagic, 8);
    put32(me + 8, static_cast<uint32_t>(rank_));
    for (int r = 1; r < rank_; ++r) {
      const sockaddr_storage a = entry(r);
      int err = 0;
      const int c = connect_once(a, deadline, &err);
      if (c < 0 || move_exact(c, me, sizeof me, true, deadline) != 0) {
        if (c >= 0) close(c);
        close(lfd);
        return error(Code::comm_error, "tcp: rank " + std::to_string(rank_) + " could not connect to rank " +
                                           std::to_string(r) + " at " + address_text(a) + ": " +
                                           errno_text(err ? err : EPIPE));
      }
      fd_[static_cast<size_t>(r)] = c;
    }
    for (int k = rank_ + 1; k < n; ++k) {
      sockaddr_storage peer{};
      const int c = accept_before(lfd, deadline, &peer);
      uint8_t them[12];
      if (c < 0 || move_exact(c, them, sizeof them, false, deadline) != 0 ||
          std::memcmp(them, kHelloMagic, 8) != 0) {
        if (c >= 0) close(c);
        std::string missing;
        for (int r = rank_ + 1; r < n; ++r)
          if (fd_[static_cast<size_t>(r)] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        close(lfd);
        return error(Code::comm_error, "tcp: rank " + std::to_string(rank_) + ": rank(s) " + missing +
                                           " did not connect within " + window);
      }
      const int r = static_cast<int>(get32(them + 8));
      if (r <= rank_ || r >= n || fd_[static_cast<size_t>(r)] >= 0) {
        close(c);
        close(lfd);
        return error(Code::comm_error, "tcp: rank " + std::to_string(rank_) + ": a peer announced rank " +
                                           std::to_string(r) + ", which is not one of the ranks above it");
      }
      fd_[static_cast<size_t>(r)] = c;
    }
    close(lfd);
  }
  for (int fd : fd_)
    if (fd >= 0) ZRT_RETURN_IF_ERROR(tune(fd));
  // Every link works before anyone starts: a barrier over the world.
  return barrier_over(members(Axis::world), rank_, kHello, Axis::world);
}

bool parse_int(const char *s, long lo, long hi, int *out) {
  if (!s || !*s) return false;
  char *end = nullptr;
  errno = 0;
  const long v = std::strtol(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

Status tcp_config_from_env(TcpConfig *out) {
  TcpConfig c;
  const char *hint = " (torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for every rank)";
  auto need = [&](const char *var) -> Status {
    if (!std::getenv(var)) return error(Code::invalid_argument, std::string(var) + " is not set" + hint);
    return {};
  };
  for (const char *v : {"WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"}) ZRT_RETURN_IF_ERROR(need(v));
  const char *ws = std::getenv("WORLD_SIZE"), *rk = std::getenv("RANK"), *port = std::getenv("MASTER_PORT");
  if (!parse_int(ws, 1, 1 << 20, &c.world))
    return error(Code::invalid_argument, std::string("WORLD_SIZE='") + ws + "' is not a positive integer");
  if (!parse_int(rk, 0, c.world - 1, &c.rank))
    return error(Code::invalid_argument, std::string("RANK='") + rk + "' is not a rank of WORLD_SIZE=" + ws);
  c.master_addr = std::getenv("MASTER_ADDR");
  if (c.master_addr.empty()) return error(Code::invalid_argument, std::string("MASTER_ADDR is empty") + hint);
  if (!parse_int(port, 1, 65535, &c.master_port))
    return error(Code::invalid_argument, std::string("MASTER_PORT='") + port + "' is not a port (1-65535)");
  // torchrun's agent may hold a TCP store at MASTER_PORT itself (its workers then connect to it as clients):
  // the rendezvous moves to the next port, the same rule on every rank.
  const char *agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  if (agent && (std::strcmp(agent, "True") == 0 || std::strcmp(agent, "true") == 0 || std::strcmp(agent, "1") == 0)) {
    if (c.master_port == 65535)
      return error(Code::invalid_argument, "MASTER_PORT=65535 is held by torchrun's agent and leaves no next port: "
                                           "set ZRT_TCP_PORT");
    c.master_port += 1;
  }
  if (const char *p = std::getenv("ZRT_TCP_PORT")) {
    if (!parse_int(p, 1, 65535, &c.master_port))
      return error(Code::invalid_argument, std::string("ZRT_TCP_PORT='") + p + "' is not a port (1-65535)");
  }
  if (const char *t = std::getenv("ZRT_TCP_TIMEOUT_S")) {
    char *end = nullptr;
    const double v = std::strtod(t, &end);
    if (end == t || *end || !(v > 0) || !std::isfinite(v))
      return error(Code::invalid_argument, std::string("ZRT_TCP_TIMEOUT_S='") + t + "' is not a positive number of seconds");
    c.timeout_s = v;
  }
  *out = c;
  return {};
}

Status make_tcp_communicator(const TcpConfig &config, std::unique_ptr<Communicator> *out) {
  if (config.world < 1 || config.rank < 0 || config.rank >= config.world)
    return error(Code::invalid_argument, "tcp: rank " + std::to_string(config.rank) + " is not a rank of a world of " +
                                             std::to_string(config.world));
  if (config.world > 1 && (config.master_port < 1 || config.master_port > 65535))
    return error(Code::invalid_argument, "tcp: port " + std::to_string(config.master_port) + " is not a port");
  if (!(config.timeout_s > 0)) return error(Code::invalid_argument, "tcp: the timeout must be positive");
  std::unique_ptr<TcpCommunicator> c(new TcpCommunicator(config));
  ZRT_RETURN_IF_ERROR(c->connect_all());
  c->set_check_collectives(check_collectives_from_env());
  *out = std::move(c);
  return {};
}

}  // namespace zrt
