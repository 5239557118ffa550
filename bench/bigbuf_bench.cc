// bigbuf_bench: big buffers against one plain registration, side by side.
//
//   bigbuf_bench [--registrar uring|verbs] [--sizes 256M,1G] [--repeats 5]
//                [--set key=value]... [--evict-size 1G] [--evict-samples 100]
//                [--no-first-get] [--no-evict]
//
// First get: for each repeat and size, in an order that alternates between
// repeats, each variant gets a fresh untouched anonymous mapping:
//   plain     one registration of the buffer by the registrar alone (in
//             pieces of at most 1 GiB on uring, whose buffers are capped there)
//   populate  MADV_POPULATE_WRITE of the buffer in the calling thread, then
//             the same plain registration (the two times are printed apart:
//             what faulting costs and what pinning resident pages costs)
//   mrcache   a cache's first get of the whole buffer (monitor none,
//             max_regions 1, then every --set), from cache creation to
//             destruction outside the timed get
// Medians over the repeats, and each variant's ratio to plain (the median of
// the per-repeat ratios, both figures of a ratio from the same repeat).
//
// Eviction: a cache (max_regions 1 plus the --set keys) holds an unused
// region of --evict-size (resident memory, registered once per sample); the
// timed operation is a get of an unrelated 4 KiB buffer, which must evict it.
// p50 and p99 over the samples. Unless --set names async_dereg, two caches
// run side by side, async_dereg=off and on, their samples alternating, and
// the ratio of their p50s and p99s (on/off) is printed. For the slowest
// samples of each cache it prints what the getting thread did meanwhile: its
// time on a CPU, and how often it was preempted (involuntary context
// switches: it waited for a CPU) and blocked (voluntary ones: it slept on a
// lock or in the kernel), how long it waited runnable for a CPU (schedstat),
// the CPU it was on before and after, and the background deregistration
// thread's time on a CPU meanwhile and the CPU it last ran on: so that a tail
// can be told apart from scheduling, and the background thread's share of it
// seen.
//
// verbs opens the first RDMA device (softverbs with
// LD_LIBRARY_PATH=bazel-bin/tests/softverbs).
#include <dirent.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
#include "bench/bench_registrar.h"
#include "mrcache/cache.h"
#include "mrcache/config.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrars/uring_registrar.h"

namespace {

using Clock = std::chrono::steady_clock;

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

struct Options {
  std::string registrar = "uring";
  std::vector<size_t> sizes;
  int repeats = 5;
  std::vector<std::pair<std::string, std::string>> sets;
  size_t evict_size = size_t{1} << 30;
  int evict_samples = 100;
  bool first_get = true;
  bool evict = true;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bigbuf_bench: %s\n", what.c_str());
  std::exit(1);
}

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// One thread's scheduler counters from /proc/self/task/<tid>/schedstat: time
// on a CPU and time runnable but waiting for one (zero if the file cannot be
// read: a kernel without schedstats).
struct SchedStat {
  double run_ms = 0, wait_ms = 0;

  static SchedStat Of(const std::string& path) {
    SchedStat s;
    std::ifstream in(path);
    unsigned long long run_ns = 0, wait_ns = 0;
    if (in >> run_ns >> wait_ns) {
      s.run_ms = static_cast<double>(run_ns) * 1e-6;
      s.wait_ms = static_cast<double>(wait_ns) * 1e-6;
    }
    return s;
  }
};

// The CPU a thread last ran on (field 39 of /proc/self/task/<tid>/stat), or -1.
int LastCpu(const std::string& stat_path) {
  std::ifstream in(stat_path);
  std::string line;
  if (!std::getline(in, line)) return -1;
  const size_t comm_end = line.rfind(')');  // the command name may hold spaces
  if (comm_end == std::string::npos) return -1;
  std::vector<std::string> fields = absl::StrSplit(line.substr(comm_end + 2), ' ');
  // fields[0] is field 3 (state); field 39 is fields[36].
  return fields.size() > 36 ? std::atoi(fields[36].c_str()) : -1;
}

// The process's background deregistration thread (named mrc-dereg by
// mrcache/core/deregistration_queue.cc), found in /proc/self/task once it
// exists; 0 until then.
pid_t DeregistrationThread() {
  static pid_t found = 0;
  if (found != 0) return found;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    if (std::getline(comm, name) && name == "mrc-dereg") {
      found = static_cast<pid_t>(std::atoi(e->d_name));
      break;
    }
  }
  closedir(dir);
  return found;
}

// The calling thread's CPU time and context switches (involuntary: it
// waited for a CPU; voluntary: it slept on a lock or in the kernel), the
// time it waited runnable for a CPU and the CPU it is on; and the background
// deregistration thread's time on a CPU and the CPU it last ran on.
struct ThreadUsage {
  double cpu_s = 0;
  long preempted = 0, blocked = 0;
  double runnable_wait_ms = 0;
  int cpu = -1;
  double worker_run_ms = 0;
  int worker_cpu = -1;

