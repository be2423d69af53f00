/* durable.c — durable file I/O shared by the dedup WAL and the StateTracker
 * (see durable_internal.h for the contracts). */
#define _GNU_SOURCE
#include "durable_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int lm_io_pwrite_full(int fd, const void *buf, size_t len, uint64_t off) {
  const uint8_t *p = (const uint8_t *)buf;
  while (len) {
    ssize_t w = pwrite(fd, p, len, (off_t)off);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (w == 0) { /* no progress: never loop forever */
      errno = EIO;
      return -1;
    }
    p += w;
    len -= (size_t)w;
    off += (uint64_t)w;
  }
  return 0;
}

ssize_t lm_io_pread_full(int fd, void *buf, size_t len, uint64_t off) {
  uint8_t *p = (uint8_t *)buf;
  size_t got = 0;
  while (got < len) {
    ssize_t r = pread(fd, p + got, len - got, (off_t)(off + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

void lm_io_close_quietly(int fd) {
  if (fd < 0) return;
  int e = errno;
  close(fd);
  errno = e;
}

int lm_io_fsync(int fd) {
  while (fsync(fd) != 0)
    if (errno != EINTR) return -1;
  return 0;
}

int lm_io_fdatasync(int fd) {
  while (fdatasync(fd) != 0)
    if (errno != EINTR) return -1;
  return 0;
}

int lm_io_fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  int r = lm_io_fsync(fd);
  lm_io_close_quietly(fd);
  return r;
}

char *lm_io_dirname(const char *path) {
  const char *slash = strrchr(path, '/');
  size_t len = !slash ? 1 : slash == path ? 1 : (size_t)(slash - path);
  char *dir = (char *)malloc(len + 1);
  if (!dir) {
    errno = ENOMEM;
    return NULL;
  }
  if (!slash)
    dir[0] = '.';
  else
    memcpy(dir, path, len);
  dir[len] = '\0';
  return dir;
}

int lm_io_replace_file(const char *tmp, const char *path, const char *dir, const struct iovec *parts, int nparts,
                       int *fd_out) {
  if (fd_out) *fd_out = -1;
  int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  uint64_t off = 0;
  int bad = 0;
  for (int i = 0; i < nparts && !bad; i++) {
    bad = lm_io_pwrite_full(fd, parts[i].iov_base, parts[i].iov_len, off) != 0;
    off += parts[i].iov_len;
  }
  bad = bad || lm_io_fsync(fd) != 0 || rename(tmp, path) != 0;
  if (!bad) {
    char *own = dir ? NULL : lm_io_dirname(path);
    bad = (!dir && !own) || lm_io_fsync_dir(dir ? dir : own) != 0;
    free(own);
  }
  if (bad || !fd_out) lm_io_close_quietly(fd);
  if (bad) {
    int e = errno;
    unlink(tmp); /* after a rename it names nothing (ENOENT, ignored) */
    errno = e;
    return -1;
  }
  if (fd_out) *fd_out = fd;
  return 0;
}
