/*
 * pl_handle_map.c — a map from a connection's handles (u32, never 0) to pointers: open addressing with
 * linear probing and tombstones. Handles are given out in sequence and never reused on a connection, so a
 * stale handle can never name another port; the map keeps look-ups O(1) whatever their values.
 */
#include "pl_remote.h"

#include <stdlib.h>

#define PL_MAP_EMPTY 0u
#define PL_MAP_REMOVED UINT32_MAX

static inline uint32_t pl_map_slot(uint32_t key, uint32_t capacity) {
    return (key * 2654435761u) & (capacity - 1); /* Knuth's multiplicative hash; capacity is a power of two */
}

void *pl_handle_map_get(const pl_handle_map_t *map, uint32_t key) {
    if (map->capacity == 0 || key == PL_MAP_EMPTY || key == PL_MAP_REMOVED) return NULL;
    for (uint32_t i = pl_map_slot(key, map->capacity), n = 0; n < map->capacity; i = (i + 1) & (map->capacity - 1), n++) {
        if (map->keys[i] == key) return map->values[i];
        if (map->keys[i] == PL_MAP_EMPTY) return NULL;
    }
    return NULL;
}

static bool pl_map_grow(pl_handle_map_t *map) {
    uint32_t capacity = map->capacity == 0 ? 16 : (map->count * 4 >= map->capacity ? map->capacity * 2 : map->capacity);
    uint32_t *keys = calloc(capacity, sizeof *keys);
    void **values = calloc(capacity, sizeof *values);
    if (keys == NULL || values == NULL) {
        free(keys);
        free(values);
        return false;
    }
    for (uint32_t i = 0; i < map->capacity; i++) {
        uint32_t key = map->keys[i];
        if (key == PL_MAP_EMPTY || key == PL_MAP_REMOVED) continue;
        uint32_t j = pl_map_slot(key, capacity);
        while (keys[j] != PL_MAP_EMPTY) j = (j + 1) & (capacity - 1);
        keys[j] = key;
        values[j] = map->values[i];
    }
    free(map->keys);
    free(map->values);
    map->keys = keys;
    map->values = values;
    map->capacity = capacity;
    map->used = map->count;
    return true;
}

bool pl_handle_map_put(pl_handle_map_t *map, uint32_t key, void *value) {
    if (key == PL_MAP_EMPTY || key == PL_MAP_REMOVED) return false;
    /* Keep at most half the slots used (live and removed), so that probes stay short. */
    if ((map->used + 1) * 2 > map->capacity && !pl_map_grow(map)) return false;
    uint32_t i = pl_map_slot(key, map->capacity);
    uint32_t tombstone = UINT32_MAX;
    for (;;) {
        if (map->keys[i] == key) {
            map->values[i] = value;
            return true;
        }
        if (map->keys[i] == PL_MAP_REMOVED && tombstone == UINT32_MAX) tombstone = i;
        if (map->keys[i] == PL_MAP_EMPTY) break;
        i = (i + 1) & (map->capacity - 1);
    }
    if (tombstone != UINT32_MAX) {
        i = tombstone;
    } else {
        map->used++;
    }
    map->keys[i] = key;
    map->values[i] = value;
    map->count++;
    return true;
}

void *pl_handle_map_remove(pl_handle_map_t *map, uint32_t key) {
    if (map->capacity == 0 || key == PL_MAP_EMPTY || key == PL_MAP_REMOVED) return NULL;
    for (uint32_t i = pl_map_slot(key, map->capacity), n = 0; n < map->capacity; i = (i + 1) & (map->capacity - 1), n++) {
        if (map->keys[i] == key) {
            void *value = map->values[i];
            map->keys[i] = PL_MAP_REMOVED;
            map->values[i] = NULL;
            map->count--;
            return value;
        }
        if (map->keys[i] == PL_MAP_EMPTY) return NULL;
    }
    return NULL;
}

void pl_handle_map_each(pl_handle_map_t *map, void (*fn)(uint32_t key, void *value, void *context), void *context) {
    for (uint32_t i = 0; i < map->capacity; i++) {
        if (map->keys[i] != PL_MAP_EMPTY && map->keys[i] != PL_MAP_REMOVED) fn(map->keys[i], map->values[i], context);
    }
}

void pl_handle_map_free(pl_handle_map_t *map) {
    free(map->keys);
    free(map->values);
    *map = (pl_handle_map_t){ 0 };
}
