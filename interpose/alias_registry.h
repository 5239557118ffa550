// alias_registry.h: the struct ibv_mr objects the shim hands to applications.
//
// For a cached registration the application receives an alias: its own
// struct ibv_mr whose addr/length are what it asked for and whose
// context/pd/handle/lkey/rkey are those of the cached MR (which may cover a
// wider, page-aligned range and be shared with other aliases). Providers
// container_of() the ibv_mr they are given, so an alias must never reach the
// real library: every ibv_dereg_mr/ibv_rereg_mr looks its argument up here
// first, and only pointers not found here go to libibverbs.
//
// Kinds:
//  - kCached:    holds one reference on `region` of `cache`; dereg is a put.
//  - kDedicated: after ibv_rereg_mr the alias fronts a registration of its
//                own (`real`), made directly; dereg/rereg go to `real`.
//  - kOrphaned:  the device was closed under it (ibv_close_device released
//                every MR); dereg frees it and fails with EINVAL, as the real
//                library's registry lookup would.
//
// Invariants: an Alias is in the registry from the moment it is returned to
// the application until its ibv_dereg_mr; `mr` is its first member, so the
// pointer the application holds is the Alias's address; all map operations
// hold the registry's mutex, never across a cache or verbs call.
#ifndef INTERPOSE_ALIAS_REGISTRY_H_
#define INTERPOSE_ALIAS_REGISTRY_H_

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "mrcache/cache.h"

namespace mrcache_preload {

struct PdCache;

enum class AliasKind { kCached, kDedicated, kOrphaned };

struct Alias {
  ibv_mr mr{};  // what the application holds (must stay the first member)
  AliasKind kind = AliasKind::kCached;
  PdCache* cache = nullptr;           // kCached
  mrcache::Region* region = nullptr;  // kCached: the referenced region
  ibv_mr* real = nullptr;             // kDedicated: the registration it fronts
  int access = 0;                     // the access flags the application asked for
  uint64_t record_id = 0;             // kCached: its ID in MRCACHE_RECORD's stream (0: none)

  // Copies context/pd/handle/lkey/rkey from `from`, keeping addr/length.
  void TakeKeys(const ibv_mr& from);
};

class AliasRegistry {
 public:
  AliasRegistry() = default;
  AliasRegistry(const AliasRegistry&) = delete;
  AliasRegistry& operator=(const AliasRegistry&) = delete;

  // Registers `alias` (allocates a map node).
  void Add(Alias* alias);
  // The alias behind `mr`, or nullptr if the shim did not create `mr`.
  Alias* Find(const ibv_mr* mr) const;
  // Like Find, and removes it: the caller owns the Alias afterwards.
  Alias* Remove(const ibv_mr* mr);
  struct Orphaned {
    mrcache::Region* region;  // the reference the alias held
    uint64_t record_id;       // its Alias::record_id
  };
  // Turns every kCached alias of `cache` into kOrphaned (the cache is about
  // to be destroyed) and returns the references they held, for the caller to put.
  std::vector<Orphaned> OrphanAll(const PdCache* cache);
  size_t size() const;

  // fork() protocol (shim.h "fork()"): LockForFork takes the registry's
  // mutex before a fork; UnlockAfterFork releases it in the parent and in
  // the child (the map is consistent: nobody held it mid-update).
  void LockForFork();
  void UnlockAfterFork();

 private:
  mutable std::mutex mu_;
  std::unordered_map<const ibv_mr*, Alias*> aliases_;  // guarded by mu_
};

}  // namespace mrcache_preload

#endif  // INTERPOSE_ALIAS_REGISTRY_H_
