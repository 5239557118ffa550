// compat_1_0.cc: the IBVERBS_1.0 variants of the device, PD and MR verbs.
//
// Each wraps the IBVERBS_1.1 implementation: a 1.0 object is allocated
// around the 1.1 object it stands for. Every wrapper handed out is recorded,
// so an unknown or freed 1.0 object is EINVAL like its 1.1 counterpart, and
// ibv_close_device frees the wrappers of whatever the context still owned.
#include "tests/softverbs/compat_1_0.h"

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "tests/softverbs/registry.h"

namespace softverbs {
namespace {

// One allocation per ibv_get_device_list@IBVERBS_1.0 result.
struct CompatList {
  ibv_device_1_0* entries[2];  // first: the caller's ibv_device_1_0** is this
  ibv_device_1_0 device;
  ibv_device** real_list;
};

struct CompatObjects {
  std::mutex mu;
  std::unordered_map<ibv_context_1_0*, bool> contexts;
  std::unordered_map<ibv_pd_1_0*, ibv_context_1_0*> pds;
  std::unordered_map<ibv_mr_1_0*, ibv_context_1_0*> mrs;
};

CompatObjects& compat() {
  static CompatObjects* objects = new CompatObjects;
  return *objects;
}

bool KnownContext(ibv_context_1_0* ctx) {
  std::lock_guard<std::mutex> lock(compat().mu);
  return compat().contexts.count(ctx) != 0;
}

}  // namespace
}  // namespace softverbs

using softverbs::compat;
using softverbs::CompatList;
using softverbs::KnownContext;

#define SOFTVERBS_COMPAT_1_0(name) __asm__(".symver softverbs_" #name "_1_0, " #name "@IBVERBS_1.0")

