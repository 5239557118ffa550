// coexist_rounds.h: the rounds of a coexistence probe (ucx_coexist_probe,
// fabric_coexist_probe): another tracker's registration cache and mrcache's
// in one process, each asked after every release whether it still hands out
// the old registration.
//
//   PROBE ORDER WAY ROUNDS
//
// ORDER (NAME is the other cache's name, Other::kName):
//   NAME_alone     the other cache only (mrcache's code is loaded, nothing of
//                  it is used)
//   mrcache_idle   the same: mrcache loaded, no cache (the baseline for the
//                  shim build, where the shim is preloaded but never called)
//   mrcache_first  mrcache's cache (its monitor) first, then the other one
//   NAME_first     the other cache first, then mrcache's
// WAY: a row of tests/monitors/release_ways.h (munmap, mremap_move,
// madvise_dontneed, shmdt, brk_shrink, glibc_free, ...).
//
// Each round: fresh memory; both caches register the range that the way
// makes disappear and let go of it; the way releases it; fresh memory is
// mapped at the same address; then
//   the other cache is stale if registering that range again registers
//   nothing new (its invalidation never came: it hands out the old region);
//   mrcache is stale if a device write through the region it returns does not
//   show in the buffer (the write went to the old pinned pages).
// A round whose released address another mapping took meanwhile cannot ask
// and is not counted (more than half of them: the probe fails). Prints one
// line:
//   coexist ORDER WAY: NAME_stale=N mrcache_stale=M rounds=R taken=T
// (R: the rounds that asked; mrcache_stale=- where no mrcache cache exists)
// and exits 0; 2 when a step of the probe itself fails (the message says
// which).
//
// Other: the other tracker's cache, with
//   static constexpr const char* kName;
//   void Create();                         // loads it, creates its cache
//   bool GetPut(void* addr, size_t len);   // registers and lets go; true if
//                                          // that took a new registration
//   void Destroy();
// Two builds of mrcache's view (registration_view.h): REGISTRATION_VIEW_C_API
// links libmrcache.so and uses the C API with the uring registrar;
// REGISTRATION_VIEW_VERBS uses plain verbs (softverbs at run time) and is run
// with the shim preloaded.
#ifndef TESTS_COEXIST_COEXIST_ROUNDS_H_
#define TESTS_COEXIST_COEXIST_ROUNDS_H_

#include <dlfcn.h>
#include <malloc.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/monitors/registration_view.h"
#include "tests/monitors/release_ways.h"

namespace mrcache {
namespace testing {

[[noreturn]] inline void CoexistProbeFailed(const std::string& step) {
  fprintf(stderr, "%s: %s\n", program_invocation_short_name, step.c_str());
  exit(2);
}

// The cache with the default monitor (or MRCACHE_MONITOR); with plain verbs,
// the preloaded shim's.
inline void CreateMrcacheView(RegistrationView* view) {
  view->Create(nullptr);
#if defined(REGISTRATION_VIEW_VERBS)
  if (dlsym(RTLD_DEFAULT, "mrcache_preload_get_stats") == nullptr) {
    CoexistProbeFailed("the shim is not loaded");
  }
#endif
}

// The probe's main: argv as in the header comment.
template <typename Other>
int RunCoexistRounds(int argc, char** argv) {
  const std::string name = Other::kName;
  if (argc != 4) {
    fprintf(stderr, "usage: %s %s_alone|mrcache_idle|mrcache_first|%s_first WAY ROUNDS\n", argv[0],
            name.c_str(), name.c_str());
    return 2;
  }
  const std::string order = argv[1];
  const ReleaseWay* way = FindReleaseWay(argv[2]);
  if (way == nullptr) CoexistProbeFailed(std::string("unknown release way ") + argv[2]);
  const int rounds = atoi(argv[3]);
  if (std::string(way->name) == "brk_shrink") {
    // The way lowers the break the probe raised: glibc's malloc must not
    // extend its heap past it meanwhile (both caches and the shim allocate
    // in every round), so it takes a large reserve now and never trims. (Not
    // for the other ways: large blocks would come from that reserve instead
    // of mmap, and glibc_free would release nothing.)
    mallopt(M_TOP_PAD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
    free(malloc(1));
  }
  Other other;
  RegistrationView mrcache;
  if (order == name + "_alone" || order == "mrcache_idle") {
    other.Create();
  } else if (order == "mrcache_first") {
    CreateMrcacheView(&mrcache);
    other.Create();
  } else if (order == name + "_first") {
    other.Create();
    CreateMrcacheView(&mrcache);
  } else {
    CoexistProbeFailed("unknown order " + order);
  }
  constexpr size_t kProbeBytes = 64;
  int other_stale = 0, mrcache_stale = 0, taken = 0;
  for (int i = 0; i < rounds; ++i) {
    Victim v = way->prepare();
    other.GetPut(v.gone, v.gone_len);
    if (mrcache.created()) mrcache.GetPut(v.gone, v.gone_len);
    way->release(v);
    if (!RefillSameAddress(v)) {
      // Another mapping landed in the hole (a sanitizer's allocator maps its
      // own memory there): the round cannot ask about the same address, and
      // its cleanup would unmap that mapping. Not counted.
      ++taken;
      continue;
    }
    memset(v.gone, 0, v.gone_len);  // the CPU's view of the fresh memory
    if (!other.GetPut(v.gone, v.gone_len)) ++other_stale;
    if (mrcache.created() &&
        !mrcache.DeviceWriteVisible(v.gone, v.gone_len, static_cast<unsigned char>(i | 1),
                                    kProbeBytes)) {
      ++mrcache_stale;
    }
    CleanupVictim(*way, v);
  }
  if (taken * 2 > rounds) {
    CoexistProbeFailed("the released address was taken by another mapping in " +
                       std::to_string(taken) + " of " + std::to_string(rounds) + " rounds");
  }
  printf("coexist %s %s: %s_stale=%d mrcache_stale=%s rounds=%d taken=%d\n", order.c_str(),
         way->name, name.c_str(), other_stale,
         mrcache.created() ? std::to_string(mrcache_stale).c_str() : "-", rounds - taken, taken);
  mrcache.Destroy();
  other.Destroy();
  return 0;
}

}  // namespace testing
}  // namespace mrcache

#endif  // TESTS_COEXIST_COEXIST_ROUNDS_H_
