// pd_caches.h: one mrcache cache per protection domain.
//
// The shim registers through the verbs registrar on the application's own
// ibv_pd, so every cached MR belongs to the PD the application named and its
// keys are valid for that PD's QPs. A PD's cache is created on its first
// cacheable registration and destroyed (every region deregistered) when the
// application deallocates the PD or closes its device.
//
// PDs are cached only if the application allocated them through the shim's
// ibv_alloc_pd and has not deallocated them (or closed their device) since:
// the shim never dereferences any other ibv_pd*, so a freed or foreign PD
// (or a parent domain, which ibv_alloc_pd does not return) goes to the real
// library untouched, which answers for it as it does without the shim.
//
// Invariants:
//  - A PdCache is destroyed only through ReleasePd (when no alias refers to
//    it) or ReleaseContext (after the caller orphaned its aliases), so an
//    alias's PdCache* stays valid for as long as the alias is registered.
//  - The map lock is never held across Cache::Create, a cache call or a
//    cache's destruction (those reach the registrar, malloc and the monitors).
//  - Stats of destroyed caches are folded into their device's entry of
//    `rails_`, so Rails() covers the whole run.
// Using a PD in one thread while another deallocates it is an application
// error (it is undefined without the shim too).
//
// Rails: the shim makes one one-rail cache per PD, never a rails cache, so
// the rails it reports are the devices its PDs belong to, each named by
// ibv_get_device_name (the verbs registrar's rail()).
#ifndef INTERPOSE_PD_CACHES_H_
#define INTERPOSE_PD_CACHES_H_

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "interpose/registrar_costs.h"
#include "mrcache/cache.h"
#include "mrcache/config.h"

namespace mrcache_preload {

// One rail's share of the run: the PD caches made on one device and their
// stats summed (AddStats), live and destroyed ones.
struct RailTotals {
  std::string name;        // the device's name (ibv_get_device_name)
  uint64_t pd_caches = 0;  // PD caches created on it
  mrcache::CacheStats stats;
};

struct PdCache {
  ibv_pd* pd = nullptr;
  ibv_context* context = nullptr;
  std::string rail;  // the PD's device, as the verbs registrar names it
  std::unique_ptr<mrcache::Cache> cache;
  // Cached aliases handed to the application and not yet deregistered.
  std::atomic<int64_t> aliases{0};
};

class PdCaches {
 public:
  explicit PdCaches(const mrcache::Config& config) : config_(config) {}
  PdCaches(const PdCaches&) = delete;
  PdCaches& operator=(const PdCaches&) = delete;

  // Records a PD the real ibv_alloc_pd just returned for `context`.
  void Adopt(ibv_pd* pd, ibv_context* context);
  // Forgets a PD the real ibv_dealloc_pd just deallocated.
  void Forget(ibv_pd* pd);

  // The cache of `pd`, created on first use (verbs registrar on `pd`).
  // EINVAL, without touching `pd`, for a PD that is not adopted (freed,
  // foreign, a parent domain); otherwise errors are those of Cache::Create
  // (e.g. the device lacks a requested ODP mode). The caller then registers
  // directly.
  absl::StatusOr<PdCache*> ForPd(ibv_pd* pd);

  // For ibv_dealloc_pd: EBUSY while the application holds aliases of `pd`;
  // otherwise destroys its cache (deregistering every unused region) and
  // returns OK. OK too when `pd` has no cache.
  absl::Status ReleasePd(ibv_pd* pd);

  // For ibv_close_device: forgets every PD of `context` and destroys their
  // caches, calling before_destroy(cache) first (to orphan its aliases).
  void ReleaseContext(ibv_context* context, const std::function<void(PdCache*)>& before_destroy);

  uint64_t created() const { return created_.load(std::memory_order_relaxed); }
  // The stats of every cache of the run, live and destroyed, summed by rail
  // (device): one entry per device a PD cache was made on, in order of name.
  // Each cache's stats are read once, all under the map lock.
  std::vector<RailTotals> Rails() const;
  // The monitor(s) the caches use ("" before the first cache exists).
  std::string monitor_name() const;
  // Registrar times by size class of every cache's registrations, and the
  // requests the caches served (the shim records those).
  RegistrarCosts& costs() { return costs_; }
  const RegistrarCosts& costs() const { return costs_; }

  // fork() protocol (shim.h "fork()"): LockForFork takes the map lock before
  // a fork, ahead of the library's cache locks (Rails() holds the map lock
  // while reading each cache's stats under its lock); UnlockAfterFork
  // releases it in the parent and in the child.
  void LockForFork();
  void UnlockAfterFork();

 private:
  void Retire(std::unique_ptr<PdCache> cache);

  const mrcache::Config config_;
  RegistrarCosts costs_;  // before caches_: their registrars record into it until destroyed
  mutable std::mutex mu_;
  std::unordered_map<ibv_pd*, std::unique_ptr<PdCache>> caches_;  // guarded by mu_
  std::unordered_map<ibv_pd*, ibv_context*> adopted_;             // guarded by mu_
  // By device name: PD caches created, and the stats of the destroyed ones.
  std::map<std::string, RailTotals> rails_;  // guarded by mu_
  std::string monitor_name_;                 // guarded by mu_
  std::atomic<uint64_t> created_{0};
};

// a += b, field by field.
void AddStats(mrcache::CacheStats* a, const mrcache::CacheStats& b);

// The stats of `rails` summed (AddStats): the run's totals (peak pinned bytes
// is then the sum of the per-PD peaks: an upper bound).
mrcache::CacheStats SumOverRails(const std::vector<RailTotals>& rails);

}  // namespace mrcache_preload

#endif  // INTERPOSE_PD_CACHES_H_
