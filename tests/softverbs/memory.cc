// memory.cc: protection domains, memory regions, ibv_advise_mr and the
// device-side write.
//
// Rules (ibv_reg_mr(3), ibv_rereg_mr(3), ibv_alloc_pd(3), kernel uverbs):
//  - access: an unknown bit outside the optional range (bits 20..29) is
//    EINVAL; unknown optional bits are dropped, as libibverbs does;
//    REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE is EINVAL.
//  - length 0 or above the device's max_mr_size (SOFTVERBS_MAX_MR_SIZE),
//    addr + length overflowing, or iova not congruent with addr modulo the
//    page size is EINVAL; unmapped memory is EFAULT (the kernel's pin
//    fails), and so is memory the CPU may not write when the MR grants a
//    write right; the context's max_mr MRs live, or a full pin table (MRs
//    with a write right), is ENOMEM.
//  - pinning: with a write right through io_uring (pin_table.h), without
//    one for reading only (read_only_pins.h), as the kernel pins.
//  - fork protection (fork_protection.h), when on: MADV_DONTFORK over a
//    non-ODP MR's pages before it is pinned, MADV_DOFORK after it is
//    deregistered, as libibverbs' ibv_reg_mr and ibv_dereg_mr do.
//  - IBV_ACCESS_ON_DEMAND on a device without ODP is EOPNOTSUPP (as the
//    kernel's ib_check_mr_access); such MRs pin nothing and may cover memory
//    not mapped yet. addr NULL + length SIZE_MAX + ON_DEMAND is the implicit
//    ODP MR: EOPNOTSUPP without implicit ODP, EINVAL if iova != 0.
//  - an unknown PD or MR is EINVAL; ibv_dealloc_pd with MRs is EBUSY.
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <mutex>

#include "tests/softverbs/fork_protection.h"
#include "tests/softverbs/read_only_pins.h"
#include "tests/softverbs/registry.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace softverbs {
namespace {

constexpr unsigned kKnownAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
    IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND |
    IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING;

// 0 or EINVAL; *accepted gets the bits the MR keeps.
int CheckAccess(unsigned access, unsigned* accepted) {
  if (access & ~kKnownAccess & ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE)) return EINVAL;
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(access & IBV_ACCESS_LOCAL_WRITE)) {
    return EINVAL;
  }
  *accepted = access & kKnownAccess;
  return 0;
}

bool IsImplicit(const void* addr, size_t length, unsigned access) {
  return (access & IBV_ACCESS_ON_DEMAND) && addr == nullptr && length == SIZE_MAX;
}

// Checks a translation (addr, length, iova) for an MR with `access` on `ctx`.
int CheckRange(const Context* ctx, void* addr, size_t length, uint64_t iova, unsigned access) {
  const bool on_demand = access & IBV_ACCESS_ON_DEMAND;
  if (on_demand && ctx->odp == OdpLevel::kNone) return EOPNOTSUPP;
  if (IsImplicit(addr, length, access)) {
    if (ctx->odp != OdpLevel::kImplicit) return EOPNOTSUPP;
    return iova == 0 ? 0 : EINVAL;
  }
  const uintptr_t start = reinterpret_cast<uintptr_t>(addr);
  // As ib_umem_get: the page-rounded end must not wrap either.
  const uintptr_t page = PageSize();
  if (length == 0 || start + length < start || ((start + length + page - 1) & ~(page - 1)) == 0) {
    return EINVAL;
  }
  if ((start ^ iova) & (page - 1)) return EINVAL;
  if (iova + length < iova) return EINVAL;
  if (length > ctx->max_mr_size) return EINVAL;
  return 0;
}

// Pins a non-ODP MR's pages as the kernel would for `access`: for write
// through ctx's io_uring table (*slots), else for reading only
// (*read_only). 0 or an errno.
int PinPages(Context* ctx, void* addr, size_t length, unsigned access, std::vector<uint32_t>* slots,
             bool* read_only) {
  *read_only = !AccessWritable(access);
  if (*read_only) return PinReadOnly(addr, length);
  return ctx->pins.Pin(addr, length, slots);
}

// Releases what PinPages took.
void UnpinPages(Context* ctx, void* addr, size_t length, const std::vector<uint32_t>& slots,
                bool read_only) {
  if (read_only) {
    UnpinReadOnly(addr, length);
  } else if (!slots.empty()) {
    ctx->pins.Unpin(slots);
  }
}

uint64_t PinnedSpan(void* addr, size_t length) {
  const uintptr_t page = PageSize();
  const uintptr_t start = reinterpret_cast<uintptr_t>(addr) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(addr) + length + page - 1) & ~(page - 1);
  return end - start;
}

