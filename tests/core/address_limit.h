// Helpers for tests that bound a child process's address space (RLIMIT_AS) to prove that
// a function does not reserve memory it should not (tests/core/test_clean.cpp,
// test_pipeline.cpp).
#pragma once

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>

// The sanitizers reserve huge address ranges: RLIMIT_AS cannot be used under them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LM_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LM_TEST_SANITIZED 1
#endif
#endif

// Fork; in the child, limit the address space to its current size + `extra` + `headroom` bytes
// and _exit(fn()).  Returns the child's exit code (3: /proc/self/statm unreadable, 4: setrlimit
// failed), or -1 when fork / waitpid failed or the child did not exit normally.
template <typename Fn>
int run_with_address_limit(size_t extra, size_t headroom, Fn fn) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    long pages = 0, page = sysconf(_SC_PAGESIZE);
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld", &pages) != 1) _exit(3);
    fclose(f);
    rlim_t lim = (rlim_t)pages * (rlim_t)page + (rlim_t)extra + (rlim_t)headroom;
    struct rlimit rl = {lim, lim};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(4);
    _exit(fn());
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}
