// loader_releases.h: what dlclose releases, for the monitors that hook it.
//
// The dynamic loader unmaps an object's segments with ld.so's own system-call
// stubs, which neither `patch` (libc's entry points) nor `symbols`
// (interposed names) sees. Those monitors hook dlclose itself (`patch`:
// libc's entry point, where dlclose lives since glibc 2.34; `symbols`: an
// interposer) and call CloseReportingReleases. `uffd` needs nothing here: the
// kernel reports the loader's unmaps of watched mappings like any other.
//
// Which ranges: the PT_LOAD segments of loaded objects (dl_iterate_phdr), in
// whole pages.
//  - Before the call: the segments of the object being closed and of every
//    object loaded after it (the dependencies its dlopen brought in are among
//    them). That is what the call can unmap, except a dependency loaded
//    before it that only it still keeps loaded (below). The report voids
//    every region cached over them before the loader frees the addresses.
//  - After the call, when the loader unloaded anything (dlpi_subs moved): the
//    segments of every object that is gone, again. This voids a registration
//    made while the call ran (a destructor's), and reports the rare
//    dependency loaded before the closed object; that one is reported only
//    after its unmap, like a `uffd` event (docs/ARCHITECTURE.md, "Other
//    trackers in the process", says what that leaves).
// An object that stays loaded (another handle holds it) gets a spurious
// report: a region cached over its segments is registered again at its next
// get. The releases are not fenced (memory_events.h): a destructor that gets
// memory of the object being closed must not wait for its own dlclose.
//
// A failed dlopen unmaps what it mapped through the loader's internal close,
// which never reaches dlclose's entry. Nothing is reported, and nothing needs
// to be: the loader mapped those addresses itself (mmap without MAP_FIXED),
// so memory registered there before had been unmapped, and reported, first;
// and no code of the failed object ran (its constructors run only after
// every step that can fail), so no get could name its addresses meanwhile.
//
// Not hook context: allocates (the snapshots of loaded objects), calls
// dl_iterate_phdr. dlclose itself is neither async-signal-safe nor called
// from inside malloc.
#ifndef MRCACHE_MONITORS_LOADER_RELEASES_H_
#define MRCACHE_MONITORS_LOADER_RELEASES_H_

namespace mrcache {

// dlclose's signature.
using DlcloseFn = int (*)(void*);

// Calls close(handle) (the next dlclose: libc's, or another tracker's hook)
// and reports what it unmapped, as stated above. Returns close's answer with
// its errno. A null handle is passed on with nothing reported.
int CloseReportingReleases(void* handle, DlcloseFn close);

}  // namespace mrcache

#endif  // MRCACHE_MONITORS_LOADER_RELEASES_H_
