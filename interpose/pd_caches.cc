#include "interpose/pd_caches.h"

#include "interpose/timed_registrar.h"

#include <cerrno>
#include <iterator>
#include <utility>
#include <vector>

#include "mrcache/errno_status.h"
#include "mrcache/registrars/prefault.h"
#include "mrcache/registrars/verbs_registrar.h"

namespace mrcache_preload {

void AddStats(mrcache::CacheStats* a, const mrcache::CacheStats& b) {
  a->hits += b.hits;
  a->misses += b.misses;
  a->registrations += b.registrations;
  a->deregistrations += b.deregistrations;
  a->evictions += b.evictions;
  a->invalidations += b.invalidations;
  a->merges += b.merges;
  a->regions += b.regions;
  a->pinned_bytes += b.pinned_bytes;
  a->registrar_ns += b.registrar_ns;
  a->peak_pinned_bytes += b.peak_pinned_bytes;
  a->registrar_failures += b.registrar_failures;
  a->bypassed += b.bypassed;
  a->remote_private += b.remote_private;
  a->monitor_incomplete += b.monitor_incomplete;
  // One budget shared by every cache of the process: the largest, not a sum.
  if (b.pin_budget_bytes > a->pin_budget_bytes) a->pin_budget_bytes = b.pin_budget_bytes;
  a->watch_failures += b.watch_failures;
  a->watch_enomem += b.watch_enomem;
  a->watch_ebusy += b.watch_ebusy;
  a->watch_eperm += b.watch_eperm;
  a->watch_einval += b.watch_einval;
  a->watch_map_limit += b.watch_map_limit;
  a->watch_other += b.watch_other;
  a->dereg_queue_depth += b.dereg_queue_depth;
  a->dereg_wait_ns += b.dereg_wait_ns;
  a->background_dereg_ns += b.background_dereg_ns;
}

mrcache::CacheStats SumOverRails(const std::vector<RailTotals>& rails) {
  mrcache::CacheStats total;
  for (const RailTotals& rail : rails) AddStats(&total, rail.stats);
  return total;
}

void PdCaches::Adopt(ibv_pd* pd, ibv_context* context) {
  std::lock_guard<std::mutex> lock(mu_);
  adopted_[pd] = context;
}

void PdCaches::Forget(ibv_pd* pd) {
  std::lock_guard<std::mutex> lock(mu_);
  adopted_.erase(pd);
}

absl::StatusOr<PdCache*> PdCaches::ForPd(ibv_pd* pd) {
  ibv_context* context = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = caches_.find(pd);
    if (it != caches_.end()) return it->second.get();
    auto adopted = adopted_.find(pd);
    if (adopted == adopted_.end()) {
      return mrcache::ErrnoStatus(
          EINVAL, "not a live PD from ibv_alloc_pd (freed, foreign or a parent domain)");
    }
    context = adopted->second;
  }
  // Build outside the lock: this queries the device and installs monitors.
  auto registrar = mrcache::MakeVerbsRegistrar(pd, config_);
  if (!registrar.ok()) return registrar.status();
  std::string rail = (*registrar)->rail();
  auto cache = mrcache::Cache::Create(
      config_, std::make_unique<TimedRegistrar>(
                   mrcache::WithPrefault(std::move(*registrar), config_), &costs_));
  if (!cache.ok()) return cache.status();
  auto fresh = std::make_unique<PdCache>();
  fresh->pd = pd;
  fresh->context = context;
  fresh->rail = std::move(rail);
  fresh->cache = std::move(*cache);
  std::unique_ptr<PdCache> loser;
  PdCache* result = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = caches_[pd];
    if (slot == nullptr) {
      monitor_name_ = fresh->cache->monitor_name();
      RailTotals& on_rail = rails_[fresh->rail];
      on_rail.name = fresh->rail;
      ++on_rail.pd_caches;
      slot = std::move(fresh);
      created_.fetch_add(1, std::memory_order_relaxed);
    } else {
      loser = std::move(fresh);  // another thread won the race
    }
    result = slot.get();
  }
  return result;  // `loser` (if any) is destroyed here, outside the lock
}

absl::Status PdCaches::ReleasePd(ibv_pd* pd) {
  std::unique_ptr<PdCache> victim;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = caches_.find(pd);
    if (it == caches_.end()) return absl::OkStatus();
    if (it->second->aliases.load() > 0) {
      return mrcache::ErrnoStatus(EBUSY, "the application still holds memory regions of this PD");
    }
    victim = std::move(it->second);
    caches_.erase(it);
  }
  Retire(std::move(victim));
  return absl::OkStatus();
}

void PdCaches::ReleaseContext(ibv_context* context,
                              const std::function<void(PdCache*)>& before_destroy) {
  std::vector<std::unique_ptr<PdCache>> victims;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = adopted_.begin(); it != adopted_.end();) {
      it = it->second == context ? adopted_.erase(it) : std::next(it);
    }
    for (auto it = caches_.begin(); it != caches_.end();) {
      if (it->second->context == context) {
        victims.push_back(std::move(it->second));
        it = caches_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& victim : victims) {
    before_destroy(victim.get());
    Retire(std::move(victim));
  }
}

void PdCaches::Retire(std::unique_ptr<PdCache> cache) {
  mrcache::CacheStats last = cache->cache->stats();
  cache->cache.reset();  // deregisters every region still cached
  last.deregistrations += last.regions;
  last.regions = 0;
  last.pinned_bytes = 0;
  std::lock_guard<std::mutex> lock(mu_);
  AddStats(&rails_[cache->rail].stats, last);
}

std::vector<RailTotals> PdCaches::Rails() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, RailTotals> rails = rails_;
  for (const auto& entry : caches_) {
    AddStats(&rails[entry.second->rail].stats, entry.second->cache->stats());
  }
  std::vector<RailTotals> sorted;
  sorted.reserve(rails.size());
  for (auto& entry : rails) sorted.push_back(std::move(entry.second));
  return sorted;
}

std::string PdCaches::monitor_name() const {
  std::lock_guard<std::mutex> lock(mu_);
  return monitor_name_;
}

void PdCaches::LockForFork() { mu_.lock(); }

void PdCaches::UnlockAfterFork() { mu_.unlock(); }

}  // namespace mrcache_preload
