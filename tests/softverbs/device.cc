// device.cc: softverbs' devices, their contexts and the query verbs.
//
// ibv_get_device_list lists SOFTVERBS_DEVICES devices (default 1, at most
// 64): "softverbs0", "softverbs1", ... Each has one InfiniBand port (ACTIVE,
// one GID, one P_Key) with a LID of its own on the fabric (transport.cc), a
// GID fe80::<the device's GUID with the LID in its low 16 bits>, and its own
// MR key space (registry.h). ibv_open_device reads SOFTVERBS_ODP,
// SOFTVERBS_SLOTS (size of the io_uring fixed-buffer table, which holds the
// MRs with a write right; default and maximum 16384), SOFTVERBS_MAX_MR
// (max_mr: live MRs of any kind, default SOFTVERBS_SLOTS, at most 2^24) and
// SOFTVERBS_MAX_MR_SIZE (max_mr_size, default 2^64-1), and fills a real
// struct verbs_context, so the inline
// ibv_query_device_ex, ibv_query_port and ibv_advise_mr of rdma-core's
// headers dispatch into softverbs.
#include <endian.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "tests/softverbs/env.h"
#include "tests/softverbs/fork_protection.h"
#include "tests/softverbs/registry.h"

#undef ibv_query_port

namespace softverbs {
namespace {

constexpr unsigned kDefaultSlots = 16384;
constexpr uint64_t kMaxMr = uint64_t{1} << 24;  // MR keys have 24 bits of index

// rdma-core's struct verbs_device, which begins with the ibv_device: a
// provider asked whether a device is its own (mlx5dv_is_supported) compares
// the ops pointer that follows, so the memory after softverbs' ibv_device is
// laid out the same and zero (no provider's ops).
struct SoftDevice {
  ibv_device device;  // first: the ibv_device* handed out is this object
  const void* ops = nullptr;
  int refcount = 1;
  void* entry[2] = {nullptr, nullptr};
  void* sysfs = nullptr;
  uint64_t core_support = 0;
};

// Every device softverbs can list, made once and never freed (a list
// handed out earlier stays valid whatever SOFTVERBS_DEVICES says later).
SoftDevice* Devices() {
  static SoftDevice* devices = [] {
    auto* all = new SoftDevice[kMaxDevices];
    for (unsigned i = 0; i < kMaxDevices; ++i) {
      ibv_device* d = &all[i].device;
      d->node_type = IBV_NODE_CA;
      d->transport_type = IBV_TRANSPORT_IB;
      snprintf(d->name, sizeof d->name, "softverbs%u", i);
      snprintf(d->dev_name, sizeof d->dev_name, "uverbs_softverbs%u", i);
      snprintf(d->dev_path, sizeof d->dev_path, "/sys/class/infiniband_verbs/uverbs_softverbs%u",
               i);
      snprintf(d->ibdev_path, sizeof d->ibdev_path, "/sys/class/infiniband/softverbs%u", i);
    }
    return all;
  }();
  return devices;
}

// The index of a softverbs device, or -1 for any other pointer.
int DeviceIndex(const ibv_device* device) {
  const SoftDevice* all = Devices();
  for (unsigned i = 0; i < kMaxDevices; ++i) {
    if (device == &all[i].device) return static_cast<int>(i);
  }
  return -1;
}

Context* FindContext(ibv_context* ctx) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.contexts.find(ctx);
  return it == r.contexts.end() ? nullptr : it->second;
}

void FillDeviceAttr(const Context* ctx, ibv_device_attr* a) {
  memset(a, 0, sizeof *a);
  snprintf(a->fw_ver, sizeof a->fw_ver, "softverbs-1.0");
  a->node_guid = htobe64(NodeGuid(ctx->device));
  a->sys_image_guid = htobe64(NodeGuid(ctx->device));
  a->max_mr_size = ctx->max_mr_size;
  a->page_size_cap = ~(static_cast<uint64_t>(PageSize()) - 1);
  a->vendor_id = 0;
  a->vendor_part_id = 0;
  a->max_mr = static_cast<int>(ctx->max_mr);
  a->max_pd = 1 << 16;
  a->max_qp = 1 << 16;
  a->max_qp_wr = 16384;
  a->max_sge = 32;
  a->max_sge_rd = 32;
  a->max_cq = 1 << 16;
  a->max_cqe = 1 << 20;
  a->max_qp_rd_atom = 16;
  a->max_qp_init_rd_atom = 16;
  a->max_res_rd_atom = 16 << 16;
  a->max_ah = 1 << 16;
  a->max_srq = 1 << 16;
  a->max_srq_wr = 16384;
  a->max_srq_sge = 32;
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE;
  a->atomic_cap = IBV_ATOMIC_NONE;
  a->max_pkeys = 1;
  a->phys_port_cnt = 1;
}

void FillPortAttr(const Context* ctx, ibv_port_attr* p) {
  memset(p, 0, sizeof *p);
  p->state = IBV_PORT_ACTIVE;
  p->max_mtu = IBV_MTU_4096;
  p->active_mtu = IBV_MTU_4096;
  p->gid_tbl_len = 1;
  p->max_msg_sz = 1U << 31;
  p->pkey_tbl_len = 1;
  p->lid = LocalLid(ctx->device);
  p->sm_lid = 1;
  p->max_vl_num = 1;
  p->active_width = 2;   // 4X
  p->active_speed = 32;  // EDR
  p->phys_state = 5;     // LinkUp
  p->link_layer = IBV_LINK_LAYER_INFINIBAND;
}

int QueryDeviceEx(ibv_context* context, const ibv_query_device_ex_input* input,
                  ibv_device_attr_ex* attr, size_t attr_size) {
  if (input != nullptr && input->comp_mask != 0) return EINVAL;
  if (attr == nullptr || attr_size < sizeof(ibv_device_attr)) return EINVAL;
  Context* ctx = FindContext(context);
  if (ctx == nullptr) return EINVAL;
  ibv_device_attr_ex ex;
  memset(&ex, 0, sizeof ex);
  FillDeviceAttr(ctx, &ex.orig_attr);
  if (ctx->odp != OdpLevel::kNone) {
    ex.odp_caps.general_caps = IBV_ODP_SUPPORT;
    if (ctx->odp == OdpLevel::kImplicit) ex.odp_caps.general_caps |= IBV_ODP_SUPPORT_IMPLICIT;
    const uint32_t rdma =
        IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ;
    ex.odp_caps.per_transport_caps.rc_odp_caps =
        rdma | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
    ex.odp_caps.per_transport_caps.uc_odp_caps =
        IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE;
    ex.odp_caps.per_transport_caps.ud_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV;
    ex.xrc_odp_caps = rdma | IBV_ODP_SUPPORT_SRQ_RECV;
  }
  ex.phys_port_cnt_ex = 1;
  memcpy(attr, &ex, attr_size < sizeof ex ? attr_size : sizeof ex);
  if (attr_size > sizeof ex) {
    memset(reinterpret_cast<char*>(attr) + sizeof ex, 0, attr_size - sizeof ex);
  }
  return 0;
}

int QueryPortEx(ibv_context* context, uint8_t port_num, ibv_port_attr* attr, size_t attr_len) {
  const Context* ctx = FindContext(context);
  if (ctx == nullptr || attr == nullptr) return EINVAL;
  if (port_num != 1) return EINVAL;
  ibv_port_attr p;
  FillPortAttr(ctx, &p);
  memcpy(attr, &p, attr_len < sizeof p ? attr_len : sizeof p);
  return 0;
}

}  // namespace
}  // namespace softverbs

