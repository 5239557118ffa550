#include "allocator/thread_tcache.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "allocator/private_jemalloc.h"

namespace mrcache {
namespace pool_internal {

thread_local TcacheSlot t_tcache_slots[kTcacheSlots];

namespace {

struct Cache {
  unsigned tcache;
  Magazine* magazine;
};

// Pool id -> the tcaches and magazines made for it. Leaked on purpose:
// threads may exit (and release their slots) during static destruction.
struct Registry {
  std::mutex mu;
  absl::flat_hash_map<uint64_t, std::vector<Cache>> caches;
};

Registry& GetRegistry() {
  static Registry* registry = new Registry;
  return *registry;
}

int FlagsOf(unsigned tcache) {
  return tcache == kNoTcache ? MALLOCX_TCACHE_NONE : MALLOCX_TCACHE(tcache);
}

// Gives every buffer in the magazine back to jemalloc (through the tcache).
void Drain(Magazine* magazine, unsigned tcache) {
  if (magazine == nullptr) return;
  const int flags = FlagsOf(tcache);
  for (int bin = 0; bin < Magazine::kMaxBins; ++bin) {
    for (int i = 0; i < magazine->count[bin]; ++i)
      mrcache_je_dallocx(magazine->slots[bin][i], flags);
    magazine->count[bin] = 0;
  }
  if (magazine->large != nullptr) mrcache_je_dallocx(magazine->large, flags);
  magazine->large = nullptr;
}

// Empties the magazine and destroys the tcache (which flushes it).
void Destroy(const Cache& cache) {
  Drain(cache.magazine, cache.tcache);
  delete cache.magazine;
  unsigned id = cache.tcache;
  if (id != kNoTcache) mrcache_je_mallctl("tcache.destroy", nullptr, nullptr, &id, sizeof id);
}

// Under registry.mu: destroys the slot's caches if its pool is still alive
// (else the pool's destruction already did).
void ReleaseSlotLocked(Registry& registry, TcacheSlot& slot) {
  if (slot.pool_id == 0) return;
  auto it = registry.caches.find(slot.pool_id);
  if (it != registry.caches.end()) {
    std::vector<Cache>& caches = it->second;
    for (size_t i = 0; i < caches.size(); ++i) {
      if (caches[i].magazine == slot.magazine && caches[i].tcache == slot.tcache) {
        Destroy(caches[i]);
        caches[i] = caches.back();
        caches.pop_back();
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
  registry.caches[pool_id];
}

void UnregisterPool(uint64_t pool_id) {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  auto it = registry.caches.find(pool_id);
  if (it == registry.caches.end()) return;
  for (const Cache& cache : it->second) Destroy(cache);
  registry.caches.erase(it);
  // The calling thread's own slot would otherwise keep a dead entry until a
  // collision; other threads' dead entries are harmless (ids are never reused).
  TcacheSlot& slot = t_tcache_slots[pool_id % kTcacheSlots];
  if (slot.pool_id == pool_id) slot = TcacheSlot{};
}

void FlushCallingThread(uint64_t pool_id) {
  const TcacheSlot& slot = t_tcache_slots[pool_id % kTcacheSlots];
  if (slot.pool_id != pool_id) return;
  Drain(slot.magazine, slot.tcache);
  unsigned id = slot.tcache;
  if (id != kNoTcache) mrcache_je_mallctl("tcache.flush", nullptr, nullptr, &id, sizeof id);
}

TcacheSlot& ThreadSlotSlow(uint64_t pool_id) {
  t_exit_release.armed = true;  // registers the thread-exit destructor
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  TcacheSlot& slot = t_tcache_slots[pool_id % kTcacheSlots];
  ReleaseSlotLocked(registry, slot);
  slot.pool_id = pool_id;
  slot.flags = MALLOCX_TCACHE_NONE;
  slot.tcache = kNoTcache;
  slot.magazine = nullptr;
  auto it = registry.caches.find(pool_id);
  if (it == registry.caches.end()) return slot;  // not a live pool: no cache
  unsigned id = 0;
  size_t len = sizeof id;
  if (mrcache_je_mallctl("tcache.create", &id, &len, nullptr, 0) == 0) {
    slot.tcache = id;
    slot.flags = MALLOCX_TCACHE(id);
  }
  slot.magazine = new (std::nothrow) Magazine;
  if (slot.magazine != nullptr) {
    std::memset(slot.magazine->count, 0, sizeof slot.magazine->count);
    slot.magazine->large = nullptr;
    slot.magazine->large_usize = 0;
  }
  it->second.push_back(Cache{slot.tcache, slot.magazine});
  return slot;
}

}  // namespace pool_internal
}  // namespace mrcache
