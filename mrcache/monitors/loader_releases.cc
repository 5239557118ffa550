#include "mrcache/monitors/loader_releases.h"

#include <errno.h>
#include <link.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "mrcache/monitors/memory_events.h"

namespace mrcache {
namespace {

struct LoadedObject {
  // Identity: the loader's own pointers for the object, which stay the same
  // while it is loaded.
  uintptr_t base;
  const char* name;
  const void* phdr;
  size_t first_segment, segments;  // in Snapshot::segments
};

struct Segment {
  uintptr_t start, end;  // whole pages
};

// The loaded objects in load order (the main program first), with their
// PT_LOAD segments, and the loader's count of unloads.
struct Snapshot {
  std::vector<LoadedObject> objects;
  std::vector<Segment> segments;
  unsigned long long unloads = 0;

  bool Holds(const LoadedObject& o) const {
    for (const LoadedObject& mine : objects) {
      if (mine.base == o.base && mine.name == o.name && mine.phdr == o.phdr) return true;
    }
    return false;
  }
  void Report(const LoadedObject& o) const {
    for (size_t i = o.first_segment; i < o.first_segment + o.segments; ++i) {
      ReportMemoryRelease(reinterpret_cast<const void*>(segments[i].start),
                          segments[i].end - segments[i].start);
    }
  }
};

int AddObject(dl_phdr_info* info, size_t, void* arg) {
  auto* s = static_cast<Snapshot*>(arg);
  const uintptr_t page = static_cast<uintptr_t>(getpagesize());
  s->unloads = info->dlpi_subs;
  LoadedObject o{info->dlpi_addr, info->dlpi_name, info->dlpi_phdr, s->segments.size(), 0};
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || ph.p_memsz == 0) continue;
    const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    s->segments.push_back({start & ~(page - 1), (start + ph.p_memsz + page - 1) & ~(page - 1)});
  }
  o.segments = s->segments.size() - o.first_segment;
  s->objects.push_back(o);
  return 0;
}

Snapshot TakeSnapshot() {
  Snapshot s;
  s.objects.reserve(64);
  s.segments.reserve(256);
  dl_iterate_phdr(&AddObject, &s);
  return s;
}

}  // namespace

int CloseReportingReleases(void* handle, DlcloseFn close) {
  if (handle == nullptr) return close(handle);
  const Snapshot before = TakeSnapshot();
  // glibc's handle is the object's link_map, whose name and base are the
  // ones dl_iterate_phdr shows.
  const link_map* closing = static_cast<const link_map*>(handle);
  bool found = false;
  for (const LoadedObject& o : before.objects) {
    found |= o.name == closing->l_name && o.base == closing->l_addr;
    if (found) before.Report(o);
  }
  const int result = close(handle);
  const int saved_errno = errno;
  const Snapshot after = TakeSnapshot();
  if (after.unloads != before.unloads) {
    for (const LoadedObject& o : before.objects) {
      if (!after.Holds(o)) before.Report(o);
    }
  }
  errno = saved_errno;
  return result;
}

}  // namespace mrcache