void AddPinnedLocked(Registry& r, uint64_t bytes) {
  r.counters.bytes_pinned += bytes;
  if (r.counters.bytes_pinned > r.counters.peak_bytes_pinned) {
    r.counters.peak_bytes_pinned = r.counters.bytes_pinned;
  }
}

ibv_mr* Fail(int err) {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    ++r.counters.failed_registrations;
  }
  errno = err;
  return nullptr;
}

ibv_mr* RegisterMr(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  Registry& r = registry();
  Pd* owner = nullptr;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.pds.find(pd);
    if (it == r.pds.end()) {
      ++r.counters.failed_registrations;
      errno = EINVAL;
      return nullptr;
    }
    owner = it->second;
    ++owner->mrs;  // holds the PD (dealloc is EBUSY) while we pin unlocked
  }
  bool counted = false;     // holds one of the context's max_mr MRs
  bool protected_ = false;  // fork protection applied to the range
  auto release = [&] {
    if (protected_) DoForkRange(addr, length);
    std::lock_guard<std::mutex> lock(r.mu);
    --owner->mrs;
    if (counted) --owner->ctx->mrs;
  };
  unsigned accepted = 0;
  int err = CheckAccess(access, &accepted);
  if (err == 0) err = CheckRange(owner->ctx, addr, length, iova, accepted);
  if (err == 0) {
    std::lock_guard<std::mutex> lock(r.mu);
    if (owner->ctx->mrs >= owner->ctx->max_mr) {
      err = ENOMEM;
    } else {
      ++owner->ctx->mrs;
      counted = true;
    }
  }
  std::vector<uint32_t> slots;
  bool read_only = false;
  const bool on_demand = accepted & IBV_ACCESS_ON_DEMAND;
  if (err == 0 && !on_demand) {
    if (DontForkRange(addr, length) != 0) {
      err = errno;
    } else {
      protected_ = true;
      err = PinPages(owner->ctx, addr, length, accepted, &slots, &read_only);
    }
  }
  if (err != 0) {
    release();
    return Fail(err);
  }
  auto* mr = new Mr();
  mr->pd = owner;
  mr->iova = iova;
  mr->access = accepted;
  mr->odp = on_demand;
  mr->implicit = IsImplicit(addr, length, accepted);
  mr->slots = std::move(slots);
  mr->read_only_pin = read_only;
  mr->pinned_bytes = on_demand ? 0 : PinnedSpan(addr, length);
  mr->mr.context = pd->context;
  mr->mr.pd = pd;
  mr->mr.addr = addr;
  mr->mr.length = length;
  std::lock_guard<std::mutex> lock(r.mu);
  mr->mr.handle = r.next_handle++;
  mr->mr.lkey = r.NewKeyLocked(owner->ctx->device);
  mr->mr.rkey = mr->mr.lkey;
  r.mrs[&mr->mr] = mr;
  r.keys[owner->ctx->device].by_key[mr->mr.lkey] = mr;
  ++r.counters.registrations;
  ++r.counters.live_mrs;
  if (on_demand) ++r.counters.odp_registrations;
  AddPinnedLocked(r, mr->pinned_bytes);
  return &mr->mr;
}

int ReregInputError(int err) {
  errno = err;
  return IBV_REREG_MR_ERR_INPUT;
}

}  // namespace

int MrCopyLocked(Mr* m, uint64_t addr, void* buf, size_t len, bool to_memory) {
  if (len == 0) return 0;
  const uintptr_t start = reinterpret_cast<uintptr_t>(m->mr.addr);
  const uintptr_t target = start + (addr - m->iova);
  if (m->odp || m->read_only_pin) {
    // Through the current page tables, faulting pages in like an ODP device
    // (read-only pins keep those pages resident).
    iovec local{buf, len};
    iovec remote{reinterpret_cast<void*>(target), len};
    ssize_t n = to_memory ? process_vm_writev(getpid(), &local, 1, &remote, 1, 0)
                          : process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (n < 0) return errno;
    return static_cast<size_t>(n) == len ? 0 : EFAULT;
  }
  return to_memory ? m->pd->ctx->pins.Write(m->slots, start, target, buf, len)
                   : m->pd->ctx->pins.Read(m->slots, start, target, buf, len);
}

