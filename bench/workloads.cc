#include "bench/workloads.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mrcache/errno_status.h"

namespace mrbench {
namespace {

// splitmix64: small, fast, and identical on every platform (unlike the
// standard distributions, whose output is implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n).
  uint64_t Below(uint64_t n) { return Next() % n; }
  // Uniform in [0, 1).
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Log-uniform in [lo, hi].
  uint64_t LogUniform(uint64_t lo, uint64_t hi) {
    const double v =
        std::exp(std::log(double(lo)) + Unit() * (std::log(double(hi)) - std::log(double(lo))));
    return std::min<uint64_t>(hi, std::max<uint64_t>(lo, static_cast<uint64_t>(v)));
  }

 private:
  uint64_t state_;
};

constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;

size_t Capacity(const WorkloadParams& p) { return p.max_regions == 0 ? 1024 : p.max_regions; }

Trace PingPong(const WorkloadParams& p) {
  Rng rng(p.seed);
  TraceBuilder b("pingpong");
  constexpr uint32_t kBuffers = 6;
  std::vector<uint64_t> bytes(kBuffers);
  for (uint32_t i = 0; i < kBuffers; ++i) b.Alloc(i, bytes[i] = rng.LogUniform(4 * KiB, MiB));
  // Mostly strict alternation between a pair, now and then another buffer.
  uint32_t a = 0, c = 1;
  for (size_t i = 0; b.transfers() < p.ops; ++i) {
    if (rng.Below(64) == 0) a = static_cast<uint32_t>(rng.Below(kBuffers));
    if (rng.Below(64) == 0) c = static_cast<uint32_t>(rng.Below(kBuffers));
    const uint32_t id = i % 2 ? a : c;
    b.Xfer(id, 0, bytes[id]);
  }
  for (uint32_t i = 0; i < kBuffers; ++i) b.Free(i);
  return b.Finish();
}

Trace Ring(const WorkloadParams& p) {
  Rng rng(p.seed);
  TraceBuilder b("ring");
  constexpr uint32_t kTensors = 4, kRanks = 8, kRank = 3;
  std::vector<uint64_t> bytes(kTensors);
  for (uint32_t t = 0; t < kTensors; ++t) b.Alloc(t, bytes[t] = rng.LogUniform(MiB, 8 * MiB) | 1);
  auto chunk = [&](uint32_t t, uint32_t c, uint64_t* off, uint64_t* len) {
    *off = bytes[t] * c / kRanks;
    *len = bytes[t] * (c + 1) / kRanks - *off;
  };
  for (uint32_t t = 0; b.transfers() < p.ops; t = (t + 1) % kTensors) {
    // Reduce-scatter then all-gather: 2 (P - 1) steps, each a send and a receive.
    for (uint32_t step = 0; step < 2 * (kRanks - 1) && b.transfers() < p.ops; ++step) {
      uint64_t off, len;
      chunk(t, (kRank + kRanks - step % (kRanks - 1)) % kRanks, &off, &len);
      b.Xfer(t, off, len);
      if (b.transfers() == p.ops) break;
      chunk(t, (kRank + 2 * kRanks - 1 - step % (kRanks - 1)) % kRanks, &off, &len);
      b.Xfer(t, off, len);
    }
  }
  for (uint32_t t = 0; t < kTensors; ++t) b.Free(t);
  return b.Finish();
}

Trace Churn(const WorkloadParams& p) {
  Rng rng(p.seed);
  TraceBuilder b("churn");
  const size_t live_target = std::max<size_t>(4, Capacity(p) / 2);
  std::vector<uint32_t> live;
  std::vector<uint64_t> bytes;
  std::vector<uint32_t> left;  // transfers left before the buffer is freed, by ID
  uint32_t next_id = 0;
  auto alloc = [&] {
    const uint32_t id = next_id++;
    bytes.push_back(rng.LogUniform(64, 4 * MiB));
    left.push_back(1 + static_cast<uint32_t>(rng.Below(8)));
    b.Alloc(id, bytes[id]);
    live.push_back(id);
  };
  while (live.size() < live_target) alloc();
  while (b.transfers() < p.ops) {
    const size_t slot = rng.Below(live.size());
    const uint32_t id = live[slot];
    if (rng.Below(4) == 0 && bytes[id] > 1) {  // a part of the buffer
      const uint64_t off = rng.Below(bytes[id]);
      b.Xfer(id, off, 1 + rng.Below(bytes[id] - off));
    } else {
      b.Xfer(id, 0, bytes[id]);
    }
    if (--left[id] == 0) {
      b.Free(id);
      live[slot] = live.back();
      live.pop_back();
      alloc();
    }
  }
  for (uint32_t id : live) b.Free(id);
  return b.Finish();
}

// Zipf(0.99) over n ranks, shuffled so that popularity is unrelated to position.
class ZipfPicker {
 public:
  ZipfPicker(uint32_t n, Rng& rng) : by_rank_(n), cdf_(n) {
    std::iota(by_rank_.begin(), by_rank_.end(), 0u);
    for (uint32_t i = n - 1; i > 0; --i) std::swap(by_rank_[i], by_rank_[rng.Below(i + 1)]);
    double sum = 0;
    for (uint32_t r = 0; r < n; ++r) cdf_[r] = sum += 1.0 / std::pow(r + 1.0, 0.99);
  }
  uint32_t Pick(Rng& rng) const {
    const double u = rng.Unit() * cdf_.back();
    const size_t r = std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
    return by_rank_[std::min(r, by_rank_.size() - 1)];
  }

