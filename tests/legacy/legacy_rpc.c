/* legacy_rpc.c: a naive two-process RPC system over RDMA, of the kind
 * mrcache-run is for.
 *
 * Plain C against rdma-core's headers, no knowledge of mrcache or softverbs.
 * A server and a client connect one RC QP each (the QP numbers, LIDs and PSNs
 * are exchanged over a unix stream socket). For every request the client
 *   - allocates a response buffer (sizes vary from 4 KiB to 2 MiB: the small
 *     ones come from the heap, the large ones from mmap, so free() munmaps
 *     them; every fifth request maps its buffer with mmap itself and munmaps
 *     it afterwards),
 *   - registers it with IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
 *   - SENDs {request number, addr, rkey, length} to the server,
 *   - waits for the server's RDMA WRITE WITH IMMEDIATE (the immediate is the
 *     request number), which fills the buffer with a pattern that depends on
 *     the request number and the byte's offset,
 *   - checks every byte, ibv_dereg_mr, and frees the buffer.
 * Freed buffers come back at the same addresses (the kernel reuses the hole a
 * munmap left), backed by new pages: a registration kept past the free would
 * send the server's write to the old pages, and the check counts the bytes
 * that did not arrive.
 *
 * With -l (late write) the client, after deregistering the last response
 * buffer and before freeing it, asks the server to write through that
 * buffer's rkey once more. An rkey dies at ibv_dereg_mr, so the server's
 * write must complete with IBV_WC_REM_ACCESS_ERR; the server reports the
 * status over the socket and both sides print it.
 *
 * stdout depends only on the arguments and the data that arrived (no
 * addresses, keys or times), so runs with and without the shim print the
 * same. The client's wall time and process CPU time go to stderr.
 *
 * Usage: legacy_rpc server SOCKET [-d DEVICE] [-g GID_INDEX]
 *        legacy_rpc client SOCKET [-d DEVICE] [-g GID_INDEX] [-n REQUESTS] [-l]
 * SOCKET is a unix socket path: the server listens there, the client connects.
 * DEVICE: the ibv device to use (default: the first); GID_INDEX: address the
 * peer through a GRH with that local GID (needed on RoCE), as the pingpongs'
 * -g does. REQUESTS defaults to 400.
 * Exit status: 0 every response verified (with -l: and the late write was
 * refused with a remote access error); 1 corrupted responses, a failed verb,
 * or (-l) a late write that was not refused; 2 bad usage or no device.
 */
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

enum {
  kRecvDepth = 16,
  kPsnClient = 0x1000,
  kPsnServer = 0x2000,
  kOpRequest = 1,
  kOpLateWrite = 2,
  kOpDone = 3,
  kMaxResponse = 2 << 20,
};

/* Response sizes: heap (< 128 KiB) and mmap, page multiples and odd sizes. */
static const size_t kSizes[] = {256 << 10, 4096,     1 << 20,   16 << 10, 300000,
                                2 << 20,   96 << 10, 512 << 10, 5000,     768 << 10};

/* A request on the wire, big-endian. */
struct message {
  uint32_t op;
  uint32_t request;
  uint64_t addr;
  uint32_t rkey;
  uint32_t length;
};

/* What the peers exchange over the socket to connect their QPs. */
struct endpoint {
  uint32_t lid;
  uint32_t qpn;
  uint32_t psn;
  union ibv_gid gid;
};

/* The command line's device choice. */
struct options {
  const char *device; /* NULL: the first device */
  int gid_index;      /* < 0: no GRH */
};

struct conn {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  int sock;
};

static const char *g_role = "legacy_rpc";

static void die(const char *what) {
  fprintf(stderr, "%s: %s: %s\n", g_role, what, strerror(errno));
  exit(2);
}

static uint64_t clock_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The byte the server writes at OFFSET of the response to REQUEST: never 0,
 * so a byte the write did not reach (still 0) always counts as corrupted. */
static unsigned char pattern(uint32_t request, size_t offset) {
  return (
      unsigned char)(((request * 131u + (uint32_t)offset * 7u + (uint32_t)(offset >> 12)) & 0xffu) |
                     1u);
}

/* Writes (WRITING) or reads LEN bytes of DATA on FD, retrying short
 * transfers; returns 0, or -1 on an error or end of file. */
