// registry.h: softverbs' objects and the process-wide registry that owns them.
//
// Every object softverbs hands out (context, PD, MR) is recorded here, and
// every entry point checks membership before it touches a caller's pointer:
// an unknown or already-freed PD or MR is EINVAL, never a crash.
//
// Invariants (all under Registry::mu):
//  - contexts, pds and mrs hold exactly the live objects;
//  - Pd::mrs == number of live MRs whose pd is that Pd (and pending ones);
//  - Context::mrs == number of live MRs of that context (and pending ones);
//  - each device has its own key table: keys[d].by_key maps each live MR of
//    device d's contexts to it by its key (lkey == rkey); a key carries its
//    device in its low byte, so no key is ever valid on two devices; keys are
//    never reused (until 2^24 registrations on one device wrap the counter);
//  - counters.live_mrs == mrs.size(), counters.live_pds == pds.size(),
//    counters.bytes_pinned == sum of Mr::pinned_bytes.
#ifndef SOFTVERBS_REGISTRY_H_
#define SOFTVERBS_REGISTRY_H_

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tests/softverbs/pin_table.h"
#include "tests/softverbs/softverbs.h"

namespace softverbs {

struct Transport;  // transport.cc: a context's queues and progress thread

// The node GUID of softverbs0; a port's GID is fe80::<its device's GUID
// with the LID in the low 16 bits>.
constexpr uint64_t kNodeGuid = 0x5f7665726273aa01ULL;  // "_verbs" + 0xaa01

// SOFTVERBS_DEVICES lists at most this many devices (softverbs0..63).
constexpr unsigned kMaxDevices = 64;

// Device d's node GUID: kNodeGuid with d in bits 16..23 (softverbs0's is kNodeGuid).
constexpr uint64_t NodeGuid(unsigned device) {
  return kNodeGuid ^ (static_cast<uint64_t>(device) << 16);
}

// ODP support, from SOFTVERBS_ODP=none|explicit|implicit at ibv_open_device.
enum class OdpLevel { kNone, kExplicit, kImplicit };

// What ibv_open_device returns a pointer into (&vctx.context).
struct Context {
  verbs_context vctx;   // first: verbs_get_ctx() computes its address from &vctx.context
  unsigned device = 0;  // index of the device opened (softverbs<device>)
  OdpLevel odp = OdpLevel::kNone;
  unsigned slots = 0;        // size of the pin table (MRs with a write right)
  uint64_t max_mr = 0;       // SOFTVERBS_MAX_MR, default `slots`: most MRs live
  uint64_t max_mr_size = 0;  // SOFTVERBS_MAX_MR_SIZE: longest MR (bytes)
  size_t mrs = 0;            // live MRs (at most max_mr)
  PinTable pins;
  Transport* transport = nullptr;  // created with the first CQ, channel, QP, SRQ or AH
  // The async event pipe: vctx.context.async_fd is its read end. softverbs
  // raises no async events, so nothing is ever written: a reader blocks (or,
  // non-blocking, gets EAGAIN) as with a quiet device. Both ends live as long
  // as the context.
  int async_write_fd = -1;
};

struct Pd {
  ibv_pd pd;  // first: the caller's ibv_pd* is this object
  Context* ctx = nullptr;
  size_t mrs = 0;
  size_t users = 0;  // QPs, SRQs and AHs on this PD (dealloc is EBUSY while any)
};

struct Mr {
  ibv_mr mr;  // first: the caller's ibv_mr* is this object
  Pd* pd = nullptr;
  uint64_t iova = 0;            // the address SGEs use for mr.addr
  unsigned access = 0;          // accepted access bits (optional ones dropped)
  bool odp = false;             // IBV_ACCESS_ON_DEMAND: nothing pinned
  bool implicit = false;        // the implicit ODP MR (addr NULL, length SIZE_MAX)
  bool read_only_pin = false;   // pinned without write access (read_only_pins.h)
  std::vector<uint32_t> slots;  // pinned for write: io_uring fixed-buffer slots, in order
  uint64_t pinned_bytes = 0;    // page-rounded span pinned
};

// One device's MR key space.
struct DeviceKeys {
  uint32_t next = 1;  // the next key's counter (bits 8..31 of the key)
  std::unordered_map<uint32_t, Mr*> by_key;
};

struct Registry {
  std::mutex mu;
  std::mutex port_mu;  // guards transport.cc's port (LID); taken after mu, never before
  std::unordered_map<ibv_context*, Context*> contexts;
  std::unordered_map<ibv_pd*, Pd*> pds;
  std::unordered_map<ibv_mr*, Mr*> mrs;
  DeviceKeys keys[kMaxDevices];
  uint32_t next_handle = 1;
  softverbs_counters counters{};

