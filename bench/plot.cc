#include "bench/plot.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mrcache/errno_status.h"

extern char** environ;

namespace mrbench {
namespace {

using mrcache::ErrnoStatus;

// Names in first-seen order.
std::vector<std::string> Ordered(const std::vector<Row>& rows, std::string Row::*field) {
  std::vector<std::string> out;
  for (const Row& r : rows) {
    if (std::find(out.begin(), out.end(), r.*field) == out.end()) out.push_back(r.*field);
  }
  return out;
}

const Row* Find(const std::vector<Row>& rows, const std::string& workload,
                const std::string& config, size_t max_regions) {
  for (const Row& r : rows) {
    if (r.workload == workload && r.config == config && r.max_regions == max_regions &&
        r.error.empty())
      return &r;
  }
  return nullptr;
}

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// One table per file: a header line, then one line per workload (or capacity).
struct DataFiles {
  std::map<std::string, std::string> contents;  // file name -> text
};

DataFiles MakeData(const std::vector<Row>& rows, const std::vector<Row>& sweep) {
  DataFiles d;
  const std::vector<std::string> workloads = Ordered(rows, &Row::workload);
  const std::vector<std::string> configs = Ordered(rows, &Row::config);
  std::string hit = "workload " + absl::StrJoin(configs, " ") + "\n";
  std::string reg = hit;
  std::string total = hit;
  for (const std::string& w : workloads) {
    hit += w, reg += w, total += w;
    for (const std::string& c : configs) {
      const Row* r = rows.empty() ? nullptr : Find(rows, w, c, rows[0].max_regions);
      hit += r ? absl::StrFormat(" %.6f", 100 * r->hit_rate()) : " NaN";
      reg += r && r->timed && r->registrar_seconds > 0
                 ? absl::StrFormat(" %.6g", r->registrar_seconds)
                 : " NaN";
      total += r && r->timed && r->total_seconds() > 0
                   ? absl::StrFormat(" %.6g", r->total_seconds())
                   : " NaN";
    }
    hit += "\n", reg += "\n", total += "\n";
  }
  d.contents["hit_rate.dat"] = hit;
  d.contents["registrar.dat"] = reg;
  d.contents["total.dat"] = total;
  const std::vector<std::string> sweep_configs = Ordered(sweep, &Row::config);
  for (const std::string& w : Ordered(sweep, &Row::workload)) {
    std::vector<size_t> caps;
    for (const Row& r : sweep) {
      if (r.workload == w && std::find(caps.begin(), caps.end(), r.max_regions) == caps.end())
        caps.push_back(r.max_regions);
    }
    std::sort(caps.begin(), caps.end());
    std::string text = "max_regions " + absl::StrJoin(sweep_configs, " ") + "\n";
    for (size_t cap : caps) {
      text += absl::StrCat(cap);
      for (const std::string& c : sweep_configs) {
        const Row* r = Find(sweep, w, c, cap);
        text += r ? absl::StrFormat(" %.6f", 100 * r->hit_rate()) : " NaN";
      }
      text += "\n";
    }
    d.contents["sweep_" + w + ".dat"] = text;
  }
  return d;
}

// The same colour for a configuration in every panel.
std::string Colour(const std::string& config) {
  static const std::map<std::string, std::string> colours = {{"none", "#888888"},
                                                             {"mrcache", "#1b9e77"},
                                                             {"mrcache-nomerge", "#66c2a5"},
                                                             {"ucx", "#d95f02"},
                                                             {"belady-nomerge", "#7570b3"}};
  auto it = colours.find(config);
  return it == colours.end() ? "#e7298a" : it->second;
}

// "plot 'file' using 2:xtic(1) title 'a' lc rgb '#..', '' using 3 ..." over `configs`.
std::string PlotColumns(const std::string& file, const std::vector<std::string>& configs,
                        bool lines) {
  std::string s = "plot ";
  for (size_t i = 0; i < configs.size(); ++i) {
    if (i > 0) s += ", \\\n     ";
    absl::StrAppend(&s, i == 0 ? Quote(file) : "''", " using ", lines ? "1:" : "", i + 2,
                    lines ? "" : ":xtic(1)", " title ", Quote(configs[i]),
                    lines ? " with linespoints pt 7 ps 0.6 lw 2" : "", " lc rgb ",
                    Quote(Colour(configs[i])));
  }
  return s + "\n";
}

}  // namespace

std::string GnuplotScript(const std::vector<Row>& rows, const std::vector<Row>& sweep,
                          const std::string& dir, const std::string& svg_path) {
  const std::vector<std::string> configs = Ordered(rows, &Row::config);
  const size_t workloads = Ordered(rows, &Row::workload).size();
  const std::vector<std::string> sweep_workloads = Ordered(sweep, &Row::workload);
  const size_t sweep_panels = sweep_workloads.size();
  constexpr size_t kBarPanels = 3;  // hit rate, registrar time, total time
  const size_t panel_rows = (kBarPanels + sweep_panels + 1) / 2;
  std::string s;
  absl::StrAppend(&s, "set terminal svg size 1200,", 420 * panel_rows,
                  " dynamic enhanced font 'sans,11'\n", "set output ", Quote(svg_path), "\n",
                  "set datafile missing 'NaN'\n", "set key outside top center horizontal\n",
                  "set grid ytics\n", "set multiplot layout ", panel_rows, ",2 title 'mrbench'\n",
                  "set style data histograms\nset style histogram clustered gap 1\n",
                  "set style fill solid 0.85 border -1\nset boxwidth 0.9\n",
                  // Clusters sit at x = 0 .. workloads-1: autoscaled, gnuplot
                  // spans -1 .. 2*workloads-1 and leaves the left quarter
                  // empty. Half a slot each side; gnuplot rejects that for a
                  // single cluster, which gets a whole slot.
                  workloads <= 1 ? std::string("set xrange [-1:1]\n")
                                 : absl::StrFormat("set xrange [-0.5:%.1f]\n", workloads - 0.5));
  absl::StrAppend(&s,
                  "set title 'hit rate'\nset ylabel 'hits / transfers (%)'\nset yrange [0:105]\n",
                  PlotColumns(dir + "/hit_rate.dat", configs, false));
  absl::StrAppend(
      &s,
      "set title 'registrar time'\nset ylabel 'seconds (log)'\nset logscale y\nset yrange [*:*]\n",
      PlotColumns(dir + "/registrar.dat", configs, false));
  absl::StrAppend(&s, "set title 'total time (registrar + cache)'\nset ylabel 'seconds (log)'\n",
                  PlotColumns(dir + "/total.dat", configs, false), "unset logscale y\n");
  if (sweep_panels > 0) {
    const std::vector<std::string> sweep_configs = Ordered(sweep, &Row::config);
    absl::StrAppend(&s, "set autoscale x\nset logscale x 2\nset xlabel 'max\\_regions'\n",
                    "set ylabel 'hit rate (%)'\nset yrange [0:105]\n");
    for (const std::string& w : sweep_workloads) {
      absl::StrAppend(&s, "set title ", Quote("hit rate vs capacity: " + w), "\n",
                      PlotColumns(dir + "/sweep_" + w + ".dat", sweep_configs, true));
    }
  }
  s += "unset multiplot\n";
  return s;
}

absl::Status PlotSvg(const std::vector<Row>& rows, const std::vector<Row>& sweep,
                     const std::string& svg_path) {
  char dir_template[] = "/tmp/mrbench-plot-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) return ErrnoStatus(errno, "mkdtemp for the plot data");
  const std::string dir = dir_template;
  std::vector<std::string> files;
  auto cleanup = [&] {
    for (const std::string& f : files) unlink(f.c_str());
    rmdir(dir.c_str());
  };
  DataFiles data = MakeData(rows, sweep);
  data.contents["plot.gp"] = GnuplotScript(rows, sweep, dir, svg_path);
  for (const auto& entry : data.contents) {
    files.push_back(dir + "/" + entry.first);
    std::ofstream out(files.back());
    out << entry.second;
    if (!out) {
      cleanup();
      return ErrnoStatus(EIO, absl::StrCat("cannot write ", files.back()));
    }
  }
  const std::string log = dir + "/gnuplot.log";
  files.push_back(log);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  std::string script = dir + "/plot.gp";
  char* argv[] = {const_cast<char*>("gnuplot"), script.data(), nullptr};
  pid_t pid;
  const int err = posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    cleanup();
    return ErrnoStatus(err == ENOENT ? ENOENT : err,
                       "cannot run gnuplot for --plot (install it: apt-get install gnuplot-nox)");
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string output;
  {
    std::ifstream in(log);
    output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  cleanup();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return ErrnoStatus(EIO, absl::StrCat("gnuplot failed writing ", svg_path, ": ", output));
  }
  return absl::OkStatus();
}

}  // namespace mrbench
