#include "mrcache/core/seen_filter.h"

#include <algorithm>

namespace mrcache {

SeenFilter::SeenFilter(size_t bits, size_t window) : window_(window > 0 ? window : 1) {
  size_t n = 64;
  while (n < bits) n *= 2;
  mask_ = n - 1;
  current_.assign(n / 64, 0);
  previous_.assign(n / 64, 0);
}

namespace {

// A 64-bit finalizer (MurmurHash3's fmix64): every bit of the key moves
// about half of the result's bits, so keys with structure (page numbers at
// a stride, XORed with others) fall on bits as random keys do.
uint64_t Mix(uint64_t key) {
  key ^= key >> 33;
  key *= 0xFF51AFD7ED558CCDull;
  key ^= key >> 33;
  key *= 0xC4CEB9FE1A85EC53ull;
  key ^= key >> 33;
  return key;
}

}  // namespace

bool SeenFilter::TestAndSet(uint64_t key) {
  const size_t bit = static_cast<size_t>(Mix(key)) & mask_;
  const uint64_t mask = uint64_t{1} << (bit % 64);
  const bool seen = ((current_[bit / 64] | previous_[bit / 64]) & mask) != 0;
  current_[bit / 64] |= mask;
  if (++calls_ >= window_) {
    current_.swap(previous_);
    std::fill(current_.begin(), current_.end(), 0);
    calls_ = 0;
  }
  return seen;
}

}  // namespace mrcache
