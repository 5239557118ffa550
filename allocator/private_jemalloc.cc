// Options compiled into the pool's private jemalloc (see private_jemalloc.h).
//
// tcache_max:65536 lets per-thread caches hold buffers up to 64 KiB (the
// default is 32 KiB), the range of eager sends and bounce buffers, so that the
// common pool sizes are served from the calling thread's private tcache
// without taking an arena lock.
//
// retain:false makes jemalloc give every extent it no longer uses back to the
// pool's dalloc hook instead of keeping its address space ("retained"), which
// the hooks could never see again: the pool (pool.h) learns that a chunk is
// empty only from those calls.
//
// lg_extent_max_active_fit:64 lets a free extent serve a request of any
// smaller size (the default, 6, refuses extents more than 64 times larger).
// Free extents normally go back to the pool at once, but one freed while
// another thread is handing extents back stays with jemalloc until the next
// free; it must be reusable meanwhile rather than make the pool map a chunk.
//
// This definition overrides the weak empty default inside the archive;
// MALLOC_CONF in the environment still applies on top, as for any jemalloc.
extern "C" {
const char* mrcache_je_malloc_conf = "tcache_max:65536,retain:false,lg_extent_max_active_fit:64";
}