  static ThreadUsage Now() {
    ThreadUsage u;
    timespec cpu{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
    rusage ru{};
    getrusage(RUSAGE_THREAD, &ru);
    u.cpu_s = static_cast<double>(cpu.tv_sec) + static_cast<double>(cpu.tv_nsec) * 1e-9;
    u.preempted = ru.ru_nivcsw;
    u.blocked = ru.ru_nvcsw;
    u.runnable_wait_ms = SchedStat::Of("/proc/thread-self/schedstat").wait_ms;
    u.cpu = sched_getcpu();
    if (const pid_t worker = DeregistrationThread(); worker != 0) {
      const std::string dir = "/proc/self/task/" + std::to_string(worker);
      u.worker_run_ms = SchedStat::Of(dir + "/schedstat").run_ms;
      u.worker_cpu = LastCpu(dir + "/stat");
    }
    return u;
  }
};

// One timed operation: its wall milliseconds; over a span just wider (the
// readings around it) the thread's CPU milliseconds, context switches and
// milliseconds waiting for a CPU, the CPUs it was on at both ends, and the
// background deregistration thread's milliseconds on a CPU and its CPU at the
// end.
struct Sample {
  double wall_ms = 0, cpu_ms = 0;
  long preempted = 0, blocked = 0;
  double runnable_wait_ms = 0;
  int cpu_before = -1, cpu_after = -1;
  double worker_run_ms = 0;
  int worker_cpu = -1;
};

Sample Around(double wall_ms, const ThreadUsage& a, const ThreadUsage& b) {
  Sample s;
  s.wall_ms = wall_ms;
  s.cpu_ms = (b.cpu_s - a.cpu_s) * 1e3;
  s.preempted = b.preempted - a.preempted;
  s.blocked = b.blocked - a.blocked;
  s.runnable_wait_ms = b.runnable_wait_ms - a.runnable_wait_ms;
  s.cpu_before = a.cpu;
  s.cpu_after = b.cpu;
  s.worker_run_ms = b.worker_run_ms - a.worker_run_ms;
  s.worker_cpu = b.worker_cpu;
  return s;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The q-quantile (nearest rank) of v.
double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(q * static_cast<double>(v.size()) + 0.999999);
  rank = std::min(std::max<size_t>(rank, 1), v.size());
  return v[rank - 1];
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// An untouched private anonymous mapping, unmapped at destruction.
class Buffer {
 public:
  explicit Buffer(size_t length) : length_(length) {
    void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) Die(std::string("mmap: ") + std::strerror(errno));
    addr_ = static_cast<char*>(p);
  }
  ~Buffer() { munmap(addr_, length_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  char* addr() const { return addr_; }
  size_t length() const { return length_; }

 private:
  char* addr_;
  size_t length_;
};

mrcache::Config BaseConfig(const Options& opt) {
  mrcache::Config config;
  config.registrar = opt.registrar;
  config.monitor = "none";
  config.max_regions = 1;
  config.stats_shm = false;
  for (const auto& kv : opt.sets) Check(config.Set(kv.first, kv.second), "--set");
  if (absl::Status s = config.Validate(); !s.ok()) Die("config: " + s.ToString());
  return config;
}

// The registrar alone, as a program without mrcache would register: every
// decorator the cache's configuration might add is turned off.
std::unique_ptr<mrcache::Registrar> PlainRegistrar(const Options& opt) {
  mrcache::Config config = BaseConfig(opt);
  (void)config.Set("prefault_bytes", "0");  // absent before the key exists
  auto r = mrbench::MakeBenchRegistrar(config);
  if (!r.ok()) Die("registrar: " + r.status().ToString());
  return std::move(*r);
}

// Registers all of `buf` in pieces the registrar accepts; returns the time
// taken, and deregisters outside it.
double PlainRegister(mrcache::Registrar& registrar, const Buffer& buf) {
  const size_t piece =
      registrar.name() == std::string("uring") ? mrcache::kUringMaxBufferBytes : buf.length();
  std::vector<mrcache::Registration> regs;
  const Clock::time_point t0 = Clock::now();
  for (size_t off = 0; off < buf.length(); off += piece) {
    auto reg = registrar.Register(buf.addr() + off, std::min(piece, buf.length() - off),
                                  mrcache::kAccessLocalWrite);
    if (!reg.ok()) Die("plain registration: " + reg.status().ToString());
    regs.push_back(*reg);
  }
  const double took = Seconds(Clock::now() - t0);
  for (const auto& reg : regs) Check(registrar.Deregister(reg), "deregister");
  return took;
}

struct FirstGetSample {
  double plain = 0, populate = 0, after_populate = 0, mrcache = 0;
};

double TimeMrcacheFirstGet(const Options& opt, size_t size) {
  mrcache::Config config = BaseConfig(opt);
  auto registrar = mrbench::MakeBenchRegistrar(config);
  if (!registrar.ok()) Die("registrar: " + registrar.status().ToString());
  auto cache = mrcache::Cache::Create(config, std::move(*registrar));
  if (!cache.ok()) Die("cache: " + cache.status().ToString());
  Buffer buf(size);
  const Clock::time_point t0 = Clock::now();
  auto ref = (*cache)->Get(buf.addr(), size, mrcache::kAccessLocalWrite);
  const double took = Seconds(Clock::now() - t0);
  if (!ref.ok()) Die("mrcache get: " + ref.status().ToString());
  if (ref->info().length < size) Die("mrcache get: the region does not cover the buffer");
  return took;
}

void RunFirstGet(const Options& opt) {
  std::printf("\nFirst get of an untouched buffer, registrar %s, %d repeats (load %s)\n",
              opt.registrar.c_str(), opt.repeats, LoadAverage().c_str());
  std::unique_ptr<mrcache::Registrar> plain = PlainRegistrar(opt);
  std::vector<std::vector<FirstGetSample>> samples(opt.sizes.size());
  for (int rep = 0; rep < opt.repeats; ++rep) {
    for (size_t i = 0; i < opt.sizes.size(); ++i) {
      const size_t size = opt.sizes[i];
      FirstGetSample s;
      std::vector<std::function<void()>> variants = {
          [&] {
            Buffer buf(size);
            s.plain = PlainRegister(*plain, buf);
          },
          [&] {
            Buffer buf(size);
            const Clock::time_point t0 = Clock::now();
            if (madvise(buf.addr(), size, MADV_POPULATE_WRITE) != 0)
              Die(std::string("MADV_POPULATE_WRITE: ") + std::strerror(errno));
            s.populate = Seconds(Clock::now() - t0);
            s.after_populate = PlainRegister(*plain, buf);
          },
          [&] { s.mrcache = TimeMrcacheFirstGet(opt, size); },
      };
      // Alternate the order, so that neither variant always runs first.
      if (rep % 2) std::reverse(variants.begin(), variants.end());
      for (auto& run : variants) run();
      samples[i].push_back(s);
    }
  }
  std::printf("%-8s %10s %12s %12s %10s %14s %14s\n", "size", "plain s", "populate s",
              "+register s", "mrcache s", "mrcache/plain", "populated/plain");
  for (size_t i = 0; i < opt.sizes.size(); ++i) {
    std::vector<double> plain_s, pop, after, mrc, ratio, pop_ratio;
    for (const FirstGetSample& s : samples[i]) {
      plain_s.push_back(s.plain);
      pop.push_back(s.populate);
      after.push_back(s.after_populate);
      mrc.push_back(s.mrcache);
      ratio.push_back(s.mrcache / s.plain);
      pop_ratio.push_back((s.populate + s.after_populate) / s.plain);
    }
    std::printf("%-8s %10.3f %12.3f %12.3f %10.3f %13.2fx %13.2fx\n",
                mrcache::FormatSize(opt.sizes[i]).c_str(), Median(plain_s), Median(pop),
                Median(after), Median(mrc), Median(ratio), Median(pop_ratio));
    std::printf("         mrcache/plain per repeat:");
    for (double r : ratio) std::printf(" %.2f", r);
    std::printf("\n");
  }
  std::printf("(load after: %s)\n", LoadAverage().c_str());
}

void RunEvict(const Options& opt) {
  std::printf(
      "\nA 4 KiB miss that evicts an unused %s region, registrar %s, %d samples "
      "(load %s)\n",
      mrcache::FormatSize(opt.evict_size).c_str(), opt.registrar.c_str(), opt.evict_samples,
      LoadAverage().c_str());
  bool async_set = false;
  for (const auto& kv : opt.sets) async_set = async_set || kv.first == "async_dereg";
  struct Variant {
    std::string name;
    std::unique_ptr<mrcache::Cache> cache;
    std::vector<double> miss_ms;
    std::vector<Sample> samples;
  };
  std::vector<Variant> variants;
  for (const char* async : {"off", "on"}) {
    mrcache::Config config = BaseConfig(opt);
    if (!async_set) Check(config.Set("async_dereg", async), "async_dereg");
    auto registrar = mrbench::MakeBenchRegistrar(config);
    if (!registrar.ok()) Die("registrar: " + registrar.status().ToString());
    auto made = mrcache::Cache::Create(config, std::move(*registrar));
    if (!made.ok()) Die("cache: " + made.status().ToString());
    variants.push_back(
        Variant{async_set ? std::string("as set") : std::string("async_dereg=") + async,
                std::move(*made),
                {},
                {}});
    if (async_set) break;
  }
  Buffer big(opt.evict_size);
  Buffer small(4096);
  std::memset(small.addr(), 1, 4096);
  if (madvise(big.addr(), big.length(), MADV_POPULATE_WRITE) != 0)
    Die(std::string("MADV_POPULATE_WRITE: ") + std::strerror(errno));
  for (int i = 0; i < opt.evict_samples; ++i) {
    for (Variant& v : variants) {
      mrcache::Cache& cache = *v.cache;
      {
        auto ref = cache.Get(big.addr(), big.length(), mrcache::kAccessLocalWrite);
        if (!ref.ok()) Die("get of the big buffer: " + ref.status().ToString());
      }  // put: the big region stays, unused
      const ThreadUsage before = ThreadUsage::Now();
      const Clock::time_point t0 = Clock::now();
      auto ref = cache.Get(small.addr(), 4096, mrcache::kAccessLocalWrite);
      const double miss_ms = Seconds(Clock::now() - t0) * 1e3;
      v.samples.push_back(Around(miss_ms, before, ThreadUsage::Now()));
      v.miss_ms.push_back(miss_ms);
      if (!ref.ok()) Die("get of the small buffer: " + ref.status().ToString());
    }
  }
  for (Variant& v : variants) {
    const mrcache::CacheStats st = v.cache->stats();
    std::printf("%-16s p50 %.3f ms, p99 %.3f ms, max %.3f ms (evictions %" PRIu64
                ", waited for the queue %.3f ms)\n",
                v.name.c_str(), Quantile(v.miss_ms, 0.5), Quantile(v.miss_ms, 0.99),
                Quantile(v.miss_ms, 1.0), st.evictions, st.dereg_wait_ns / 1e6);
    std::sort(v.samples.begin(), v.samples.end(),
              [](const Sample& a, const Sample& b) { return a.wall_ms > b.wall_ms; });
    std::printf(
        "  slowest (wall ms / on-CPU ms / preempted / blocked / waited for a CPU ms / "
        "CPU before>after / background thread on-CPU ms @ its CPU):\n   ");
    for (size_t i = 0; i < v.samples.size() && i < 4; ++i) {
      const Sample& s = v.samples[i];
      std::printf("  %.2f/%.2f/%ld/%ld/%.2f/%d>%d/%.2f@%d", s.wall_ms, s.cpu_ms, s.preempted,
                  s.blocked, s.runnable_wait_ms, s.cpu_before, s.cpu_after, s.worker_run_ms,
                  s.worker_cpu);
    }
    std::printf("\n");
  }
  if (variants.size() == 2) {
    std::printf("on/off: p50 %.4f, p99 %.4f\n",
                Quantile(variants[1].miss_ms, 0.5) / Quantile(variants[0].miss_ms, 0.5),
                Quantile(variants[1].miss_ms, 0.99) / Quantile(variants[0].miss_ms, 0.99));
  }
}

Options Parse(int argc, char** argv) {
  Options opt;
  std::string sizes;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Die(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--registrar") {
      opt.registrar = value();
    } else if (arg == "--sizes") {
      sizes = value();
    } else if (arg == "--repeats") {
      opt.repeats = std::atoi(value().c_str());
      if (opt.repeats < 1) Die("--repeats must be at least 1");
    } else if (arg == "--set") {
      const std::string kv = value();
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) Die("--set takes key=value, not " + kv);
      opt.sets.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    } else if (arg == "--evict-size") {
      auto v = mrcache::ParseSize(value());
      if (!v.ok() || *v == 0) Die("--evict-size: a size such as 1G");
      opt.evict_size = *v;
    } else if (arg == "--evict-samples") {
      opt.evict_samples = std::atoi(value().c_str());
      if (opt.evict_samples < 1) Die("--evict-samples must be at least 1");
    } else if (arg == "--no-first-get") {
      opt.first_get = false;
    } else if (arg == "--no-evict") {
      opt.evict = false;
    } else {
      Die("unknown argument " + arg + " (see the top of bench/bigbuf_bench.cc)");
    }
  }
  if (sizes.empty()) sizes = opt.registrar == "verbs" ? "1G,4G" : "256M,1G";
  for (absl::string_view part : absl::StrSplit(sizes, ',')) {
    auto v = mrcache::ParseSize(part);
    if (!v.ok() || *v == 0) Die("--sizes: sizes such as 256M,1G");
    opt.sizes.push_back(*v);
  }
  return opt;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = Parse(argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (opt.first_get) RunFirstGet(opt);
  if (opt.evict) RunEvict(opt);
  return 0;
}