  // Releases the MR's pins and forgets it. Caller holds mu.
  void ForgetMrLocked(Mr* mr);
  // The first half of ForgetMrLocked: the MR leaves the maps, so its keys
  // stop working and no transfer reaches its pages, but it still counts as
  // live and pinned, and holds its PD (dealloc is EBUSY) and one of its
  // context's max_mr, until ReleaseMrLocked. ibv_dereg_mr unpins in
  // between without mu, as the kernel releases one MR's pages without
  // stopping other registrations. Caller holds mu.
  void DetachMrLocked(Mr* mr);
  // The second half, once the MR's pages are unpinned: counts it gone and
  // frees it. Caller holds mu.
  void ReleaseMrLocked(Mr* mr);
  // A fresh key of `device` (never handed out before). Caller holds mu.
  uint32_t NewKeyLocked(unsigned device);
  // The live MR whose key is `key` on `device`, or null. Caller holds mu.
  Mr* MrByKeyLocked(unsigned device, uint32_t key);
  // The live MR whose key is `key` on the device the key names, or null (for
  // the test entry points, which name no device). Caller holds mu.
  Mr* MrByKeyLocked(uint32_t key);
};

// The process-wide registry (never destroyed, so it outlives exit handlers).
Registry& registry();

// The ODP level SOFTVERBS_ODP asks for (unknown values: none, with a warning).
OdpLevel OdpLevelFromEnvironment();

// The system page size.
size_t PageSize();

// The verbs_context ops softverbs implements in memory.cc (advise_mr).
int AdviseMr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
             uint32_t num_sge);

// Moves len bytes between buf and MR m at `addr` (in its iova space, already
// checked to lie inside it): through the pages pinned at registration, or the
// current page tables for ODP MRs. to_memory: buf -> MR. 0 or an errno.
// Caller holds registry().mu.
int MrCopyLocked(Mr* m, uint64_t addr, void* buf, size_t len, bool to_memory);

// The responder's rkey check: the MR is alive, belongs to `pd` (any PD if
// null), grants every bit of `right` and contains [addr, addr+len).
// IBV_WC_SUCCESS (and *out set, if not null) or IBV_WC_REM_ACCESS_ERR.
// Caller holds registry().mu.
int CheckRkeyLocked(Registry& r, uint32_t rkey, uint64_t addr, uint64_t len, unsigned right,
                    const Pd* pd, Mr** out);

// A peer's RDMA WRITE (to_memory) or READ through rkey, as softverbs.h's
// softverbs_remote_write/read describe, restricted to `pd` if not null.
// Returns the enum ibv_wc_status the requester sees. Caller holds mu.
int RemoteAccessLocked(Registry& r, uint32_t rkey, uint64_t addr, void* buf, size_t len,
                       bool to_memory, const Pd* pd);

// Installs the queue verbs (poll_cq, post_send, ...) in a new context.
void InitTransportOps(Context* ctx);

// ibv_close_device: stops the context's progress thread and releases its
// QPs, SRQs, AHs, CQs and completion channels. Called without mu held.
void CloseTransport(Context* ctx);

// The LID of `device`'s port, unique among the live ports (every device of
// every process) sharing SOFTVERBS_FABRIC_DIR (0 if the fabric directory is
// unusable; a message says why). A child made by fork() gets LIDs of its
// own at their first use.
uint16_t LocalLid(unsigned device);

// The GID of `device`'s port (fe80:: + NodeGuid(device) with the LID in its
// low 16 bits).
ibv_gid LocalGid(unsigned device);

}  // namespace softverbs

// rdma-core exports these names twice: the IBVERBS_1.1 default and an
// IBVERBS_1.0 compat variant taking libibverbs 1.0's structs (compat_1_0.cc).
// The 1.1 definitions are named softverbs_<name>_1_1 and bound to
// <name>@@IBVERBS_1.1 by SOFTVERBS_DEFAULT_1_1(<name>).
#define SOFTVERBS_DEFAULT_1_1(name) \
  __asm__(".symver softverbs_" #name "_1_1, " #name "@@IBVERBS_1.1")

extern "C" {
ibv_device** softverbs_ibv_get_device_list_1_1(int* num_devices);
void softverbs_ibv_free_device_list_1_1(ibv_device** list);
const char* softverbs_ibv_get_device_name_1_1(ibv_device* device);
__be64 softverbs_ibv_get_device_guid_1_1(ibv_device* device);
ibv_context* softverbs_ibv_open_device_1_1(ibv_device* device);
int softverbs_ibv_close_device_1_1(ibv_context* context);
int softverbs_ibv_query_device_1_1(ibv_context* context, ibv_device_attr* attr);
int softverbs_ibv_query_port_1_1(ibv_context* context, uint8_t port_num,
                                 _compat_ibv_port_attr* attr);
int softverbs_ibv_query_gid_1_1(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid);
int softverbs_ibv_query_pkey_1_1(ibv_context* context, uint8_t port_num, int index, __be16* pkey);
ibv_pd* softverbs_ibv_alloc_pd_1_1(ibv_context* context);
int softverbs_ibv_dealloc_pd_1_1(ibv_pd* pd);
ibv_mr* softverbs_ibv_reg_mr_1_1(ibv_pd* pd, void* addr, size_t length, int access);
int softverbs_ibv_dereg_mr_1_1(ibv_mr* mr);
int softverbs_ibv_get_async_event_1_1(ibv_context* context, ibv_async_event* event);
void softverbs_ibv_ack_async_event_1_1(ibv_async_event* event);
}

#endif  // SOFTVERBS_REGISTRY_H_
