// transport.cc: completion queues, completion channels, queue pairs (RC, UC,
// UD), shared receive queues and address handles, between processes on one
// machine.
//
// The fabric. Every device of every process is one port with its own LID,
// held by an flock on SOFTVERBS_FABRIC_DIR/lid-<LID> (default $XDG_RUNTIME_DIR/softverbs-fabric,
// else /tmp/softverbs-fabric-<uid>); the lock dies with the process, so a LID
// is free again once its owner is gone. Every QP binds a unix datagram socket
// SOFTVERBS_FABRIC_DIR/<LID>-<QPN> (hex, 4 and 6 digits); a peer's packets are
// datagrams sent to the path named by the destination LID and QPN. Messages
// travel in fragments of at most kFragment bytes.
//
// The NIC. Each device context runs a progress thread once it has a QP: it
// receives packets, executes them as a responder (rkey checked like a NIC
// checks it, data moved through the pages pinned at registration by
// MrCopyLocked), handles ACK/NAK/read responses as a requester, and fires
// retransmission and RNR timers. RC requesters keep one packet in flight per
// QP (go-back-N with a window of one): every packet is acknowledged, a
// duplicate (PSN = expected - 1) is re-acknowledged without being executed
// again, any other PSN is dropped. UC and UD send without acknowledgement; a
// UC or UD message that finds no receive WQE is dropped. Like InfiniBand's
// credit-based link flow control, the fabric does not drop a UC or UD packet
// for congestion: when a peer process's socket queue is full, the sender
// waits for room, for at most kHeadOfQueueLifetime (a switch's limit on a
// blocked packet), then the packet is lost. RC packets are never held back
// (they are retransmitted), nor packets between QPs of one process (whose
// receiver needs the lock the sender holds).
//
// Locking: every object here is guarded by registry().mu, like PDs and MRs;
// the progress thread takes it per batch of packets. Nothing blocks while it
// is held (sockets and the channel pipe are non-blocking), except the
// io_uring copies of PinTable, which the kernel completes at once, and a UC
// or UD sender waiting (bounded) for room at another process's socket.
//
// Errors: failed WQEs complete with the status hardware reports and move the
// QP to the error state, which flushes every other WQE (IBV_WC_WR_FLUSH_ERR).
#include <endian.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tests/softverbs/registry.h"

namespace softverbs {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kFragment = 64 * 1024;  // payload bytes per packet
constexpr uint32_t kPsnMask = 0xffffff;
constexpr uint32_t kMagic = 0x53565031;  // "SVP1"
constexpr uint32_t kMaxWr = 16384;
constexpr uint32_t kMaxSge = 32;
constexpr uint32_t kMaxInline = 1024;
constexpr int kMaxCqe = 1 << 20;
constexpr uint64_t kMaxMessage = 1ULL << 31;  // port max_msg_sz
constexpr size_t kGrhBytes = 40;
constexpr uint32_t kUdMtu = 4096;  // the port's active MTU: UD messages fit one packet
// How long a UC or UD packet may wait for room at a peer's full socket queue.
constexpr auto kHeadOfQueueLifetime = std::chrono::milliseconds(500);
// The local ACK timeout never goes below this: the responder is a thread of
// another process that the scheduler (or a sanitizer) may stall, and only a
// retry count exhausted by real silence should fail a WQE.
constexpr auto kMinAckTimeout = std::chrono::milliseconds(250);
// NAK status that asks the requester to retry later (receiver not ready).
constexpr uint32_t kRnrNak = 0xffff;

enum Kind : uint8_t { kSend = 1, kWrite, kReadRequest, kReadResponse, kAck, kNak };
enum Flags : uint8_t { kFirst = 1, kLast = 2, kImm = 4, kSolicited = 8, kGlobal = 16 };

struct PacketHeader {
  uint32_t magic;
  uint8_t kind;
  uint8_t flags;
  uint16_t src_lid;
  uint32_t src_qpn;
  uint32_t dst_qpn;
  uint32_t psn;
  uint32_t imm;  // as posted (network order)
  uint32_t rkey;
  uint32_t status;  // kNak: the ibv_wc_status for the requester, or kRnrNak
  uint32_t qkey;    // UD
  uint32_t rnr_timer;
  uint32_t length;       // payload bytes in this packet (kReadRequest: bytes asked)
  uint64_t remote_addr;  // kWrite / kReadRequest: where this packet's bytes go / come from
  uint64_t total;        // the message's length
  uint64_t offset;       // this packet's offset within the message
  uint8_t sgid[16];      // UD with a GRH: the sender's GID
};

// The largest datagram: a header and a full fragment.
constexpr size_t kPacketBytes = sizeof(PacketHeader) + kFragment;

// The RNR timer encodings of the InfiniBand specification (table 45), in µs.
constexpr uint32_t kRnrMicros[32] = {655360, 10,    20,    30,     40,     60,     80,     120,
                                     160,    240,   320,   480,    640,    960,    1280,   1920,
                                     2560,   3840,  5120,  7680,   10240,  15360,  20480,  30720,
                                     40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};

struct Channel {
  ibv_comp_channel ch;  // first: the caller's pointer
  int write_fd = -1;    // the pipe's write end; ch.fd is its read end
};

struct Cq {
  ibv_cq cq;  // first
  Channel* channel = nullptr;
  std::deque<ibv_wc> entries;
  size_t capacity = 0;
  bool overrun = false;
  bool armed = false;
  bool armed_solicited = false;
  uint32_t events_delivered = 0;  // read by ibv_get_cq_event
  size_t qps = 0;                 // QPs that complete into it
  // entries.size(), readable without the lock: an empty poll (the busy loop
  // of every verbs program) must not contend with the progress thread. A
  // destroyed CQ is never freed (Queues::graveyard), so the read stays safe.
  std::atomic<size_t> count{0};
  std::atomic<bool> alive{true};
};

struct RecvWqe {
  uint64_t wr_id = 0;
  std::vector<ibv_sge> sges;
};

struct Srq {
  ibv_srq srq;  // first
  Pd* pd = nullptr;
  std::deque<RecvWqe> wqes;
  uint32_t max_wr = 0, max_sge = 0, limit = 0;
  size_t qps = 0;
};

struct Ah {
  ibv_ah ah;  // first
  Pd* pd = nullptr;
  ibv_ah_attr attr{};
};

struct SendWqe {
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  unsigned flags = 0;
  std::vector<ibv_sge> sges;
  bool is_inline = false;
  std::vector<char> inline_data;
  uint32_t imm = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  // UD
  uint16_t dlid = 0;
  bool global = false;
  uint32_t remote_qpn = 0, remote_qkey = 0;
};

struct Qp {
  ibv_qp_ex qpx;  // first: qpx.qp_base is the caller's ibv_qp
  Context* ctx = nullptr;
  Pd* pd = nullptr;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Srq* srq = nullptr;
  ibv_qp_cap cap{};
  bool sig_all = false;
  bool ex_api = false;  // created with send_ops_flags: ibv_qp_to_qp_ex works
  int sock = -1;
  std::string path;
  ibv_qp_attr attr{};  // the attributes ibv_query_qp reports
  std::deque<SendWqe> sq;
  std::deque<RecvWqe> rq;
  // Requester (RC): the head of sq is in flight while busy.
  bool busy = false;
  uint64_t acked = 0;  // bytes of the head WQE acknowledged
  uint64_t total = 0;  // its length
  uint32_t psn = 0;    // next PSN to send / the in-flight packet's
  uint32_t retries = 0, rnr_retries = 0;
  bool rnr_wait = false;  // deadline is an RNR back-off, not an ACK timeout
  Clock::time_point deadline;
  // Responder.
  uint32_t epsn = 0;
  bool in_message = false;    // a SEND's later fragments are expected
  bool drop_message = false;  // UC: the current message found no WQE
  RecvWqe cur;                // the receive WQE the current SEND fills
  // ibv_wr_* batch (ibv_qp_ex): built between wr_start and wr_complete.
  std::vector<SendWqe> batch;
  int batch_error = 0;
};

}  // namespace

// A packet taken off a QP's socket but not handled yet.
struct StashedPacket {
  uint32_t qpn;
  std::vector<char> bytes;
};

struct Transport {
  int epfd = -1;
  int wake_fd = -1;  // eventfd: stop the thread, or handle the stash
  std::thread thread;
  bool started = false;
  bool stop = false;
  // Packets a sender waiting for room at a peer took off this context's
  // sockets (so the peer, maybe waiting on us, gets room too), in arrival
  // order per socket; the progress thread handles them before reading the
  // sockets again.
  std::deque<StashedPacket> stash;
};

namespace {

// Objects of this file, guarded by registry().mu.
struct Queues {
  std::unordered_map<ibv_comp_channel*, Channel*> channels;
  std::unordered_map<ibv_cq*, Cq*> cqs;
  std::unordered_map<ibv_qp*, Qp*> qps;
  std::unordered_map<uint32_t, Qp*> by_qpn;
  std::unordered_map<ibv_srq*, Srq*> srqs;
  std::unordered_map<ibv_ah*, Ah*> ahs;
  std::vector<Cq*> graveyard;  // destroyed CQs, kept for PollCq's lock-free check
  uint32_t next_qpn = 0x11;
};

Queues& queues() {
  static Queues* q = new Queues;
  return *q;
}

// ---- The fabric directory and this process's LIDs (one per device) ----

struct Port {
  std::string dir;
  uint16_t lid = 0;
  pid_t pid = 0;  // the process holding the LID's lock
};

std::string FabricDir() {
  if (const char* d = getenv("SOFTVERBS_FABRIC_DIR"); d != nullptr && *d != '\0') return d;
  if (const char* x = getenv("XDG_RUNTIME_DIR"); x != nullptr && *x != '\0') {
    return std::string(x) + "/softverbs-fabric";
  }
  return "/tmp/softverbs-fabric-" + std::to_string(getuid());
}

// Takes a free LID: the first lid-<n> file in the fabric directory this
// process can flock. The descriptor stays open, so the lock lives as long as
// the process (a forked child shares it, and takes a LID of its own).
Port AcquirePort() {
  Port p;
  p.pid = getpid();
  p.dir = FabricDir();
  if (mkdir(p.dir.c_str(), 0700) != 0 && errno != EEXIST) {
    fprintf(stderr, "softverbs: cannot create SOFTVERBS_FABRIC_DIR %s: %s\n", p.dir.c_str(),
            strerror(errno));
    return p;
  }
  // Unicast LIDs are 1..0xbfff; start from the pid to avoid contention.
  const unsigned first = static_cast<unsigned>(p.pid) % 0xbfff;
  for (unsigned i = 0; i < 0xbfff; ++i) {
    const uint16_t lid = static_cast<uint16_t>((first + i) % 0xbfff + 1);
    const std::string lock = p.dir + "/lid-" + std::to_string(lid);
    int fd = open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      fprintf(stderr, "softverbs: cannot open %s: %s\n", lock.c_str(), strerror(errno));
      return p;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      p.lid = lid;
      return p;
    }
    close(fd);
  }
  fprintf(stderr, "softverbs: no free LID in %s\n", p.dir.c_str());
  return p;
}

