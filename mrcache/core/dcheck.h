// dcheck.h: MRCACHE_DCHECK(condition), the core's run-time check of the
// invariants its comments state (ARCHITECTURE.md, cache_impl.h,
// thread_cache.h, eviction.h).
//
// On unless MRCACHE_DCHECKS is 0: by default on where NDEBUG is not
// defined (the plain and sanitizer builds) and off under `-c opt`, where
// the condition is not evaluated and costs nothing; the ASan and TSan
// configurations of .bazelrc set MRCACHE_DCHECKS=1 whatever the mode. A
// failed check prints the condition and where it is, then aborts: an
// invariant that does not hold means the protocol is broken, and going on
// could deregister memory in use. Checks may be as costly as a walk of the
// threads' tables; none is placed on the lock-free hit path.
#ifndef MRCACHE_CORE_DCHECK_H_
#define MRCACHE_CORE_DCHECK_H_

#ifndef MRCACHE_DCHECKS
#ifdef NDEBUG
#define MRCACHE_DCHECKS 0
#else
#define MRCACHE_DCHECKS 1
#endif
#endif

namespace mrcache {

// Prints "mrcache: invariant violated: <condition> (<file>:<line>)" to
// stderr and aborts.
[[noreturn]] __attribute__((cold, noinline)) void DcheckFailed(const char* condition,
                                                               const char* file, int line);

}  // namespace mrcache

#if MRCACHE_DCHECKS
#define MRCACHE_DCHECK(condition)                    \
  (__builtin_expect(static_cast<bool>(condition), 1) \
       ? static_cast<void>(0)                        \
       : ::mrcache::DcheckFailed(#condition, __FILE__, __LINE__))
#else
// Not evaluated; still compiled, so that a check cannot rot in -c opt.
#define MRCACHE_DCHECK(condition) static_cast<void>(sizeof(static_cast<bool>(condition)))
#endif

#endif  // MRCACHE_CORE_DCHECK_H_
