#include "mrcache/monitors/mapping_bounds.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace mrcache {
namespace {

// Parses lowercase hex up to `stop`; advances *p past it.
bool ParseHex(const char** p, const char* limit, char stop, uintptr_t* out) {
  uintptr_t v = 0;
  const char* s = *p;
  if (s >= limit || *s == stop) return false;
  for (; s < limit && *s != stop; ++s) {
    int d;
    if (*s >= '0' && *s <= '9') {
      d = *s - '0';
    } else if (*s >= 'a' && *s <= 'f') {
      d = *s - 'a' + 10;
    } else {
      return false;
    }
    v = (v << 4) | static_cast<uintptr_t>(d);
  }
  if (s >= limit) return false;
  *p = s + 1;
  *out = v;
  return true;
}

// One line of /proc/self/maps: "start-end perms offset dev inode [name]".
// `kind` holds everything after the addresses except the offset, so two
// lines describe the same kind of memory iff their kinds are equal.
struct MapsLine {
  uintptr_t start = 0, end = 0;
  char kind[96] = {};
};

bool ParseLine(const char* p, const char* eol, MapsLine* line) {
  if (!ParseHex(&p, eol, '-', &line->start) || !ParseHex(&p, eol, ' ', &line->end)) return false;
  // perms, then skip the offset, then dev, inode and name.
  size_t k = 0;
  while (p < eol && *p != ' ' && k + 1 < sizeof line->kind) line->kind[k++] = *p++;
  if (p < eol) ++p;
  while (p < eol && *p != ' ') ++p;  // offset
  while (p < eol && k + 1 < sizeof line->kind) line->kind[k++] = *p++;
  line->kind[k] = '\0';
  return true;
}

bool SameKind(const MapsLine& a, const MapsLine& b) {
  for (size_t i = 0; i < sizeof a.kind; ++i) {
    if (a.kind[i] != b.kind[i]) return false;
    if (a.kind[i] == '\0') return true;
  }
  return true;
}

// Calls fn(line) for every line of /proc/self/maps, in address order, until
// fn returns false. Reads with open/read into a fixed stack buffer. False if
// the file cannot be read.
template <typename Fn>
bool ForEachMapsLine(Fn fn) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096];
  size_t have = 0;
  bool at_line_start = true, done = false;
  MapsLine line;
  for (;;) {
    ssize_t n = read(fd, buf + have, sizeof buf - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += static_cast<size_t>(n);
    // Parse every complete line in buf[0, have).
    size_t consumed = 0;
    for (size_t i = 0; i < have; ++i) {
      if (buf[i] != '\n') continue;
      if (at_line_start && ParseLine(buf + consumed, buf + i, &line) && !fn(line)) {
        done = true;
        break;
      }
      at_line_start = true;
      consumed = i + 1;
    }
    if (done) break;
    if (consumed == 0 && have == sizeof buf) {
      // A line longer than the buffer (a long path): skip the rest of it.
      at_line_start = false;
      have = 0;
      continue;
    }
    for (size_t i = consumed; i < have; ++i) buf[i - consumed] = buf[i];
    have -= consumed;
  }
  close(fd);
  return true;
}

}  // namespace

bool FindMappingExtent(uintptr_t low, uintptr_t high, MappingExtent* out) {
  bool found_low = false, found_high = false;
  // The run of contiguous lines of the same kind being read: the kernel keeps
  // one mapping in several lines when flags differ in parts of it (a
  // userfaultfd-registered range, an mlocked one).
  MapsLine run;
  bool in_run = false;
  ForEachMapsLine([&](const MapsLine& line) {
    if (in_run && run.end == line.start && SameKind(run, line)) {
      run.end = line.end;
    } else {
      if (found_low) return false;  // the run holding `low` ended
      run = line;
      in_run = true;
    }
    if (!found_low && run.start <= low && low < run.end) {
      out->start = run.start;
      found_low = true;
    }
    if (found_low && run.start <= high && high < run.end) {
      out->start = run.start;  // low and high in one run
      out->end = run.end;
      found_high = true;
    }
    return true;
  });
  return found_low && found_high;
}

// True for a private mapping of no file: perms "...p", device 00:00, inode
// 0 and no name (not [heap], [stack], [vdso], ...).
static bool PrivateAnonymous(const MapsLine& line) {
  const char* k = line.kind;
  if (strlen(k) < 4 || k[3] != 'p') return false;
  k += 4;
  while (*k == ' ') ++k;
  if (strncmp(k, "00:00 0", 7) != 0) return false;
  for (k += 7; *k != '\0'; ++k) {
    if (*k != ' ' && *k != '\n') return false;
  }
  return true;
}

bool ScanMappings(uintptr_t start, uintptr_t end, MappingScan* out) {
  *out = MappingScan();
  uintptr_t next = start;  // the first address of [start, end) no line has covered yet
  bool hole = false, any = false, anonymous = true;
  bool read = ForEachMapsLine([&](const MapsLine& line) {
    ++out->map_count;
    if (line.end <= start || line.start >= end) return true;
    if (!any) out->first = line.start;
    any = true;
    anonymous &= PrivateAnonymous(line);
    out->last = line.end;
    if (line.start > next) hole = true;
    if (line.end > next) next = line.end;
    return true;
  });
  out->covered = read && !hole && start < end && next >= end;
  out->anonymous = any && anonymous;
  return read;
}

}  // namespace mrcache