// Guarded by registry().port_mu; an entry whose pid is not ours (never
// taken, or inherited through fork()) is taken afresh at its first use.
Port ports[kMaxDevices];

Port PortOf(unsigned device) {
  std::lock_guard<std::mutex> lock(registry().port_mu);
  Port& port = ports[device];
  if (port.pid != getpid()) port = AcquirePort();
  return port;
}

// Whether `lid` is the port of one of this process's devices.
bool IsLocalLid(uint16_t lid) {
  if (lid == 0) return false;
  std::lock_guard<std::mutex> lock(registry().port_mu);
  const pid_t self = getpid();
  for (const Port& port : ports) {
    if (port.pid == self && port.lid == lid) return true;
  }
  return false;
}

// The socket of QP `qpn` at `lid`, in the fabric directory of `port` (the
// sender's or binder's own port).
std::string QpPath(const Port& port, uint16_t lid, uint32_t qpn) {
  char name[32];
  snprintf(name, sizeof name, "/%04x-%06x", lid, qpn);
  return port.dir + name;
}

// ---- Completions ----

void NotifyLocked(Cq* cq) {
  cq->armed = cq->armed_solicited = false;
  Cq* self = cq;
  // The pipe is non-blocking and holds thousands of events; at most one per
  // arming is ever written.
  if (write(cq->channel->write_fd, &self, sizeof self) != sizeof self) {
    fprintf(stderr, "softverbs: completion event lost: %s\n", strerror(errno));
  }
}

void PushLocked(Cq* cq, const ibv_wc& wc, bool solicited) {
  if (cq->entries.size() >= cq->capacity) {
    cq->overrun = true;  // the CQE is lost; ibv_poll_cq fails from now on
    return;
  }
  cq->entries.push_back(wc);
  cq->count.store(cq->entries.size(), std::memory_order_release);
  if (cq->channel != nullptr &&
      (cq->armed || (cq->armed_solicited && (solicited || wc.status != IBV_WC_SUCCESS)))) {
    NotifyLocked(cq);
  }
}

ibv_wc BaseWc(const Qp* qp, uint64_t wr_id, ibv_wc_status status) {
  ibv_wc wc;
  memset(&wc, 0, sizeof wc);
  wc.wr_id = wr_id;
  wc.status = status;
  wc.qp_num = qp->qpx.qp_base.qp_num;
  return wc;
}

ibv_wc_opcode SendWcOpcode(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
      return IBV_WC_RDMA_READ;
    default:
      return IBV_WC_SEND;
  }
}

void CompleteSendLocked(Qp* qp, const SendWqe& w, ibv_wc_status status, uint64_t len) {
  if (status == IBV_WC_SUCCESS && !qp->sig_all && !(w.flags & IBV_SEND_SIGNALED)) return;
  ibv_wc wc = BaseWc(qp, w.wr_id, status);
  if (status == IBV_WC_SUCCESS) {
    wc.opcode = SendWcOpcode(w.opcode);
    if (w.opcode == IBV_WR_RDMA_READ) wc.byte_len = static_cast<uint32_t>(len);
  }
  PushLocked(qp->send_cq, wc, false);
}

void CompleteRecvLocked(Qp* qp, uint64_t wr_id, ibv_wc_status status) {
  PushLocked(qp->recv_cq, BaseWc(qp, wr_id, status), false);
}

void SetStateLocked(Qp* qp, ibv_qp_state s) {
  qp->attr.qp_state = s;
  qp->attr.cur_qp_state = s;
  qp->qpx.qp_base.state = s;
}

// The error state: every outstanding WQE completes with IBV_WC_WR_FLUSH_ERR.
void FlushLocked(Qp* qp) {
  for (const SendWqe& w : qp->sq) {
    PushLocked(qp->send_cq, BaseWc(qp, w.wr_id, IBV_WC_WR_FLUSH_ERR), false);
  }
  qp->sq.clear();
  qp->busy = false;
  if (qp->in_message) CompleteRecvLocked(qp, qp->cur.wr_id, IBV_WC_WR_FLUSH_ERR);
  qp->in_message = false;
  for (const RecvWqe& w : qp->rq) CompleteRecvLocked(qp, w.wr_id, IBV_WC_WR_FLUSH_ERR);
  qp->rq.clear();
}

void EnterErrorLocked(Qp* qp) {
  SetStateLocked(qp, IBV_QPS_ERR);
  FlushLocked(qp);
}

// The requester's head WQE failed with `status`: it completes with it (always
// signalled) and the QP enters the error state.
void FailHeadLocked(Qp* qp, ibv_wc_status status) {
  if (!qp->sq.empty()) {
    PushLocked(qp->send_cq, BaseWc(qp, qp->sq.front().wr_id, status), false);
    qp->sq.pop_front();
  }
  qp->busy = false;
  EnterErrorLocked(qp);
}

// ---- Local memory through lkeys ----

uint64_t SgeTotal(const std::vector<ibv_sge>& sges) {
  uint64_t total = 0;
  for (const ibv_sge& s : sges) total += s.length;
  return total;
}

// The NIC's lkey check of every SGE: MR alive, of the QP's PD, the bytes
// inside it, LOCAL_WRITE where the device writes. IBV_WC_SUCCESS or
// IBV_WC_LOC_PROT_ERR.
int CheckSgesLocked(Registry& r, const Pd* pd, const std::vector<ibv_sge>& sges, bool write) {
  for (const ibv_sge& s : sges) {
    if (s.length == 0) continue;
    const Mr* m = r.MrByKeyLocked(pd->ctx->device, s.lkey);
    if (m == nullptr) return IBV_WC_LOC_PROT_ERR;
    if (m->pd != pd) return IBV_WC_LOC_PROT_ERR;
    if (write && !(m->access & IBV_ACCESS_LOCAL_WRITE)) return IBV_WC_LOC_PROT_ERR;
    if (s.addr + s.length < s.addr || s.addr < m->iova ||
        s.addr + s.length - m->iova > m->mr.length) {
      return IBV_WC_LOC_PROT_ERR;
    }
  }
  return IBV_WC_SUCCESS;
}

// Moves len bytes between buf and the message described by sges, starting
// `offset` bytes into it (checked first as CheckSgesLocked does). to_memory:
// buf -> the SGEs' memory. IBV_WC_SUCCESS or IBV_WC_LOC_PROT_ERR.
int SgeCopyLocked(Registry& r, const Pd* pd, const std::vector<ibv_sge>& sges, uint64_t offset,
                  char* buf, size_t len, bool to_memory) {
  if (CheckSgesLocked(r, pd, sges, to_memory) != IBV_WC_SUCCESS) return IBV_WC_LOC_PROT_ERR;
  for (const ibv_sge& s : sges) {
    if (len == 0) break;
    if (offset >= s.length) {
      offset -= s.length;
      continue;
    }
    const size_t n = std::min<uint64_t>(len, s.length - offset);
    Mr* m = r.MrByKeyLocked(pd->ctx->device, s.lkey);
    if (MrCopyLocked(m, s.addr + offset, buf, n, to_memory) != 0) return IBV_WC_LOC_PROT_ERR;
    buf += n;
    len -= n;
    offset = 0;
  }
  return len == 0 ? IBV_WC_SUCCESS : IBV_WC_LOC_LEN_ERR;
}

// ---- Packets ----

// Takes every packet waiting on the sockets of ctx's QPs into its
// transport's stash and wakes the progress thread to handle them.
void StashArrivalsLocked(Context* ctx) {
  Transport* t = ctx->transport;
  if (t == nullptr || !t->started) return;
  bool any = false;
  std::vector<char> buf(kPacketBytes);
  for (auto& [p, other] : queues().qps) {
    if (other->ctx != ctx || other->sock < 0) continue;
    for (;;) {
      ssize_t got = recv(other->sock, buf.data(), buf.size(), MSG_DONTWAIT);
      if (got < 0) break;
      t->stash.push_back(
          {other->qpx.qp_base.qp_num, std::vector<char>(buf.begin(), buf.begin() + got)});
      any = true;
    }
  }
  if (any) {
    uint64_t one = 1;
    if (write(t->wake_fd, &one, sizeof one) < 0) { /* already signalled: the count saturates */
    }
  }
}

// Sends one packet to (dlid, h.dst_qpn). false: it was lost. A UC or UD
// packet for another process waits for room there (see the fabric above).
bool SendPacketLocked(Registry& r, Qp* qp, uint16_t dlid, const PacketHeader& h,
                      const void* payload, size_t len) {
  sockaddr_un to{};
  to.sun_family = AF_UNIX;
  const std::string path = QpPath(PortOf(qp->ctx->device), dlid, h.dst_qpn);
  if (path.size() >= sizeof to.sun_path) return false;
  memcpy(to.sun_path, path.c_str(), path.size() + 1);
  iovec iov[2] = {{const_cast<PacketHeader*>(&h), sizeof h}, {const_cast<void*>(payload), len}};
  msghdr msg{};
  msg.msg_name = &to;
  msg.msg_namelen = sizeof to;
  msg.msg_iov = iov;
  msg.msg_iovlen = len != 0 ? 2 : 1;
  // A missing peer loses the packet, as a fabric would; so does a full queue
  // for RC (which retransmits) and within this process.
  const ibv_qp_type type = qp->qpx.qp_base.qp_type;
  const bool lossless = type != IBV_QPT_RC && !IsLocalLid(dlid);
  const auto deadline = Clock::now() + kHeadOfQueueLifetime;
  auto pause = std::chrono::microseconds(20);
  while (sendmsg(qp->sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
    if (!lossless || errno != EAGAIN || Clock::now() >= deadline) return false;
    // The peer may itself be waiting for room here, holding the lock its
    // progress thread needs: empty this context's sockets meanwhile.
    StashArrivalsLocked(qp->ctx);
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
  }
  ++r.counters.packets_sent;
  return true;
}

PacketHeader NewHeader(const Qp* qp, Kind kind, uint32_t dst_qpn) {
  PacketHeader h;
  memset(&h, 0, sizeof h);
  h.magic = kMagic;
  h.kind = kind;
  h.src_lid = PortOf(qp->ctx->device).lid;
  h.src_qpn = qp->qpx.qp_base.qp_num;
  h.dst_qpn = dst_qpn;
  return h;
}

void ReplyLocked(Registry& r, Qp* qp, const PacketHeader& req, Kind kind, uint32_t status,
                 const void* payload, size_t len) {
  PacketHeader h = NewHeader(qp, kind, req.src_qpn);
  h.psn = req.psn;
  h.status = status;
  h.rnr_timer = qp->attr.min_rnr_timer;
  h.length = static_cast<uint32_t>(len);
  SendPacketLocked(r, qp, req.src_lid, h, payload, len);
}

Clock::duration AckTimeout(const Qp* qp) {
  // 4.096 µs * 2^timeout; 0 means "infinite" and is treated as the floor.
  const uint8_t t = qp->attr.timeout;
  auto d = std::chrono::nanoseconds(static_cast<int64_t>(4096) << std::min<uint8_t>(t, 31));
  return std::max<Clock::duration>(d, kMinAckTimeout);
}

// ---- Requester ----

Kind RequestKind(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return kWrite;
    case IBV_WR_RDMA_READ:
      return kReadRequest;
    default:
      return kSend;
  }
}

