// plot.h: mrbench's figures, rendered by gnuplot into one SVG.
//
// Panels: hit rate per workload and configuration (clustered bars),
// registrar time and total time (registrar + cache, the figure users
// compare) per workload and configuration (log scale; `belady-nomerge` has
// neither), and, when sweep rows are given, hit rate versus max_regions per
// workload (log2 x axis), one line per configuration. The data and the
// script are written to a private temporary directory, gnuplot runs as a
// child process, and the directory is removed afterwards. NOT_FOUND (ENOENT)
// with a hint to install gnuplot-nox if gnuplot is not on PATH; the error
// carries gnuplot's own message if it fails.
#ifndef BENCH_PLOT_H_
#define BENCH_PLOT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/report.h"

namespace mrbench {

// The gnuplot script for `rows` and `sweep`, reading data files from `dir`
// (exposed for tests; PlotSvg writes the files it names).
std::string GnuplotScript(const std::vector<Row>& rows, const std::vector<Row>& sweep,
                          const std::string& dir, const std::string& svg_path);

absl::Status PlotSvg(const std::vector<Row>& rows, const std::vector<Row>& sweep,
                     const std::string& svg_path);

}  // namespace mrbench

#endif  // BENCH_PLOT_H_
