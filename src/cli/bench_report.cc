// upfs bench: the table of results, and their JSON.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "cli/bench_internal.h"
#include "upfs/upfs.h"

namespace upfs::cli::bench {

// Two threads' rate against one thread's in the same rounds: the median of
// the rounds' ratios (0 if the workload measured none).
double Scaling(const std::vector<double>& two, const std::vector<double>& one) {
  std::vector<double> ratios;
  for (size_t i = 0; i < two.size() && i < one.size(); i++)
    if (one[i] > 0) ratios.push_back(two[i] / one[i]);
  return ratios.empty() ? 0 : Median(ratios);
}

double Spread(const std::vector<double>& v) {
  if (v.empty()) return 0;
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  double m = Median(v);
  return m > 0 ? (*hi - *lo) / 2 / m * 100 : 0;
}

void Bench::PrintTable(const std::vector<Result>& results) const {
  int w = 18;  // the pool workloads' names are longer
  for (const Result& r : results) w = std::max(w, int(r.name.size()));
  std::printf("%-*s %14s %6s %14s %6s %12s %8s\n", w, "workload", "upfs ops/s", "+-%",
              "kernel ops/s", "+-%", "upfs/kernel", "pm B/B");
  bool any_written = false;
  for (const Result& r : results) {
    double u = Median(r.upfs_ops), k = Median(r.kernel_ops);
    char amp[32] = "-";
    if (r.pm_bytes_per_byte) std::snprintf(amp, sizeof amp, "%.2f", *r.pm_bytes_per_byte);
    any_written = any_written || r.pm_bytes_per_byte;
    std::printf("%-*s %14s %6.1f %14s %6.1f %11.2fx %8s\n", w, r.name.c_str(),
                WithCommas(uint64_t(u)).c_str(), Spread(r.upfs_ops),
                WithCommas(uint64_t(k)).c_str(), Spread(r.kernel_ops), k > 0 ? u / k : 0.0, amp);
  }
  for (const Result& r : results) {
    if (r.upfs_one_thread.empty()) continue;
    std::printf("%-*s two threads made %.2fx one thread's creates on upfs, %.2fx on the kernel;\n"
                "%-*s %.2fx on upfs with each thread in a pool of its own (nothing shared)\n",
                w, "", Scaling(r.upfs_ops, r.upfs_one_thread), Scaling(r.kernel_ops, r.kernel_one_thread), w,
                "", Scaling(r.upfs_two_pools, r.upfs_one_thread));
  }
  std::printf("\nops/s: median over %d rounds of %.2f s per side; +-%%: half the range of the "
              "rounds, in %% of the median.\n",
              cfg_.rounds, cfg_.seconds);
  if (any_written) {
    std::printf("pm B/B: bytes upfs wrote back to the medium (cache lines of non-temporal\n"
                "copies, and flushed lines stored to since) per byte the workload wrote;\n"
                "one untimed round with the persistence primitives counted.\n");
  }
  // Per-file workloads of names: in the first table a new user sees, say
  // why they are below 1x.
  if (std::any_of(results.begin(), results.end(), [](const Result& r) {
        return r.kind == Kind::kCreate || r.kind == Kind::kOpenClose;
      })) {
    std::printf("create-512, open-close: a per-file upfs file is a host file, so the kernel\n"
                "still creates and opens every name, and upfs adds its own setup; a pool\n"
                "serves names in userspace (upfs bench --pool).\n");
  }
  if (std::any_of(results.begin(), results.end(), [](const Result& r) { return !r.upfs_one_thread.empty(); })) {
    std::printf("pool-create-2t: one thread alone creates a batch of as many files between\n"
                "the two threads' batches; the median of the rounds' ratios. In a pool of its\n"
                "own each thread shares no log, index, lock or directory with the other:\n"
                "what this machine allows two threads of one process.\n");
  }
  if (cfg_.pool) {
    std::printf("pool-*: upfs in a pool on %s, kernel in a directory there; namespace operations\n"
                "are not followed by an fsync of the directory on either side.\n",
                MediumKindName(medium_));
  }
  if (medium_ == MediumKind::kPageCache) {
    std::printf("medium is a page-cache file system: both sides fsync after every write.\n");
  } else {
    std::printf("kernel writes are each followed by fsync(2); upfs writes are durable on "
                "return (%s).\n",
                MediumKindName(medium_));
  }
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

Status Bench::WriteJson(const std::vector<Result>& results) const {
  std::string text = "[\n";
  for (size_t i = 0; i < results.size(); i++) {
    const Result& r = results[i];
    double u = Median(r.upfs_ops), k = Median(r.kernel_ops);
    char amp[64] = "";
    if (r.pm_bytes_per_byte)
      std::snprintf(amp, sizeof amp, ", \"pm_bytes_per_byte\": %.4f", *r.pm_bytes_per_byte);
    char scaling[256] = "";
    if (!r.upfs_one_thread.empty())
      std::snprintf(scaling, sizeof scaling,
                    ", \"upfs_one_thread_ops\": %.1f, \"kernel_one_thread_ops\": %.1f, "
                    "\"upfs_scaling\": %.4f, \"kernel_scaling\": %.4f, \"upfs_two_pools_scaling\": %.4f",
                    Median(r.upfs_one_thread), Median(r.kernel_one_thread), Scaling(r.upfs_ops, r.upfs_one_thread),
                    Scaling(r.kernel_ops, r.kernel_one_thread), Scaling(r.upfs_two_pools, r.upfs_one_thread));
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "  {\"name\": %s, \"upfs_ops\": %.1f, \"kernel_ops\": %.1f, \"ratio\": %.4f%s%s}%s\n",
                  JsonString(r.name).c_str(), u, k, k > 0 ? u / k : 0.0, amp, scaling,
                  i + 1 < results.size() ? "," : "");
    text += buf;
  }
  text += "]\n";
  FILE* f = std::fopen(cfg_.json->c_str(), "w");
  if (!f) return Status::FromErrno("open " + *cfg_.json);
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return Status::FromErrno("write " + *cfg_.json);
  return Status::OK();
}

}  // namespace upfs::cli::bench