bool HasImm(ibv_wr_opcode op) {
  return op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM;
}

// Sends (or resends) the fragment of the head WQE that starts at qp->acked.
// false: the local gather failed with *status.
bool SendFragmentLocked(Registry& r, Qp* qp, int* status) {
  const SendWqe& w = qp->sq.front();
  const Kind kind = RequestKind(w.opcode);
  const uint64_t chunk = std::min<uint64_t>(kFragment, qp->total - qp->acked);
  PacketHeader h = NewHeader(qp, kind, qp->attr.dest_qp_num);
  h.psn = qp->psn;
  h.flags = (qp->acked == 0 ? kFirst : 0) | (qp->acked + chunk == qp->total ? kLast : 0);
  if (HasImm(w.opcode)) h.flags |= kImm;
  if (w.flags & IBV_SEND_SOLICITED) h.flags |= kSolicited;
  h.imm = w.imm;
  h.rkey = w.rkey;
  h.remote_addr = w.remote_addr + qp->acked;
  h.total = qp->total;
  h.offset = qp->acked;
  h.length = static_cast<uint32_t>(chunk);
  std::vector<char> payload;
  if (kind != kReadRequest && chunk != 0) {
    payload.resize(chunk);
    if (w.is_inline) {
      memcpy(payload.data(), w.inline_data.data() + qp->acked, chunk);
    } else {
      *status = SgeCopyLocked(r, qp->pd, w.sges, qp->acked, payload.data(), chunk, false);
      if (*status != IBV_WC_SUCCESS) return false;
    }
  }
  SendPacketLocked(r, qp, qp->attr.ah_attr.dlid, h, payload.data(),
                   kind == kReadRequest ? 0 : chunk);
  return true;
}

// Checks the head WQE before its first packet. IBV_WC_SUCCESS or the status
// it completes with.
int StartHeadLocked(Registry& r, Qp* qp) {
  const SendWqe& w = qp->sq.front();
  qp->total = w.is_inline ? w.inline_data.size() : SgeTotal(w.sges);
  qp->acked = 0;
  qp->retries = qp->rnr_retries = 0;
  qp->rnr_wait = false;
  if (qp->total > kMaxMessage) return IBV_WC_LOC_LEN_ERR;
  if (qp->qpx.qp_base.qp_type == IBV_QPT_UD && qp->total > kUdMtu) return IBV_WC_LOC_LEN_ERR;
  if (!w.is_inline) return CheckSgesLocked(r, qp->pd, w.sges, w.opcode == IBV_WR_RDMA_READ);
  return IBV_WC_SUCCESS;
}

// UD: one datagram to the AH's LID and the WR's remote QPN, complete at once.
void SendUdLocked(Registry& r, Qp* qp, const SendWqe& w) {
  PacketHeader h = NewHeader(qp, kSend, w.remote_qpn);
  h.flags = kFirst | kLast | (HasImm(w.opcode) ? kImm : 0) |
            ((w.flags & IBV_SEND_SOLICITED) ? kSolicited : 0) | (w.global ? kGlobal : 0);
  h.imm = w.imm;
  // A remote Q_Key with the high bit set means "use the QP's own".
  h.qkey = (w.remote_qkey & 0x80000000u) ? qp->attr.qkey : w.remote_qkey;
  h.total = h.length = static_cast<uint32_t>(qp->total);
  const ibv_gid gid = LocalGid(qp->ctx->device);
  memcpy(h.sgid, &gid, sizeof h.sgid);
  std::vector<char> payload(qp->total);
  int status = IBV_WC_SUCCESS;
  if (w.is_inline) {
    memcpy(payload.data(), w.inline_data.data(), payload.size());
  } else if (!payload.empty()) {
    status = SgeCopyLocked(r, qp->pd, w.sges, 0, payload.data(), payload.size(), false);
  }
  if (status != IBV_WC_SUCCESS) {
    FailHeadLocked(qp, static_cast<ibv_wc_status>(status));
    return;
  }
  SendPacketLocked(r, qp, w.dlid, h, payload.data(), payload.size());
  CompleteSendLocked(qp, w, IBV_WC_SUCCESS, qp->total);
  qp->sq.pop_front();
}

// Starts whatever the send queue holds, as far as the transport allows.
void PumpLocked(Registry& r, Qp* qp) {
  while (qp->attr.qp_state == IBV_QPS_RTS && !qp->busy && !qp->sq.empty()) {
    int status = StartHeadLocked(r, qp);
    if (status != IBV_WC_SUCCESS) {
      FailHeadLocked(qp, static_cast<ibv_wc_status>(status));
      return;
    }
    const ibv_qp_type type = qp->qpx.qp_base.qp_type;
    if (type == IBV_QPT_UD) {
      SendUdLocked(r, qp, qp->sq.front());
      continue;
    }
    if (type == IBV_QPT_UC) {
      // Unacknowledged: every fragment goes now, the WQE completes on transmit.
      do {
        if (!SendFragmentLocked(r, qp, &status)) {
          FailHeadLocked(qp, static_cast<ibv_wc_status>(status));
          return;
        }
        qp->psn = (qp->psn + 1) & kPsnMask;
        qp->acked += std::min<uint64_t>(kFragment, qp->total - qp->acked);
      } while (qp->acked < qp->total);
      CompleteSendLocked(qp, qp->sq.front(), IBV_WC_SUCCESS, qp->total);
      qp->sq.pop_front();
      continue;
    }
    qp->busy = true;
    if (!SendFragmentLocked(r, qp, &status)) {
      FailHeadLocked(qp, static_cast<ibv_wc_status>(status));
      return;
    }
    qp->deadline = Clock::now() + AckTimeout(qp);
  }
}

// An ACK, NAK or read response for the packet in flight.
void HandleResponseLocked(Registry& r, Qp* qp, const PacketHeader& h, const char* payload,
                          size_t len) {
  if (qp->qpx.qp_base.qp_type != IBV_QPT_RC || !qp->busy || h.psn != qp->psn) return;
  if (qp->attr.qp_state != IBV_QPS_RTS) return;
  const SendWqe& w = qp->sq.front();
  if (h.kind == kNak) {
    if (h.status != kRnrNak) {
      FailHeadLocked(qp, static_cast<ibv_wc_status>(h.status));
      return;
    }
    // Receiver not ready: back off; rnr_retry 7 retries forever.
    if (qp->attr.rnr_retry != 7 && qp->rnr_retries >= qp->attr.rnr_retry) {
      FailHeadLocked(qp, IBV_WC_RNR_RETRY_EXC_ERR);
      return;
    }
    ++qp->rnr_retries;
    qp->rnr_wait = true;
    qp->deadline = Clock::now() + std::chrono::microseconds(kRnrMicros[h.rnr_timer & 31]);
    return;
  }
  const uint64_t chunk = std::min<uint64_t>(kFragment, qp->total - qp->acked);
  if (h.kind == kReadResponse) {
    if (w.opcode != IBV_WR_RDMA_READ || len != chunk) return;
    int status = SgeCopyLocked(r, qp->pd, w.sges, qp->acked, const_cast<char*>(payload), len, true);
    if (status != IBV_WC_SUCCESS) {
      FailHeadLocked(qp, static_cast<ibv_wc_status>(status));
      return;
    }
  } else if (h.kind != kAck || w.opcode == IBV_WR_RDMA_READ) {
    return;
  }
  qp->psn = (qp->psn + 1) & kPsnMask;
  qp->acked += chunk;
  qp->retries = qp->rnr_retries = 0;
  qp->rnr_wait = false;
  if (qp->acked < qp->total) {
    int status = IBV_WC_SUCCESS;
    if (!SendFragmentLocked(r, qp, &status)) {
      FailHeadLocked(qp, static_cast<ibv_wc_status>(status));
      return;
    }
    qp->deadline = Clock::now() + AckTimeout(qp);
    return;
  }
  CompleteSendLocked(qp, w, IBV_WC_SUCCESS, qp->total);
  qp->sq.pop_front();
  qp->busy = false;
  PumpLocked(r, qp);
}

void TimersLocked(Registry& r, Qp* qp, Clock::time_point now) {
  if (!qp->busy || qp->attr.qp_state != IBV_QPS_RTS || now < qp->deadline) return;
  if (!qp->rnr_wait) {
    // Local ACK timeout: retransmit, up to retry_cnt times (7: forever).
    if (qp->attr.retry_cnt != 7 && qp->retries >= qp->attr.retry_cnt) {
      FailHeadLocked(qp, IBV_WC_RETRY_EXC_ERR);
      return;
    }
    ++qp->retries;
  }
  qp->rnr_wait = false;
  int status = IBV_WC_SUCCESS;
  if (!SendFragmentLocked(r, qp, &status)) {
    FailHeadLocked(qp, static_cast<ibv_wc_status>(status));
    return;
  }
  qp->deadline = now + AckTimeout(qp);
}

// ---- Responder ----

bool TakeRecvLocked(Qp* qp, RecvWqe* out) {
  std::deque<RecvWqe>& q = qp->srq != nullptr ? qp->srq->wqes : qp->rq;
  if (q.empty()) return false;
  *out = std::move(q.front());
  q.pop_front();
  return true;
}

bool HasRecvLocked(const Qp* qp) { return !(qp->srq != nullptr ? qp->srq->wqes : qp->rq).empty(); }

