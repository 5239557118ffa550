/* softverbs.h: the test-only entry points of softverbs, the stand-in
 * libibverbs.so.1 (see README.md in this directory).
 *
 * Programs built against rdma-core's headers load softverbs instead of the
 * real library (LD_LIBRARY_PATH). These extra functions let tests look
 * inside: what the "device" has registered, what a DMA write through a
 * registration does, and what a peer holding an rkey can reach. Resolve them with
 * dlsym(RTLD_DEFAULT, ...) when the program must also run against the real library.
 *
 * Invariants:
 *  - live_mrs == registrations - deregistrations - mrs_released_by_close.
 *  - bytes_pinned is the sum, over live non-ODP MRs, of the page-rounded
 *    span [floor(addr), ceil(addr + length)) that io_uring holds pinned (MRs
 *    with a write right) or mlock holds resident (MRs without one).
 *  - Every counter is updated under the same lock as the MR registry, so a
 *    snapshot is consistent.
 */
#ifndef SOFTVERBS_SOFTVERBS_H_
#define SOFTVERBS_SOFTVERBS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct softverbs_counters {
  uint64_t registrations;         /* successful ibv_reg_mr* calls, ODP included */
  uint64_t failed_registrations;  /* ibv_reg_mr* calls that returned NULL */
  uint64_t deregistrations;       /* successful ibv_dereg_mr calls */
  uint64_t rereg_calls;           /* successful ibv_rereg_mr calls */
  uint64_t mrs_released_by_close; /* MRs still live at ibv_close_device */
  uint64_t live_mrs;              /* MRs registered now */
  uint64_t live_pds;              /* PDs allocated now */
  uint64_t bytes_pinned;          /* pinned now (non-ODP MRs) */
  uint64_t peak_bytes_pinned;     /* high-water mark of bytes_pinned */
  uint64_t odp_registrations;     /* successful IBV_ACCESS_ON_DEMAND registrations */
  uint64_t advise_calls;          /* ibv_advise_mr calls that reached softverbs */
  uint64_t device_writes;         /* successful softverbs_device_write calls */
  uint64_t
      remote_accesses; /* successful rkey accesses: softverbs_remote_write/read and peers' RDMA */
  uint64_t remote_access_errors; /* rkey accesses (test entry points and peers' RDMA) that failed */
  uint64_t live_cqs;             /* completion queues now */
  uint64_t live_qps;             /* queue pairs now */
  uint64_t packets_sent;         /* fabric packets this process sent (requests and responses) */
};

/* Copies a consistent snapshot of the process-wide counters. */
void softverbs_get_counters(struct softverbs_counters* out);

/* A device-side write of `len` bytes from `src` to `addr` (in the MR's iova
 * space, like an SGE) through the MR whose lkey is `lkey`. Pinned MRs are
 * written through the io_uring fixed buffer (IORING_OP_READ_FIXED from a
 * memfd), i.e. into the pages pinned at registration, whatever the CPU's page
 * tables say now. ODP MRs are written through the current page tables
 * (process_vm_writev), like a device that faults pages on demand.
 * Returns 0, or: EINVAL unknown lkey or len == 0 or src == NULL;
 * ERANGE [addr, addr+len) not inside the MR; EACCES the MR lacks
 * IBV_ACCESS_LOCAL_WRITE; EFAULT (ODP) target not mapped writable; EIO the
 * kernel transferred fewer bytes than asked. */
int softverbs_device_write(uint32_t lkey, uint64_t addr, const void* src, size_t len);

/* What a peer's RDMA WRITE (softverbs_remote_write) or RDMA READ
 * (softverbs_remote_read) of `len` bytes at `addr` (in the MR's iova space)
 * with the rkey `rkey` does, checked like an HCA checks it (by the device
 * the key belongs to; every device has keys of its own): the MR named by
 * the rkey must be alive (rkeys die at ibv_dereg_mr and are never reused),
 * grant IBV_ACCESS_REMOTE_WRITE (resp. REMOTE_READ), and contain
 * [addr, addr+len) byte for byte. Data moves through the pages pinned at
 * registration, as softverbs_device_write does (ODP MRs, and MRs without a
 * write right, which are pinned for reading only: the current page
 * tables). Returns IBV_WC_SUCCESS (0) or the completion status the peer would
 * see (enum ibv_wc_status): IBV_WC_REM_ACCESS_ERR for a dead or unknown rkey,
 * a missing right, a range outside the MR, or (ODP) memory not mapped;
 * IBV_WC_LOC_PROT_ERR for a null src/dst; IBV_WC_REM_OP_ERR if the kernel
 * failed the copy. len == 0 succeeds without any check, as the InfiniBand
 * specification has zero-length RDMA operations skip the R_Key check. */
int softverbs_remote_write(uint32_t rkey, uint64_t addr, const void* src, size_t len);
int softverbs_remote_read(uint32_t rkey, uint64_t addr, void* dst, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* SOFTVERBS_SOFTVERBS_H_ */
