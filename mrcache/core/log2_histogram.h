// log2_histogram.h: a histogram of counts in power-of-two buckets, updated
// with relaxed atomics (slow paths only: each Add is one shared increment).
//
// Bucket 0 holds values <= 1; bucket b (1 <= b < kBuckets - 1) holds values
// in (2^(b-1), 2^b]; the last bucket holds everything above 2^(kBuckets-2).
// So bucket b's inclusive upper bound is 2^b (Prometheus' `le`), except the
// last, which is unbounded (+Inf).
#ifndef MRCACHE_CORE_LOG2_HISTOGRAM_H_
#define MRCACHE_CORE_LOG2_HISTOGRAM_H_

#include <atomic>
#include <cstdint>

namespace mrcache {

class Log2Histogram {
 public:
  static constexpr int kBuckets = 48;

  static int BucketOf(uint64_t value) {
    if (value <= 1) return 0;
    const int b = 64 - __builtin_clzll(value - 1);
    return b < kBuckets - 1 ? b : kBuckets - 1;
  }
  void Add(uint64_t value) {
    counts_[BucketOf(value)].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(value, std::memory_order_relaxed);
  }
  // Copies the counts and the sum of the values added (each read on its
  // own: a concurrent Add may or may not be included).
  void Read(uint64_t out[kBuckets], uint64_t* sum) const {
    for (int b = 0; b < kBuckets; ++b) out[b] = counts_[b].load(std::memory_order_relaxed);
    *sum = sum_.load(std::memory_order_relaxed);
  }

 private:
  std::atomic<uint64_t> counts_[kBuckets] = {};
  std::atomic<uint64_t> sum_{0};
};

// The same for state a lock guards: plain adds, which the lock orders (the
// owner's reads take the same lock).
class PlainLog2Histogram {
 public:
  void Add(uint64_t value) {
    ++counts_[Log2Histogram::BucketOf(value)];
    sum_ += value;
  }
  // Adds the counts to `out` and the sum to *sum.
  void AddTo(uint64_t out[Log2Histogram::kBuckets], uint64_t* sum) const {
    for (int b = 0; b < Log2Histogram::kBuckets; ++b) out[b] += counts_[b];
    *sum += sum_;
  }

 private:
  uint64_t counts_[Log2Histogram::kBuckets] = {};
  uint64_t sum_ = 0;
};

// Every histogram is a sample: one in kHistogramSampleEvery of what it
// counts, chosen by the cache's running count (the misses before a miss, the
// registrations before a registration, the deregistrations before a
// deregistration), so it follows no pattern of sizes or addresses. A sampled
// miss records its latency, its requested bytes and, if it installed a
// region, its registration's time; a sampled registration its size; a
// sampled deregistration its time. A histogram's count and sum are the
// sample's; its distribution and mean estimate the whole, and the count
// times kHistogramSampleEvery estimates the events (the exact totals are the
// cache's counters: misses, registrations, deregistrations). Timing every
// miss (clock reads, conversions, the histogram lines) cost the
// null-registrar miss a sixth of its time; with the latencies sampled, the
// size buckets of every miss and the sampled recording inline still cost it
// 77 instructions, and 18 with everything sampled and recorded out of line
// (bench/RESULTS.md, "The miss's histograms: every one sampled").
constexpr uint64_t kHistogramSampleEvery = 16;

// A cache's distributions, copied (CacheImpl::ReadHistograms), each a
// sample (kHistogramSampleEvery):
//  region_bytes   the size of the registrations the cache made (the
//                 implicit ODP region, which covers no range, left out);
//  miss_ns        the gets that missed, each from its slow path's start to
//                 its return with a region (registration included);
//  register_ns    the registrar Register calls of the sampled misses that
//                 installed a region, and every other Register call (a
//                 bypass's, a refused one, one whose region was discarded);
//  deregister_ns  the Deregister calls;
//  get_bytes      the requested length of the gets that missed (the
//                 sampled misses of miss_ns; lock-free hits are not sized:
//                 they stay free of shared writes).
struct CacheHistogramCounts {
  uint64_t region_bytes[Log2Histogram::kBuckets] = {};
  uint64_t miss_ns[Log2Histogram::kBuckets] = {};
  uint64_t register_ns[Log2Histogram::kBuckets] = {};
  uint64_t deregister_ns[Log2Histogram::kBuckets] = {};
  uint64_t get_bytes[Log2Histogram::kBuckets] = {};
  // The sum of the values of each, in the order above.
  uint64_t sums[5] = {};
};

}  // namespace mrcache

#endif  // MRCACHE_CORE_LOG2_HISTOGRAM_H_