// The responder failed a request of an RC/UC QP: NAK it (RC) and enter the
// error state, as hardware does.
void ResponderErrorLocked(Registry& r, Qp* qp, const PacketHeader& h, uint32_t status) {
  if (qp->qpx.qp_base.qp_type == IBV_QPT_RC) ReplyLocked(r, qp, h, kNak, status, nullptr, 0);
  EnterErrorLocked(qp);
}

void HandleUdLocked(Registry& r, Qp* qp, const PacketHeader& h, const char* payload, size_t len) {
  if (h.kind != kSend || h.qkey != qp->attr.qkey || len != h.total) return;
  RecvWqe w;
  if (!TakeRecvLocked(qp, &w)) return;  // no receive WQE: the datagram is dropped
  if (len + kGrhBytes > SgeTotal(w.sges)) {
    CompleteRecvLocked(qp, w.wr_id, IBV_WC_LOC_LEN_ERR);
    return;
  }
  std::vector<char> data(kGrhBytes + len, 0);
  if (h.flags & kGlobal) {
    data[0] = 0x60;  // IPv6 version
    memcpy(&data[8], h.sgid, 16);
    const ibv_gid dgid = LocalGid(qp->ctx->device);
    memcpy(&data[24], &dgid, 16);
  }
  if (len != 0) memcpy(&data[kGrhBytes], payload, len);
  int status = SgeCopyLocked(r, qp->pd, w.sges, 0, data.data(), data.size(), true);
  ibv_wc wc = BaseWc(qp, w.wr_id, static_cast<ibv_wc_status>(status));
  if (status == IBV_WC_SUCCESS) {
    wc.opcode = IBV_WC_RECV;
    wc.byte_len = static_cast<uint32_t>(data.size());
    wc.src_qp = h.src_qpn;
    wc.slid = h.src_lid;
    wc.wc_flags = (h.flags & kGlobal) ? IBV_WC_GRH : 0;
    if (h.flags & kImm) {
      wc.imm_data = h.imm;
      wc.wc_flags |= IBV_WC_WITH_IMM;
    }
  }
  PushLocked(qp->recv_cq, wc, h.flags & kSolicited);
  if (status != IBV_WC_SUCCESS) EnterErrorLocked(qp);
}

void CompleteIncomingLocked(Qp* qp, const RecvWqe& w, const PacketHeader& h, ibv_wc_opcode op) {
  ibv_wc wc = BaseWc(qp, w.wr_id, IBV_WC_SUCCESS);
  wc.opcode = op;
  wc.byte_len = static_cast<uint32_t>(h.total);
  wc.src_qp = h.src_qpn;
  wc.slid = h.src_lid;
  if (h.flags & kImm) {
    wc.imm_data = h.imm;
    wc.wc_flags = IBV_WC_WITH_IMM;
  }
  PushLocked(qp->recv_cq, wc, h.flags & kSolicited);
}

void HandleRequestLocked(Registry& r, Qp* qp, const PacketHeader& h, const char* payload,
                         size_t len) {
  const ibv_qp_state state = qp->attr.qp_state;
  if (state != IBV_QPS_RTR && state != IBV_QPS_RTS) return;  // dropped: the peer retries
  const ibv_qp_type type = qp->qpx.qp_base.qp_type;
  if (type == IBV_QPT_UD) {
    HandleUdLocked(r, qp, h, payload, len);
    return;
  }
  if (h.src_lid != qp->attr.ah_attr.dlid || h.src_qpn != qp->attr.dest_qp_num) return;
  const bool rc = type == IBV_QPT_RC;
  if (h.psn != qp->epsn) {
    if (rc && h.psn == ((qp->epsn - 1) & kPsnMask)) {
      // A retransmission of what was executed already: answer again.
      if (h.kind != kReadRequest) {
        ReplyLocked(r, qp, h, kAck, 0, nullptr, 0);
        return;
      }
    } else if (!rc && (h.flags & kFirst)) {
      qp->epsn = h.psn;  // UC resynchronises on a new message
      qp->drop_message = false;
      if (qp->in_message) {
        CompleteRecvLocked(qp, qp->cur.wr_id, IBV_WC_WR_FLUSH_ERR);
        qp->in_message = false;
      }
    } else {
      return;
    }
  }
  const bool duplicate = h.psn != qp->epsn;
  if (!rc && qp->drop_message && !(h.flags & kFirst)) {
    qp->epsn = (qp->epsn + 1) & kPsnMask;
    return;
  }
  qp->drop_message = false;
  if (len != (h.kind == kReadRequest ? 0 : h.length)) return;
  switch (h.kind) {
    case kSend: {
      if (h.flags & kFirst) {
        if (!TakeRecvLocked(qp, &qp->cur)) {
          if (rc) {
            ReplyLocked(r, qp, h, kNak, kRnrNak, nullptr, 0);
          } else {
            qp->drop_message = !(h.flags & kLast);
            qp->epsn = (qp->epsn + 1) & kPsnMask;
          }
          return;
        }
        qp->in_message = true;
        if (h.total > SgeTotal(qp->cur.sges)) {
          qp->in_message = false;
          CompleteRecvLocked(qp, qp->cur.wr_id, IBV_WC_LOC_LEN_ERR);
          ResponderErrorLocked(r, qp, h, IBV_WC_REM_INV_REQ_ERR);
          return;
        }
      }
      if (!qp->in_message) return;
      int status =
          SgeCopyLocked(r, qp->pd, qp->cur.sges, h.offset, const_cast<char*>(payload), len, true);
      if (status != IBV_WC_SUCCESS) {
        qp->in_message = false;
        CompleteRecvLocked(qp, qp->cur.wr_id, static_cast<ibv_wc_status>(status));
        ResponderErrorLocked(r, qp, h, IBV_WC_REM_OP_ERR);
        return;
      }
      if (h.flags & kLast) {
        qp->in_message = false;
        CompleteIncomingLocked(qp, qp->cur, h, IBV_WC_RECV);
      }
      break;
    }
    case kWrite: {
      if (h.flags & kFirst) {
        if (!(qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) ||
            (h.total != 0 &&
             CheckRkeyLocked(r, h.rkey, h.remote_addr, h.total, IBV_ACCESS_REMOTE_WRITE, qp->pd,
                             nullptr) != IBV_WC_SUCCESS)) {
          ++r.counters.remote_access_errors;
          ResponderErrorLocked(r, qp, h, IBV_WC_REM_ACCESS_ERR);
          return;
        }
        if ((h.flags & kImm) && !HasRecvLocked(qp)) {
          if (rc)
            ReplyLocked(r, qp, h, kNak, kRnrNak, nullptr, 0);
          else
            qp->drop_message = !(h.flags & kLast);
          if (!rc) qp->epsn = (qp->epsn + 1) & kPsnMask;
          return;
        }
      }
      int status = RemoteAccessLocked(r, h.rkey, h.remote_addr, const_cast<char*>(payload), len,
                                      true, qp->pd);
      if (status != IBV_WC_SUCCESS) {
        ResponderErrorLocked(r, qp, h, status);
        return;
      }
      if ((h.flags & kLast) && (h.flags & kImm)) {
        RecvWqe w;
        if (TakeRecvLocked(qp, &w)) CompleteIncomingLocked(qp, w, h, IBV_WC_RECV_RDMA_WITH_IMM);
      }
      break;
    }
    case kReadRequest: {
      if (!rc) return;
      if (!(qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_READ) ||
          ((h.flags & kFirst) && h.total != 0 &&
           CheckRkeyLocked(r, h.rkey, h.remote_addr, h.total, IBV_ACCESS_REMOTE_READ, qp->pd,
                           nullptr) != IBV_WC_SUCCESS)) {
        ++r.counters.remote_access_errors;
        ResponderErrorLocked(r, qp, h, IBV_WC_REM_ACCESS_ERR);
        return;
      }
      std::vector<char> data(h.length);
      int status =
          RemoteAccessLocked(r, h.rkey, h.remote_addr, data.data(), data.size(), false, qp->pd);
      if (status != IBV_WC_SUCCESS) {
        ResponderErrorLocked(r, qp, h, status);
        return;
      }
      ReplyLocked(r, qp, h, kReadResponse, 0, data.data(), data.size());
      if (!duplicate) qp->epsn = (qp->epsn + 1) & kPsnMask;
      return;
    }
    default:
      return;
  }
  qp->epsn = (qp->epsn + 1) & kPsnMask;
  if (rc) ReplyLocked(r, qp, h, kAck, 0, nullptr, 0);
}

void HandlePacketLocked(Registry& r, Qp* qp, const char* buf, size_t n) {
  if (n < sizeof(PacketHeader)) return;
  PacketHeader h;
  memcpy(&h, buf, sizeof h);
  if (h.magic != kMagic || h.dst_qpn != qp->qpx.qp_base.qp_num) return;
  const char* payload = buf + sizeof h;
  const size_t len = n - sizeof h;
  if (h.kind == kAck || h.kind == kNak || h.kind == kReadResponse) {
    HandleResponseLocked(r, qp, h, payload, len);
  } else {
    HandleRequestLocked(r, qp, h, payload, len);
  }
}

// ---- The progress thread ----

void ProgressLoop(Context* ctx) {
  Registry& r = registry();
  Transport* t = ctx->transport;
  std::vector<char> buf(kPacketBytes);
  epoll_event events[16];
  for (;;) {
    int wait_ms = 100;
    {
      std::lock_guard<std::mutex> lock(r.mu);
      if (t->stop) return;
      const auto now = Clock::now();
      for (auto& [p, qp] : queues().qps) {
        if (qp->ctx != ctx || !qp->busy) continue;
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(qp->deadline - now);
        wait_ms = std::max<int>(0, std::min<int>(wait_ms, static_cast<int>(left.count()) + 1));
      }
    }
    int n = epoll_wait(t->epfd, events, 16, wait_ms);
    std::lock_guard<std::mutex> lock(r.mu);
    if (t->stop) return;
    // Packets a waiting sender took off the sockets come first: they arrived
    // before whatever the sockets hold now.
    while (!t->stash.empty()) {
      StashedPacket packet = std::move(t->stash.front());
      t->stash.pop_front();
      auto it = queues().by_qpn.find(packet.qpn);
      if (it == queues().by_qpn.end()) continue;  // destroyed meanwhile
      HandlePacketLocked(r, it->second, packet.bytes.data(), packet.bytes.size());
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u32 == 0) {  // the wake fd: reset it (the stash is handled above)
        uint64_t count;
        if (read(t->wake_fd, &count, sizeof count) < 0) { /* already reset */
        }
        continue;
      }
      auto it = queues().by_qpn.find(events[i].data.u32);
      if (it == queues().by_qpn.end()) continue;  // destroyed meanwhile
      Qp* qp = it->second;
      for (int k = 0; k < 64; ++k) {  // a bounded batch, then timers get their turn
        ssize_t got = recv(qp->sock, buf.data(), buf.size(), MSG_DONTWAIT);
        if (got < 0) break;
        HandlePacketLocked(r, qp, buf.data(), static_cast<size_t>(got));
      }
    }
    const auto now = Clock::now();
    for (auto& [p, qp] : queues().qps) {
      if (qp->ctx == ctx) TimersLocked(r, qp, now);
    }
  }
}

