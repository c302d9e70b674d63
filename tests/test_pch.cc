// The one source of upfs_test_pch, the program that owns the tests' shared
// precompiled header (GoogleTest's; tests/CMakeLists.txt). It is never
// built: every test program reuses the header instead of parsing it again.
