// prometheus_format_check: reads the Prometheus text exposition format
// (version 0.0.4) on stdin and exits 1, naming the line, at the first thing
// a strict parser would refuse, or that mrcache-info must not print:
//  - a line that is not "# HELP name text", "# TYPE name type", another
//    comment, or a sample "name{label="value",...} value";
//  - a bad metric or label name, an unescaped or unterminated label value,
//    a value that is not a float (Inf and NaN included), a duplicate label;
//  - a family whose samples are not contiguous, a TYPE after its samples or
//    twice, a HELP twice; a sample without TYPE;
//  - a counter not named *_total; a histogram without a +Inf bucket equal to
//    its _count, with buckets out of order or decreasing, or without _sum;
//  - a series twice; a metric not named mrcache_*, a sample without the
//    labels pid, cache and rail.
// Used by live_stats_test.sh where promtool is not installed, and beside it
// where it is.
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace {

int line_number = 0;

[[noreturn]] void Refuse(const std::string& why, const std::string& line) {
  std::cerr << "line " << line_number << ": " << why << ": " << line << "\n";
  std::exit(1);
}

bool IsFloat(const std::string& v) {
  if (v == "+Inf" || v == "-Inf" || v == "NaN") return true;
  static const std::regex kFloat(R"([-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?)");
  return std::regex_match(v, kFloat);
}

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string value;
};

Sample ParseSample(const std::string& line) {
  static const std::regex kName("[a-zA-Z_:][a-zA-Z0-9_:]*");
  static const std::regex kLabel("[a-zA-Z_][a-zA-Z0-9_]*");
  Sample s;
  size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
  s.name = line.substr(0, i);
  if (!std::regex_match(s.name, kName)) Refuse("bad metric name", line);
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      const size_t eq = line.find('=', i);
      if (eq == std::string::npos) Refuse("label without '='", line);
      const std::string label = line.substr(i, eq - i);
      if (!std::regex_match(label, kLabel)) Refuse("bad label name '" + label + "'", line);
      if (eq + 1 >= line.size() || line[eq + 1] != '"') Refuse("unquoted label value", line);
      std::string value;
      size_t j = eq + 2;
      for (; j < line.size() && line[j] != '"'; ++j) {
        if (line[j] == '\\') {
          if (j + 1 >= line.size() ||
              (line[j + 1] != '\\' && line[j + 1] != '"' && line[j + 1] != 'n'))
            Refuse("bad escape in a label value", line);
          ++j;
        }
        value += line[j];
      }
      if (j >= line.size()) Refuse("unterminated label value", line);
      if (!s.labels.emplace(label, value).second) Refuse("duplicate label " + label, line);
      i = j + 1;
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) Refuse("unterminated label set", line);
    ++i;
  }
  if (i >= line.size() || line[i] != ' ') Refuse("no value", line);
  std::string rest = line.substr(i + 1);
  const size_t space = rest.find(' ');
  s.value = rest.substr(0, space);
  if (!IsFloat(s.value)) Refuse("value is not a float", line);
  if (space != std::string::npos) {
    static const std::regex kTimestamp("-?[0-9]+");
    if (!std::regex_match(rest.substr(space + 1), kTimestamp)) Refuse("bad timestamp", line);
  }
  return s;
}

// The family a sample belongs to, given the declared types.
std::string FamilyOf(const std::string& name, const std::map<std::string, std::string>& types) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string sfx(suffix);
    if (name.size() > sfx.size() && name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0) {
      const std::string base = name.substr(0, name.size() - sfx.size());
      auto t = types.find(base);
      if (t != types.end() && (t->second == "histogram" || t->second == "summary")) return base;
    }
  }
  return name;
}

std::string SeriesKey(const Sample& s, bool without_le) {
  std::string key = s.name + "{";
  for (const auto& [k, v] : s.labels) {
    if (without_le && k == "le") continue;
    key += k + "=" + v + ",";
  }
  return key + "}";
}

}  // namespace

int main() {
  static const std::regex kHelp(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*)");
  static const std::regex kType(
      R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped))");
  std::map<std::string, std::string> types;
  std::set<std::string> helps, families_done, series;
  std::string current;  // family whose samples are being read
  // Histogram series (labels without le): last bound, last cumulative count, +Inf count.
  struct HistogramState {
    double bound = -INFINITY, count = 0;
    bool inf = false, sum = false, total = false;
    double inf_count = 0, total_count = -1;
  };
  std::map<std::string, HistogramState> histograms;
  std::string line;
  int samples = 0;
  while (std::getline(std::cin, line)) {
    ++line_number;
    if (line.empty()) continue;
    std::smatch m;
    if (line.rfind("# HELP ", 0) == 0) {
      if (!std::regex_match(line, m, kHelp)) Refuse("malformed HELP", line);
      if (!helps.insert(m[1]).second) Refuse("second HELP", line);
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      if (!std::regex_match(line, m, kType)) Refuse("malformed TYPE", line);
      const std::string name = m[1];
      if (types.count(name)) Refuse("second TYPE", line);
      if (families_done.count(name) || current == name) Refuse("TYPE after samples", line);
      types[name] = m[2];
      if (m[2] == "counter" && (name.size() < 6 || name.substr(name.size() - 6) != "_total"))
        Refuse("counter not named *_total", line);
      continue;
    }
    if (line[0] == '#') continue;
    const Sample s = ParseSample(line);
    ++samples;
    const std::string family = FamilyOf(s.name, types);
    if (!types.count(family)) Refuse("sample without a TYPE", line);
    if (family != current) {
      if (families_done.count(family)) Refuse("family's samples not contiguous", line);
      if (!current.empty()) families_done.insert(current);
      current = family;
    }
    if (family.rfind("mrcache_", 0) != 0) Refuse("metric not named mrcache_*", line);
    for (const char* label : {"pid", "cache", "rail"}) {
      if (!s.labels.count(label)) Refuse(std::string("no label ") + label, line);
    }
    if (!series.insert(SeriesKey(s, false)).second) Refuse("series twice", line);
    if (types[family] == "histogram") {
      Sample base = s;
      base.name = family;
      HistogramState& h = histograms[SeriesKey(base, true)];
      const double v = std::strtod(s.value.c_str(), nullptr);
      if (s.name == family + "_bucket") {
        auto le = s.labels.find("le");
        if (le == s.labels.end() || !IsFloat(le->second)) Refuse("bucket without a float le", line);
        const double bound =
            le->second == "+Inf" ? INFINITY : std::strtod(le->second.c_str(), nullptr);
        if (!(bound > h.bound)) Refuse("bucket bounds not increasing", line);
        if (v < h.count) Refuse("bucket counts decreasing", line);
        h.bound = bound;
        h.count = v;
        if (std::isinf(bound)) h.inf = true, h.inf_count = v;
      } else if (s.name == family + "_sum") {
        h.sum = true;
      } else if (s.name == family + "_count") {
        h.total = true;
        h.total_count = v;
      } else {
        Refuse("histogram sample neither _bucket, _sum nor _count", line);
      }
    } else if (s.labels.count("le")) {
      Refuse("le label outside a histogram", line);
    }
  }
  for (const auto& [key, h] : histograms) {
    if (!h.inf || !h.sum || !h.total || h.inf_count != h.total_count) {
      std::cerr << "histogram " << key << ": needs a +Inf bucket equal to _count, and _sum\n";
      return 1;
    }
  }
  if (samples == 0) {
    std::cerr << "no samples\n";
    return 1;
  }
  return 0;
}
