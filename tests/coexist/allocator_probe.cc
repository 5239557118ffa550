// allocator_probe: mrcache (libmrcache.so, default monitor, uring registrar)
// in a process whose malloc is whatever allocator is loaded (glibc's, or
// tcmalloc, mimalloc or jemalloc preloaded), asked whether a registration of
// a freed block survives the allocator giving that memory back to the system.
//
//   allocator_probe ROUNDS
//
// Each round: malloc a block (64 KiB to 2 MiB: an unprivileged
// process may pin 8 MiB), write it, register it and let
// go of it; free it and ask the allocator to return free memory to the system
// (tcmalloc: MallocExtension_ReleaseFreeMemory; mimalloc: mi_collect(true);
// jemalloc: arena.<all>.purge; glibc: malloc_trim(0)); malloc the same size
// again. Where the new block overlaps the old one (an exercised round), a
// device write through the region mrc_get returns for it must show in the
// buffer; otherwise it went to the old pinned pages (stale).
// Prints:  allocator LIBRARY: stale=S exercised=E rounds=R
// and exits 0; 2 when a step of the probe itself fails.
#include <dlfcn.h>
#include <malloc.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "mrcache/mrcache.h"

namespace {

[[noreturn]] void Fail(const std::string& step) {
  fprintf(stderr, "allocator_probe: %s\n", step.c_str());
  exit(2);
}

// The file malloc comes from.
std::string AllocatorLibrary() {
  Dl_info info{};
  void* fn = dlsym(RTLD_DEFAULT, "malloc");
  if (fn == nullptr || dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return "?";
  return info.dli_fname;
}

// Asks whichever allocator is loaded to give its free memory back.
void ReleaseFreeMemory() {
  using VoidFn = void (*)();
  using CollectFn = void (*)(bool);
  using MallctlFn = int (*)(const char*, void*, size_t*, void*, size_t);
  if (auto tcmalloc =
          reinterpret_cast<VoidFn>(dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseFreeMemory"))) {
    tcmalloc();
  } else if (auto mimalloc = reinterpret_cast<CollectFn>(dlsym(RTLD_DEFAULT, "mi_collect"))) {
    mimalloc(true);
  } else if (auto mallctl = reinterpret_cast<MallctlFn>(dlsym(RTLD_DEFAULT, "mallctl"))) {
    if (mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0) != 0) Fail("jemalloc purge");
  } else {
    malloc_trim(0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s ROUNDS\n", argv[0]);
    return 2;
  }
  const int rounds = atoi(argv[1]);
  mrc_config_t* cfg = nullptr;
  mrc_cache_t* cache = nullptr;
  if (mrc_config_create(&cfg) != 0 || mrc_config_set(cfg, "registrar", "uring") != 0) {
    Fail("mrc_config_create/set");
  }
  int rc = mrc_cache_create(cfg, nullptr, &cache);
  mrc_config_destroy(cfg);
  if (rc != 0) Fail(std::string("mrc_cache_create: ") + mrc_strerror(rc));
  int stale = 0, exercised = 0;
  for (int i = 0; i < rounds; ++i) {
    size_t len = size_t{64} << 10 << (i % 6);  // 64 KiB .. 2 MiB
    char* old_block = static_cast<char*>(malloc(len));
    if (old_block == nullptr) Fail("malloc");
    memset(old_block, 0x5a, len);
    mrc_region_t* region = nullptr;
    if ((rc = mrc_get(cache, old_block, len, 1, &region)) != 0) {
      Fail(std::string("mrc_get: ") + mrc_strerror(rc));
    }
    mrc_put(cache, region);
    const uintptr_t old_start = reinterpret_cast<uintptr_t>(old_block);
    free(old_block);
    ReleaseFreeMemory();
    char* block = static_cast<char*>(malloc(len));
    if (block == nullptr) Fail("malloc again");
    memset(block, 0, len);
    const uintptr_t start = reinterpret_cast<uintptr_t>(block);
    if (start < old_start + len && old_start < start + len) {
      ++exercised;
      if ((rc = mrc_get(cache, block, len, 1, &region)) != 0) {
        Fail(std::string("mrc_get of the new block: ") + mrc_strerror(rc));
      }
      mrc_region_info_t info;
      mrc_region_info(region, &info);
      unsigned char data[64];
      memset(data, (i & 0xff) | 1, sizeof(data));
      size_t head = static_cast<size_t>(block - static_cast<char*>(info.addr));
      if (mrc_region_device_write(cache, region, head, data, sizeof(data)) != 0 ||
          mrc_region_device_write(cache, region, head + len - sizeof(data), data, sizeof(data)) !=
              0) {
        Fail("mrc_region_device_write");
      }
      mrc_put(cache, region);
      if (memcmp(block, data, sizeof(data)) != 0 ||
          memcmp(block + len - sizeof(data), data, sizeof(data)) != 0) {
        ++stale;
      }
    }
    // What this round registered goes before the block is reused by the next.
    mrc_invalidate(cache, block, len);
    free(block);
  }
  printf("allocator %s: stale=%d exercised=%d rounds=%d\n", AllocatorLibrary().c_str(), stale,
         exercised, rounds);
  mrc_cache_destroy(cache);
  return 0;
}