// Creates the context's transport (not its thread). Caller holds mu.
Transport* TransportLocked(Context* ctx) {
  if (ctx->transport == nullptr) ctx->transport = new Transport();
  return ctx->transport;
}

// Starts the progress thread. 0 or an errno. Caller holds mu.
int StartProgressLocked(Context* ctx) {
  Transport* t = TransportLocked(ctx);
  if (t->started) return 0;
  t->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (t->epfd < 0) return errno;
  t->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (t->wake_fd < 0) {
    int err = errno;
    close(t->epfd);
    t->epfd = -1;
    return err;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = 0;  // QPN 0 is never a softverbs QP
  epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->wake_fd, &ev);
  t->thread = std::thread(ProgressLoop, ctx);
  t->started = true;
  return 0;
}

// A destroyed CQ: its entries are freed, the object stays for PollCq.
void BuryLocked(Cq* cq) {
  cq->alive.store(false, std::memory_order_release);
  cq->entries = std::deque<ibv_wc>();
  cq->count.store(0);
  queues().graveyard.push_back(cq);
}

// Frees a CQ already removed from queues().cqs. Caller holds mu.
void ReleaseCqLocked(Registry& r, Cq* cq) {
  if (cq->channel != nullptr) --cq->channel->ch.refcnt;
  pthread_mutex_destroy(&cq->cq.mutex);
  pthread_cond_destroy(&cq->cq.cond);
  --r.counters.live_cqs;
  BuryLocked(cq);
}

// Frees a completion channel already removed from queues().channels.
void ReleaseChannel(Channel* ch) {
  close(ch->ch.fd);
  close(ch->write_fd);
  delete ch;
}

// ---- Lookups ----

Context* FindContextLocked(ibv_context* c) {
  auto it = registry().contexts.find(c);
  return it == registry().contexts.end() ? nullptr : it->second;
}

template <typename Map, typename Key>
auto FindLocked(Map& m, Key k) -> decltype(m.begin()->second) {
  auto it = m.find(k);
  return it == m.end() ? nullptr : it->second;
}

// ---- Context ops ----

int PollCq(ibv_cq* cq_in, int num_entries, ibv_wc* wc) {
  // Every CQ softverbs made stays readable (graveyard); anything else is the
  // caller's invalid pointer, which hardware providers dereference too.
  const Cq* fast = reinterpret_cast<const Cq*>(cq_in);
  if (fast != nullptr && fast->alive.load(std::memory_order_acquire) &&
      fast->count.load(std::memory_order_acquire) == 0 && num_entries >= 0) {
    // The "NIC" is a thread of this process: a busy-polling caller gives it
    // the CPU, or on a machine with fewer cores than spinning pollers the
    // completion waits for the scheduler's next time slice.
    sched_yield();
    return 0;
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  Cq* cq = FindLocked(queues().cqs, cq_in);
  if (cq == nullptr || num_entries < 0 || (num_entries > 0 && wc == nullptr)) return -EINVAL;
  if (cq->overrun) return -EOVERFLOW;
  int n = 0;
  while (n < num_entries && !cq->entries.empty()) {
    wc[n++] = cq->entries.front();
    cq->entries.pop_front();
  }
  cq->count.store(cq->entries.size(), std::memory_order_release);
  return n;
}

int ReqNotifyCq(ibv_cq* cq_in, int solicited_only) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  Cq* cq = FindLocked(queues().cqs, cq_in);
  if (cq == nullptr) return EINVAL;
  if (cq->channel == nullptr) return 0;  // armed, but events have nowhere to go
  if (solicited_only) {
    cq->armed_solicited = true;
  } else {
    cq->armed = true;
  }
  // Completions already waiting raise the event at once, as an arm request
  // behind the CQ's producer index does on hardware.
  if (!cq->entries.empty() && !solicited_only) NotifyLocked(cq);
  return 0;
}

bool OpcodeAllowed(ibv_qp_type type, ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
      return true;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return type != IBV_QPT_UD;
    case IBV_WR_RDMA_READ:
      return type == IBV_QPT_RC;
    default:
      return false;  // atomics, MW binds, TSO, ...: not modelled
  }
}

// Validates one send WR and turns it into a WQE. 0 or an errno.
int MakeSendWqeLocked(Qp* qp, const ibv_send_wr* wr, SendWqe* out) {
  const ibv_qp_type type = qp->qpx.qp_base.qp_type;
  if (!OpcodeAllowed(type, wr->opcode)) return EINVAL;
  if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->cap.max_send_sge) return EINVAL;
  if (wr->num_sge > 0 && wr->sg_list == nullptr) return EINVAL;
  constexpr unsigned kKnownFlags =
      IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE;
  if (wr->send_flags & ~kKnownFlags) return EINVAL;
  out->wr_id = wr->wr_id;
  out->opcode = wr->opcode;
  out->flags = wr->send_flags;
  out->imm = wr->imm_data;
  out->sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
  if (wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
      wr->opcode == IBV_WR_RDMA_READ) {
    out->remote_addr = wr->wr.rdma.remote_addr;
    out->rkey = wr->wr.rdma.rkey;
  }
  if (wr->send_flags & IBV_SEND_INLINE) {
    if (wr->opcode == IBV_WR_RDMA_READ) return EINVAL;
    const uint64_t total = SgeTotal(out->sges);
    if (total > qp->cap.max_inline_data) return EINVAL;
    // Inline data is copied now, from the addresses, without lkeys.
    out->is_inline = true;
    out->inline_data.reserve(total);
    for (const ibv_sge& s : out->sges) {
      const char* p = reinterpret_cast<const char*>(static_cast<uintptr_t>(s.addr));
      out->inline_data.insert(out->inline_data.end(), p, p + s.length);
    }
    out->sges.clear();
  }
  if (type == IBV_QPT_UD) {
    Ah* ah = FindLocked(queues().ahs, wr->wr.ud.ah);
    if (ah == nullptr || ah->pd != qp->pd) return EINVAL;
    out->dlid = ah->attr.dlid;
    out->global = ah->attr.is_global;
    out->remote_qpn = wr->wr.ud.remote_qpn;
    out->remote_qkey = wr->wr.ud.remote_qkey;
  }
  return 0;
}

// Queues validated WQEs; in the error state they are flushed at once.
void QueueSendsLocked(Registry& r, Qp* qp, std::vector<SendWqe>* wqes) {
  for (SendWqe& w : *wqes) qp->sq.push_back(std::move(w));
  wqes->clear();
  if (qp->attr.qp_state == IBV_QPS_ERR) {
    FlushLocked(qp);
    return;
  }
  PumpLocked(r, qp);
}

int PostSend(ibv_qp* qp_in, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  Qp* qp = FindLocked(queues().qps, qp_in);
  std::vector<SendWqe> wqes;
  int err = 0;
  if (qp == nullptr) {
    err = EINVAL;
  } else if (qp->attr.qp_state != IBV_QPS_RTS && qp->attr.qp_state != IBV_QPS_ERR &&
             qp->attr.qp_state != IBV_QPS_SQD) {
    err = EINVAL;  // the send queue accepts WQEs from RTS on
  }
  for (; err == 0 && wr != nullptr; wr = wr->next) {
    if (qp->sq.size() + wqes.size() >= qp->cap.max_send_wr) {
      err = ENOMEM;
      break;
    }
    SendWqe w;
    err = MakeSendWqeLocked(qp, wr, &w);
    if (err != 0) break;  // *bad_wr is this WR
    wqes.push_back(std::move(w));
  }
  // WRs before the bad one are posted, as on hardware.
  if (qp != nullptr && !wqes.empty()) QueueSendsLocked(r, qp, &wqes);
  if (err != 0 && bad_wr != nullptr) *bad_wr = wr;
  return err;
}

// Validates a receive WR for a queue of `max_sge` SGEs.
int MakeRecvWqe(const ibv_recv_wr* wr, uint32_t max_sge, RecvWqe* out) {
  if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > max_sge) return EINVAL;
  if (wr->num_sge > 0 && wr->sg_list == nullptr) return EINVAL;
  out->wr_id = wr->wr_id;
  out->sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
  return 0;
}

int PostRecv(ibv_qp* qp_in, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  Qp* qp = FindLocked(queues().qps, qp_in);
  int err = 0;
  if (qp == nullptr || qp->srq != nullptr || qp->attr.qp_state == IBV_QPS_RESET) err = EINVAL;
  for (; err == 0 && wr != nullptr; wr = wr->next) {
    if (qp->rq.size() >= qp->cap.max_recv_wr) {
      err = ENOMEM;
      break;
    }
    RecvWqe w;
    err = MakeRecvWqe(wr, qp->cap.max_recv_sge, &w);
    if (err != 0) break;
    qp->rq.push_back(std::move(w));
  }
  if (qp != nullptr && qp->attr.qp_state == IBV_QPS_ERR) FlushLocked(qp);
  if (err != 0 && bad_wr != nullptr) *bad_wr = wr;
  return err;
}

int PostSrqRecv(ibv_srq* srq_in, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  Srq* srq = FindLocked(queues().srqs, srq_in);
  int err = srq == nullptr ? EINVAL : 0;
  for (; err == 0 && wr != nullptr; wr = wr->next) {
    if (srq->wqes.size() >= srq->max_wr) {
      err = ENOMEM;
      break;
    }
    RecvWqe w;
    err = MakeRecvWqe(wr, srq->max_sge, &w);
    if (err != 0) break;
    srq->wqes.push_back(std::move(w));
  }
  if (err != 0 && bad_wr != nullptr) *bad_wr = wr;
  return err;
}

// ---- ibv_qp_ex: the ibv_wr_* send API ----

Qp* QpOf(ibv_qp_ex* qpx) { return reinterpret_cast<Qp*>(qpx); }

void WrStart(ibv_qp_ex* qpx) {
  Qp* qp = QpOf(qpx);
  qp->batch.clear();
  qp->batch_error = 0;
}

