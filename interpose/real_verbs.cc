#include "interpose/real_verbs.h"

#include <dlfcn.h>

namespace mrcache_preload {
namespace {

template <typename Fn>
void Resolve(Fn* out, const char* name, const char* version) {
  *out = reinterpret_cast<Fn>(dlvsym(RTLD_NEXT, name, version));
}

RealVerbs ResolveAll() {
  RealVerbs r;
  Resolve(&r.reg_mr, "ibv_reg_mr", "IBVERBS_1.1");
  Resolve(&r.reg_mr_iova, "ibv_reg_mr_iova", "IBVERBS_1.7");
  Resolve(&r.reg_mr_iova2, "ibv_reg_mr_iova2", "IBVERBS_1.8");
  Resolve(&r.reg_dmabuf_mr, "ibv_reg_dmabuf_mr", "IBVERBS_1.12");
  Resolve(&r.dereg_mr, "ibv_dereg_mr", "IBVERBS_1.1");
  Resolve(&r.rereg_mr, "ibv_rereg_mr", "IBVERBS_1.1");
  Resolve(&r.alloc_pd, "ibv_alloc_pd", "IBVERBS_1.1");
  Resolve(&r.dealloc_pd, "ibv_dealloc_pd", "IBVERBS_1.1");
  Resolve(&r.close_device, "ibv_close_device", "IBVERBS_1.1");
  return r;
}

}  // namespace

const RealVerbs& Real() {
  static const RealVerbs* real = new RealVerbs(ResolveAll());  // leaked: usable during exit
  return *real;
}

}  // namespace mrcache_preload
