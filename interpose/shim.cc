#include "interpose/shim.h"

#include <pthread.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "interpose/real_verbs.h"
#include "interpose/shim_scope.h"
#include "mrcache/errno_status.h"
#include "mrcache/internal/log.h"
#include "mrcache/monitors/fork_guard.h"
#include "mrcache/registrar.h"

namespace mrcache_preload {
namespace {

std::atomic<Shim*> g_shim{nullptr};

constexpr unsigned kBypassAccess = mrcache::kAccessMwBind | mrcache::kAccessZeroBased;

// Requests registered directly, never cached (docs/ARCHITECTURE.md, "What the shim never caches").
bool MustBypass(void* addr, uint64_t iova, unsigned access) {
  return addr == nullptr || iova != reinterpret_cast<uintptr_t>(addr) || (access & kBypassAccess);
}

ibv_mr* MissingFunction() {
  errno = ENOSYS;
  return nullptr;
}

void Relax(std::atomic<uint64_t>& counter) { counter.fetch_add(1, std::memory_order_relaxed); }

// True if the cache failed because the device refused the request's own
// pages: registering them directly would fail the same way.
bool DeviceRefusedPages(const absl::Status& status) {
  const int err = mrcache::StatusToErrno(status);
  return err == EFAULT || err == EACCES;
}

// pthread_atfork handlers of the shim (shim.h "fork()"): lock order alias
// registry, then PD cache map; released in reverse order.
void OnForkPrepare() {
  if (Shim* shim = Shim::IfCreated()) shim->LockForFork();
}

void OnForkRelease() {
  if (Shim* shim = Shim::IfCreated()) shim->UnlockAfterFork();
}

}  // namespace

Shim& Shim::Get() {
  static Shim* shim = [] {
    Shim* s = new Shim;  // leaked: interposers may run during exit
    g_shim.store(s, std::memory_order_release);
    // After the library's handlers, so that these run first at prepare
    // (pthread_atfork runs prepare handlers in reverse order): the shim's
    // locks come before the caches' (shim.h "fork()").
    mrcache::EnsureForkGuardInstalled();
    pthread_atfork(&OnForkPrepare, &OnForkRelease, &OnForkRelease);
    return s;
  }();
  return *shim;
}

void Shim::LockForFork() {
  aliases_.LockForFork();
  if (caches_ != nullptr) caches_->LockForFork();
}

void Shim::UnlockAfterFork() {
  if (caches_ != nullptr) caches_->UnlockAfterFork();
  aliases_.UnlockAfterFork();
}

Shim* Shim::IfCreated() { return g_shim.load(std::memory_order_acquire); }

Shim::Shim() {
  ShimScope scope;
  auto config = mrcache::Config::FromEnvironment(ShimDefaults());
  if (!config.ok()) {
    disabled_ = std::string(config.status().message());
  } else if (config->monitor != "none") {
    auto lease = mrcache::AcquireMonitor(config->monitor);
    if (lease.ok() && !(*lease)->blind()) {
      monitor_ = std::move(*lease);
    } else if (config->odp == mrcache::OdpMode::kOff) {
      disabled_ = lease.ok() ? "the memory monitor '" + config->monitor + "' sees nothing"
                             : "no memory monitor: " + std::string(lease.status().message());
    }
  }
  if (!disabled_.empty()) {
    mrcache::Log(mrcache::LogLevel::kWarning,
                 "libmrcache_preload passes every registration through (" + disabled_ + ")");
    return;
  }
  remote_keys_ = mrcache::RemoteKeysName(config->remote_keys);
  sample_costs_ = ReportRequested(std::getenv("MRCACHE_STATS"));
  caches_ = std::make_unique<PdCaches>(*config);
  const char* record = std::getenv("MRCACHE_RECORD");
  if (record != nullptr && *record != '\0') recorder_ = Recorder::Open(record, *config);
}

void Shim::SampleRegistrationCost(RegEntry entry, ibv_pd* pd, void* addr, size_t length,
                                  uint64_t iova, unsigned access) {
  const int saved_errno = errno;
  const auto start = std::chrono::steady_clock::now();
  ibv_mr* mr = Direct(entry, pd, addr, length, iova, access);
  if (mr != nullptr && Real().dereg_mr != nullptr && Real().dereg_mr(mr) == 0) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now() - start);
    caches_->costs().AddSample(length, static_cast<uint64_t>(ns.count()));
  }
  errno = saved_errno;
}

ibv_mr* Shim::Direct(RegEntry entry, ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                     unsigned access) {
  const RealVerbs& real = Real();
  switch (entry) {
    case RegEntry::kRegMr:
      if (real.reg_mr == nullptr) return MissingFunction();
      return real.reg_mr(pd, addr, length, static_cast<int>(access));
    case RegEntry::kRegMrIova:
      if (real.reg_mr_iova == nullptr) return MissingFunction();
      return real.reg_mr_iova(pd, addr, length, iova, static_cast<int>(access));
    case RegEntry::kRegMrIova2:
      if (real.reg_mr_iova2 == nullptr) return MissingFunction();
      return real.reg_mr_iova2(pd, addr, length, iova, access);
  }
  return MissingFunction();
}

