// `upfs`: the command-line tool. Dispatches to one verb per source file.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "cli/cli.h"

#ifndef UPFS_VERSION
#define UPFS_VERSION "unknown"
#endif

namespace upfs::cli {

const std::vector<Verb>& Verbs() {
  static const std::vector<Verb> verbs = {
      {"mkfs", "make a new, empty pool: a whole namespace in one file", kMkfsHelp, RunMkfs},
      {"ls", "list the directories of a pool (POOL[:PATH])", kLsHelp, RunLs},
      {"cp", "copy files and trees into, out of and between pools (POOL:PATH)", kCpHelp, RunCp},
      {"info", "show the header, log, block usage, medium and shared state of a upfs file",
       kInfoHelp, RunInfo},
      {"fsck", "check every structure of a upfs file; exit 0 if clean, 1 if damaged", kFsckHelp,
       RunFsck},
      {"convert", "copy a plain file into a new upfs file, or a upfs file into a plain file",
       kConvertHelp, RunConvert},
      {"bench", "benchmark upfs against the kernel file system on the same medium", kBenchHelp,
       RunBench},
      {"rm", "remove upfs files together with their shared state in /dev/shm", kRmHelp, RunRm},
      {"sweep", "remove shared state in /dev/shm that no process uses (left by killed ones)",
       kSweepHelp, RunSweep},
      {"run", "run a program with the LD_PRELOAD library: its new files under DIR are upfs",
       kRunHelp, RunRun},
  };
  return verbs;
}

const Verb* FindVerb(const std::string& name) {
  for (const Verb& v : Verbs()) {
    if (name == v.name) return &v;
  }
  return nullptr;
}

namespace {

void PrintMainHelp(FILE* out) {
  std::fprintf(out,
               "upfs %s - a userspace file system for persistent memory\n"
               "\n"
               "usage: upfs VERB [ARGS...]\n"
               "       upfs help VERB | upfs VERB --help\n"
               "       upfs --help | --version\n"
               "\n"
               "verbs:\n",
               UPFS_VERSION);
  for (const Verb& v : Verbs()) std::fprintf(out, "  %-9s %s\n", v.name, v.summary);
  std::fprintf(out,
               "\n"
               "Exit status: 0 success, 1 failure (or a damaged file for fsck), 2 bad usage.\n");
}

// The first line of a verb's help is its usage line.
std::string UsageLine(const Verb& v) {
  const char* nl = std::strchr(v.help, '\n');
  return nl ? std::string(v.help, nl) : std::string(v.help);
}

int UsageFailure(const std::string& message) {
  std::fprintf(stderr, "upfs: %s\nTry 'upfs --help'.\n", message.c_str());
  return kExitUsage;
}

}  // namespace

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    PrintMainHelp(stderr);
    return kExitUsage;
  }
  const std::string& first = args[0];
  if (first == "--help" || first == "-h") {
    PrintMainHelp(stdout);
    return kExitOk;
  }
  if (first == "--version") {
    std::printf("upfs %s\n", UPFS_VERSION);
    return kExitOk;
  }
  if (first == "help") {
    if (args.size() == 1) {
      PrintMainHelp(stdout);
      return kExitOk;
    }
    if (args.size() > 2) return UsageFailure("help takes at most one verb");
    const Verb* v = FindVerb(args[1]);
    if (!v) return UsageFailure("unknown verb '" + args[1] + "'");
    std::fputs(v->help, stdout);
    return kExitOk;
  }
  const Verb* v = FindVerb(first);
  if (!v) return UsageFailure("unknown verb '" + first + "'");
  std::vector<std::string> rest(args.begin() + 1, args.end());
  for (const std::string& a : rest) {
    if (a == "--") break;
    if (a == "--help" || a == "-h") {
      std::fputs(v->help, stdout);
      return kExitOk;
    }
  }
  try {
    return v->run(rest);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "upfs %s: %s\n%s\nTry 'upfs help %s'.\n", v->name, e.what(),
                 UsageLine(*v).c_str(), v->name);
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "upfs %s: %s\n", v->name, e.what());
    return kExitFailure;
  }
}

}  // namespace upfs::cli

int main(int argc, char** argv) { return upfs::cli::Main(argc, argv); }
