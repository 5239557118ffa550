#include "mrcache/thread_cache.h"

#include <pthread.h>

namespace mrcache {
namespace {

// A thread's directory of ThreadCaches, most recently used first. Plain
// data in initial-exec TLS, so the hit path reaches it without a call (even
// from libmrcache.so); a pthread key's destructor orphans the entries at
// thread exit.
constexpr int kEntries = 8;
__thread ThreadCache* tl_entries[kEntries] __attribute__((tls_model("initial-exec"), visibility("hidden")));
__thread bool tl_exit_hook_armed __attribute__((tls_model("initial-exec"), visibility("hidden")));

void OrphanAll(void*) {
  for (ThreadCache*& tc : tl_entries) {
    if (tc == nullptr) continue;
    tc->orphaned.store(true, std::memory_order_release);
    ThreadCache::Unref(tc);
    tc = nullptr;
  }
}

pthread_key_t ExitKey() {
  static const pthread_key_t key = [] {
    pthread_key_t k;
    pthread_key_create(&k, &OrphanAll);
    return k;
  }();
  return key;
}

}  // namespace

ThreadCache* FindThreadCache(uint64_t cache_uid) {
  ThreadCache* first = tl_entries[0];
  if (first != nullptr && first->cache_uid == cache_uid) return first;
  for (int i = 1; i < kEntries; ++i) {
    ThreadCache* tc = tl_entries[i];
    if (tc != nullptr && tc->cache_uid == cache_uid) {
      for (int j = i; j > 0; --j) tl_entries[j] = tl_entries[j - 1];
      tl_entries[0] = tc;
      return tc;
    }
  }
  return nullptr;
}

void InstallThreadCache(ThreadCache* tc) {
  if (!tl_exit_hook_armed) {
    // Any non-null value makes the destructor run at thread exit.
    pthread_setspecific(ExitKey(), reinterpret_cast<void*>(1));
    tl_exit_hook_armed = true;
  }
  ThreadCache* evicted = tl_entries[kEntries - 1];
  for (int j = kEntries - 1; j > 0; --j) tl_entries[j] = tl_entries[j - 1];
  tl_entries[0] = tc;
  if (evicted != nullptr) {
    evicted->orphaned.store(true, std::memory_order_release);
    ThreadCache::Unref(evicted);
  }
}

}  // namespace mrcache
