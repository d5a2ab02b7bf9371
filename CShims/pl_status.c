/*
 * pl_status.c — human-readable status descriptions, so that C callers and the Swift error type print
 * the same words, and the name of the system call behind a PL_ERR_SYSTEM.
 */
#include "pl_internal.h"

#include <errno.h>

/* Per thread, so that a failure is reported to the thread that saw it. */
static _Thread_local const char *pl_failed_call;

pl_status_t pl_system_failure(const char *call) {
    int saved = errno;
    pl_failed_call = call;
    errno = saved;
    return PL_ERR_SYSTEM;
}

const char *pl_last_system_call(void) { return pl_failed_call; }

const char *pl_status_describe(pl_status_t status) {
    switch (status) {
    case PL_OK: return "success";
    case PL_ERR_TIMED_OUT: return "timed out";
    case PL_ERR_INVALID_DEST: return "invalid destination: the port was destroyed";
    case PL_ERR_PORT_DIED: return "port died: destroyed while waiting";
    case PL_ERR_TOO_LARGE: return "message too large";
    case PL_ERR_INVALID_ARG: return "invalid argument";
    case PL_ERR_ALREADY_IN_SET: return "already a member of the set";
    case PL_ERR_NOT_IN_SET: return "not a member of the set";
    case PL_ERR_INVALID_NAME: return "invalid name: the port or set was destroyed, or the right was used up";
    case PL_ERR_NO_MEMORY: return "out of memory";
    case PL_ERR_SYSTEM: return "system call failed";
    case PL_ERR_WOULD_DEADLOCK: return "would deadlock: the calling thread is the one that must receive the reply";
    case PL_ERR_NO_SENDERS: return "no senders: no send right to the port is left, so nothing can arrive";
    case PL_ERR_NAME_IN_USE: return "name in use: a live process has checked in that service name";
    case PL_ERR_UNKNOWN_SERVICE: return "unknown service: no process has checked in that name";
    case PL_ERR_REFUSED: return "refused: the service's policy does not admit this process";
    case PL_ERR_NO_SPACE: return "no space: a connection's or service's limit is reached";
    }
    return "unknown status";
}