ibv_mr* Shim::CountedDirect(RegEntry entry, ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                            unsigned access) {
  return CountDirectFailure(Direct(entry, pd, addr, length, iova, access));
}

ibv_mr* Shim::CountDirectFailure(ibv_mr* mr) {
  if (mr == nullptr) {
    Relax(failed_);
    Relax(direct_failures_);
  }
  return mr;
}

ibv_mr* Shim::Register(RegEntry entry, ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                       unsigned access) {
  ShimScope scope;
  Relax(calls_);
  if (caches_ == nullptr || pd == nullptr || MustBypass(addr, iova, access)) {
    Relax(bypassed_);
    return CountedDirect(entry, pd, addr, length, iova, access);
  }
  auto cache = caches_->ForPd(pd);
  if (!cache.ok()) {
    Relax(fallbacks_);
    return CountedDirect(entry, pd, addr, length, iova, access);
  }
  Relax(lookups_);
  // Releases this thread makes from here on are recorded after the `reg`
  // line (recorder.h): the cache answers before them.
  Recorder::GetScope recording(recorder_.get());
  auto region = (*cache)->cache->Acquire(addr, length, static_cast<int>(access));
  if (!region.ok()) {
    if (DeviceRefusedPages(region.status())) {
      Relax(failed_);
      errno = mrcache::StatusToErrno(region.status());
      return nullptr;
    }
    Relax(fallbacks_);
    return CountedDirect(entry, pd, addr, length, iova, access);
  }
  // Served requests are counted only for the report: no shared counter on
  // the registration path otherwise. A failed request is never priced.
  const bool sample = sample_costs_ && caches_->costs().AddRequest(length);
  if (sample) SampleRegistrationCost(entry, pd, addr, length, iova, access);
  const mrcache::RegionInfo info = mrcache::GetRegionInfo(*region);
  if ((info.access & IBV_ACCESS_LOCAL_WRITE) != 0 && (access & IBV_ACCESS_LOCAL_WRITE) == 0) {
    // The cache may serve more local rights than asked; plain verbs would
    // refuse a device write through this lkey (EACCES), so the request gets
    // a registration of its own rights instead.
    (void)(*cache)->cache->Put(*region);
    Relax(bypassed_);
    return CountedDirect(entry, pd, addr, length, iova, access);
  }
  if (info.mr == nullptr) {
    // Every PdCaches cache registers through the verbs registrar, which
    // always sets the MR; a region without one has no keys to hand out.
    (void)(*cache)->cache->Put(*region);
    Relax(fallbacks_);
    return CountedDirect(entry, pd, addr, length, iova, access);
  }
  auto* alias = new (std::nothrow) Alias;
  if (alias == nullptr) {
    (void)(*cache)->cache->Put(*region);
    errno = ENOMEM;
    return nullptr;
  }
  alias->TakeKeys(*info.mr);
  alias->mr.addr = addr;
  alias->mr.length = length;
  alias->kind = AliasKind::kCached;
  alias->cache = *cache;
  alias->region = *region;
  alias->access = static_cast<int>(access);
  // Recorded before the application can deregister it: "reg" precedes "dereg".
  if (recorder_ != nullptr) alias->record_id = recorder_->Register(addr, length, access);
  (*cache)->aliases.fetch_add(1);
  aliases_.Add(alias);
  return &alias->mr;
}

ibv_mr* Shim::RegisterDmabuf(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                             int access) {
  ShimScope scope;
  Relax(calls_);
  Relax(bypassed_);
  return CountDirectFailure(Real().reg_dmabuf_mr == nullptr
                                ? MissingFunction()
                                : Real().reg_dmabuf_mr(pd, offset, length, iova, fd, access));
}

int Shim::Deregister(ibv_mr* mr) {
  ShimScope scope;
  Alias* alias = aliases_.Remove(mr);
  if (alias == nullptr) {
    Relax(passthrough_deregs_);
    return Real().dereg_mr == nullptr ? ENOSYS : Real().dereg_mr(mr);
  }
  int ret = 0;
  switch (alias->kind) {
    case AliasKind::kCached: {
      if (recorder_ != nullptr) recorder_->Deregister(alias->record_id);
      absl::Status put = alias->cache->cache->Put(alias->region);
      alias->cache->aliases.fetch_sub(1);
      ret = put.ok() ? 0 : mrcache::StatusToErrno(put);
      break;
    }
    case AliasKind::kDedicated:
      ret = Real().dereg_mr(alias->real);
      if (ret != 0) {  // the MR is still registered: so is the alias
        aliases_.Add(alias);
        return ret;
      }
      break;
    case AliasKind::kOrphaned:
      ret = EINVAL;  // its MR went away with ibv_close_device
      break;
  }
  Relax(alias_deregs_);
  delete alias;
  return ret;
}

