#include "interpose/alias_registry.h"

namespace mrcache_preload {

void Alias::TakeKeys(const ibv_mr& from) {
  mr.context = from.context;
  mr.pd = from.pd;
  mr.handle = from.handle;
  mr.lkey = from.lkey;
  mr.rkey = from.rkey;
}

void AliasRegistry::Add(Alias* alias) {
  std::lock_guard<std::mutex> lock(mu_);
  aliases_[&alias->mr] = alias;
}

Alias* AliasRegistry::Find(const ibv_mr* mr) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = aliases_.find(mr);
  return it == aliases_.end() ? nullptr : it->second;
}

Alias* AliasRegistry::Remove(const ibv_mr* mr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = aliases_.find(mr);
  if (it == aliases_.end()) return nullptr;
  Alias* alias = it->second;
  aliases_.erase(it);
  return alias;
}

std::vector<AliasRegistry::Orphaned> AliasRegistry::OrphanAll(const PdCache* cache) {
  std::vector<Orphaned> held;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& entry : aliases_) {
    Alias* alias = entry.second;
    if (alias->kind == AliasKind::kCached && alias->cache == cache) {
      held.push_back({alias->region, alias->record_id});
      alias->record_id = 0;
      alias->kind = AliasKind::kOrphaned;
      alias->cache = nullptr;
      alias->region = nullptr;
    }
  }
  return held;
}

size_t AliasRegistry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aliases_.size();
}

void AliasRegistry::LockForFork() { mu_.lock(); }

void AliasRegistry::UnlockAfterFork() { mu_.unlock(); }

}  // namespace mrcache_preload