 private:
  std::vector<uint32_t> by_rank_;
  std::vector<double> cdf_;
};

Trace Zipf(const WorkloadParams& p) {
  Rng rng(p.seed);
  TraceBuilder b("zipf");
  const uint32_t n = static_cast<uint32_t>(4 * Capacity(p));
  std::vector<uint64_t> bytes(n);
  for (uint32_t i = 0; i < n; ++i) b.Alloc(i, bytes[i] = rng.LogUniform(4 * KiB, 128 * KiB));
  ZipfPicker popular(n, rng);
  while (b.transfers() < p.ops) {
    const uint32_t id = popular.Pick(rng);
    b.Xfer(id, 0, bytes[id]);
  }
  for (uint32_t i = 0; i < n; ++i) b.Free(i);
  return b.Finish();
}

Trace Kv(const WorkloadParams& p) {
  Rng rng(p.seed);
  TraceBuilder b("kv");
  constexpr uint64_t kPool = 64 * MiB;
  const uint32_t keys = static_cast<uint32_t>(32 * Capacity(p));
  b.Alloc(0, kPool);
  // Each key's value lives at a fixed random (64-byte aligned) offset.
  std::vector<uint64_t> offset(keys), length(keys);
  for (uint32_t k = 0; k < keys; ++k) {
    length[k] = rng.LogUniform(256, 64 * KiB);
    offset[k] = rng.Below((kPool - length[k]) / 64 + 1) * 64;
  }
  ZipfPicker popular(keys, rng);
  while (b.transfers() < p.ops) {
    const uint32_t k = popular.Pick(rng);
    b.Xfer(0, offset[k], length[k]);
  }
  b.Free(0);
  return b.Finish();
}

}  // namespace

const std::vector<std::string>& WorkloadNames() {
  static const auto* names =
      new std::vector<std::string>{"pingpong", "ring", "churn", "zipf", "kv"};
  return *names;
}

absl::StatusOr<Trace> MakeWorkload(const std::string& name, const WorkloadParams& params) {
  if (params.ops == 0) return mrcache::ErrnoStatus(EINVAL, "--ops must be at least 1");
  if (name == "pingpong") return PingPong(params);
  if (name == "ring") return Ring(params);
  if (name == "churn") return Churn(params);
  if (name == "zipf") return Zipf(params);
  if (name == "kv") return Kv(params);
  return mrcache::ErrnoStatus(EINVAL, absl::StrCat("unknown workload '", name, "' (known: ",
                                                   absl::StrJoin(WorkloadNames(), ", "), ")"));
}

}  // namespace mrbench