extern "C" {

SOFTVERBS_COMPAT_1_0(ibv_get_device_list);
ibv_device_1_0** softverbs_ibv_get_device_list_1_0(int* num_devices) {
  int n = 0;
  ibv_device** real = softverbs_ibv_get_device_list_1_1(&n);
  if (real == nullptr) return nullptr;
  auto* list = new CompatList();
  list->real_list = real;
  list->device.real_device = real[0];
  list->entries[0] = &list->device;
  list->entries[1] = nullptr;
  if (num_devices != nullptr) *num_devices = n;
  return list->entries;
}

SOFTVERBS_COMPAT_1_0(ibv_free_device_list);
void softverbs_ibv_free_device_list_1_0(ibv_device_1_0** entries) {
  if (entries == nullptr) return;
  auto* list = reinterpret_cast<CompatList*>(entries);
  softverbs_ibv_free_device_list_1_1(list->real_list);
  delete list;
}

SOFTVERBS_COMPAT_1_0(ibv_get_device_name);
const char* softverbs_ibv_get_device_name_1_0(ibv_device_1_0* device) {
  return softverbs_ibv_get_device_name_1_1(device != nullptr ? device->real_device : nullptr);
}

SOFTVERBS_COMPAT_1_0(ibv_get_device_guid);
__be64 softverbs_ibv_get_device_guid_1_0(ibv_device_1_0* device) {
  return softverbs_ibv_get_device_guid_1_1(device != nullptr ? device->real_device : nullptr);
}

SOFTVERBS_COMPAT_1_0(ibv_open_device);
ibv_context_1_0* softverbs_ibv_open_device_1_0(ibv_device_1_0* device) {
  ibv_context* real =
      softverbs_ibv_open_device_1_1(device != nullptr ? device->real_device : nullptr);
  if (real == nullptr) return nullptr;
  auto* ctx = new ibv_context_1_0();
  ctx->device = device;
  ctx->cmd_fd = real->cmd_fd;
  ctx->async_fd = real->async_fd;
  ctx->num_comp_vectors = real->num_comp_vectors;
  ctx->real_context = real;
  std::lock_guard<std::mutex> lock(compat().mu);
  compat().contexts[ctx] = true;
  return ctx;
}

SOFTVERBS_COMPAT_1_0(ibv_close_device);
int softverbs_ibv_close_device_1_0(ibv_context_1_0* ctx) {
  {
    std::lock_guard<std::mutex> lock(compat().mu);
    auto& objects = compat();
    if (objects.contexts.erase(ctx) == 0) {
      errno = EINVAL;
      return -1;
    }
    for (auto it = objects.mrs.begin(); it != objects.mrs.end();) {
      if (it->second != ctx) {
        ++it;
        continue;
      }
      delete it->first;
      it = objects.mrs.erase(it);
    }
    for (auto it = objects.pds.begin(); it != objects.pds.end();) {
      if (it->second != ctx) {
        ++it;
        continue;
      }
      delete it->first;
      it = objects.pds.erase(it);
    }
  }
  int ret = softverbs_ibv_close_device_1_1(ctx->real_context);
  delete ctx;
  return ret;
}

SOFTVERBS_COMPAT_1_0(ibv_query_device);
int softverbs_ibv_query_device_1_0(ibv_context_1_0* ctx, ibv_device_attr* attr) {
  if (!KnownContext(ctx)) return EINVAL;
  return softverbs_ibv_query_device_1_1(ctx->real_context, attr);
}

SOFTVERBS_COMPAT_1_0(ibv_query_port);
int softverbs_ibv_query_port_1_0(ibv_context_1_0* ctx, uint8_t port_num,
                                 _compat_ibv_port_attr* attr) {
  if (!KnownContext(ctx)) return EINVAL;
  return softverbs_ibv_query_port_1_1(ctx->real_context, port_num, attr);
}

SOFTVERBS_COMPAT_1_0(ibv_query_gid);
int softverbs_ibv_query_gid_1_0(ibv_context_1_0* ctx, uint8_t port_num, int index, ibv_gid* gid) {
  if (!KnownContext(ctx)) {
    errno = EINVAL;
    return -1;
  }
  return softverbs_ibv_query_gid_1_1(ctx->real_context, port_num, index, gid);
}

SOFTVERBS_COMPAT_1_0(ibv_query_pkey);
int softverbs_ibv_query_pkey_1_0(ibv_context_1_0* ctx, uint8_t port_num, int index, __be16* pkey) {
  if (!KnownContext(ctx)) {
    errno = EINVAL;
    return -1;
  }
  return softverbs_ibv_query_pkey_1_1(ctx->real_context, port_num, index, pkey);
}

SOFTVERBS_COMPAT_1_0(ibv_alloc_pd);
ibv_pd_1_0* softverbs_ibv_alloc_pd_1_0(ibv_context_1_0* ctx) {
  if (!KnownContext(ctx)) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_pd* real = softverbs_ibv_alloc_pd_1_1(ctx->real_context);
  if (real == nullptr) return nullptr;
  auto* pd = new ibv_pd_1_0();
  pd->context = ctx;
  pd->handle = real->handle;
  pd->real_pd = real;
  std::lock_guard<std::mutex> lock(compat().mu);
  compat().pds[pd] = ctx;
  return pd;
}

SOFTVERBS_COMPAT_1_0(ibv_dealloc_pd);
int softverbs_ibv_dealloc_pd_1_0(ibv_pd_1_0* pd) {
  std::lock_guard<std::mutex> lock(compat().mu);
  auto it = compat().pds.find(pd);
  if (it == compat().pds.end()) return EINVAL;
  int ret = softverbs_ibv_dealloc_pd_1_1(pd->real_pd);
  if (ret != 0) return ret;
  compat().pds.erase(it);
  delete pd;
  return 0;
}

SOFTVERBS_COMPAT_1_0(ibv_reg_mr);
ibv_mr_1_0* softverbs_ibv_reg_mr_1_0(ibv_pd_1_0* pd, void* addr, size_t length, int access) {
  ibv_pd* real_pd = nullptr;
  {
    std::lock_guard<std::mutex> lock(compat().mu);
    if (compat().pds.count(pd) != 0) real_pd = pd->real_pd;
  }
  // An unknown PD still reaches the 1.1 verb, which counts and rejects it.
  ibv_mr* real = softverbs_ibv_reg_mr_1_1(real_pd, addr, length, access);
  if (real == nullptr) return nullptr;
  auto* mr = new ibv_mr_1_0();
  mr->context = pd->context;
  mr->pd = pd;
  mr->handle = real->handle;
  mr->lkey = real->lkey;
  mr->rkey = real->rkey;
  mr->real_mr = real;
  std::lock_guard<std::mutex> lock(compat().mu);
  compat().mrs[mr] = pd->context;
  return mr;
}

SOFTVERBS_COMPAT_1_0(ibv_dereg_mr);
int softverbs_ibv_dereg_mr_1_0(ibv_mr_1_0* mr) {
  std::lock_guard<std::mutex> lock(compat().mu);
  auto it = compat().mrs.find(mr);
  if (it == compat().mrs.end()) return EINVAL;
  int ret = softverbs_ibv_dereg_mr_1_1(mr->real_mr);
  if (ret != 0) return ret;
  compat().mrs.erase(it);
  delete mr;
  return 0;
}

}  // extern "C"