using softverbs::Context;
using softverbs::FindContext;
using softverbs::Registry;
using softverbs::registry;

extern "C" {

// SOFTVERBS_DEVICES=N lists softverbs0..softverbs<N-1>; a value that is not
// a whole number in 1..64, or a SOFTVERBS_FORK that is not copy|dontfork,
// fails with EINVAL and a message on stderr.
SOFTVERBS_DEFAULT_1_1(ibv_get_device_list);
ibv_device** softverbs_ibv_get_device_list_1_1(int* num_devices) {
  uint64_t n = 1;
  if (softverbs::InitForkProtectionOnce() != 0 ||
      softverbs::CountFromEnvironment("SOFTVERBS_DEVICES", 1, softverbs::kMaxDevices, &n) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  auto** list = static_cast<ibv_device**>(calloc(n + 1, sizeof(ibv_device*)));
  if (list == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  for (uint64_t i = 0; i < n; ++i) list[i] = &softverbs::Devices()[i].device;
  if (num_devices != nullptr) *num_devices = static_cast<int>(n);
  return list;
}

SOFTVERBS_DEFAULT_1_1(ibv_free_device_list);
void softverbs_ibv_free_device_list_1_1(ibv_device** list) { free(list); }

SOFTVERBS_DEFAULT_1_1(ibv_get_device_name);
const char* softverbs_ibv_get_device_name_1_1(ibv_device* device) {
  if (softverbs::DeviceIndex(device) < 0) {
    errno = EINVAL;
    return nullptr;
  }
  return device->name;
}

SOFTVERBS_DEFAULT_1_1(ibv_get_device_guid);
__be64 softverbs_ibv_get_device_guid_1_1(ibv_device* device) {
  const int index = softverbs::DeviceIndex(device);
  if (index < 0) {
    errno = EINVAL;
    return 0;
  }
  return htobe64(softverbs::NodeGuid(static_cast<unsigned>(index)));
}

int ibv_get_device_index(ibv_device* device) { return softverbs::DeviceIndex(device); }

SOFTVERBS_DEFAULT_1_1(ibv_open_device);
ibv_context* softverbs_ibv_open_device_1_1(ibv_device* device) {
  const int index = softverbs::DeviceIndex(device);
  if (index < 0) {
    errno = EINVAL;
    return nullptr;
  }
  uint64_t slots = softverbs::kDefaultSlots;
  uint64_t max_mr_size = UINT64_MAX;
  if (softverbs::CountFromEnvironment("SOFTVERBS_SLOTS", 1, softverbs::kDefaultSlots, &slots) !=
          0 ||
      softverbs::BytesFromEnvironment("SOFTVERBS_MAX_MR_SIZE", 1, UINT64_MAX, &max_mr_size) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  uint64_t max_mr = slots;
  if (softverbs::CountFromEnvironment("SOFTVERBS_MAX_MR", 1, softverbs::kMaxMr, &max_mr) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  auto* ctx = new Context();
  ctx->device = static_cast<unsigned>(index);
  ctx->max_mr = max_mr;
  ctx->max_mr_size = max_mr_size;
  int err = ctx->pins.Init(static_cast<unsigned>(slots));
  if (err != 0) {
    delete ctx;
    errno = err;
    return nullptr;
  }
  ctx->odp = softverbs::OdpLevelFromEnvironment();
  ctx->slots = static_cast<unsigned>(slots);
  verbs_context& v = ctx->vctx;
  v.sz = sizeof(verbs_context);
  v.query_device_ex = softverbs::QueryDeviceEx;
  v.query_port = softverbs::QueryPortEx;
  v.advise_mr = softverbs::AdviseMr;
  v.context.device = device;
  v.context.cmd_fd = ctx->pins.fd();
  int async_pipe[2];
  if (pipe2(async_pipe, O_CLOEXEC) != 0) {
    err = errno;
    delete ctx;
    errno = err;
    return nullptr;
  }
  v.context.async_fd = async_pipe[0];
  ctx->async_write_fd = async_pipe[1];
  v.context.num_comp_vectors = 1;
  pthread_mutex_init(&v.context.mutex, nullptr);
  v.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
  softverbs::InitTransportOps(ctx);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.contexts[&v.context] = ctx;
  return &v.context;
}

// Like closing the uverbs file: whatever the context still owns is released.
SOFTVERBS_DEFAULT_1_1(ibv_close_device);
int softverbs_ibv_close_device_1_1(ibv_context* context) {
  Registry& r = registry();
  Context* ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.contexts.find(context);
    if (it == r.contexts.end()) {
      errno = EINVAL;
      return -1;
    }
    ctx = it->second;
    r.contexts.erase(it);
  }
  softverbs::CloseTransport(ctx);
  {
    std::lock_guard<std::mutex> lock(r.mu);
    for (auto m = r.mrs.begin(); m != r.mrs.end();) {
      softverbs::Mr* mr = m->second;
      ++m;
      if (mr->pd->ctx != ctx) continue;
      ++r.counters.mrs_released_by_close;
      r.ForgetMrLocked(mr);
    }
    for (auto p = r.pds.begin(); p != r.pds.end();) {
      softverbs::Pd* pd = p->second;
      if (pd->ctx != ctx) {
        ++p;
        continue;
      }
      p = r.pds.erase(p);
      --r.counters.live_pds;
      delete pd;
    }
  }
  pthread_mutex_destroy(&ctx->vctx.context.mutex);
  close(ctx->vctx.context.async_fd);
  close(ctx->async_write_fd);
  delete ctx;
  return 0;
}

SOFTVERBS_DEFAULT_1_1(ibv_query_device);
int softverbs_ibv_query_device_1_1(ibv_context* context, ibv_device_attr* attr) {
  const Context* ctx = FindContext(context);
  if (ctx == nullptr || attr == nullptr) return EINVAL;
  softverbs::FillDeviceAttr(ctx, attr);
  return 0;
}

// The exported symbol takes the pre-port_cap_flags2 layout; rdma-core's
// inline ibv_query_port only calls it when verbs_context.query_port is unset.
SOFTVERBS_DEFAULT_1_1(ibv_query_port);
int softverbs_ibv_query_port_1_1(ibv_context* context, uint8_t port_num,
                                 _compat_ibv_port_attr* attr) {
  return softverbs::QueryPortEx(context, port_num, reinterpret_cast<ibv_port_attr*>(attr),
                                offsetof(ibv_port_attr, port_cap_flags2));
}

SOFTVERBS_DEFAULT_1_1(ibv_query_gid);
int softverbs_ibv_query_gid_1_1(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
  const Context* ctx = FindContext(context);
  if (ctx == nullptr || gid == nullptr || port_num != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *gid = softverbs::LocalGid(ctx->device);
  return 0;
}

// rdma-core private (IBVERBS_PRIVATE_34), used by ibv_devinfo: the GID type
// (0 = IB/RoCE v1).
int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index, int* type) {
  if (FindContext(context) == nullptr || type == nullptr || port_num != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *type = 0;
  return 0;
}

// The GID table of port 1: one entry, index 0, of type IB, on no netdev.
int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                      ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  const Context* ctx = FindContext(context);
  if (ctx == nullptr || entry == nullptr || flags != 0 || entry_size < sizeof(ibv_gid_entry)) {
    return EINVAL;
  }
  if (port_num != 1) return EINVAL;
  if (gid_index != 0) return ENODATA;
  memset(entry, 0, entry_size);
  entry->gid = softverbs::LocalGid(ctx->device);
  entry->gid_index = 0;
  entry->port_num = 1;
  entry->gid_type = IBV_GID_TYPE_IB;
  entry->ndev_ifindex = 0;
  return 0;
}

// The whole GID table: the number of entries written, or -errno.
ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                             uint32_t flags, size_t entry_size) {
  if (FindContext(context) == nullptr || entries == nullptr || flags != 0 ||
      entry_size < sizeof(ibv_gid_entry)) {
    return -EINVAL;
  }
  if (max_entries < 1) return -EINVAL;
  int err = _ibv_query_gid_ex(context, 1, 0, entries, 0, entry_size);
  return err != 0 ? -err : 1;
}

// Blocks until the device raises an async event; softverbs raises none, so
// this blocks for ever, or fails with EAGAIN when async_fd was made
// non-blocking, as on a quiet device.
SOFTVERBS_DEFAULT_1_1(ibv_get_async_event);
int softverbs_ibv_get_async_event_1_1(ibv_context* context, ibv_async_event* event) {
  if (FindContext(context) == nullptr || event == nullptr) {
    errno = EINVAL;
    return -1;
  }
  char byte;
  ssize_t n = read(context->async_fd, &byte, 1);
  if (n < 0) return -1;
  // Nothing writes the pipe while the context lives.
  errno = EIO;
  return -1;
}

// No event is ever handed out, so none needs acknowledging.
SOFTVERBS_DEFAULT_1_1(ibv_ack_async_event);
void softverbs_ibv_ack_async_event_1_1(ibv_async_event* event) { (void)event; }

SOFTVERBS_DEFAULT_1_1(ibv_query_pkey);
int softverbs_ibv_query_pkey_1_1(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
  if (FindContext(context) == nullptr || pkey == nullptr || port_num != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *pkey = htobe16(0xffff);
  return 0;
}

int ibv_get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) {
  if (FindContext(context) == nullptr || port_num != 1 || pkey != htobe16(0xffff)) {
    return -1;
  }
  return 0;
}

// Reads dir/file into buf (NUL-terminated, trailing newline dropped).
// Returns the length, or -1 with errno.
int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  char path[IBV_SYSFS_PATH_MAX * 2];
  if (dir == nullptr || file == nullptr || buf == nullptr || size == 0) {
    errno = EINVAL;
    return -1;
  }
  snprintf(path, sizeof path, "%s/%s", dir, file);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, size);
  int saved = errno;
  close(fd);
  if (n < 0) {
    errno = saved;
    return -1;
  }
  if (n > 0 && buf[n - 1] == '\n') --n;
  if (static_cast<size_t>(n) >= size) n = static_cast<ssize_t>(size) - 1;
  buf[n] = '\0';
  return static_cast<int>(n);
}

const char* ibv_node_type_str(ibv_node_type node_type) {
  switch (node_type) {
    case IBV_NODE_CA:
      return "InfiniBand channel adapter";
    case IBV_NODE_SWITCH:
      return "InfiniBand switch";
    case IBV_NODE_ROUTER:
      return "InfiniBand router";
    case IBV_NODE_RNIC:
      return "iWARP NIC";
    case IBV_NODE_USNIC:
      return "usNIC";
    case IBV_NODE_USNIC_UDP:
      return "usNIC UDP";
    case IBV_NODE_UNSPECIFIED:
      return "unspecified";
    default:
      return "unknown";
  }
}

const char* ibv_port_state_str(ibv_port_state port_state) {
  switch (port_state) {
    case IBV_PORT_NOP:
      return "no state change (NOP)";
    case IBV_PORT_DOWN:
      return "down";
    case IBV_PORT_INIT:
      return "init";
    case IBV_PORT_ARMED:
      return "armed";
    case IBV_PORT_ACTIVE:
      return "active";
    case IBV_PORT_ACTIVE_DEFER:
      return "active defer";
    default:
      return "invalid state";
  }
}

}  // extern "C"
