#include "allocator/thread_tcache.h"

#include <atomic>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "allocator/private_jemalloc.h"

namespace mrcache {
namespace pool_internal {

thread_local TcacheSlot t_tcache_slots[kTcacheSlots];

namespace {

// Pool id -> the explicit tcaches made for it. Leaked on purpose: threads may
// exit (and release their slots) during static destruction.
struct Registry {
  std::mutex mu;
  absl::flat_hash_map<uint64_t, std::vector<unsigned>> tcaches;
};

Registry& GetRegistry() {
  static Registry* registry = new Registry;
  return *registry;
}

void DestroyTcache(unsigned id) {
  mrc_je_mallctl("tcache.destroy", nullptr, nullptr, &id, sizeof id);
}

// Under registry.mu: destroys the slot's tcache if its pool is still alive.
void ReleaseSlotLocked(Registry& registry, TcacheSlot& slot) {
  if (slot.pool_id == 0) return;
  auto it = registry.tcaches.find(slot.pool_id);
  if (it != registry.tcaches.end() && slot.tcache != kNoTcache) {
    std::vector<unsigned>& ids = it->second;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] == slot.tcache) {
        ids[i] = ids.back();
        ids.pop_back();
        DestroyTcache(slot.tcache);
        break;
      }
    }
  }
  slot = TcacheSlot{};
}

// Its destructor runs at thread exit and gives the thread's tcaches back.
struct ThreadExitRelease {
  bool armed = false;
  ~ThreadExitRelease() {
    Registry& registry = GetRegistry();
    std::lock_guard<std::mutex> lock(registry.mu);
    for (TcacheSlot& slot : t_tcache_slots) ReleaseSlotLocked(registry, slot);
  }
};
thread_local ThreadExitRelease t_exit_release;

}  // namespace

uint64_t NewPoolId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void RegisterPool(uint64_t pool_id) {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  registry.tcaches[pool_id];
}

void UnregisterPool(uint64_t pool_id) {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  auto it = registry.tcaches.find(pool_id);
  if (it == registry.tcaches.end()) return;
  for (unsigned id : it->second) DestroyTcache(id);
  registry.tcaches.erase(it);
  // The calling thread's own slot would otherwise keep a dead entry until a
  // collision; other threads' dead entries are harmless (ids are never reused).
  TcacheSlot& slot = t_tcache_slots[pool_id % kTcacheSlots];
  if (slot.pool_id == pool_id) slot = TcacheSlot{};
}

void FlushCallingThread(uint64_t pool_id) {
  const TcacheSlot& slot = t_tcache_slots[pool_id % kTcacheSlots];
  if (slot.pool_id != pool_id || slot.tcache == kNoTcache) return;
  unsigned id = slot.tcache;
  mrc_je_mallctl("tcache.flush", nullptr, nullptr, &id, sizeof id);
}

int TcacheFlagsSlow(uint64_t pool_id) {
  t_exit_release.armed = true;  // registers the thread-exit destructor
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  TcacheSlot& slot = t_tcache_slots[pool_id % kTcacheSlots];
  ReleaseSlotLocked(registry, slot);
  slot.pool_id = pool_id;
  slot.flags = MALLOCX_TCACHE_NONE;
  slot.tcache = kNoTcache;
  auto it = registry.tcaches.find(pool_id);
  if (it == registry.tcaches.end()) return slot.flags;  // not a live pool: no cache
  unsigned id = 0;
  size_t len = sizeof id;
  if (mrc_je_mallctl("tcache.create", &id, &len, nullptr, 0) == 0) {
    it->second.push_back(id);
    slot.tcache = id;
    slot.flags = MALLOCX_TCACHE(id);
  }
  return slot.flags;
}

}  // namespace pool_internal
}  // namespace mrcache
