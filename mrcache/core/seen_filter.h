// seen_filter.h: whether a key was seen lately, in a fixed number of bits.
//
// Two bitsets of `bits` bits each (a power of two), the current and the
// previous one. TestAndSet(key) answers whether key's bit is set in either,
// then sets it in the current one; every `window` calls the current bitset
// becomes the previous one and a cleared one the current. A key is so
// remembered for at least `window` and at most 2 x `window` calls. Another
// key may share its bit (a false "seen"); a key set within the last `window`
// calls is never missed. Keys are mixed before they pick a bit, so false
// "seen"s come as often as for random keys whatever the keys' structure
// (page numbers at a stride, say): n distinct keys set in b bits meet about
// n^2/2b of them. Allocates only when constructed. Not thread-safe: the
// owner serialises calls (CacheImpl calls it under its lock).
#ifndef MRCACHE_CORE_SEEN_FILTER_H_
#define MRCACHE_CORE_SEEN_FILTER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mrcache {

class SeenFilter {
 public:
  // `bits` is rounded up to a power of two of at least 64; a `window` of 0
  // is taken as 1.
  SeenFilter(size_t bits, size_t window);

  // Whether key was set lately (see above); sets it.
  bool TestAndSet(uint64_t key);

  size_t bits() const { return mask_ + 1; }
  size_t window() const { return window_; }

 private:
  size_t mask_;
  size_t window_;
  size_t calls_ = 0;  // since the last rotation
  std::vector<uint64_t> current_, previous_;
};

}  // namespace mrcache

#endif  // MRCACHE_CORE_SEEN_FILTER_H_
