/*
 * pl_ool.c — out-of-line payloads: Mach's out-of-line memory, as a sealed memfd.
 *
 * Above a threshold, a payload bound for another process is not cut into 64 KiB frames: the sender writes it
 * into a memfd, seals it (no write, no resize, no more seals), and passes the descriptor beside one MESSAGE
 * frame. The receiver maps it read-only. The seals are what make this safe: a sender cannot change, shrink or
 * grow the bytes after the receiver has checked them (so reading the mapping cannot fault on a truncated file),
 * and the receiver refuses a descriptor that lacks any of them, as it refuses any malformed frame.
 *
 * Payload memory handed over whole (pl_payload_t) is either malloc'd or such a mapping; pl_payload_free knows
 * which.
 */
#define _GNU_SOURCE /* memfd_create, F_ADD_SEALS */
#include "pl_remote.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PL_OOL_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)

static _Atomic uint32_t pl_ool_threshold_bytes = PL_OOL_THRESHOLD_DEFAULT;

uint32_t pl_out_of_line_threshold(void) {
    return atomic_load_explicit(&pl_ool_threshold_bytes, memory_order_relaxed);
}

void pl_set_out_of_line_threshold(uint32_t bytes) {
    /* A payload never goes out of line below a page: a memfd costs more than the frames it would save. */
    if (bytes < PL_OOL_THRESHOLD_MIN) bytes = PL_OOL_THRESHOLD_MIN;
    atomic_store_explicit(&pl_ool_threshold_bytes, bytes, memory_order_relaxed);
}

pl_status_t pl_ool_make(const void *payload, size_t size, int *out_fd) {
    *out_fd = -1;
    int fd = memfd_create("portloop-payload", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return pl_system_failure("memfd_create");
    /* pwrite, never a shared writable mapping: F_SEAL_WRITE is refused while one exists. */
    const uint8_t *bytes = payload;
    size_t done = 0;
    while (done < size) {
        ssize_t n = pwrite(fd, bytes + done, size - done, (off_t)done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            pl_status_t status = pl_system_failure("pwrite(memfd)");
            int saved = errno;
            close(fd);
            errno = saved;
            return status;
        }
        done += (size_t)n;
    }
    if (fcntl(fd, F_ADD_SEALS, PL_OOL_SEALS) != 0) {
        pl_status_t status = pl_system_failure("fcntl(F_ADD_SEALS)");
        int saved = errno;
        close(fd);
        errno = saved;
        return status;
    }
    *out_fd = fd;
    return PL_OK;
}

bool pl_ool_check(int fd, uint32_t size, const char **reason) {
    /* F_GET_SEALS fails on a file that is not shared memory; one made without MFD_ALLOW_SEALING says F_SEAL_SEAL
     * alone. Only a memfd can carry all four. */
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0) { *reason = "out of line: the descriptor is not a memfd"; return false; }
    if ((seals & PL_OOL_SEALS) != PL_OOL_SEALS) {
        *reason = "out of line: the memfd is not sealed against writing and resizing";
        return false;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { *reason = "out of line: the descriptor is not a memfd"; return false; }
    if ((uint64_t)st.st_size != size) { *reason = "out of line: the memfd's size differs from the message's"; return false; }
    return true;
}

void *pl_ool_map(int fd, uint32_t size, bool *out_mapped, const char **reason) {
    /* Populated at once: one call instead of a fault per page when the receiver reads it. */
    void *map = mmap(NULL, size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (map != MAP_FAILED) {
        *out_mapped = true;
        return map;
    }
    /* No address space or mapping left (ENOMEM, the map count limit): read it into the heap instead. */
    *out_mapped = false;
    uint8_t *copy = malloc(size);
    if (copy == NULL) { *reason = "out of memory for a message"; return NULL; }
    size_t done = 0;
    while (done < size) {
        ssize_t n = pread(fd, copy + done, size - done, (off_t)done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            free(copy);
            *reason = "out of line: the memfd could not be read";
            return NULL;
        }
        done += (size_t)n;
    }
    return copy;
}

void pl_ool_release(void *bytes, size_t size, bool mapped) {
    if (bytes == NULL) return;
    if (mapped) munmap(bytes, size); else pl_payload_cache_give(bytes);
}

void pl_payload_free(pl_payload_t *payload) {
    if (payload == NULL) return;
    pl_ool_release(payload->base, payload->size, payload->mapped != 0);
    *payload = (pl_payload_t){ 0 };
}

pl_status_t pl_payload_allocate(size_t size, pl_payload_t *out) {
    if (out == NULL || size > PL_MSG_SIZE_MAX) return PL_ERR_INVALID_ARG;
    *out = (pl_payload_t){ .base = NULL, .size = size, .mapped = 0 };
    if (size == 0) return PL_OK;
    out->base = malloc(size); /* never a kept buffer: what the caller leaves unwritten must not be another message's */
    if (out->base == NULL) {
        out->size = 0;
        return PL_ERR_NO_MEMORY;
    }
    return PL_OK;
}
