// private_jemalloc.h: the pool's own copy of jemalloc, under the mrcache_je_ prefix.
//
// Debian's jemalloc exports unprefixed malloc/free/operator new. Linking it
// (-ljemalloc) into a library that an application links replaces the
// application's allocator process-wide through symbol resolution order. The
// pool must not do that, so //allocator:private_jemalloc is built from the
// static PIC archive with every symbol renamed (privatize_jemalloc.sh): the
// application keeps glibc's malloc, and only the functions declared below,
// called by name, reach the private copy.
//
// Only the types and MALLOCX_* macros come from <jemalloc/jemalloc.h>; none of
// the unprefixed functions it declares may be called from the allocator.
//
// Static TLS: Debian built jemalloc with initial-exec TLS (about 2.6 KiB).
// A program that links a library containing the private copy loads it at
// startup, where that is free. dlopen() of such a library fails with "cannot
// allocate memory in static TLS block" unless glibc reserves more surplus:
// GLIBC_TUNABLES=glibc.rtld.optional_static_tls=4096 (measured to suffice).
//
// The private copy reads its options from the compiled-in string in
// private_jemalloc.cc (mrcache_je_malloc_conf), then from MALLOC_CONF like any
// jemalloc; the pool sets everything it relies on per arena at runtime.
#ifndef MRCACHE_ALLOCATOR_PRIVATE_JEMALLOC_H_
#define MRCACHE_ALLOCATOR_PRIVATE_JEMALLOC_H_

#include <jemalloc/jemalloc.h>

#include <cstddef>

extern "C" {
void* mrcache_je_mallocx(size_t size, int flags);
void mrcache_je_dallocx(void* ptr, int flags);
size_t mrcache_je_sallocx(const void* ptr, int flags);
size_t mrcache_je_nallocx(size_t size, int flags);
int mrcache_je_mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen);
}

#endif  // MRCACHE_ALLOCATOR_PRIVATE_JEMALLOC_H_