// Begins a WQE of the batch with the fields the caller set in qpx.
SendWqe* WrNew(ibv_qp_ex* qpx, ibv_wr_opcode op) {
  Qp* qp = QpOf(qpx);
  qp->batch.emplace_back();
  SendWqe* w = &qp->batch.back();
  w->wr_id = qpx->wr_id;
  w->flags = qpx->wr_flags;
  w->opcode = op;
  return w;
}

void WrSend(ibv_qp_ex* qpx) { WrNew(qpx, IBV_WR_SEND); }
void WrSendImm(ibv_qp_ex* qpx, __be32 imm) { WrNew(qpx, IBV_WR_SEND_WITH_IMM)->imm = imm; }
void WrRdma(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr, ibv_wr_opcode op, __be32 imm) {
  SendWqe* w = WrNew(qpx, op);
  w->rkey = rkey;
  w->remote_addr = addr;
  w->imm = imm;
}
void WrWrite(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr) {
  WrRdma(qpx, rkey, addr, IBV_WR_RDMA_WRITE, 0);
}
void WrWriteImm(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr, __be32 imm) {
  WrRdma(qpx, rkey, addr, IBV_WR_RDMA_WRITE_WITH_IMM, imm);
}
void WrRead(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr) {
  WrRdma(qpx, rkey, addr, IBV_WR_RDMA_READ, 0);
}

void WrSetSgeList(ibv_qp_ex* qpx, size_t num_sge, const ibv_sge* sg_list) {
  Qp* qp = QpOf(qpx);
  if (qp->batch.empty()) {
    qp->batch_error = EINVAL;
    return;
  }
  qp->batch.back().sges.assign(sg_list, sg_list + num_sge);
}
void WrSetSge(ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length) {
  ibv_sge sge{addr, length, lkey};
  WrSetSgeList(qpx, 1, &sge);
}
void WrSetInlineDataList(ibv_qp_ex* qpx, size_t num_buf, const ibv_data_buf* buf_list) {
  Qp* qp = QpOf(qpx);
  if (qp->batch.empty()) {
    qp->batch_error = EINVAL;
    return;
  }
  SendWqe& w = qp->batch.back();
  w.is_inline = true;
  w.inline_data.clear();
  for (size_t i = 0; i < num_buf; ++i) {
    const char* p = static_cast<const char*>(buf_list[i].addr);
    w.inline_data.insert(w.inline_data.end(), p, p + buf_list[i].length);
  }
  if (w.inline_data.size() > qp->cap.max_inline_data) qp->batch_error = EINVAL;
}
void WrSetInlineData(ibv_qp_ex* qpx, void* addr, size_t length) {
  ibv_data_buf b{addr, length};
  WrSetInlineDataList(qpx, 1, &b);
}
void WrSetUdAddr(ibv_qp_ex* qpx, ibv_ah* ah_in, uint32_t remote_qpn, uint32_t remote_qkey) {
  Qp* qp = QpOf(qpx);
  std::lock_guard<std::mutex> lock(registry().mu);
  Ah* ah = FindLocked(queues().ahs, ah_in);
  if (qp->batch.empty() || ah == nullptr || ah->pd != qp->pd) {
    qp->batch_error = EINVAL;
    return;
  }
  SendWqe& w = qp->batch.back();
  w.dlid = ah->attr.dlid;
  w.global = ah->attr.is_global;
  w.remote_qpn = remote_qpn;
  w.remote_qkey = remote_qkey;
}

int WrComplete(ibv_qp_ex* qpx) {
  Qp* qp = QpOf(qpx);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  int err = qp->batch_error;
  const ibv_qp_state s = qp->attr.qp_state;
  if (err == 0 && s != IBV_QPS_RTS && s != IBV_QPS_ERR && s != IBV_QPS_SQD) err = EINVAL;
  if (err == 0 && qp->sq.size() + qp->batch.size() > qp->cap.max_send_wr) err = ENOMEM;
  for (const SendWqe& w : qp->batch) {
    if (err == 0 && (!OpcodeAllowed(qp->qpx.qp_base.qp_type, w.opcode) ||
                     w.sges.size() > qp->cap.max_send_sge)) {
      err = EINVAL;
    }
  }
  if (err != 0) {
    qp->batch.clear();
    return err;
  }
  QueueSendsLocked(r, qp, &qp->batch);
  return 0;
}

void WrAbort(ibv_qp_ex* qpx) { QpOf(qpx)->batch.clear(); }

void InitQpEx(Qp* qp, uint64_t ops) {
  ibv_qp_ex& x = qp->qpx;
  x.comp_mask = 0;
  if (ops & IBV_QP_EX_WITH_SEND) x.wr_send = WrSend;
  if (ops & IBV_QP_EX_WITH_SEND_WITH_IMM) x.wr_send_imm = WrSendImm;
  if (ops & IBV_QP_EX_WITH_RDMA_WRITE) x.wr_rdma_write = WrWrite;
  if (ops & IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM) x.wr_rdma_write_imm = WrWriteImm;
  if (ops & IBV_QP_EX_WITH_RDMA_READ) x.wr_rdma_read = WrRead;
  x.wr_start = WrStart;
  x.wr_complete = WrComplete;
  x.wr_abort = WrAbort;
  x.wr_set_sge = WrSetSge;
  x.wr_set_sge_list = WrSetSgeList;
  x.wr_set_inline_data = WrSetInlineData;
  x.wr_set_inline_data_list = WrSetInlineDataList;
  x.wr_set_ud_addr = WrSetUdAddr;
}

// ---- QP creation, modification and teardown ----

constexpr uint64_t kSupportedSendOps =
    IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ;

ibv_qp* Fail(int err) {
  errno = err;
  return nullptr;
}

// Binds the QP's socket at SOFTVERBS_FABRIC_DIR/<LID>-<QPN>. 0 or an errno.
int BindQp(Qp* qp) {
  const Port port = PortOf(qp->ctx->device);
  if (port.lid == 0) return ENODEV;
  qp->path = QpPath(port, port.lid, qp->qpx.qp_base.qp_num);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (qp->path.size() >= sizeof addr.sun_path) {
    fprintf(stderr,
            "softverbs: socket path %s is longer than %zu bytes: shorten SOFTVERBS_FABRIC_DIR\n",
            qp->path.c_str(), sizeof addr.sun_path - 1);
    return ENAMETOOLONG;
  }
  memcpy(addr.sun_path, qp->path.c_str(), qp->path.size() + 1);
  qp->sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (qp->sock < 0) return errno;
  unlink(qp->path.c_str());  // a dead process's: our LID lock proves it gone
  if (bind(qp->sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    close(qp->sock);
    qp->sock = -1;
    return err;
  }
  int size = 4 << 20;
  setsockopt(qp->sock, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
  setsockopt(qp->sock, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  return 0;
}

ibv_qp* CreateQp(ibv_context* context, ibv_qp_init_attr_ex* a) {
  if (a == nullptr) return Fail(EINVAL);
  constexpr uint32_t kKnownMask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  if (a->comp_mask & ~kKnownMask) return Fail(EOPNOTSUPP);
  if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD)) return Fail(EINVAL);
  const uint64_t ops = (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ? a->send_ops_flags : 0;
  if (ops & ~kSupportedSendOps) return Fail(EOPNOTSUPP);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto pd_it = r.pds.find(a->pd);
  if (pd_it == r.pds.end()) return Fail(EINVAL);
  Pd* pd = pd_it->second;
  if (context != nullptr && pd->ctx != FindContextLocked(context)) return Fail(EINVAL);
  Cq* scq = FindLocked(queues().cqs, a->send_cq);
  Cq* rcq = FindLocked(queues().cqs, a->recv_cq);
  if (scq == nullptr || rcq == nullptr) return Fail(EINVAL);
  if (scq->cq.context != a->pd->context || rcq->cq.context != a->pd->context) return Fail(EINVAL);
  Srq* srq = nullptr;
  if (a->srq != nullptr) {
    srq = FindLocked(queues().srqs, a->srq);
    if (srq == nullptr || srq->srq.context != a->pd->context) return Fail(EINVAL);
  }
  if (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UC && a->qp_type != IBV_QPT_UD) {
    return Fail(EOPNOTSUPP);
  }
  ibv_qp_cap& c = a->cap;
  if (c.max_send_wr > kMaxWr || c.max_send_sge > kMaxSge || c.max_inline_data > kMaxInline ||
      (srq == nullptr && (c.max_recv_wr > kMaxWr || c.max_recv_sge > kMaxSge))) {
    return Fail(EINVAL);
  }
  int err = StartProgressLocked(pd->ctx);
  if (err != 0) return Fail(err);
  auto* qp = new Qp();
  qp->ctx = pd->ctx;
  qp->pd = pd;
  qp->send_cq = scq;
  qp->recv_cq = rcq;
  qp->srq = srq;
  qp->cap = c;
  if (srq != nullptr) qp->cap.max_recv_wr = qp->cap.max_recv_sge = 0;
  qp->sig_all = a->sq_sig_all != 0;
  qp->ex_api = (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
  ibv_qp& q = qp->qpx.qp_base;
  q.context = a->pd->context;
  q.qp_context = a->qp_context;
  q.pd = a->pd;
  q.send_cq = a->send_cq;
  q.recv_cq = a->recv_cq;
  q.srq = a->srq;
  q.handle = r.next_handle++;
  q.qp_num = queues().next_qpn;
  queues().next_qpn = (queues().next_qpn + 1) & kPsnMask;  // QPNs are 24 bits
  if (queues().next_qpn < 0x11) queues().next_qpn = 0x11;
  q.qp_type = a->qp_type;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  SetStateLocked(qp, IBV_QPS_RESET);
  qp->attr.cap = qp->cap;
  InitQpEx(qp, ops);
  err = BindQp(qp);
  if (err != 0) {
    delete qp;
    return Fail(err);
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = q.qp_num;
  epoll_ctl(pd->ctx->transport->epfd, EPOLL_CTL_ADD, qp->sock, &ev);
  ++scq->qps;
  ++rcq->qps;
  if (srq != nullptr) ++srq->qps;
  ++pd->users;
  queues().qps[&q] = qp;
  queues().by_qpn[q.qp_num] = qp;
  ++r.counters.live_qps;
  return &q;
}

// Forgets a QP (and unbinds its socket). Caller holds mu.
void DestroyQpLocked(Registry& r, Qp* qp) {
  if (qp->sock >= 0) {
    if (qp->ctx->transport != nullptr && qp->ctx->transport->epfd >= 0) {
      epoll_ctl(qp->ctx->transport->epfd, EPOLL_CTL_DEL, qp->sock, nullptr);
    }
    close(qp->sock);
    unlink(qp->path.c_str());
  }
  --qp->send_cq->qps;
  --qp->recv_cq->qps;
  if (qp->srq != nullptr) --qp->srq->qps;
  --qp->pd->users;
  queues().by_qpn.erase(qp->qpx.qp_base.qp_num);
  queues().qps.erase(&qp->qpx.qp_base);
  --r.counters.live_qps;
  pthread_mutex_destroy(&qp->qpx.qp_base.mutex);
  pthread_cond_destroy(&qp->qpx.qp_base.cond);
  delete qp;
}

// The attributes a transition requires (*required) and allows (the result,
// -1 for a transition softverbs does not model), per transport, as
// ibv_modify_qp(3) and the InfiniBand specification's QP state table list them.
int AllowedMask(ibv_qp_type type, ibv_qp_state from, ibv_qp_state to, int* required) {
  const int kAv = IBV_QP_AV, kMtu = IBV_QP_PATH_MTU, kDqpn = IBV_QP_DEST_QPN, kRq = IBV_QP_RQ_PSN,
            kSq = IBV_QP_SQ_PSN, kAcc = IBV_QP_ACCESS_FLAGS, kPkey = IBV_QP_PKEY_INDEX,
            kPort = IBV_QP_PORT, kQkey = IBV_QP_QKEY, kCur = IBV_QP_CUR_STATE,
            kAlt = IBV_QP_ALT_PATH, kMig = IBV_QP_PATH_MIG_STATE, kRnrT = IBV_QP_MIN_RNR_TIMER;
  *required = 0;
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) return 0;
  const bool rc = type == IBV_QPT_RC, uc = type == IBV_QPT_UC;
  if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
    *required = kPkey | kPort | (rc || uc ? kAcc : kQkey);
    return *required;
  }
  if (from == IBV_QPS_INIT && to == IBV_QPS_INIT) {
    return kPkey | kPort | (rc || uc ? kAcc : kQkey);
  }
  if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    if (rc) {
      *required = kAv | kMtu | kDqpn | kRq | IBV_QP_MAX_DEST_RD_ATOMIC | kRnrT;
      return *required | kAlt | kAcc | kPkey;
    }
    if (uc) {
      *required = kAv | kMtu | kDqpn | kRq;
      return *required | kAlt | kAcc | kPkey;
    }
    return kPkey | kQkey;
  }
  if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
    if (rc) {
      *required =
          kSq | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      return *required | kCur | kAlt | kAcc | kRnrT | kMig;
    }
    *required = kSq;
    return *required | kCur | (uc ? kAlt | kAcc | kMig : kQkey);
  }
  if (from == IBV_QPS_RTS && to == IBV_QPS_RTS) {
    if (rc) return kCur | kAcc | kAlt | kMig | kRnrT;
    return kCur | (uc ? kAcc | kAlt | kMig : kQkey);
  }
  return -1;  // not a transition softverbs models (SQD, SQE, ...)
}

