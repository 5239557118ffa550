// mpi_sendrecv: a naive MPI application. Rank 0 and rank 1 exchange
// messages of many sizes, each in a freshly malloc'ed buffer freed right
// after (so the runtime registers memory that is then returned to the
// allocator, and large buffers to the kernel), and check every byte; then an
// allreduce whose result is checked. Prints "rank N: ok" and exits 0 when
// every check passed; exits 1 on the first mismatch, naming it.
//
// Usage: mpi_sendrecv [MAX_BYTES]: messages longer than MAX_BYTES are left
// out (default: none, up to 4 MiB); exit 2 on a malformed MAX_BYTES.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

// The byte at index i of the message of size n, round r, sent by rank s.
static unsigned char Pattern(size_t i, size_t n, int r, int s) {
  return (unsigned char)(i * 131u + n * 7u + (size_t)r * 17u + (size_t)s * 101u + (i >> 8));
}

// One message from `from` to `to`: a fresh buffer filled or checked.
static int Exchange(int rank, int from, int to, size_t n, int round) {
  unsigned char* buf = malloc(n == 0 ? 1 : n);
  if (buf == NULL) {
    fprintf(stderr, "rank %d: malloc(%zu) failed\n", rank, n);
    return 1;
  }
  int bad = 0;
  if (rank == from) {
    for (size_t i = 0; i < n; ++i) buf[i] = Pattern(i, n, round, from);
    MPI_Send(buf, (int)n, MPI_BYTE, to, round, MPI_COMM_WORLD);
  } else if (rank == to) {
    MPI_Status status;
    MPI_Recv(buf, (int)n, MPI_BYTE, from, round, MPI_COMM_WORLD, &status);
    int count = -1;
    MPI_Get_count(&status, MPI_BYTE, &count);
    if (count != (int)n) {
      fprintf(stderr, "rank %d: round %d received %d bytes, expected %zu\n", rank, round, count, n);
      bad = 1;
    }
    for (size_t i = 0; i < n && !bad; ++i) {
      if (buf[i] != Pattern(i, n, round, from)) {
        fprintf(stderr,
                "rank %d: round %d, %zu-byte message: byte %zu is 0x%02x, expected 0x%02x\n", rank,
                round, n, i, buf[i], Pattern(i, n, round, from));
        bad = 1;
      }
    }
  }
  free(buf);
  return bad;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  size_t max_bytes = (size_t)-1;
  if (argc > 1) {
    char* end = NULL;
    unsigned long long v = strtoull(argv[1], &end, 10);
    if (argv[1][0] == '\0' || argv[1][0] == '-' || *end != '\0') {
      fprintf(stderr, "mpi_sendrecv: MAX_BYTES '%s' is not a byte count\n", argv[1]);
      MPI_Finalize();
      return 2;
    }
    max_bytes = (size_t)v;
  }
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) fprintf(stderr, "mpi_sendrecv needs exactly 2 ranks, got %d\n", size);
    MPI_Finalize();
    return 1;
  }
  // Eager, segmented and rendezvous sizes, and their neighbours.
  static const size_t kSizes[] = {0,     1,     7,     64,     4095,    4096,    4097,    8192,
                                  65535, 65536, 65537, 262144, 1048576, 1048579, 3 << 20, 4 << 20};
  const int kRounds = 3;
  int bad = 0, round = 0;
  for (int r = 0; r < kRounds && !bad; ++r) {
    for (size_t k = 0; k < sizeof kSizes / sizeof kSizes[0] && !bad; ++k) {
      if (kSizes[k] > max_bytes) continue;
      bad |= Exchange(rank, 0, 1, kSizes[k], round++);
      bad |= Exchange(rank, 1, 0, kSizes[k], round++);
    }
  }
  // Allreduce: element i of rank s contributes (s + 1) * (i + 1).
  const int kCount = 100000;
  long* mine = malloc(kCount * sizeof *mine);
  long* sum = malloc(kCount * sizeof *sum);
  for (int i = 0; i < kCount; ++i) mine[i] = (long)(rank + 1) * (i + 1);
  MPI_Allreduce(mine, sum, kCount, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < kCount && !bad; ++i) {
    if (sum[i] != 3L * (i + 1)) {
      fprintf(stderr, "rank %d: allreduce element %d is %ld, expected %ld\n", rank, i, sum[i],
              3L * (i + 1));
      bad = 1;
    }
  }
  free(mine);
  free(sum);
  int any_bad = 0;
  MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (!bad) printf("rank %d: ok (%d messages, allreduce of %d longs)\n", rank, round, kCount);
  MPI_Finalize();
  return any_bad ? 1 : 0;
}
