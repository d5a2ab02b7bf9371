/*
 * pl_signal.c — signals as a readable descriptor, for run loops that handle SIGINT and SIGTERM as a source.
 *
 * Why this shim exists: Swift's Glibc module does not export <sys/signalfd.h>, and a signal handler cannot
 * safely do anything a daemon wants at shutdown (no locks, no allocation, no printing). The classic answer is
 * to block the signals in every thread and read them from a signalfd, which a port set watches like any
 * descriptor member (CF programs do the same with a dispatch source or a self-pipe in a CFFileDescriptor).
 * Blocking is here too so that one call builds the sigset and the caller never handles a sigset_t.
 */
#include "portloop.h"

#include <errno.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

/* Builds a sigset from a list of signal numbers; -1 with EINVAL for a number that is not a signal. */
static int pl_sigset_make(const int *signals, size_t count, sigset_t *set) {
    sigemptyset(set);
    for (size_t i = 0; i < count; i++) {
        if (sigaddset(set, signals[i]) != 0) return -1;
    }
    return 0;
}

int pl_signals_block(const int *signals, size_t count) {
    sigset_t set;
    if (signals == NULL && count > 0) return EINVAL;
    if (pl_sigset_make(signals, count, &set) != 0) return errno;
    return pthread_sigmask(SIG_BLOCK, &set, NULL);
}

int pl_signalfd_open(const int *signals, size_t count) {
    sigset_t set;
    if (signals == NULL || count == 0) { errno = EINVAL; return -1; }
    if (pl_sigset_make(signals, count, &set) != 0) return -1;
    return signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}

int pl_signalfd_read(int fd) {
    struct signalfd_siginfo info;
    ssize_t n;
    do { n = read(fd, &info, sizeof info); } while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof info) return (int)info.ssi_signo;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (n >= 0) errno = EIO; /* a short read: the kernel never does that for signalfd */
    return -1;
}
