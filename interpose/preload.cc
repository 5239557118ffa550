// preload.cc: the symbols libmrcache_preload.so exports in libibverbs' name.
//
// Each carries rdma-core's default symbol version (preload.map), so an
// application linked against libibverbs -- whose references read e.g.
// ibv_reg_mr@IBVERBS_1.1 -- binds to these when the shim is preloaded. Inside
// a ShimScope (shim_scope.h) every one of them is a plain forward to the real
// function, so the shim's own registrar calls and libibverbs' internal
// funnelling reach the device exactly once.
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "interpose/dlsym_hook.h"
#include "interpose/preload.h"
#include "interpose/real_verbs.h"
#include "interpose/shim.h"
#include "interpose/shim_scope.h"
#include "interpose/stats_report.h"
#include "mrcache/internal/log.h"

// verbs.h turns these into inline dispatchers; here they are the functions.
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

using mrcache_preload::Real;
using mrcache_preload::RegEntry;
using mrcache_preload::Shim;
using mrcache_preload::ShimScope;

namespace mrcache_preload {

__thread int ShimScope::depth_ = 0;

void* SubstituteInterposer(void* real) {
  const RealVerbs& r = Real();
  if (real == reinterpret_cast<void*>(r.reg_mr)) return reinterpret_cast<void*>(&ibv_reg_mr);
  if (real == reinterpret_cast<void*>(r.reg_mr_iova))
    return reinterpret_cast<void*>(&ibv_reg_mr_iova);
  if (real == reinterpret_cast<void*>(r.reg_mr_iova2))
    return reinterpret_cast<void*>(&ibv_reg_mr_iova2);
  if (real == reinterpret_cast<void*>(r.reg_dmabuf_mr))
    return reinterpret_cast<void*>(&ibv_reg_dmabuf_mr);
  if (real == reinterpret_cast<void*>(r.dereg_mr)) return reinterpret_cast<void*>(&ibv_dereg_mr);
  if (real == reinterpret_cast<void*>(r.rereg_mr)) return reinterpret_cast<void*>(&ibv_rereg_mr);
  if (real == reinterpret_cast<void*>(r.alloc_pd)) return reinterpret_cast<void*>(&ibv_alloc_pd);
  if (real == reinterpret_cast<void*>(r.dealloc_pd))
    return reinterpret_cast<void*>(&ibv_dealloc_pd);
  if (real == reinterpret_cast<void*>(r.close_device))
    return reinterpret_cast<void*>(&ibv_close_device);
  return real;
}

}  // namespace mrcache_preload

extern "C" {

ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  if (ShimScope::Inside()) return Real().reg_mr(pd, addr, length, access);
  return Shim::Get().Register(RegEntry::kRegMr, pd, addr, length, reinterpret_cast<uintptr_t>(addr),
                              static_cast<unsigned>(access));
}

ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  if (ShimScope::Inside()) return Real().reg_mr_iova(pd, addr, length, iova, access);
  return Shim::Get().Register(RegEntry::kRegMrIova, pd, addr, length, iova,
                              static_cast<unsigned>(access));
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                         unsigned int access) {
  if (ShimScope::Inside()) return Real().reg_mr_iova2(pd, addr, length, iova, access);
  return Shim::Get().Register(RegEntry::kRegMrIova2, pd, addr, length, iova, access);
}

ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                          int access) {
  if (ShimScope::Inside()) return Real().reg_dmabuf_mr(pd, offset, length, iova, fd, access);
  return Shim::Get().RegisterDmabuf(pd, offset, length, iova, fd, access);
}

int ibv_dereg_mr(ibv_mr* mr) {
  Shim* shim = Shim::IfCreated();  // no shim yet: no alias can exist
  if (ShimScope::Inside() || shim == nullptr) return Real().dereg_mr(mr);
  return shim->Deregister(mr);
}

int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  Shim* shim = Shim::IfCreated();
  if (ShimScope::Inside() || shim == nullptr) {
    return Real().rereg_mr(mr, flags, pd, addr, length, access);
  }
  return shim->Reregister(mr, flags, pd, addr, length, access);
}

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  if (ShimScope::Inside()) {
    if (Real().alloc_pd == nullptr) {
      errno = ENOSYS;
      return nullptr;
    }
    return Real().alloc_pd(context);
  }
  return Shim::Get().AllocPd(context);
}

int ibv_dealloc_pd(ibv_pd* pd) {
  Shim* shim = Shim::IfCreated();
  if (ShimScope::Inside() || shim == nullptr) return Real().dealloc_pd(pd);
  return shim->DeallocPd(pd);
}

int ibv_close_device(ibv_context* context) {
  Shim* shim = Shim::IfCreated();
  if (ShimScope::Inside() || shim == nullptr) return Real().close_device(context);
  return shim->CloseDevice(context);
}

void mrcache_preload_get_stats(mrcache_preload_stats* out) {
  std::memset(out, 0, sizeof *out);
  Shim* shim = Shim::IfCreated();
  if (shim == nullptr) return;
  mrcache_preload::Report r = shim->MakeReport();
  out->calls = r.shim.calls;
  out->cache_lookups = r.shim.cache_lookups;
  out->hits = r.cache.hits;
  out->misses = r.cache.misses;
  out->bypassed = r.shim.bypassed;
  out->fallbacks = r.shim.fallbacks;
  out->cache_registrations = r.cache.registrations;
  out->live_aliases = shim->live_aliases();
  out->enabled = r.disabled.empty() ? 1 : 0;
  out->remote_private = r.cache.remote_private;
  out->watch_failures = r.cache.watch_failures;
}

}  // extern "C"

namespace {

// MRCACHE_STATS: the summary at exit, for processes that used verbs.
__attribute__((destructor)) void ReportAtExit() {
  const char* spec = std::getenv("MRCACHE_STATS");
  Shim* shim = Shim::IfCreated();
  if (!mrcache_preload::ReportRequested(spec) || shim == nullptr) return;
  absl::Status s = mrcache_preload::EmitReport(spec, shim->MakeReport());
  if (!s.ok()) mrcache::Log(mrcache::LogLevel::kError, s.message());
}

}  // namespace
