/*
 * pl_identity.c — who is at the other end of a Unix socket, and who may be.
 *
 * SO_PEERCRED gives the pid, uid and gid the peer had when it connected (or listened). A pid can be reused once
 * its process is gone, so where the kernel has SO_PEERPIDFD (Linux 6.5) the peer's pidfd is read too: its
 * inode number in pidfs names that one process for as long as the system runs (Linux 6.9). The pidfd itself is
 * closed at once; a connection keeps no descriptor for it.
 */
#define _GNU_SOURCE /* struct ucred */
#include "pl_remote.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

pl_status_t pl_identity_of_peer(int fd, pl_sender_t *out) {
    struct ucred credentials;
    socklen_t length = sizeof credentials;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
        return pl_system_failure("getsockopt(SO_PEERCRED)");
    }
    *out = (pl_sender_t){ .pid = credentials.pid, .uid = credentials.uid, .gid = credentials.gid };
    int pidfd = -1;
    length = sizeof pidfd;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &length) == 0 && pidfd >= 0) {
        struct stat st;
        if (fstat(pidfd, &st) == 0) out->process_id = (uint64_t)st.st_ino;
        close(pidfd);
    }
    return PL_OK;
}

uint64_t pl_process_unique_id(int32_t pid) {
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) return 0;
    struct stat st;
    uint64_t id = fstat(pidfd, &st) == 0 ? (uint64_t)st.st_ino : 0;
    close(pidfd);
    return id;
}

pl_policy_t pl_policy_default(void) {
    return (pl_policy_t){ .allow_same_user = 1, .allow_root = 1 };
}

int pl_policy_admits(const pl_policy_t *policy, uint32_t uid, uint32_t gid) {
    if (policy->allow_anyone) return 1;
    if (policy->allow_same_user && uid == (uint32_t)geteuid()) return 1;
    if (policy->allow_root && uid == 0) return 1;
    for (uint32_t i = 0; i < policy->uid_count && i < 16; i++) {
        if (policy->uids[i] == uid) return 1;
    }
    for (uint32_t i = 0; i < policy->gid_count && i < 16; i++) {
        if (policy->gids[i] == gid) return 1;
    }
    return 0;
}