static int transfer_all(int fd, void *data, size_t len, int writing) {
  char *p = data;
  while (len > 0) {
    ssize_t n = writing ? write(fd, p, len) : read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int write_all(int fd, const void *data, size_t len) {
  return transfer_all(fd, (void *)data, len, 1);
}

static int read_all(int fd, void *data, size_t len) { return transfer_all(fd, data, len, 0); }

/* Listens (server) or connects (client) on the unix socket PATH. */
static int open_socket(const char *path, int server) {
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof sa.sun_path) {
    errno = ENAMETOOLONG;
    die("socket path");
  }
  strcpy(sa.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  if (server) {
    unlink(path);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 1) != 0) die("listen");
    int peer = accept(fd, NULL, NULL);
    if (peer < 0) die("accept");
    close(fd);
    unlink(path);
    return peer;
  }
  /* The server may not be listening yet: retry for up to 10 s. */
  for (int attempt = 0; connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0; ++attempt) {
    if ((errno != ENOENT && errno != ECONNREFUSED) || attempt == 1000) die("connect");
    usleep(10000);
  }
  return fd;
}

/* Opens the device, creates the PD, CQ and an RC QP, exchanges endpoints
 * over the socket and moves the QP to RTS. */
static void connect_qp(struct conn *c, const char *path, int server, const struct options *opt) {
  int ndev = 0, pick = 0;
  struct ibv_device **devs = ibv_get_device_list(&ndev);
  if (devs == NULL || ndev == 0) {
    fprintf(stderr, "%s: no RDMA device\n", g_role);
    exit(2);
  }
  while (opt->device != NULL && pick < ndev &&
         strcmp(ibv_get_device_name(devs[pick]), opt->device) != 0)
    ++pick;
  if (pick == ndev) {
    fprintf(stderr, "%s: device %s not found\n", g_role, opt->device);
    exit(2);
  }
  c->ctx = ibv_open_device(devs[pick]);
  ibv_free_device_list(devs);
  if (c->ctx == NULL) die("ibv_open_device");
  c->pd = ibv_alloc_pd(c->ctx);
  if (c->pd == NULL) die("ibv_alloc_pd");
  c->cq = ibv_create_cq(c->ctx, 4 * kRecvDepth, NULL, NULL, 0);
  if (c->cq == NULL) die("ibv_create_cq");
  struct ibv_qp_init_attr init = {
      .send_cq = c->cq,
      .recv_cq = c->cq,
      .cap = {.max_send_wr = 4, .max_recv_wr = kRecvDepth, .max_send_sge = 1, .max_recv_sge = 1},
      .qp_type = IBV_QPT_RC,
  };
  c->qp = ibv_create_qp(c->pd, &init);
  if (c->qp == NULL) die("ibv_create_qp");
  struct ibv_port_attr port;
  if (ibv_query_port(c->ctx, 1, &port) != 0) die("ibv_query_port");

  c->sock = open_socket(path, server);
  struct endpoint me = {htobe32(port.lid),
                        htobe32(c->qp->qp_num),
                        htobe32(server ? kPsnServer : kPsnClient),
                        {.raw = {0}}};
  if (opt->gid_index >= 0 && ibv_query_gid(c->ctx, 1, opt->gid_index, &me.gid) != 0)
    die("ibv_query_gid");
  struct endpoint peer;
  if (write_all(c->sock, &me, sizeof me) != 0 || read_all(c->sock, &peer, sizeof peer) != 0)
    die("endpoint exchange");

  struct ibv_qp_attr attr = {
      .qp_state = IBV_QPS_INIT,
      .pkey_index = 0,
      .port_num = 1,
      .qp_access_flags = IBV_ACCESS_REMOTE_WRITE,
  };
  if (ibv_modify_qp(c->qp, &attr,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
    die("modify QP to INIT");
  memset(&attr, 0, sizeof attr);
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_4096;
  attr.dest_qp_num = be32toh(peer.qpn);
  attr.rq_psn = be32toh(peer.psn);
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  attr.ah_attr.dlid = (uint16_t)be32toh(peer.lid);
  attr.ah_attr.port_num = 1;
  if (opt->gid_index >= 0) {
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = peer.gid;
    attr.ah_attr.grh.sgid_index = (uint8_t)opt->gid_index;
    attr.ah_attr.grh.hop_limit = 1;
  }
  if (ibv_modify_qp(c->qp, &attr,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
    die("modify QP to RTR");
  memset(&attr, 0, sizeof attr);
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.sq_psn = server ? kPsnServer : kPsnClient;
  attr.max_rd_atomic = 1;
  if (ibv_modify_qp(c->qp, &attr,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0)
    die("modify QP to RTS");
  /* Both QPs are in RTS before either side sends. */
  char token = 'r', got;
  if (write_all(c->sock, &token, 1) != 0 || read_all(c->sock, &got, 1) != 0) die("RTS handshake");
}

/* Waits for one completion and returns it in *wc. */
static void poll_one(struct conn *c, struct ibv_wc *wc) {
  int n;
  while ((n = ibv_poll_cq(c->cq, 1, wc)) == 0) {
  }
  if (n < 0) {
    errno = -n;
    die("ibv_poll_cq");
  }
}

static int post_recv(struct conn *c, struct ibv_sge *sge, uint64_t wr_id) {
  struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = sge, .num_sge = sge ? 1 : 0}, *bad;
  return ibv_post_recv(c->qp, &wr, &bad);
}

/* Posts one signaled send WR and waits for its completion; returns its status. */
static enum ibv_wc_status post_send_wait(struct conn *c, struct ibv_send_wr *wr) {
  struct ibv_send_wr *bad;
  wr->send_flags = IBV_SEND_SIGNALED;
  if (ibv_post_send(c->qp, wr, &bad) != 0) die("ibv_post_send");
  struct ibv_wc wc;
  poll_one(c, &wc);
  if (wc.wr_id != wr->wr_id) {
    fprintf(stderr, "%s: unexpected completion %llu (opcode %d, status %s)\n", g_role,
            (unsigned long long)wc.wr_id, wc.opcode, ibv_wc_status_str(wc.status));
    exit(1);
  }
  return wc.status;
}

static void teardown(struct conn *c) {
  if (ibv_destroy_qp(c->qp) != 0 || ibv_destroy_cq(c->cq) != 0 || ibv_dealloc_pd(c->pd) != 0 ||
      ibv_close_device(c->ctx) != 0) {
    fprintf(stderr, "%s: teardown failed\n", g_role);
    exit(1);
  }
  close(c->sock);
}

static int run_server(const char *path, const struct options *opt) {
  g_role = "legacy_rpc server";
  struct conn c;
  connect_qp(&c, path, 1, opt);
  /* The response source buffer and the request slots: registered once. */
  unsigned char *source = malloc(kMaxResponse);
  struct message *slots = calloc(kRecvDepth, sizeof *slots);
  if (source == NULL || slots == NULL) die("malloc");
  struct ibv_mr *source_mr = ibv_reg_mr(c.pd, source, kMaxResponse, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *slots_mr =
      ibv_reg_mr(c.pd, slots, kRecvDepth * sizeof *slots, IBV_ACCESS_LOCAL_WRITE);
  if (source_mr == NULL || slots_mr == NULL) die("ibv_reg_mr");
  struct ibv_sge slot_sge[kRecvDepth];
  for (int i = 0; i < kRecvDepth; ++i) {
    slot_sge[i] = (struct ibv_sge){(uintptr_t)&slots[i], sizeof slots[i], slots_mr->lkey};
    if (post_recv(&c, &slot_sge[i], (uint64_t)i) != 0) die("ibv_post_recv");
  }

  long served = 0;
  int exit_code = 0;
  for (;;) {
    struct ibv_wc wc;
    poll_one(&c, &wc);
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || wc.wr_id >= kRecvDepth) {
      fprintf(stderr, "%s: receive failed: %s\n", g_role, ibv_wc_status_str(wc.status));
      exit_code = 1;
      break;
    }
    struct message m = slots[wc.wr_id];
    uint32_t op = be32toh(m.op), request = be32toh(m.request), length = be32toh(m.length);
    if (op == kOpDone) break;
    if (post_recv(&c, &slot_sge[wc.wr_id], wc.wr_id) != 0) die("ibv_post_recv");
    if (length > kMaxResponse || (op != kOpRequest && op != kOpLateWrite)) {
      fprintf(stderr, "%s: bad request (op %u, length %u)\n", g_role, op, length);
      exit_code = 1;
      break;
    }
    for (uint32_t k = 0; k < length; ++k) source[k] = pattern(request, k);
    struct ibv_sge sge = {(uintptr_t)source, length, source_mr->lkey};
    struct ibv_send_wr wr = {
        .wr_id = kRecvDepth + 1,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = op == kOpRequest ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
        .imm_data = htobe32(request),
        .wr = {.rdma = {.remote_addr = be64toh(m.addr), .rkey = be32toh(m.rkey)}},
    };
    enum ibv_wc_status status = post_send_wait(&c, &wr);
    if (op == kOpLateWrite) {
      /* The QPs are in the error state now if the write was refused: the
       * verdict goes back over the socket, and the run ends. */
      printf("late write after ibv_dereg_mr: %s\n", ibv_wc_status_str(status));
      uint32_t verdict = htobe32((uint32_t)status);
      if (write_all(c.sock, &verdict, sizeof verdict) != 0) die("sending the verdict");
      break;
    }
    if (status != IBV_WC_SUCCESS) {
      fprintf(stderr, "%s: response %u failed: %s\n", g_role, request, ibv_wc_status_str(status));
      exit_code = 1;
      break;
    }
    ++served;
  }
  printf("served %ld responses\n", served);
  fflush(stdout);
  /* Wait until the client is done with the QPs before destroying ours. */
  char token;
  (void)read_all(c.sock, &token, 1);
  if (ibv_dereg_mr(source_mr) != 0 || ibv_dereg_mr(slots_mr) != 0) die("ibv_dereg_mr");
  free(source);
  free(slots);
  teardown(&c);
  return exit_code;
}

/* A response buffer: from malloc, or (every fifth request) mmap. */
static void *alloc_response(long request, size_t size) {
  if (request % 5 == 4) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
  }
  return malloc(size);
}

static void free_response(long request, void *buf, size_t size) {
  if (request % 5 == 4) {
    munmap(buf, size);
  } else {
    free(buf);
  }
}

static int run_client(const char *path, const struct options *opt, long requests, int late_write) {
  g_role = "legacy_rpc client";
  /* glibc raises its mmap threshold after the first free of an mmapped
   * chunk; pin it so the large responses keep coming from mmap. */
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  struct conn c;
  connect_qp(&c, path, 0, opt);
  struct message *request_msg = malloc(sizeof *request_msg);
  if (request_msg == NULL) die("malloc");
  struct ibv_mr *msg_mr =
      ibv_reg_mr(c.pd, request_msg, sizeof *request_msg, IBV_ACCESS_LOCAL_WRITE);
  if (msg_mr == NULL) die("ibv_reg_mr");
  struct ibv_sge msg_sge = {(uintptr_t)request_msg, sizeof *request_msg, msg_mr->lkey};
  struct ibv_send_wr send = {.wr_id = 1, .sg_list = &msg_sge, .num_sge = 1, .opcode = IBV_WR_SEND};

  long corrupted_requests = 0, failures = 0;
  uint64_t corrupted_bytes = 0, bytes = 0;
  int late_refused = 0;
  uint64_t t0 = clock_ns(CLOCK_MONOTONIC), cpu0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  for (long r = 0; r < requests && failures == 0; ++r) {
    size_t size = kSizes[(size_t)r % (sizeof kSizes / sizeof kSizes[0])];
    unsigned char *buf = alloc_response(r, size);
    if (buf == NULL) die("allocating a response buffer");
    memset(buf, 0, size);
    struct ibv_mr *mr =
        ibv_reg_mr(c.pd, buf, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (mr == NULL) die("ibv_reg_mr of a response buffer");
    /* The response arrives as a WRITE WITH IMMEDIATE: it consumes a receive. */
    if (post_recv(&c, NULL, 2) != 0) die("ibv_post_recv");
    *request_msg =
        (struct message){htobe32(kOpRequest), htobe32((uint32_t)r), htobe64((uintptr_t)buf),
                         htobe32(mr->rkey), htobe32((uint32_t)size)};
    enum ibv_wc_status status = post_send_wait(&c, &send);
    struct ibv_wc wc = {.status = status};
    if (status == IBV_WC_SUCCESS) poll_one(&c, &wc);
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
        be32toh(wc.imm_data) != (uint32_t)r) {
      fprintf(stderr, "%s: request %ld failed: %s\n", g_role, r, ibv_wc_status_str(wc.status));
      ++failures;
    } else {
      uint64_t bad = 0;
      for (size_t k = 0; k < size; ++k) bad += buf[k] != pattern((uint32_t)r, k);
      corrupted_bytes += bad;
      corrupted_requests += bad != 0;
      bytes += size;
    }
    const uint32_t rkey = mr->rkey; /* mr is gone after ibv_dereg_mr */
    if (ibv_dereg_mr(mr) != 0) die("ibv_dereg_mr of a response buffer");
    if (late_write && r == requests - 1 && failures == 0) {
      /* Ask for one more write through the rkey just deregistered; the
       * buffer stays allocated until the verdict is in. */
      *request_msg =
          (struct message){htobe32(kOpLateWrite), htobe32((uint32_t)r), htobe64((uintptr_t)buf),
                           htobe32(rkey), htobe32((uint32_t)size)};
      if (post_send_wait(&c, &send) != IBV_WC_SUCCESS) die("sending the late-write request");
      uint32_t verdict;
      if (read_all(c.sock, &verdict, sizeof verdict) != 0) die("reading the verdict");
      verdict = be32toh(verdict);
      printf("late write after ibv_dereg_mr: %s\n", ibv_wc_status_str((enum ibv_wc_status)verdict));
      late_refused = verdict == IBV_WC_REM_ACCESS_ERR;
    }
    free_response(r, buf, size);
  }
  uint64_t elapsed = clock_ns(CLOCK_MONOTONIC) - t0;
  uint64_t cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu0; /* every thread of the process */
  if (!late_write) {
    *request_msg = (struct message){.op = htobe32(kOpDone)};
    if (post_send_wait(&c, &send) != IBV_WC_SUCCESS) die("sending done");
  }
  printf("requests %ld bytes %llu corrupted_bytes %llu corrupted_requests %ld failures %ld\n",
         requests, (unsigned long long)bytes, (unsigned long long)corrupted_bytes,
         corrupted_requests, failures);
  fprintf(stderr, "legacy_rpc: wall_ns=%llu cpu_ns=%llu\n", (unsigned long long)elapsed,
          (unsigned long long)cpu);
  fflush(stdout);
  char token = 'd';
  if (write_all(c.sock, &token, 1) != 0) die("telling the server we are done");
  if (ibv_dereg_mr(msg_mr) != 0) die("ibv_dereg_mr");
  free(request_msg);
  teardown(&c);
  int ok = corrupted_bytes == 0 && failures == 0 && (!late_write || late_refused);
  return ok ? 0 : 1;
}

static int usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s server SOCKET [-d DEVICE] [-g GID_INDEX]\n"
          "       %s client SOCKET [-d DEVICE] [-g GID_INDEX] [-n REQUESTS] [-l]\n",
          argv0, argv0);
  return 2;
}

/* Parses TEXT as an integer in [lo, hi] into *out; -1 if it is not one. */
static int parse_long(const char *text, long lo, long hi, long *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) return usage(argv[0]);
  int server = strcmp(argv[1], "server") == 0;
  if (!server && strcmp(argv[1], "client") != 0) return usage(argv[0]);
  struct options opt = {NULL, -1};
  long requests = 400, gid_index = -1;
  int late_write = 0;
  for (int i = 3; i < argc; ++i) {
    const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (!server && strcmp(flag, "-l") == 0) {
      late_write = 1;
    } else if (strcmp(flag, "-d") == 0 && value != NULL) {
      opt.device = value;
      ++i;
    } else if (strcmp(flag, "-g") == 0 && value != NULL) {
      if (parse_long(value, 0, 255, &gid_index) != 0) {
        fprintf(stderr, "%s: -g takes a GID index in 0..255\n", argv[0]);
        return 2;
      }
      opt.gid_index = (int)gid_index;
      ++i;
    } else if (!server && strcmp(flag, "-n") == 0 && value != NULL) {
      if (parse_long(value, 1, 10000000, &requests) != 0) {
        fprintf(stderr, "%s: -n takes a request count in 1..10000000\n", argv[0]);
        return 2;
      }
      ++i;
    } else {
      return usage(argv[0]);
    }
  }
  return server ? run_server(argv[2], &opt) : run_client(argv[2], &opt, requests, late_write);
}
