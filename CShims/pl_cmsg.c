/*
 * pl_cmsg.c — reading the control messages that come beside a packet: descriptors (SCM_RIGHTS) and, while a
 * client waits for a service's hello, the kernel's word on who sent it (SCM_CREDENTIALS, SCM_PIDFD).
 *
 * Why the client asks the kernel at all: SO_PEERCRED on a connected client socket names the process that
 * called listen(), which under socket activation is the service manager, not the service. Credentials passed
 * with a packet are those of the process that sent it, checked by the kernel.
 *
 * Every control message's length is checked before its data is read; whatever does not fit the caller's
 * arrays is closed, never leaked.
 */
#define _GNU_SOURCE /* struct ucred, SCM_CREDENTIALS */
#include "pl_remote.h"

#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef SCM_PIDFD
#define SCM_PIDFD 0x04
#endif
#ifndef SO_PASSPIDFD
#define SO_PASSPIDFD 76
#endif

void pl_cmsg_collect(struct msghdr *msg, int *fds, uint32_t *fd_count, bool *too_many, pl_sender_t *sender,
                     bool *has_sender) {
    *fd_count = 0;
    *too_many = false;
    *has_sender = false;
    for (struct cmsghdr *cmsg = CMSG_FIRSTHDR(msg); cmsg != NULL; cmsg = CMSG_NXTHDR(msg, cmsg)) {
        if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_len < CMSG_LEN(0)) continue;
        const unsigned char *data = CMSG_DATA(cmsg);
        size_t size = cmsg->cmsg_len - CMSG_LEN(0);
        if (cmsg->cmsg_type == SCM_RIGHTS) {
            for (size_t k = 0; k + sizeof(int) <= size; k += sizeof(int)) {
                int fd;
                memcpy(&fd, data + k, sizeof fd);
                if (*fd_count < PL_WIRE_MAX_ATTACHMENTS) {
                    fds[(*fd_count)++] = fd;
                } else {
                    close(fd);
                    *too_many = true;
                }
            }
        } else if (cmsg->cmsg_type == SCM_CREDENTIALS && size >= sizeof(struct ucred)) {
            struct ucred credentials;
            memcpy(&credentials, data, sizeof credentials);
            sender->pid = credentials.pid;
            sender->uid = credentials.uid;
            sender->gid = credentials.gid;
            *has_sender = true;
        } else if (cmsg->cmsg_type == SCM_PIDFD && size >= sizeof(int)) {
            int pidfd;
            memcpy(&pidfd, data, sizeof pidfd);
            if (pidfd >= 0) {
                struct stat st;
                if (fstat(pidfd, &st) == 0) sender->process_id = (uint64_t)st.st_ino;
                close(pidfd);
            }
        }
    }
}

void pl_cmsg_ask_credentials(int fd, bool on) {
    int value = on ? 1 : 0;
    setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &value, sizeof value);
    setsockopt(fd, SOL_SOCKET, SO_PASSPIDFD, &value, sizeof value); /* refused by kernels before 6.5: no matter */
}