int CheckRkeyLocked(Registry& r, uint32_t rkey, uint64_t addr, uint64_t len, unsigned right,
                    const Pd* pd, Mr** out) {
  // One key per MR (lkey == rkey), looked up in the responder's device's
  // own table: a key of another device is unknown here.
  Mr* m = pd != nullptr ? r.MrByKeyLocked(pd->ctx->device, rkey) : r.MrByKeyLocked(rkey);
  if (m == nullptr || m->mr.rkey != rkey) return IBV_WC_REM_ACCESS_ERR;
  if (pd != nullptr && m->pd != pd) return IBV_WC_REM_ACCESS_ERR;
  if ((m->access & right) != right) return IBV_WC_REM_ACCESS_ERR;
  if (addr + len < addr || addr < m->iova || addr + len - m->iova > m->mr.length) {
    return IBV_WC_REM_ACCESS_ERR;
  }
  if (out != nullptr) *out = m;
  return IBV_WC_SUCCESS;
}

int RemoteAccessLocked(Registry& r, uint32_t rkey, uint64_t addr, void* buf, size_t len,
                       bool to_memory, const Pd* pd) {
  if (len == 0) return IBV_WC_SUCCESS;
  auto fail = [&r](int status) {
    ++r.counters.remote_access_errors;
    return status;
  };
  if (buf == nullptr) return fail(IBV_WC_LOC_PROT_ERR);
  Mr* m = nullptr;
  const unsigned right = to_memory ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ;
  int status = CheckRkeyLocked(r, rkey, addr, len, right, pd, &m);
  if (status != IBV_WC_SUCCESS) return fail(status);
  int err = MrCopyLocked(m, addr, buf, len, to_memory);
  // ODP: memory not mapped is the peer's access error; a failed pinned copy
  // is the responder's operational error.
  if (err != 0) return fail(m->odp ? IBV_WC_REM_ACCESS_ERR : IBV_WC_REM_OP_ERR);
  ++r.counters.remote_accesses;
  return IBV_WC_SUCCESS;
}

namespace {

// A peer's RDMA access through `rkey` (softverbs.h). `to_memory`: WRITE
// (from `buf` into the MR), else READ (from the MR into `buf`).
int RemoteAccess(uint32_t rkey, uint64_t addr, void* buf, size_t len, bool to_memory) {
  if (len == 0) return IBV_WC_SUCCESS;
  Registry& r = registry();
  // Held throughout, so the MR (and its slots) cannot be released mid-access.
  std::lock_guard<std::mutex> lock(r.mu);
  return RemoteAccessLocked(r, rkey, addr, buf, len, to_memory, nullptr);
}

}  // namespace

int AdviseMr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
             uint32_t num_sge) {
  Registry& r = registry();
  struct Range {
    uintptr_t start, end;
  };
  std::vector<Range> ranges;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    ++r.counters.advise_calls;
    auto it = r.pds.find(pd);
    if (it == r.pds.end()) return EINVAL;
    if (it->second->ctx->odp == OdpLevel::kNone) return EOPNOTSUPP;
    if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
        advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) {
      return EINVAL;
    }
    if (flags & ~static_cast<uint32_t>(IBV_ADVISE_MR_FLAG_FLUSH)) return EINVAL;
    if (sg_list == nullptr || num_sge == 0) return EINVAL;
    for (uint32_t i = 0; i < num_sge; ++i) {
      const Mr* mr = r.MrByKeyLocked(it->second->ctx->device, sg_list[i].lkey);
      if (mr == nullptr) return EINVAL;
      if (!mr->odp || mr->pd != it->second) return EINVAL;
      const uint64_t addr = sg_list[i].addr, len = sg_list[i].length;
      if (len == 0 || addr + len < addr || addr < mr->iova ||
          addr + len - mr->iova > mr->mr.length) {
        return EINVAL;
      }
      const uintptr_t start = reinterpret_cast<uintptr_t>(mr->mr.addr) + (addr - mr->iova);
      ranges.push_back({start, start + len});
    }
  }
  if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) return 0;
  // Fault the pages in now, as the device's page-fault handler would.
  const int how =
      advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
  const uintptr_t page = PageSize();
  for (const Range& range : ranges) {
    uintptr_t start = range.start & ~(page - 1);
    uintptr_t end = (range.end + page - 1) & ~(page - 1);
    if (madvise(reinterpret_cast<void*>(start), end - start, how) != 0) {
      // Without FLUSH the real prefetch is asynchronous and its failure silent.
      if (flags & IBV_ADVISE_MR_FLAG_FLUSH) return errno == ENOMEM ? EFAULT : errno;
    }
  }
  return 0;
}

}  // namespace softverbs

using softverbs::Mr;
using softverbs::Pd;
using softverbs::Registry;
using softverbs::registry;

