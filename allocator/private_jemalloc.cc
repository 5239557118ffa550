// Options compiled into the pool's private jemalloc (see private_jemalloc.h).
//
// tcache_max:65536 lets per-thread caches hold buffers up to 64 KiB (the
// default is 32 KiB), the range of eager sends and bounce buffers, so that the
// common pool sizes are served from the calling thread's private tcache
// without taking an arena lock. This definition overrides the weak empty
// default inside the archive; MALLOC_CONF in the environment still applies on
// top, as for any jemalloc.
extern "C" {
const char* mrcache_je_malloc_conf = "tcache_max:65536";
}
