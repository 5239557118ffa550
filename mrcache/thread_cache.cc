#include "mrcache/thread_cache.h"

namespace mrcache {
namespace {

// A thread's directory of ThreadCaches, most recently used first.
struct Directory {
  static constexpr int kEntries = 8;
  ThreadCache* entries[kEntries] = {};

  ~Directory() {
    for (ThreadCache*& tc : entries) {
      if (tc == nullptr) continue;
      tc->orphaned.store(true, std::memory_order_release);
      ThreadCache::Unref(tc);
      tc = nullptr;
    }
  }
};

thread_local Directory tl_directory;

}  // namespace

ThreadCache* FindThreadCache(uint64_t cache_uid) {
  Directory& d = tl_directory;
  ThreadCache* first = d.entries[0];
  if (first != nullptr && first->cache_uid == cache_uid) return first;
  for (int i = 1; i < Directory::kEntries; ++i) {
    ThreadCache* tc = d.entries[i];
    if (tc != nullptr && tc->cache_uid == cache_uid) {
      for (int j = i; j > 0; --j) d.entries[j] = d.entries[j - 1];
      d.entries[0] = tc;
      return tc;
    }
  }
  return nullptr;
}

void InstallThreadCache(ThreadCache* tc) {
  Directory& d = tl_directory;
  ThreadCache* evicted = d.entries[Directory::kEntries - 1];
  for (int j = Directory::kEntries - 1; j > 0; --j) d.entries[j] = d.entries[j - 1];
  d.entries[0] = tc;
  if (evicted != nullptr) {
    evicted->orphaned.store(true, std::memory_order_release);
    ThreadCache::Unref(evicted);
  }
}

}  // namespace mrcache
