/*
 * bs_process.c — for the cross-process scenarios' children: they must not outlive the benchmark that started
 * them; and a plain wrapper of fork(2) for the one scenario that forks clients.
 */
#define _GNU_SOURCE
#include "cbenchsupport.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

int bs_die_with_parent(int32_t parent) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return -1;
    return getppid() == (pid_t)parent ? 0 : -1; /* the parent died before the prctl: nothing will signal */
}

int32_t bs_fork(void) { return (int32_t)fork(); }
