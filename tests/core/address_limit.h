// Helpers for tests that bound a child process's address space (RLIMIT_AS) to prove that
// a function does not reserve memory it should not (tests/core/test_clean.cpp,
// test_pipeline.cpp).
#pragma once

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

extern "C" {
#include "luminamoon/batch.h"
}

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

// The oversized-document check shared by the stages: a batch of "small" (5 bytes) and 64 MiB
// of 'a'; `run(&in, &r)` runs the stage under test (set up with max_doc_bytes = 1024) and
// returns its lm_status.  In a child whose address space leaves ~96 MiB beyond the input (the
// result reserves about the input's size up front), the run must succeed with document 0 kept
// and document 1 TOO_LARGE: nothing was reserved for the big one.  Then the same answer in this
// process, without a limit.  Under a sanitizer (LM_TEST_SANITIZED) the test is skipped instead.
template <typename Run>
void expect_oversized_document_refused_without_reserving(Run run) {
#ifdef LM_TEST_SANITIZED
  (void)run;
  GTEST_SKIP() << "RLIMIT_AS cannot be used under a sanitizer";
#else
  const size_t big = (size_t)64 << 20;
  std::vector<int64_t> offs{0, 5, (int64_t)(5 + big)};
  std::string data = "small" + std::string(big, 'a');
  lm_batch_result r;
  lm_batch_result_init(&r);
  lm_docs in{offs.data(), (const uint8_t *)data.data(), 2, data.size()};
  const int code = run_with_address_limit(data.size(), (size_t)96 << 20, [&] {
    lm_status s = run(&in, &r);
    if (s != LM_OK) return 10 + (int)s;
    if (r.n_out != 1 || r.reasons[0] != LM_REASON_KEPT || r.reasons[1] != LM_REASON_TOO_LARGE) return 5;
    return 0;
  });
  EXPECT_EQ(code, 0) << "child exit code (10 + lm_status on an error; 12 = LM_ENOMEM)";
  ASSERT_EQ(run(&in, &r), LM_OK);
  EXPECT_EQ(r.reasons[1], LM_REASON_TOO_LARGE);
  lm_batch_result_free(&r);
#endif
}