extern "C" {

SOFTVERBS_DEFAULT_1_1(ibv_alloc_pd);
ibv_pd* softverbs_ibv_alloc_pd_1_1(ibv_context* context) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.contexts.find(context);
  if (it == r.contexts.end()) {
    errno = EINVAL;
    return nullptr;
  }
  auto* pd = new Pd();
  pd->ctx = it->second;
  pd->pd.context = context;
  pd->pd.handle = r.next_handle++;
  r.pds[&pd->pd] = pd;
  ++r.counters.live_pds;
  return &pd->pd;
}

SOFTVERBS_DEFAULT_1_1(ibv_dealloc_pd);
int softverbs_ibv_dealloc_pd_1_1(ibv_pd* pd) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.pds.find(pd);
  if (it == r.pds.end()) return EINVAL;
  if (it->second->mrs != 0 || it->second->users != 0) return EBUSY;
  delete it->second;
  r.pds.erase(it);
  --r.counters.live_pds;
  return 0;
}

SOFTVERBS_DEFAULT_1_1(ibv_reg_mr);
ibv_mr* softverbs_ibv_reg_mr_1_1(ibv_pd* pd, void* addr, size_t length, int access) {
  return softverbs::RegisterMr(pd, addr, length, reinterpret_cast<uintptr_t>(addr),
                               static_cast<unsigned>(access));
}

ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  return softverbs::RegisterMr(pd, addr, length, iova, static_cast<unsigned>(access));
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                         unsigned int access) {
  return softverbs::RegisterMr(pd, addr, length, iova, access);
}

// dma-buf import needs a real device's DMA mapping: not modelled.
ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                          int access) {
  return softverbs::Fail(EOPNOTSUPP);
}

SOFTVERBS_DEFAULT_1_1(ibv_dereg_mr);
int softverbs_ibv_dereg_mr_1_1(ibv_mr* mr) {
  Registry& r = registry();
  Mr* m = nullptr;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.mrs.find(mr);
    if (it == r.mrs.end()) return EINVAL;
    m = it->second;
    r.DetachMrLocked(m);
  }
  // Unlocked, as RegisterMr pins: another thread's registration or
  // deregistration does not wait for this one's unpinning (the kernel's
  // ib_dereg_mr takes no lock that ibv_reg_mr of another MR takes).
  void* const addr = m->mr.addr;
  const size_t length = m->mr.length;
  const bool on_demand = m->odp;
  if (!on_demand) softverbs::UnpinPages(m->pd->ctx, addr, length, m->slots, m->read_only_pin);
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.ReleaseMrLocked(m);
    ++r.counters.deregistrations;
  }
  if (!on_demand) softverbs::DoForkRange(addr, length);
  return 0;
}

