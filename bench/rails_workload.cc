#include "bench/rails_workload.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_registrar.h"
#include "bench/rails_registrar_only.h"
#include "mrcache/cache.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrar.h"

namespace mrbench {
namespace {

constexpr int kInFlight = 16;
constexpr int kAccess = mrcache::kAccessLocalWrite;

// One step of the plan: map a buffer into a slot (unmapping the one there),
// or send part of the slot's buffer on a rail.
struct Step {
  bool map;  // else a transfer
  int slot;
  size_t bytes;   // map: the buffer's size; transfer: the chunk's
  size_t offset;  // transfer: where the chunk starts
  int rail;       // transfer
};

std::vector<Step> Plan(const RailsRunOptions& o) {
  std::mt19937_64 rng(o.seed);
  std::vector<Step> plan;
  std::vector<size_t> size(kInFlight, 0);
  uint64_t transfers = 0;
  while (transfers < o.transfers) {
    const int slot = static_cast<int>(rng() % kInFlight);
    const size_t bytes = size_t{256} << 10 << (rng() % 4);  // 256 KiB .. 2 MiB
    plan.push_back(Step{true, slot, bytes, 0, 0});
    const int destinations = rng() % 4 == 0 ? 2 : 1;
    for (int d = 0; d < destinations; ++d) {
      const int rail = static_cast<int>(rng() % (4 * o.rails)) % o.rails;
      const size_t chunks = 1 + rng() % 4;
      for (size_t c = 0; c < chunks && transfers < o.transfers; ++c, ++transfers) {
        const size_t chunk = bytes / chunks;
        plan.push_back(Step{false, slot, chunk, c * chunk, rail});
      }
    }
  }
  return plan;
}

struct Result {
  uint64_t registrations = 0;
  // registrar: every rail's registrar calls; cache: the gets, puts and the
  // final flush (registration, deregistration and the cache's own work);
  // wall: the whole replay, the workload's mmap, fill and munmap included;
  // cpu: the process's CPU time over the replay, every thread's (the
  // background deregistration thread's included).
  double registrar_s = 0, cache_s = 0, wall_s = 0, cpu_s = 0;
};

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The CPU time of the process so far, every thread's, in seconds.
double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Replays `plan` on a fresh rails cache; `eager` asks every rail on every get.
absl::StatusOr<Result> Replay(const RailsRunOptions& o, const std::vector<Step>& plan, bool eager) {
  auto rails = MakeBenchRailRegistrars(o.base, o.rails);
  if (!rails.ok()) return rails.status();
  auto cache = mrcache::Cache::CreateRails(o.base, std::move(*rails));
  if (!cache.ok()) return cache.status();
  const uint64_t every = o.rails == 64 ? ~uint64_t{0} : (uint64_t{1} << o.rails) - 1;
  std::vector<char*> buffer(kInFlight, nullptr);
  std::vector<size_t> length(kInFlight, 0);
  absl::Status failed;
  double cache_s = 0;
  const double cpu0 = ProcessCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (const Step& s : plan) {
    if (s.map) {
      if (buffer[s.slot] != nullptr) munmap(buffer[s.slot], length[s.slot]);
      void* p = mmap(nullptr, s.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        failed = mrcache::ErrnoStatus(errno, "mmap of a buffer");
        break;
      }
      buffer[s.slot] = static_cast<char*>(p);
      length[s.slot] = s.bytes;
      std::memset(p, s.slot, s.bytes);  // the application fills it
      continue;
    }
    const auto get = std::chrono::steady_clock::now();
    {
      auto region = (*cache)->GetRails(buffer[s.slot] + s.offset, s.bytes, kAccess,
                                       eager ? every : uint64_t{1} << s.rail);
      if (!region.ok()) {
        failed = region.status();
        break;
      }
    }  // the put
    cache_s += Since(get);
  }
  for (int i = 0; i < kInFlight; ++i) {
    if (buffer[i] != nullptr) munmap(buffer[i], length[i]);
  }
  const auto flush = std::chrono::steady_clock::now();
  (void)(*cache)->Flush();
  cache_s += Since(flush);
  const double wall_s = Since(t0);
  const double cpu_s = ProcessCpuSeconds() - cpu0;
  if (!failed.ok()) return failed;
  Result r;
  r.cache_s = cache_s;
  r.wall_s = wall_s;
  r.cpu_s = cpu_s;
  for (int rail = 0; rail < o.rails; ++rail) {
    absl::StatusOr<mrcache::RailStats> s = (*cache)->rail_stats(rail);
    if (!s.ok()) return s.status();
    r.registrations += s->registrations;
    r.registrar_s += static_cast<double>(s->registrar_ns) * 1e-9;
  }
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Medians over the runs of the registrar-only experiment's figures, per call.
void PrintRegistrarOnly(const std::vector<RegistrarOnlyTimes>& runs, int rails, FILE* out) {
  const double buffers = static_cast<double>(runs[0].buffers);
  auto us_per_call = [&](double RegistrarOnlyTimes::*field, double calls_per_buffer) {
    std::vector<double> v;
    for (const RegistrarOnlyTimes& t : runs) v.push_back(t.*field);
    return Median(v) * 1e6 / (buffers * calls_per_buffer);
  };
  std::vector<double> one, every, one_unmapped, every_unmapped;
  for (const RegistrarOnlyTimes& t : runs) {
    one.push_back(t.one_rail_s());
    every.push_back(t.every_rail_s());
    one_unmapped.push_back(t.one_rail_unmapped_s());
    every_unmapped.push_back(t.every_rail_unmapped_s());
  }
  const double added = rails - 1;
  std::fprintf(out,
               "registrar only (no cache; the same %.0f buffers, each registered whole): us per "
               "call, medians\n",
               buffers);
  std::fprintf(out,
               "  register: first %.1f, on a rail more %.1f, again after unpinning %.1f; "
               "deregister: last pin %.1f, other %.1f, last pin after munmap %.1f\n",
               us_per_call(&RegistrarOnlyTimes::first_s, 1),
               us_per_call(&RegistrarOnlyTimes::added_s, added),
               us_per_call(&RegistrarOnlyTimes::again_s, 1),
               us_per_call(&RegistrarOnlyTimes::last_dereg_s, 1),
               us_per_call(&RegistrarOnlyTimes::other_dereg_s, added),
               us_per_call(&RegistrarOnlyTimes::unmapped_dereg_s, 1));
  std::fprintf(out,
               "  one rail / every rail: %.4f / %.4f s = %.3f; the last deregistration after "
               "munmap: %.4f / %.4f s = %.3f\n",
               Median(one), Median(every), Median(one) / Median(every), Median(one_unmapped),
               Median(every_unmapped), Median(one_unmapped) / Median(every_unmapped));
}

}  // namespace

absl::Status RunRailsWorkload(const RailsRunOptions& o, FILE* out) {
  if (o.rails < 1 || o.rails > mrcache::kMaxRails) {
    return mrcache::ErrnoStatus(EINVAL, absl::StrCat("--rails ", o.rails, " is not in 1..64"));
  }
  const std::vector<Step> plan = Plan(o);
  std::vector<size_t> buffer_sizes;
  for (const Step& s : plan) {
    if (s.map) buffer_sizes.push_back(s.bytes);
  }
  std::vector<double> regs[2], registrar_s[2], cache_s[2], wall_s[2], cpu_s[2];
  std::vector<RegistrarOnlyTimes> alone;
  for (int rep = 0; rep < o.repeats; ++rep) {
    for (int eager = 0; eager < 2; ++eager) {
      absl::StatusOr<Result> r = Replay(o, plan, eager == 1);
      if (!r.ok()) {
        return mrcache::ErrnoStatus(
            mrcache::StatusToErrno(r.status()),
            absl::StrCat(eager ? "eager: " : "mrcache: ", r.status().message()));
      }
      regs[eager].push_back(static_cast<double>(r->registrations));
      registrar_s[eager].push_back(r->registrar_s);
      cache_s[eager].push_back(r->cache_s);
      wall_s[eager].push_back(r->wall_s);
      cpu_s[eager].push_back(r->cpu_s);
    }
    if (o.rails > 1) {
      absl::StatusOr<RegistrarOnlyTimes> t = TimeRegistrarOnly(o.base, o.rails, buffer_sizes);
      if (!t.ok()) return t.status();
      alone.push_back(*t);
    }
  }
  std::fprintf(out,
               "mrbench: rails workload: %d rails, registrar %s, seed %llu, %llu transfers, "
               "medians of %d runs each (alternating)\n",
               o.rails, o.base.registrar.c_str(), static_cast<unsigned long long>(o.seed),
               static_cast<unsigned long long>(o.transfers), o.repeats);
  std::fprintf(out,
               "total s: time in the cache's calls (gets, puts, final flush); wall s: the whole "
               "replay, the workload's own mmap, fill and munmap included; cpu s: the process's "
               "CPU time over the replay, every thread's (async_dereg's background thread "
               "included)\n");
  std::fprintf(out, "%-10s %14s %12s %12s %12s %12s\n", "config", "registrations", "registrar s",
               "total s", "wall s", "cpu s");
  const char* names[2] = {"mrcache", "eager"};
  for (int c = 0; c < 2; ++c) {
    std::fprintf(out, "%-10s %14.0f %12.4f %12.4f %12.4f %12.4f\n", names[c], Median(regs[c]),
                 Median(registrar_s[c]), Median(cache_s[c]), Median(wall_s[c]), Median(cpu_s[c]));
  }
  std::fprintf(out, "%-10s %14.3f %12.3f %12.3f %12.3f %12.3f\n", "ratio",
               Median(regs[0]) / Median(regs[1]), Median(registrar_s[0]) / Median(registrar_s[1]),
               Median(cache_s[0]) / Median(cache_s[1]), Median(wall_s[0]) / Median(wall_s[1]),
               Median(cpu_s[0]) / Median(cpu_s[1]));
  if (!alone.empty()) PrintRegistrarOnly(alone, o.rails, out);
  return absl::OkStatus();
}

}  // namespace mrbench
