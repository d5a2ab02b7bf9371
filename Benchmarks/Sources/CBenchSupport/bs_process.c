/*
 * bs_process.c — for the cross-process scenarios' child: it must not outlive the benchmark that started it.
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
