// mrcache_run.cc: mrcache-run, the launcher for unmodified verbs applications.
//
//   mrcache-run [OPTIONS] -- CMD [ARGS...]
//
// Prepends libmrcache_preload.so (absolute path) to LD_PRELOAD, exports the
// MRCACHE_* settings the options name, and execs CMD (searched in PATH).
// Every option is validated before anything runs: a bad option, a bad value,
// a missing command or a shim that cannot be found exits with status 2 and a
// message on stderr; a command that cannot be executed exits 127 (not found)
// or 126, like env(1).
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "mrcache/config.h"
#include "mrcache/monitors/monitor_table.h"

namespace {

constexpr char kShimName[] = "libmrcache_preload.so";

// {monitors} stands for the monitor table's names (monitor_table.h).
constexpr char kUsage[] =
    "usage: mrcache-run [OPTIONS] -- CMD [ARGS...]\n"
    "\n"
    "Runs CMD with libmrcache_preload.so preloaded: its ibv_reg_mr/ibv_dereg_mr calls\n"
    "go through a registration cache (one per protection domain), with no change to\n"
    "the program. Every other MRCACHE_* variable (see mrcache-info) is passed on.\n"
    "\n"
    "Options:\n"
    "  --stats               print a summary at exit (MRCACHE_STATS=1): calls, hits, hit\n"
    "                        rate, registrations avoided, registrar time saved, peak pinned\n"
    "  --stats=json:PATH     write the same figures as JSON to PATH (MRCACHE_STATS=json:PATH)\n"
    "  --max-bytes N         bound on pinned bytes per PD cache, e.g. 512M, 2G; 0 = no\n"
    "                        bound (MRCACHE_MAX_BYTES)\n"
    "  --monitor M           memory monitor: {monitors}, or a\n"
    "                        '+'-joined list (MRCACHE_MONITOR; default auto). With none the\n"
    "                        application must never free registered memory.\n"
    "  --remote-keys MODE    private (default): a registration with a remote right gets its\n"
    "                        own MR of exactly its bytes, and ibv_dereg_mr revokes its rkey,\n"
    "                        as without the shim. shared: such registrations are cached too;\n"
    "                        an rkey then reaches every page registered with the same remote\n"
    "                        rights nearby, until the cache deregisters it\n"
    "                        (MRCACHE_REMOTE_KEYS)\n"
    "  --record PATH         write the registration stream (each registration the caches\n"
    "                        serve, each deregistration, each release of memory the\n"
    "                        monitors see) and the configuration to PATH, for\n"
    "                        mrbench --trace PATH (MRCACHE_RECORD; %p in PATH = the pid)\n"
    "  --shim PATH           the preload library to use (default: $MRCACHE_PRELOAD_LIB, else\n"
    "                        libmrcache_preload.so next to mrcache-run or in ../lib)\n"
    "  -h, --help            this text\n"
    "\n"
    "Exit status: CMD's; 2 for a usage error; 126/127 if CMD cannot be run.\n";

[[noreturn]] void UsageError(const std::string& message) {
  std::fprintf(stderr, "mrcache-run: %s\n(run mrcache-run --help for usage)\n", message.c_str());
  std::exit(2);
}

bool IsFile(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string Absolute(const std::string& path) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) return path;
  return resolved;
}

// Where the shim is: the flag, the environment, then beside this program
// (as invoked, and as resolved through symlinks) or in ../lib.
std::string FindShim(const std::string& flag, const char* argv0) {
  if (!flag.empty()) {
    if (!IsFile(flag)) UsageError("--shim " + flag + ": no such readable file");
    return Absolute(flag);
  }
  const char* env = std::getenv("MRCACHE_PRELOAD_LIB");
  if (env != nullptr && *env != '\0') {
    if (!IsFile(env))
      UsageError(std::string("MRCACHE_PRELOAD_LIB=") + env + ": no such readable file");
    return Absolute(env);
  }
  std::vector<std::string> dirs;
  if (std::strchr(argv0, '/') != nullptr) dirs.push_back(Dirname(argv0));
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    dirs.push_back(Dirname(self));
  }
  for (const std::string& dir : dirs) {
    for (const std::string& candidate : {dir + "/" + kShimName, dir + "/../lib/" + kShimName}) {
      if (IsFile(candidate)) return Absolute(candidate);
    }
  }
  UsageError(std::string("cannot find ") + kShimName +
             " next to mrcache-run or in ../lib; use --shim PATH or MRCACHE_PRELOAD_LIB");
}

