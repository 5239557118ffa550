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

bool SeenFilter::TestAndSet(uint64_t key) {
  // Fibonacci hashing: the product's high half mixes every bit of the key.
  const size_t bit = static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
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
