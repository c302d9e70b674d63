// UPFS_HOT_TLS: for a thread_local that every call reads. The shared
// library's default TLS model reaches a variable through a call to
// __tls_get_addr; the initial-exec model is one %fs-relative access (five
// such calls were 7% of a pool stat's samples). Safe where the library is
// loaded at start (linked, or LD_PRELOAD) and, when it is dlopen()ed later,
// as long as these variables fit in glibc's surplus of static TLS: keep
// them to a few dozen bytes (the large per-thread buffers keep the default
// model).
#pragma once

#define UPFS_HOT_TLS __attribute__((tls_model("initial-exec")))