// "--name=value" or "--name value"; advances *i past what it used.
bool TakeValue(int argc, char** argv, int* i, const char* name, std::string* value) {
  const std::string arg = argv[*i];
  const std::string eq = std::string(name) + "=";
  if (arg == name) {
    if (*i + 1 >= argc) UsageError(std::string(name) + " needs a value");
    *value = argv[++*i];
    return true;
  }
  if (absl::StartsWith(arg, eq)) {
    *value = arg.substr(eq.size());
    return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::string stats, max_bytes, monitor, remote_keys, record, shim_flag, value;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      std::fputs(absl::StrReplaceAll(kUsage, {{"{monitors}", mrcache::MonitorNames("|")}}).c_str(),
                 stdout);
      return 0;
    }
    if (arg == "--stats") {
      stats = "1";
    } else if (absl::StartsWith(arg, "--stats=")) {
      stats = arg.substr(8);
      if (stats != "1" && !(absl::StartsWith(stats, "json:") && stats.size() > 5)) {
        UsageError("--stats=" + stats + ": expected --stats or --stats=json:PATH");
      }
    } else if (TakeValue(argc, argv, &i, "--max-bytes", &value)) {
      mrcache::Config check;
      absl::Status s = check.Set("max_bytes", value);
      if (!s.ok()) UsageError("--max-bytes: " + std::string(s.message()));
      max_bytes = value;
    } else if (TakeValue(argc, argv, &i, "--monitor", &value)) {
      mrcache::Config check;
      absl::Status s = check.Set("monitor", value);
      if (s.ok()) s = check.Validate();  // uffd alone, for one
      if (!s.ok()) UsageError("--monitor: " + std::string(s.message()));
      monitor = value;
    } else if (TakeValue(argc, argv, &i, "--remote-keys", &value)) {
      mrcache::Config check;
      absl::Status s = check.Set("remote_keys", value);
      if (!s.ok()) UsageError("--remote-keys: " + std::string(s.message()));
      remote_keys = value;
    } else if (TakeValue(argc, argv, &i, "--record", &value)) {
      if (value.empty()) UsageError("--record needs a path");
      record = value;
    } else if (TakeValue(argc, argv, &i, "--shim", &value)) {
      shim_flag = value;
    } else if (absl::StartsWith(arg, "-")) {
      UsageError("unknown option '" + arg + "'");
    } else {
      break;  // the command, without a "--"
    }
  }
  if (i >= argc) UsageError("no command given: mrcache-run [OPTIONS] -- CMD [ARGS...]");

  const std::string shim = FindShim(shim_flag, argv[0]);
  const char* old = std::getenv("LD_PRELOAD");
  const std::string preload = (old != nullptr && *old != '\0') ? shim + ":" + old : shim;
  setenv("LD_PRELOAD", preload.c_str(), 1);
  if (!stats.empty()) setenv("MRCACHE_STATS", stats.c_str(), 1);
  if (!max_bytes.empty()) setenv("MRCACHE_MAX_BYTES", max_bytes.c_str(), 1);
  if (!monitor.empty()) setenv("MRCACHE_MONITOR", monitor.c_str(), 1);
  if (!remote_keys.empty()) setenv("MRCACHE_REMOTE_KEYS", remote_keys.c_str(), 1);
  if (!record.empty()) setenv("MRCACHE_RECORD", record.c_str(), 1);

  execvp(argv[i], argv + i);
  const int err = errno;
  std::fprintf(stderr, "mrcache-run: cannot run '%s': %s\n", argv[i], std::strerror(err));
  return err == ENOENT ? 127 : 126;
}
