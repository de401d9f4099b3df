// Linux-only calls from glibc that the daemon's event loop needs: inotify(7) for the watch folder,
// signalfd(2) so SIGINT/SIGTERM arrive as a readable fd, flock(2) for the spool lock, syncfs(2).
#ifndef TILESPOOL_CLINUX_SHIM_H
#define TILESPOOL_CLINUX_SHIM_H
#define _GNU_SOURCE 1
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <signal.h>
#include <unistd.h>
#include <fcntl.h>
#include <errno.h>

static inline int tilespool_errno(void) { return errno; }
static inline int tilespool_syncfs(int fd) { return syncfs(fd); }
static inline int tilespool_open(const char *path, int flags, int mode) { return open(path, flags, (mode_t)mode); }
static inline int tilespool_openat(int dirfd, const char *path, int flags, int mode) { return openat(dirfd, path, flags, (mode_t)mode); }
#endif
