// What starting and watching a child process needs from glibc and Linux that Glibc's
// Swift module leaves out (ChildProcess in the core).
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

// glibc 2.34+, declared in spawn.h under _GNU_SOURCE only: the child closes every
// descriptor from `from` on, whichever thread of the parent opened it and when.
extern int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *actions, int from);

// glibc 2.29+, under _GNU_SOURCE only: the child's working directory.
extern int posix_spawn_file_actions_addchdir_np(posix_spawn_file_actions_t *actions, const char *path);

// Declared in unistd.h under _GNU_SOURCE only: a pipe whose ends are close-on-exec from
// the start, so no program another thread starts meanwhile inherits them.
extern int pipe2(int pipefd[2], int flags);

// Linux 5.3+: a descriptor that becomes readable when the process exits (pidfd_open(2)).
// No glibc wrapper before 2.36's sys/pidfd.h, and syscall(2) is variadic: Swift can't
// call it. 434 is pidfd_open's number on every architecture.
static inline int fieldhal_pidfd_open(pid_t pid) {
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    return (int)syscall(434, pid, 0);
#endif
}