int Shim::Reregister(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  ShimScope scope;
  Alias* alias = aliases_.Find(mr);
  if (alias == nullptr) {
    return Real().rereg_mr == nullptr ? ENOSYS
                                      : Real().rereg_mr(mr, flags, pd, addr, length, access);
  }
  switch (alias->kind) {
    case AliasKind::kCached:
      return ReregisterCached(alias, flags, pd, addr, length, access);
    case AliasKind::kDedicated: {
      int ret = Real().rereg_mr(alias->real, flags, pd, addr, length, access);
      const int saved = errno;
      alias->TakeKeys(*alias->real);
      alias->mr.addr = alias->real->addr;
      alias->mr.length = alias->real->length;
      if (ret == 0 && (flags & IBV_REREG_MR_CHANGE_ACCESS)) alias->access = access;
      errno = saved;
      return ret;
    }
    case AliasKind::kOrphaned:
      break;
  }
  errno = EINVAL;
  return IBV_REREG_MR_ERR_INPUT;
}

int Shim::ReregisterCached(Alias* alias, int flags, ibv_pd* pd, void* addr, size_t length,
                           int access) {
  // libibverbs' own input checks, in its order.
  if ((flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) ||
      ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (addr == nullptr || length == 0)) ||
      (access != 0 && !(flags & IBV_REREG_MR_CHANGE_ACCESS))) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  if (flags == 0) return 0;  // nothing to change
  ibv_pd* new_pd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd : alias->mr.pd;
  void* new_addr = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? addr : alias->mr.addr;
  size_t new_length = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? length : alias->mr.length;
  int new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? access : alias->access;
  if (Real().reg_mr_iova2 == nullptr) {
    errno = ENOSYS;
    return IBV_REREG_MR_ERR_INPUT;
  }
  ibv_mr* real =
      Real().reg_mr_iova2(new_pd, new_addr, new_length, reinterpret_cast<uintptr_t>(new_addr),
                          static_cast<unsigned>(new_access));
  if (real == nullptr) return IBV_REREG_MR_ERR_INPUT;  // errno from libibverbs; alias untouched
  if (recorder_ != nullptr) recorder_->Deregister(alias->record_id);
  alias->record_id = 0;
  (void)alias->cache->cache->Put(alias->region);
  alias->cache->aliases.fetch_sub(1);
  alias->kind = AliasKind::kDedicated;
  alias->cache = nullptr;
  alias->region = nullptr;
  alias->real = real;
  alias->access = new_access;
  alias->TakeKeys(*real);
  alias->mr.addr = real->addr;
  alias->mr.length = real->length;
  Relax(rereg_conversions_);
  return 0;
}

ibv_pd* Shim::AllocPd(ibv_context* context) {
  ShimScope scope;
  if (Real().alloc_pd == nullptr) {
    errno = ENOSYS;
    return nullptr;
  }
  ibv_pd* pd = Real().alloc_pd(context);
  if (pd != nullptr && caches_ != nullptr) {
    const int saved = errno;
    caches_->Adopt(pd, context);
    errno = saved;
  }
  return pd;
}

int Shim::DeallocPd(ibv_pd* pd) {
  ShimScope scope;
  if (caches_ != nullptr) {
    absl::Status released = caches_->ReleasePd(pd);
    if (!released.ok()) {
      Relax(busy_deallocs_);
      return mrcache::StatusToErrno(released);
    }
  }
  if (Real().dealloc_pd == nullptr) return ENOSYS;
  const int ret = Real().dealloc_pd(pd);
  if (ret == 0 && caches_ != nullptr) caches_->Forget(pd);
  return ret;
}

int Shim::CloseDevice(ibv_context* context) {
  ShimScope scope;
  if (caches_ != nullptr) {
    // The device takes every MR with it: aliases still held become orphans,
    // and their references are dropped so the cache goes down cleanly.
    caches_->ReleaseContext(context, [this](PdCache* cache) {
      for (const AliasRegistry::Orphaned& orphan : aliases_.OrphanAll(cache)) {
        if (recorder_ != nullptr) recorder_->Deregister(orphan.record_id);
        (void)cache->cache->Put(orphan.region);
        cache->aliases.fetch_sub(1);
      }
    });
  }
  return Real().close_device == nullptr ? ENOSYS : Real().close_device(context);
}

Report Shim::MakeReport() const {
  ShimScope scope;
  Report r;
  r.shim.calls = calls_.load();
  r.shim.cache_lookups = lookups_.load();
  r.shim.bypassed = bypassed_.load();
  r.shim.fallbacks = fallbacks_.load();
  r.shim.alias_deregs = alias_deregs_.load();
  r.shim.passthrough_deregs = passthrough_deregs_.load();
  r.shim.rereg_conversions = rereg_conversions_.load();
  r.shim.busy_deallocs = busy_deallocs_.load();
  r.shim.failed = failed_.load();
  r.shim.direct_failures = direct_failures_.load();
  if (caches_ != nullptr) {
    r.rails = caches_->Rails();
    r.cache = SumOverRails(r.rails);
    r.shim.caches = caches_->created();
    r.monitor = caches_->monitor_name();
    r.uncached = caches_->costs().EstimateUncached();
  }
  r.disabled = disabled_;
  r.remote_keys = remote_keys_;
  return r;
}

}  // namespace mrcache_preload
