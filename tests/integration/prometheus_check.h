#pragma once

// A strict, independent checker of the Prometheus text exposition format 0.0.4 (the format of
// `.aprfs/metrics`), used instead of promtool (not in Debian 12's small packages). Stricter
// than the format where a well-made exporter has no excuse: no blank lines, every family has
// one HELP and one TYPE before its samples, samples of a family are contiguous, no series
// twice, counters are named *_total and are never negative.

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace aprfs_itest {

struct PromSample {
  std::string name;
  std::map<std::string, std::string> labels;  // unescaped values
  double value = 0;
};

struct PromParse {
  std::vector<std::string> problems;  // empty when the text is valid
  std::vector<PromSample> samples;
  std::map<std::string, std::string> types;  // family -> counter/gauge/...
  // The value of the series `name` with exactly these labels, or NaN.
  double Value(const std::string& name, const std::map<std::string, std::string>& labels) const {
    for (const PromSample& s : samples) {
      if (s.name == name && s.labels == labels) return s.value;
    }
    return std::nan("");
  }
};

inline bool PromMetricName(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != ':') return false;
  }
  return true;
}

inline bool PromLabelName(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  if (name.rfind("__", 0) == 0) return false;  // reserved
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// Parses `{a="x",b="y"}` starting at text[*at] == '{'; advances past '}'.
inline bool PromLabels(const std::string& text, size_t* at, std::map<std::string, std::string>* out,
                       std::string* why) {
  size_t i = *at + 1;
  for (;;) {
    if (i < text.size() && text[i] == '}') break;
    size_t eq = text.find('=', i);
    if (eq == std::string::npos) return *why = "label without '='", false;
    std::string name = text.substr(i, eq - i);
    if (!PromLabelName(name)) return *why = "bad label name '" + name + "'", false;
    if (eq + 1 >= text.size() || text[eq + 1] != '"') return *why = "label value not quoted", false;
    std::string value;
    i = eq + 2;
    for (;; ++i) {
      if (i >= text.size()) return *why = "unterminated label value", false;
      char c = text[i];
      if (c == '"') break;
      if (c == '\\') {
        if (i + 1 >= text.size()) return *why = "dangling backslash", false;
        char e = text[++i];
        if (e == '\\')
          value += '\\';
        else if (e == '"')
          value += '"';
        else if (e == 'n')
          value += '\n';
        else
          return *why = std::string("bad escape \\") + e, false;
      } else {
        value += c;
      }
    }
    if (!out->emplace(name, value).second) return *why = "label '" + name + "' twice", false;
    ++i;  // past the closing quote
    if (i < text.size() && text[i] == ',') {
      ++i;
      continue;
    }
    if (i < text.size() && text[i] == '}') break;
    return *why = "expected ',' or '}' after a label", false;
  }
  *at = i + 1;
  return true;
}

inline bool PromValue(const std::string& text, double* value) {
  if (text == "NaN") return *value = std::nan(""), true;
  if (text == "+Inf") return *value = HUGE_VAL, true;
  if (text == "-Inf") return *value = -HUGE_VAL, true;
  if (text.empty()) return false;
  char* end = nullptr;
  *value = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

inline PromParse ParsePrometheusText(const std::string& text) {
  PromParse out;
  auto problem = [&](int line, const std::string& what) {
    out.problems.push_back("line " + std::to_string(line) + ": " + what);
  };
  if (text.empty()) out.problems.push_back("empty exposition");
  if (!text.empty() && text.back() != '\n') out.problems.push_back("does not end with a newline");
  std::set<std::string> helped, finished, series;
  std::string current;  // the family whose lines we are in
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty()) {
      problem(number, "blank line");
      continue;
    }
    if (line[0] == '#') {
      std::istringstream fields(line);
      std::string hash, keyword, name;
      fields >> hash >> keyword >> name;
      if (hash != "#" || (keyword != "HELP" && keyword != "TYPE")) {
        problem(number, "a comment that is neither HELP nor TYPE: " + line);
        continue;
      }
      if (!PromMetricName(name)) {
        problem(number, "bad metric name in " + keyword + ": '" + name + "'");
        continue;
      }
      if (name != current) {
        if (finished.count(name)) problem(number, "family " + name + " appears twice");
        if (!current.empty()) finished.insert(current);
        current = name;
      }
      std::string rest;
      std::getline(fields, rest);
      if (rest.size() < 2 || rest[0] != ' ') {
        problem(number, keyword + " of " + name + " has no text");
        continue;
      }
      rest = rest.substr(1);
      if (keyword == "HELP") {
        if (!helped.insert(name).second) problem(number, "second HELP for " + name);
        for (size_t i = 0; i < rest.size(); ++i) {
          if (rest[i] == '\\' &&
              (i + 1 >= rest.size() || (rest[i + 1] != '\\' && rest[i + 1] != 'n'))) {
            problem(number, "bad escape in HELP of " + name);
          }
          if (rest[i] == '\\') ++i;
        }
      } else {
        static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary",
                                                     "untyped"};
        if (!kTypes.count(rest)) problem(number, "unknown TYPE '" + rest + "' for " + name);
        if (out.types.count(name)) problem(number, "second TYPE for " + name);
        if (series.count(name)) problem(number, "TYPE of " + name + " after its samples");
        out.types[name] = rest;
      }
      continue;
    }
    // A sample: name[{labels}] value [timestamp]
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    PromSample sample;
    sample.name = line.substr(0, i);
    if (!PromMetricName(sample.name)) {
      problem(number, "bad metric name '" + sample.name + "'");
      continue;
    }
    if (i < line.size() && line[i] == '{') {
      std::string why;
      if (!PromLabels(line, &i, &sample.labels, &why)) {
        problem(number, why + ": " + line);
        continue;
      }
    }
    if (i >= line.size() || line[i] != ' ') {
      problem(number, "no space before the value: " + line);
      continue;
    }
    std::istringstream rest(line.substr(i + 1));
    std::string value_text, timestamp, extra;
    rest >> value_text >> timestamp >> extra;
    if (!PromValue(value_text, &sample.value)) problem(number, "bad value '" + value_text + "'");
    if (!extra.empty()) problem(number, "trailing text: " + line);
    if (!timestamp.empty()) {
      char* end = nullptr;
      std::strtoll(timestamp.c_str(), &end, 10);
      if (*end != '\0') problem(number, "bad timestamp '" + timestamp + "'");
    }
    if (sample.name != current) {
      problem(number, "sample of " + sample.name + " outside its family's block (after " +
                          (current.empty() ? "nothing" : current) + ")");
    }
    if (!out.types.count(sample.name)) problem(number, "no TYPE before " + sample.name);
    if (!helped.count(sample.name)) problem(number, "no HELP before " + sample.name);
    std::string id = sample.name;
    for (const auto& [k, v] : sample.labels) id += "\x1f" + k + "=" + v;
    if (!series.insert(id).second) problem(number, "series twice: " + line);
    series.insert(sample.name);
    const std::string type = out.types.count(sample.name) ? out.types[sample.name] : "";
    if (type == "counter") {
      if (sample.name.size() < 6 || sample.name.compare(sample.name.size() - 6, 6, "_total") != 0) {
        problem(number, "counter " + sample.name + " is not named *_total");
      }
      if (!(sample.value >= 0)) problem(number, "negative or NaN counter: " + line);
    }
    out.samples.push_back(std::move(sample));
  }
  return out;
}

}  // namespace aprfs_itest
