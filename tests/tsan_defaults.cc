// ThreadSanitizer's defaults for the test programs (linked into each of
// them in a TSan build; TSAN_OPTIONS still overrides).
//
// die_after_fork=0: a process that closed a upfs file has a thread that
// ends its parked files (src/posix/file_registry.h), and the tests fork
// children that start threads, as real programs do. TSan refuses that by
// default, so six concurrency tests died at their fork when ctest ran
// without scripts/test.sh's TSAN_OPTIONS.
extern "C" const char* __tsan_default_options() { return "die_after_fork=0"; }