int ModifyQpLocked(Qp* qp, ibv_qp_attr* attr, int mask) {
  const ibv_qp_type type = qp->qpx.qp_base.qp_type;
  const ibv_qp_state cur = qp->attr.qp_state;
  if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur) return EINVAL;
  const ibv_qp_state to = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
  if (to > IBV_QPS_ERR) return EINVAL;
  int required = 0;
  const int allowed = AllowedMask(type, cur, to, &required);
  if (allowed < 0) return EINVAL;
  const int given = mask & ~(IBV_QP_STATE | IBV_QP_CUR_STATE);
  if ((given & required) != required || (given & ~(allowed & ~IBV_QP_CUR_STATE))) return EINVAL;
  // Values.
  if ((mask & IBV_QP_PORT) && attr->port_num != 1) return EINVAL;
  if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0) return EINVAL;
  constexpr unsigned kQpAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  if ((mask & IBV_QP_ACCESS_FLAGS) && (attr->qp_access_flags & ~kQpAccess)) return EINVAL;
  if ((mask & IBV_QP_PATH_MTU) && (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096)) {
    return EINVAL;
  }
  if (mask & IBV_QP_AV) {
    const ibv_ah_attr& ah = attr->ah_attr;
    if (ah.port_num != 1 || ah.dlid == 0 || ah.dlid >= 0xc000) return EINVAL;
    if (ah.is_global && ah.grh.sgid_index != 0) return EINVAL;
  }
  if ((mask & IBV_QP_DEST_QPN) && attr->dest_qp_num > kPsnMask) return EINVAL;
  if ((mask & IBV_QP_TIMEOUT) && attr->timeout > 31) return EINVAL;
  if ((mask & IBV_QP_RETRY_CNT) && attr->retry_cnt > 7) return EINVAL;
  if ((mask & IBV_QP_RNR_RETRY) && attr->rnr_retry > 7) return EINVAL;
  if ((mask & IBV_QP_MIN_RNR_TIMER) && attr->min_rnr_timer > 31) return EINVAL;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > 16) return EINVAL;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > 16) return EINVAL;
  if ((mask & IBV_QP_ALT_PATH) || (mask & IBV_QP_PATH_MIG_STATE)) return EINVAL;  // no APM
  // Apply.
  ibv_qp_attr& a = qp->attr;
  if (mask & IBV_QP_PORT) a.port_num = attr->port_num;
  if (mask & IBV_QP_PKEY_INDEX) a.pkey_index = attr->pkey_index;
  if (mask & IBV_QP_ACCESS_FLAGS) a.qp_access_flags = attr->qp_access_flags;
  if (mask & IBV_QP_QKEY) a.qkey = attr->qkey;
  if (mask & IBV_QP_PATH_MTU) a.path_mtu = attr->path_mtu;
  if (mask & IBV_QP_AV) a.ah_attr = attr->ah_attr;
  if (mask & IBV_QP_DEST_QPN) a.dest_qp_num = attr->dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) {
    a.rq_psn = attr->rq_psn & kPsnMask;
    qp->epsn = a.rq_psn;
  }
  if (mask & IBV_QP_SQ_PSN) {
    a.sq_psn = attr->sq_psn & kPsnMask;
    qp->psn = a.sq_psn;
  }
  if (mask & IBV_QP_TIMEOUT) a.timeout = attr->timeout;
  if (mask & IBV_QP_RETRY_CNT) a.retry_cnt = attr->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) a.rnr_retry = attr->rnr_retry;
  if (mask & IBV_QP_MIN_RNR_TIMER) a.min_rnr_timer = attr->min_rnr_timer;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) a.max_rd_atomic = attr->max_rd_atomic;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) a.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  if (to == IBV_QPS_RESET) {
    // Back to RESET: the queues are emptied without completions.
    qp->sq.clear();
    qp->rq.clear();
    qp->busy = qp->in_message = qp->drop_message = false;
  }
  SetStateLocked(qp, to);
  if (to == IBV_QPS_ERR && cur != IBV_QPS_ERR) FlushLocked(qp);
  return 0;
}

// Removes from `m` every object `mine` selects and hands it to `release`.
template <typename Map, typename Mine, typename Release>
void ReleaseWhere(Map& m, Mine mine, Release release) {
  for (auto it = m.begin(); it != m.end();) {
    auto* obj = it->second;
    if (!mine(obj)) {
      ++it;
      continue;
    }
    it = m.erase(it);
    release(obj);
  }
}

}  // namespace

void InitTransportOps(Context* ctx) {
  ibv_context_ops& ops = ctx->vctx.context.ops;
  ops.poll_cq = PollCq;
  ops.req_notify_cq = ReqNotifyCq;
  ops.post_send = PostSend;
  ops.post_recv = PostRecv;
  ops.post_srq_recv = PostSrqRecv;
  ctx->vctx.create_qp_ex = CreateQp;
}

void CloseTransport(Context* ctx) {
  Registry& r = registry();
  Transport* t = nullptr;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    t = ctx->transport;
    if (t == nullptr) return;
    t->stop = true;
    if (t->wake_fd >= 0) {
      uint64_t one = 1;
      if (write(t->wake_fd, &one, sizeof one) < 0) { /* the thread also polls t->stop */
      }
    }
  }
  if (t->thread.joinable()) t->thread.join();
  std::lock_guard<std::mutex> lock(r.mu);
  Queues& q = queues();
  for (auto it = q.qps.begin(); it != q.qps.end();) {
    Qp* qp = (it++)->second;
    if (qp->ctx == ctx) DestroyQpLocked(r, qp);
  }
  ibv_context* const c = &ctx->vctx.context;
  ReleaseWhere(
      q.srqs, [c](Srq* s) { return s->srq.context == c; },
      [](Srq* s) {
        --s->pd->users;
        delete s;
      });
  ReleaseWhere(
      q.ahs, [c](Ah* ah) { return ah->ah.context == c; },
      [](Ah* ah) {
        --ah->pd->users;
        delete ah;
      });
  ReleaseWhere(
      q.cqs, [c](Cq* cq) { return cq->cq.context == c; }, [&r](Cq* cq) { ReleaseCqLocked(r, cq); });
  ReleaseWhere(
      q.channels, [c](Channel* ch) { return ch->ch.context == c; }, ReleaseChannel);
  if (t->epfd >= 0) close(t->epfd);
  if (t->wake_fd >= 0) close(t->wake_fd);
  delete t;
  ctx->transport = nullptr;
}

uint16_t LocalLid(unsigned device) { return PortOf(device).lid; }

ibv_gid LocalGid(unsigned device) {
  ibv_gid gid;
  gid.global.subnet_prefix = htobe64(0xfe80000000000000ULL);
  gid.global.interface_id = htobe64((NodeGuid(device) & ~0xffffULL) | LocalLid(device));
  return gid;
}

}  // namespace softverbs

using softverbs::Registry;
using softverbs::registry;

