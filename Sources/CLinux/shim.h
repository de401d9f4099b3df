// Linux-only calls from glibc that the daemon's event loop needs: inotify(7) for the watch folder,
// signalfd(2) so SIGINT/SIGTERM arrive as a readable fd, eventfd(2) for the durability writer's
// wake-ups, flock(2) for the spool lock, syncfs(2).
#ifndef TILESPOOL_CLINUX_SHIM_H
#define TILESPOOL_CLINUX_SHIM_H
#define _GNU_SOURCE 1
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/eventfd.h>
#include <signal.h>
#include <unistd.h>
#include <fcntl.h>
#include <errno.h>
#include <stdio.h>

static inline int tilespool_errno(void) { return errno; }
// mallopt(3) M_ARENA_MAX: at most `n` malloc arenas (glibc makes up to 8 per core, each keeping
// what its threads freed; a macro Swift may not import).
#include <malloc.h>
static inline int tilespool_limit_malloc_arenas(int n) { return mallopt(M_ARENA_MAX, n); }
// posix_spawn_file_actions_addclosefrom_np(3) (glibc 2.34+): the child keeps no descriptor from `from` up.
// Declared here with a void * (spawn.h declares it only under _GNU_SOURCE, and including spawn.h in
// this module would clash with the other modules' view of <sys/select.h>); `a` is a
// posix_spawn_file_actions_t *.
extern int posix_spawn_file_actions_addclosefrom_np(void *a, int from);
static inline int tilespool_spawn_closefrom(void *a, int from) { return posix_spawn_file_actions_addclosefrom_np(a, from); }
static inline int tilespool_syncfs(int fd) { return syncfs(fd); }
/* 1 when signal `sig` is ignored (SIG_IGN) in this process, as `nohup` leaves SIGHUP. */
static inline int tilespool_signal_is_ignored(int sig) {
    struct sigaction old;
    return sigaction(sig, NULL, &old) == 0 && old.sa_handler == SIG_IGN;
}
// renameat2(2) (glibc 2.28+) and its flags, which are macros Swift may not import.
static inline int tilespool_renameat2(int olddir, const char *oldname, int newdir, const char *newname, unsigned int flags) {
    return renameat2(olddir, oldname, newdir, newname, flags);
}
static inline unsigned int tilespool_rename_noreplace(void) { return RENAME_NOREPLACE; }
static inline unsigned int tilespool_rename_exchange(void) { return RENAME_EXCHANGE; }
// copy_file_range(2) from the current offsets of both fds: exports append temp files in the kernel.
static inline ssize_t tilespool_copy_file_range(int in, int out, size_t len) { return copy_file_range(in, NULL, out, NULL, len, 0); }
// copy_file_range(2) from `*in_off` in `in` (advanced by what was copied) to the current offset of
// `out`: a site export copies one object out of a pack file (the kernel copies, or shares extents).
static inline ssize_t tilespool_copy_file_range_from(int in, long long *in_off, int out, size_t len) {
    __off64_t off = (__off64_t)*in_off;
    ssize_t r = copy_file_range(in, &off, out, NULL, len, 0);
    *in_off = (long long)off;
    return r;
}
static inline int tilespool_open(const char *path, int flags, int mode) { return open(path, flags, (mode_t)mode); }
static inline int tilespool_openat(int dirfd, const char *path, int flags, int mode) { return openat(dirfd, path, flags, (mode_t)mode); }
// open(2) O_TMPFILE: an unnamed regular file in folder `dir` (relative to `dirfd`), write-only, to be
// given a name by linkat(2). O_TMPFILE is a macro Swift does not import (it includes O_DIRECTORY).
static inline int tilespool_open_tmpfile(int dirfd, const char *dir, int mode) { return openat(dirfd, dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, (mode_t)mode); }
// An unnamed scratch file in folder `dir`, read-write, private (0600): it never has a name, so
// nothing can be put in its place and nothing is left after a crash.
static inline int tilespool_open_scratch(const char *dir) { return open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, (mode_t)0600); }

/// Whether another process has `path` open for writing, asked by taking a read lease (fcntl(2)
/// F_SETLEASE, which fails with EAGAIN while any writer holds the file open) and dropping it at
/// once. Returns 1 when a writer has it open, 0 when none does, -1 when leases are not available
/// here (not the owner and no CAP_LEASE, or a filesystem without leases).
static inline int tilespool_is_open_for_writing(const char *path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    int r = fcntl(fd, F_SETLEASE, F_RDLCK);
    int answer = r == 0 ? 0 : (errno == EAGAIN ? 1 : -1);
    if (r == 0) fcntl(fd, F_SETLEASE, F_UNLCK);
    close(fd);
    return answer;
}
#endif
