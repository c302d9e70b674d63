// Shared pieces of the `upfs` command-line tool: the verb table, a small
// argument parser, number formatting and a progress bar.
//
// Every verb is a function `int RunX(const std::vector<std::string>& args)`
// that returns the process exit code: 0 success, 1 a runtime failure (the
// message is printed by the verb), 2 bad usage (thrown as UsageError and
// printed by the dispatcher together with the verb's usage line).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/status.h"

namespace upfs {
struct FileReport;
}

namespace upfs::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// Bad command-line arguments. Caught by the dispatcher: message + exit 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Verb {
  const char* name;
  const char* summary;  // one line, for `upfs --help`
  const char* help;     // full text, for `upfs help VERB` / `upfs VERB --help`
  int (*run)(const std::vector<std::string>& args);
};

// The verb table (main.cc).
const std::vector<Verb>& Verbs();
const Verb* FindVerb(const std::string& name);

int RunInfo(const std::vector<std::string>& args);
int RunFsck(const std::vector<std::string>& args);
// The pool forms of info and fsck (pool_inspect.cc).
bool IsPoolFile(const std::string& path);
int RunPoolInfo(const std::string& path);
int RunPoolFsck(const std::string& path);
// An info line ("key: value") and a block count with its size (info.cc).
void Row(const char* key, const std::string& value);
std::string Blocks(uint64_t n);
int RunConvert(const std::vector<std::string>& args);
int RunBench(const std::vector<std::string>& args);
int RunRm(const std::vector<std::string>& args);
int RunSweep(const std::vector<std::string>& args);
int RunRun(const std::vector<std::string>& args);
int RunMkfs(const std::vector<std::string>& args);
int RunLs(const std::vector<std::string>& args);
int RunCp(const std::vector<std::string>& args);

extern const char kInfoHelp[];
extern const char kFsckHelp[];
extern const char kConvertHelp[];
extern const char kBenchHelp[];
extern const char kRmHelp[];
extern const char kSweepHelp[];
extern const char kRunHelp[];
extern const char kMkfsHelp[];
extern const char kLsHelp[];
extern const char kCpHelp[];

// ---------------------------------------------------------------------------
// Argument parsing. Options are long (`--name`), take a value either as
// `--name=value` or as the next argument, and may appear anywhere among the
// positional arguments; `--` ends option parsing.
struct OptionSpec {
  std::string name;  // without the leading dashes
  bool takes_value = false;
};

struct ParsedArgs {
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;  // options with a value
  std::vector<std::string> flags;             // options without a value, in order

  bool Has(const std::string& name) const;
  std::optional<std::string> Value(const std::string& name) const;
};

// Throws UsageError on an unknown option or a missing value.
ParsedArgs ParseArgs(const std::vector<std::string>& args, const std::vector<OptionSpec>& specs);

// Strict number parsing for option values; throw UsageError naming `what`.
double ParseDouble(const std::string& s, const std::string& what);
uint64_t ParseUint(const std::string& s, const std::string& what);
// A byte count with an optional suffix K, M or G (powers of 1024).
uint64_t ParseSize(const std::string& s, const std::string& what);

// The pool verbs mimic ls(1) and cp(1), whose users type `-lR` and `-r`:
// this rewrites such bundles into the long options ParseArgs knows
// (`short_to_long` maps 'l' to "long"); other arguments pass unchanged.
std::vector<std::string> ExpandShortFlags(const std::vector<std::string>& args,
                                          const std::map<char, std::string>& short_to_long);

// ---------------------------------------------------------------------------
// Formatting.
std::string HumanBytes(uint64_t bytes);        // "1.00 GiB"
std::string WithCommas(uint64_t v);             // "1,234,567"
std::string FormatFixed(double v, int digits);  // "%.*f"
std::string FormatTimeNs(uint64_t unix_ns);     // "2024-05-01 12:34:56.789 UTC"

// Prints "upfs VERB: message" to stderr and returns kExitFailure.
int Fail(const std::string& verb, const std::string& message);
int Fail(const std::string& verb, const Status& st);

// The message of the last C API failure: upfs_last_error() plus strerror.
std::string ApiError(const std::string& what);

// ---------------------------------------------------------------------------
// A progress bar on stderr. Redraws in place on a terminal; on anything else
// (only when asked for with --progress) prints a line every 10%.
class Progress {
 public:
  Progress(std::string label, uint64_t total, bool enabled);
  ~Progress();
  void Update(uint64_t done);
  void Finish();  // draws 100% and ends the line

 private:
  void Draw(uint64_t done, bool final);

  std::string label_;
  uint64_t total_;
  bool enabled_;
  bool tty_;
  bool finished_ = false;
  double start_s_;
  double last_draw_s_ = -1;
  int last_decile_ = -1;
};

// The shared-state and leaked-block lines of `info` (also used by fsck).
void PrintSharedState(const FileReport& r);

// Monotonic seconds.
double NowSeconds();

}  // namespace upfs::cli
