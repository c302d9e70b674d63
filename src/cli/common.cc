#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "cli/cli.h"
#include "upfs/upfs.h"

namespace upfs::cli {

bool ParsedArgs::Has(const std::string& name) const {
  if (values.count(name)) return true;
  for (const std::string& f : flags) {
    if (f == name) return true;
  }
  return false;
}

std::optional<std::string> ParsedArgs::Value(const std::string& name) const {
  auto it = values.find(name);
  if (it == values.end()) return std::nullopt;
  return it->second;
}

ParsedArgs ParseArgs(const std::vector<std::string>& args, const std::vector<OptionSpec>& specs) {
  ParsedArgs out;
  bool options_done = false;
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& a = args[i];
    if (options_done || a.size() < 2 || a[0] != '-') {
      out.positional.push_back(a);
      continue;
    }
    if (a == "--") {
      options_done = true;
      continue;
    }
    if (a[1] != '-') throw UsageError("unknown option '" + a + "' (options are spelled --name)");
    std::string name = a.substr(2);
    std::optional<std::string> inline_value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const OptionSpec* spec = nullptr;
    for (const OptionSpec& s : specs) {
      if (s.name == name) spec = &s;
    }
    if (!spec) throw UsageError("unknown option '--" + name + "'");
    if (!spec->takes_value) {
      if (inline_value) throw UsageError("option '--" + name + "' takes no value");
      out.flags.push_back(name);
      continue;
    }
    if (inline_value) {
      out.values[name] = *inline_value;
    } else {
      if (i + 1 >= args.size()) throw UsageError("option '--" + name + "' needs a value");
      out.values[name] = args[++i];
    }
  }
  return out;
}

double ParseDouble(const std::string& s, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || errno != 0 || *end != '\0' || !std::isfinite(v)) {
    throw UsageError(what + ": '" + s + "' is not a number");
  }
  return v;
}

uint64_t ParseUint(const std::string& s, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  if (s.empty() || s[0] == '-' || s[0] == '+') {
    throw UsageError(what + ": '" + s + "' is not a non-negative integer");
  }
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') {
    throw UsageError(what + ": '" + s + "' is not a non-negative integer");
  }
  return v;
}

uint64_t ParseSize(const std::string& s, const std::string& what) {
  if (s.empty()) throw UsageError(what + ": empty");
  uint64_t mult = 1;
  std::string digits = s;
  switch (s.back()) {
    case 'k': case 'K': mult = 1ull << 10; break;
    case 'm': case 'M': mult = 1ull << 20; break;
    case 'g': case 'G': mult = 1ull << 30; break;
    default: break;
  }
  if (mult != 1) digits.pop_back();
  uint64_t v = ParseUint(digits, what);
  if (v > (1ull << 44) / mult) throw UsageError(what + ": too large");
  return v * mult;
}

std::vector<std::string> ExpandShortFlags(const std::vector<std::string>& args,
                                          const std::map<char, std::string>& short_to_long) {
  std::vector<std::string> out;
  bool options_done = false;
  for (const std::string& a : args) {
    if (options_done || a.size() < 2 || a[0] != '-' || a[1] == '-') {
      if (a == "--") options_done = true;
      out.push_back(a);
      continue;
    }
    for (size_t i = 1; i < a.size(); i++) {
      auto it = short_to_long.find(a[i]);
      if (it == short_to_long.end()) throw UsageError("unknown option '-" + std::string(1, a[i]) + "'");
      out.push_back("--" + it->second);
    }
  }
  return out;
}

std::string HumanBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    u++;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  }
  return buf;
}

std::string WithCommas(uint64_t v) {
  std::string digits = std::to_string(v);
  std::string out;
  int n = int(digits.size());
  for (int i = 0; i < n; i++) {
    out += digits[i];
    int left = n - 1 - i;
    if (left > 0 && left % 3 == 0) out += ',';
  }
  return out;
}

std::string FormatFixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string FormatTimeNs(uint64_t unix_ns) {
  time_t secs = time_t(unix_ns / 1000000000ull);
  unsigned ms = unsigned((unix_ns / 1000000ull) % 1000);
  struct tm tm;
  if (!gmtime_r(&secs, &tm)) return std::to_string(unix_ns) + " ns";
  char buf[64];
  size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03u UTC", ms);
  return buf;
}

int Fail(const std::string& verb, const std::string& message) {
  std::fprintf(stderr, "upfs %s: %s\n", verb.c_str(), message.c_str());
  return kExitFailure;
}

int Fail(const std::string& verb, const Status& st) { return Fail(verb, st.ToString()); }

std::string ApiError(const std::string& what) {
  int err = errno;
  std::string detail = upfs_last_error();
  std::string msg = what + ": ";
  if (!detail.empty()) {
    msg += detail;
    msg += " (";
    msg += std::strerror(err);
    msg += ")";
  } else {
    msg += std::strerror(err);
  }
  errno = err;
  return msg;
}

double NowSeconds() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

Progress::Progress(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled), tty_(isatty(STDERR_FILENO)),
      start_s_(NowSeconds()) {}

Progress::~Progress() {
  // An unfinished bar (an error path) still needs its line ended.
  if (enabled_ && !finished_ && last_draw_s_ >= 0 && tty_) std::fputc('\n', stderr);
}

void Progress::Update(uint64_t done) {
  if (!enabled_ || finished_) return;
  double now = NowSeconds();
  if (tty_) {
    if (last_draw_s_ >= 0 && now - last_draw_s_ < 0.1) return;
    last_draw_s_ = now;
    Draw(done, false);
  } else {
    int decile = total_ ? int(done * 10 / total_) : 10;
    if (decile <= last_decile_ || decile == 0) return;
    last_decile_ = decile;
    last_draw_s_ = now;
    Draw(done, false);
  }
}

void Progress::Finish() {
  if (!enabled_ || finished_) return;
  Draw(total_, true);
  finished_ = true;
}

void Progress::Draw(uint64_t done, bool final) {
  constexpr int kWidth = 30;
  double frac = total_ ? double(done) / double(total_) : 1.0;
  if (frac > 1) frac = 1;
  int filled = int(frac * kWidth);
  double elapsed = NowSeconds() - start_s_;
  double rate = elapsed > 0 ? double(done) / elapsed : 0;
  std::string bar(size_t(filled), '#');
  bar.append(size_t(kWidth - filled), '.');
  if (!tty_ && !final && last_decile_ == 10) return;  // the final line says it
  std::fprintf(stderr, "%s%s [%s] %3d%%  %s / %s  %s/s%s", tty_ ? "\r" : "", label_.c_str(),
               bar.c_str(), int(frac * 100), HumanBytes(done).c_str(),
               HumanBytes(total_).c_str(), HumanBytes(uint64_t(rate)).c_str(),
               tty_ ? (final ? "\033[K\n" : "\033[K") : "\n");
  std::fflush(stderr);
}

}  // namespace upfs::cli