// The old MR stays valid whenever this fails (IBV_REREG_MR_ERR_INPUT + errno):
// the new translation is pinned before the old one is released. Keys persist.
int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  if (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) return softverbs::ReregInputError(EINVAL);
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (addr == nullptr || length == 0)) {
    return softverbs::ReregInputError(EINVAL);
  }
  if (access != 0 && !(flags & IBV_REREG_MR_CHANGE_ACCESS))
    return softverbs::ReregInputError(EINVAL);
  Registry& r = registry();
  Mr* m = nullptr;
  Pd* new_pd = nullptr;
  void* new_addr = nullptr;
  size_t new_length = 0;
  unsigned new_access = 0;
  softverbs::Context* ctx = nullptr;  // outlives this call
  void* old_addr = nullptr;
  size_t old_length = 0;
  bool old_odp = false;
  bool old_read_only = false;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.mrs.find(mr);
    if (it == r.mrs.end()) return softverbs::ReregInputError(EINVAL);
    m = it->second;
    ctx = m->pd->ctx;
    old_addr = m->mr.addr;
    old_length = m->mr.length;
    old_odp = m->odp;
    old_read_only = m->read_only_pin;
    if (m->implicit) return softverbs::ReregInputError(EOPNOTSUPP);
    new_pd = m->pd;
    if (flags & IBV_REREG_MR_CHANGE_PD) {
      auto p = r.pds.find(pd);
      if (p == r.pds.end() || p->second->ctx != m->pd->ctx)
        return softverbs::ReregInputError(EINVAL);
      new_pd = p->second;
    }
    new_addr = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? addr : m->mr.addr;
    new_length = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? length : m->mr.length;
    new_access = m->access;
    if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
      int err = softverbs::CheckAccess(static_cast<unsigned>(access), &new_access);
      if (err != 0) return softverbs::ReregInputError(err);
    }
    const uint64_t new_iova =
        (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? reinterpret_cast<uintptr_t>(new_addr) : m->iova;
    int err = softverbs::CheckRange(m->pd->ctx, new_addr, new_length, new_iova, new_access);
    if (err != 0 || softverbs::IsImplicit(new_addr, new_length, new_access)) {
      return softverbs::ReregInputError(err != 0 ? err : EOPNOTSUPP);
    }
    ++new_pd->mrs;  // reserved for the MR's new home
  }
  // As libibverbs: the new range is protected from fork before the device
  // sees it, and unprotected again if the call fails.
  const bool translation = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
  if (translation && softverbs::DontForkRange(new_addr, new_length) != 0) {
    const int err = errno;
    std::lock_guard<std::mutex> lock(r.mu);
    --new_pd->mrs;
    errno = err;
    return IBV_REREG_MR_ERR_DONT_FORK_NEW;
  }
  auto fail = [&](int err) {
    if (translation) softverbs::DoForkRange(new_addr, new_length);
    return softverbs::ReregInputError(err);
  };
  const bool on_demand = new_access & IBV_ACCESS_ON_DEMAND;
  const bool read_only = !on_demand && !softverbs::AccessWritable(new_access);
  const bool repin =
      translation || on_demand != old_odp || (!on_demand && read_only != old_read_only);
  std::vector<uint32_t> slots;
  bool pinned_read_only = false;
  if (repin && !on_demand) {
    int err = softverbs::PinPages(ctx, new_addr, new_length, new_access, &slots, &pinned_read_only);
    if (err != 0) {
      {
        std::lock_guard<std::mutex> lock(r.mu);
        --new_pd->mrs;
      }
      return fail(err);
    }
  }
  bool gone = false;
  // What to unpin once unlocked: the old pins (success) or the unused new
  // ones (the MR was deregistered meanwhile).
  void* unpin_addr = new_addr;
  size_t unpin_length = new_length;
  bool unpin_read_only = pinned_read_only;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.mrs.find(mr) == r.mrs.end()) {  // deregistered meanwhile
      --new_pd->mrs;
      gone = true;
    } else {
      --m->pd->mrs;
      m->pd = new_pd;
      m->mr.pd = &new_pd->pd;
      m->access = new_access;
      if (repin) {
        r.counters.bytes_pinned -= m->pinned_bytes;
        slots.swap(m->slots);  // slots now holds the old pins
        unpin_addr = m->mr.addr;
        unpin_length = m->mr.length;
        unpin_read_only = m->read_only_pin;
        m->read_only_pin = pinned_read_only;
        m->odp = on_demand;
        m->pinned_bytes = on_demand ? 0 : softverbs::PinnedSpan(new_addr, new_length);
        softverbs::AddPinnedLocked(r, m->pinned_bytes);
        if (translation) m->iova = reinterpret_cast<uintptr_t>(new_addr);
      }
      m->mr.addr = new_addr;
      m->mr.length = new_length;
      ++r.counters.rereg_calls;
    }
  }
  if (repin) softverbs::UnpinPages(ctx, unpin_addr, unpin_length, slots, unpin_read_only);
  if (gone) return fail(EINVAL);
  if (translation && softverbs::DoForkRange(old_addr, old_length) != 0) {
    return IBV_REREG_MR_ERR_DO_FORK_OLD;
  }
  return 0;
}

int softverbs_device_write(uint32_t lkey, uint64_t addr, const void* src, size_t len) {
  Registry& r = registry();
  // Held throughout, so the MR (and its slots) cannot be released mid-write.
  std::lock_guard<std::mutex> lock(r.mu);
  Mr* m = r.MrByKeyLocked(lkey);
  if (m == nullptr || src == nullptr || len == 0) return EINVAL;
  if (addr + len < addr || addr < m->iova || addr + len - m->iova > m->mr.length) return ERANGE;
  if (!(m->access & IBV_ACCESS_LOCAL_WRITE)) return EACCES;
  const int err = softverbs::MrCopyLocked(m, addr, const_cast<void*>(src), len, /*to_memory=*/true);
  if (err == 0) ++r.counters.device_writes;
  return err;
}

int softverbs_remote_write(uint32_t rkey, uint64_t addr, const void* src, size_t len) {
  return softverbs::RemoteAccess(rkey, addr, const_cast<void*>(src), len, /*to_memory=*/true);
}

int softverbs_remote_read(uint32_t rkey, uint64_t addr, void* dst, size_t len) {
  return softverbs::RemoteAccess(rkey, addr, dst, len, /*to_memory=*/false);
}

}  // extern "C"
