// shim_scope.h: the thread-local "inside the shim" flag.
//
// Why it exists: the shim exports ibv_reg_mr_iova2, ibv_dereg_mr, ... and,
// being preloaded, comes first in the global symbol scope. Every call to those
// names made by code that binds through the PLT therefore lands in the shim
// again, in particular:
//  - the verbs registrar linked into the shim (mrcache/registrars/verbs_registrar.cc calls
//    ibv_reg_mr_iova2 and ibv_dereg_mr by symbol; inside a shared library a
//    call to a default-visibility symbol goes through the PLT, so it binds to
//    the shim's own interposer, not to libibverbs);
//  - libibverbs itself: its ibv_reg_mr and ibv_reg_mr_iova tail-call
//    ibv_reg_mr_iova2 through its PLT (softverbs does not funnel; both work).
// While a ShimScope is alive on a thread, every interposer on that thread
// passes straight to the real function, so an application call costs exactly
// one cache lookup and the cache's own registrations reach the device.
//
// Invariant: a ShimScope is opened by every interposer before it does any
// work (cache lookups, direct registrations, flushes) and closed on return.
#ifndef INTERPOSE_SHIM_SCOPE_H_
#define INTERPOSE_SHIM_SCOPE_H_

namespace mrcache_preload {

class ShimScope {
 public:
  ShimScope() { ++depth_; }
  ~ShimScope() { --depth_; }
  ShimScope(const ShimScope&) = delete;
  ShimScope& operator=(const ShimScope&) = delete;

  // True on a thread that is already inside an interposer.
  static bool Inside() { return depth_ > 0; }

 private:
  // Plain TLS (no constructor, no destructor): safe in any thread, at any time.
  static __thread int depth_;
};

}  // namespace mrcache_preload

#endif  // INTERPOSE_SHIM_SCOPE_H_
