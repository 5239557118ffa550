#include "mrcache/core/thread_cache.h"

#include <pthread.h>
#include <sys/mman.h>

#include <cstdlib>
#include <new>

#include "mrcache/core/table_memory.h"

namespace mrcache {
namespace {

using thread_cache_internal::kDirectoryEntries;
using thread_cache_internal::tl_directory;

// A pthread key's destructor orphans the directory's entries at thread exit.
__thread bool tl_exit_hook_armed __attribute__((tls_model("initial-exec"), visibility("hidden")));

// Gives up this thread's use of tc: orphaned, the orphan epoch raised after
// (thread_cache_internal::g_orphan_epoch), and the thread's reference dropped.
void Orphan(ThreadCache* tc) {
  tc->orphaned.store(true, std::memory_order_release);
  thread_cache_internal::g_orphan_epoch.fetch_add(1, std::memory_order_release);
  ThreadCache::Unref(tc);
}

void OrphanAll(void*) {
  for (ThreadCache*& tc : tl_directory) {
    if (tc == nullptr) continue;
    Orphan(tc);
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

namespace thread_cache_internal {

// Plain data in initial-exec TLS, so the hit path reaches it without a call
// (even from libmrcache.so).
__thread ThreadCache* tl_directory[kDirectoryEntries]
    __attribute__((tls_model("initial-exec"), visibility("hidden")));

std::atomic<uint64_t> g_orphan_epoch{0};

ThreadCache* FindThreadCacheAfterFirst(uint64_t cache_uid) {
  for (int i = 1; i < kDirectoryEntries; ++i) {
    ThreadCache* tc = tl_directory[i];
    if (tc != nullptr && tc->cache_uid == cache_uid) {
      for (int j = i; j > 0; --j) tl_directory[j] = tl_directory[j - 1];
      tl_directory[0] = tc;
      return tc;
    }
  }
  return nullptr;
}

}  // namespace thread_cache_internal

ThreadCache::Line* ThreadCache::AllocateLines(size_t n) {
  void* p = MapTableMemory(n * sizeof(Line));
  if (p == MAP_FAILED) std::abort();
  Line* lines = static_cast<Line*>(p);
  for (size_t i = 0; i < n; ++i) new (&lines[i]) Line();
  return lines;
}

void ThreadCache::FreeLines(Line* lines, size_t n) {
  if (lines == nullptr) return;
  UnmapTableMemory(lines, n * sizeof(Line));
}

void InstallThreadCache(ThreadCache* tc) {
  if (!tl_exit_hook_armed) {
    // Any non-null value makes the destructor run at thread exit.
    pthread_setspecific(ExitKey(), reinterpret_cast<void*>(1));
    tl_exit_hook_armed = true;
  }
  ThreadCache* evicted = tl_directory[kDirectoryEntries - 1];
  for (int j = kDirectoryEntries - 1; j > 0; --j) tl_directory[j] = tl_directory[j - 1];
  tl_directory[0] = tc;
  if (evicted != nullptr) Orphan(evicted);
}

}  // namespace mrcache
