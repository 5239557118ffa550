// range.h: a half-open range of addresses [start, end), and rounding of
// addresses to a power-of-two unit.
#ifndef MRCACHE_CORE_RANGE_H_
#define MRCACHE_CORE_RANGE_H_

#include <cstddef>
#include <cstdint>

namespace mrcache {

struct Range {
  uintptr_t start = 0, end = 0;

  // True if [s, e) and this range share an address.
  bool Overlaps(uintptr_t s, uintptr_t e) const { return start < e && s < end; }
  // True if [s, e) lies within this range.
  bool Contains(uintptr_t s, uintptr_t e) const { return start <= s && e <= end; }
  bool operator==(const Range& o) const { return start == o.start && end == o.end; }
};

// v rounded down to a multiple of `a` (a power of two).
inline uintptr_t AlignDown(uintptr_t v, size_t a) { return v & ~(uintptr_t(a) - 1); }
// v rounded up to a multiple of `a` (a power of two); 0 on overflow.
inline uintptr_t AlignUp(uintptr_t v, size_t a) {
  uintptr_t r = (v + a - 1) & ~(uintptr_t(a) - 1);
  return r < v ? 0 : r;
}

}  // namespace mrcache

#endif  // MRCACHE_CORE_RANGE_H_