extern "C" {

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  softverbs::Context* ctx = softverbs::FindContextLocked(context);
  if (ctx == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  fcntl(fds[1], F_SETFL, O_NONBLOCK);
  auto* ch = new softverbs::Channel();
  ch->ch.context = context;
  ch->ch.fd = fds[0];
  ch->ch.refcnt = 0;
  ch->write_fd = fds[1];
  softverbs::TransportLocked(ctx);
  softverbs::queues().channels[&ch->ch] = ch;
  return &ch->ch;
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto& m = softverbs::queues().channels;
  auto it = m.find(channel);
  if (it == m.end()) return EINVAL;
  if (channel->refcnt != 0) return EBUSY;  // CQs still use it
  softverbs::ReleaseChannel(it->second);
  m.erase(it);
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                      int comp_vector) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  softverbs::Context* ctx = softverbs::FindContextLocked(context);
  softverbs::Channel* ch = nullptr;
  if (channel != nullptr) ch = softverbs::FindLocked(softverbs::queues().channels, channel);
  if (ctx == nullptr || cqe < 1 || cqe > softverbs::kMaxCqe || comp_vector != 0 ||
      (channel != nullptr && (ch == nullptr || channel->context != context))) {
    errno = EINVAL;
    return nullptr;
  }
  softverbs::TransportLocked(ctx);
  auto* cq = new softverbs::Cq();
  cq->channel = ch;
  cq->capacity = static_cast<size_t>(cqe);
  cq->cq.context = context;
  cq->cq.channel = channel;
  cq->cq.cq_context = cq_context;
  cq->cq.handle = r.next_handle++;
  cq->cq.cqe = cqe;
  pthread_mutex_init(&cq->cq.mutex, nullptr);
  pthread_cond_init(&cq->cq.cond, nullptr);
  if (ch != nullptr) ++ch->ch.refcnt;
  softverbs::queues().cqs[&cq->cq] = cq;
  ++r.counters.live_cqs;
  return &cq->cq;
}

// Fails (EBUSY) while QPs use the CQ or events read by ibv_get_cq_event are
// unacknowledged (libibverbs would wait for the acknowledgement forever).
int ibv_destroy_cq(ibv_cq* cq_in) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto& m = softverbs::queues().cqs;
  auto it = m.find(cq_in);
  if (it == m.end()) return EINVAL;
  softverbs::Cq* cq = it->second;
  if (cq->qps != 0 || cq->cq.comp_events_completed != cq->events_delivered) return EBUSY;
  m.erase(it);
  softverbs::ReleaseCqLocked(r, cq);
  return 0;
}

// Blocks (unless the channel's fd was made non-blocking) until a CQ armed by
// ibv_req_notify_cq has a completion. 0, or -1 with errno.
int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq_out, void** cq_context) {
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    if (softverbs::FindLocked(softverbs::queues().channels, channel) == nullptr) {
      errno = EINVAL;
      return -1;
    }
  }
  for (;;) {
    softverbs::Cq* cq = nullptr;
    ssize_t n = read(channel->fd, &cq, sizeof cq);
    if (n < 0 && errno == EINTR) continue;
    if (n != sizeof cq) {
      if (n >= 0) errno = EIO;
      return -1;
    }
    std::lock_guard<std::mutex> lock(registry().mu);
    if (softverbs::FindLocked(softverbs::queues().cqs, &cq->cq) != cq) continue;  // destroyed
    ++cq->events_delivered;
    if (cq_out != nullptr) *cq_out = &cq->cq;
    if (cq_context != nullptr) *cq_context = cq->cq.cq_context;
    return 0;
  }
}

void ibv_ack_cq_events(ibv_cq* cq_in, unsigned int nevents) {
  std::lock_guard<std::mutex> lock(registry().mu);
  softverbs::Cq* cq = softverbs::FindLocked(softverbs::queues().cqs, cq_in);
  if (cq != nullptr) cq->cq.comp_events_completed += nevents;
}

int ibv_resize_cq(ibv_cq* cq_in, int cqe) {
  std::lock_guard<std::mutex> lock(registry().mu);
  softverbs::Cq* cq = softverbs::FindLocked(softverbs::queues().cqs, cq_in);
  if (cq == nullptr || cqe < 1 || cqe > softverbs::kMaxCqe ||
      static_cast<size_t>(cqe) < cq->entries.size()) {
    return EINVAL;
  }
  cq->capacity = static_cast<size_t>(cqe);
  cq->cq.cqe = cqe;
  return 0;
}

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_qp_init_attr_ex ex;
  memset(&ex, 0, sizeof ex);
  memcpy(&ex, attr, sizeof *attr);
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = pd;
  ibv_qp* qp = softverbs::CreateQp(nullptr, &ex);
  if (qp != nullptr) attr->cap = ex.cap;
  return qp;
}

ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp_in) {
  std::lock_guard<std::mutex> lock(registry().mu);
  softverbs::Qp* qp = softverbs::FindLocked(softverbs::queues().qps, qp_in);
  if (qp == nullptr || !qp->ex_api) return nullptr;
  return &qp->qpx;
}

int ibv_modify_qp(ibv_qp* qp_in, ibv_qp_attr* attr, int attr_mask) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  softverbs::Qp* qp = softverbs::FindLocked(softverbs::queues().qps, qp_in);
  if (qp == nullptr || attr == nullptr) return EINVAL;
  int err = softverbs::ModifyQpLocked(qp, attr, attr_mask);
  if (err == 0) softverbs::PumpLocked(r, qp);
  return err;
}

int ibv_query_qp(ibv_qp* qp_in, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init_attr) {
  std::lock_guard<std::mutex> lock(registry().mu);
  softverbs::Qp* qp = softverbs::FindLocked(softverbs::queues().qps, qp_in);
  if (qp == nullptr || attr == nullptr || init_attr == nullptr) return EINVAL;
  *attr = qp->attr;
  memset(init_attr, 0, sizeof *init_attr);
  const ibv_qp& q = qp->qpx.qp_base;
  init_attr->qp_context = q.qp_context;
  init_attr->send_cq = q.send_cq;
  init_attr->recv_cq = q.recv_cq;
  init_attr->srq = q.srq;
  init_attr->cap = qp->cap;
  init_attr->qp_type = q.qp_type;
  init_attr->sq_sig_all = qp->sig_all;
  return 0;
}

int ibv_destroy_qp(ibv_qp* qp_in) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  softverbs::Qp* qp = softverbs::FindLocked(softverbs::queues().qps, qp_in);
  if (qp == nullptr) return EINVAL;
  softverbs::DestroyQpLocked(r, qp);
  return 0;
}

ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.pds.find(pd);
  if (it == r.pds.end() || attr == nullptr || attr->attr.max_wr == 0 ||
      attr->attr.max_wr > softverbs::kMaxWr || attr->attr.max_sge == 0 ||
      attr->attr.max_sge > softverbs::kMaxSge || attr->attr.srq_limit > attr->attr.max_wr) {
    errno = EINVAL;
    return nullptr;
  }
  auto* s = new softverbs::Srq();
  s->pd = it->second;
  s->max_wr = attr->attr.max_wr;
  s->max_sge = attr->attr.max_sge;
  s->limit = attr->attr.srq_limit;
  s->srq.context = pd->context;
  s->srq.srq_context = attr->srq_context;
  s->srq.pd = pd;
  s->srq.handle = r.next_handle++;
  pthread_mutex_init(&s->srq.mutex, nullptr);
  pthread_cond_init(&s->srq.cond, nullptr);
  ++s->pd->users;
  softverbs::TransportLocked(s->pd->ctx);
  softverbs::queues().srqs[&s->srq] = s;
  return &s->srq;
}

int ibv_modify_srq(ibv_srq* srq_in, ibv_srq_attr* attr, int mask) {
  std::lock_guard<std::mutex> lock(registry().mu);
  softverbs::Srq* s = softverbs::FindLocked(softverbs::queues().srqs, srq_in);
  if (s == nullptr || attr == nullptr || (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))) return EINVAL;
  if ((mask & IBV_SRQ_MAX_WR) &&
      (attr->max_wr == 0 || attr->max_wr > softverbs::kMaxWr || attr->max_wr < s->wqes.size())) {
    return EINVAL;
  }
  const uint32_t max_wr = (mask & IBV_SRQ_MAX_WR) ? attr->max_wr : s->max_wr;
  if ((mask & IBV_SRQ_LIMIT) && attr->srq_limit > max_wr) return EINVAL;
  s->max_wr = max_wr;
  if (mask & IBV_SRQ_LIMIT) s->limit = attr->srq_limit;
  return 0;
}

int ibv_query_srq(ibv_srq* srq_in, ibv_srq_attr* attr) {
  std::lock_guard<std::mutex> lock(registry().mu);
  softverbs::Srq* s = softverbs::FindLocked(softverbs::queues().srqs, srq_in);
  if (s == nullptr || attr == nullptr) return EINVAL;
  attr->max_wr = s->max_wr;
  attr->max_sge = s->max_sge;
  attr->srq_limit = s->limit;
  return 0;
}

int ibv_destroy_srq(ibv_srq* srq_in) {
  std::lock_guard<std::mutex> lock(registry().mu);
  auto& m = softverbs::queues().srqs;
  auto it = m.find(srq_in);
  if (it == m.end()) return EINVAL;
  if (it->second->qps != 0) return EBUSY;
  --it->second->pd->users;
  pthread_mutex_destroy(&it->second->srq.mutex);
  pthread_cond_destroy(&it->second->srq.cond);
  delete it->second;
  m.erase(it);
  return 0;
}

ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.pds.find(pd);
  if (it == r.pds.end() || attr == nullptr || attr->port_num != 1 || attr->dlid == 0 ||
      attr->dlid >= 0xc000 || (attr->is_global && attr->grh.sgid_index != 0)) {
    errno = EINVAL;
    return nullptr;
  }
  auto* ah = new softverbs::Ah();
  ah->pd = it->second;
  ah->attr = *attr;
  ah->ah.context = pd->context;
  ah->ah.pd = pd;
  ah->ah.handle = r.next_handle++;
  ++ah->pd->users;
  softverbs::TransportLocked(ah->pd->ctx);
  softverbs::queues().ahs[&ah->ah] = ah;
  return &ah->ah;
}

int ibv_destroy_ah(ibv_ah* ah_in) {
  std::lock_guard<std::mutex> lock(registry().mu);
  auto& m = softverbs::queues().ahs;
  auto it = m.find(ah_in);
  if (it == m.end()) return EINVAL;
  --it->second->pd->users;
  delete it->second;
  m.erase(it);
  return 0;
}

const char* ibv_wc_status_str(ibv_wc_status status) {
  static const char* const kNames[] = {"success",
                                       "local length error",
                                       "local QP operation error",
                                       "local EE context operation error",
                                       "local protection error",
                                       "Work Request Flushed Error",
                                       "memory management operation error",
                                       "bad response error",
                                       "local access error",
                                       "remote invalid request error",
                                       "remote access error",
                                       "remote operation error",
                                       "transport retry counter exceeded",
                                       "RNR retry counter exceeded",
                                       "local RDD violation error",
                                       "remote invalid RD request",
                                       "aborted error",
                                       "invalid EE context number",
                                       "invalid EE context state",
                                       "fatal error",
                                       "response timeout error",
                                       "general error",
                                       "TM error",
                                       "TM rendezvous pending"};
  const unsigned i = static_cast<unsigned>(status);
  return i < sizeof kNames / sizeof kNames[0] ? kNames[i] : "unknown";
}

}  // extern "C"
