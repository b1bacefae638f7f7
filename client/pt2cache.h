/* SPDX-License-Identifier: MIT
 *
 * libpt2cache's C API: get and put compiled artifacts in pt2cached, the
 * per-user compile-cache daemon, over its Unix socket.
 *
 * A cache must never make a compiler fail: treat every negative return code
 * as a miss (get, exists) or as "not stored" (put, del), and carry on. When the
 * daemon is absent or dies, calls fail fast for a couple of seconds and then
 * reconnect by themselves.
 *
 * A pt2cache_client is not thread-safe: use one per thread, or lock around
 * it. Nothing here raises SIGPIPE or changes signal dispositions.
 */
#ifndef PT2CACHE_H
#define PT2CACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes. */
#define PT2CACHE_OK 0               /* done; for exists/del: the entry existed */
#define PT2CACHE_MISS 1             /* no such entry; for put: NOT_STORED */
#define PT2CACHE_E_UNREACHABLE (-1) /* no daemon, or connection lost (retried later) */
#define PT2CACHE_E_TIMEOUT (-2)     /* the daemon did not answer in time */
#define PT2CACHE_E_PROTOCOL (-3)    /* the daemon's reply made no sense */
#define PT2CACHE_E_SERVER (-4)      /* the daemon answered an error (bad key...) */
#define PT2CACHE_E_INVALID (-5)     /* a NULL argument */
#define PT2CACHE_E_INTERNAL (-6)    /* out of memory, or a bug in the library */

/* Flags of pt2cache_put. */
#define PT2CACHE_ONLY_IF_ABSENT 1 /* store only if no live entry exists */

typedef struct pt2cache_client pt2cache_client;

/* Creates a client for the daemon at `socket_path`, or, when NULL or empty, at
 * the default path ($XDG_RUNTIME_DIR/pt2cache/pt2cached.sock, else
 * /tmp/pt2cache-$UID/pt2cached.sock). Connects on first use. Returns NULL only
 * when out of memory. */
pt2cache_client* pt2cache_open(const char* socket_path);

/* Closes the connection and frees `client`; NULL is ignored. */
void pt2cache_close(pt2cache_client* client);

/* Looks up `key` (`key_len` bytes, 1 to 1024) in namespace `ns`
 * ([a-z0-9-]{1,32}, NUL-terminated). On PT2CACHE_OK, `*value` is a malloc'd
 * buffer of `*value_len` bytes (never NULL, even when empty) to release with
 * pt2cache_free; otherwise `*value` is NULL and `*value_len` 0. */
int pt2cache_get(pt2cache_client* client, const char* ns, const void* key, size_t key_len,
                 void** value, size_t* value_len);

/* Stores `value_len` bytes at `value` (NULL allowed when `value_len` is 0)
 * under `key`. `ttl_ms` 0 means no expiry. With PT2CACHE_ONLY_IF_ABSENT in
 * `flags`, returns PT2CACHE_MISS when a live entry already exists. */
int pt2cache_put(pt2cache_client* client, const char* ns, const void* key, size_t key_len,
                 const void* value, size_t value_len, uint64_t ttl_ms, int flags);

/* PT2CACHE_OK when a live entry exists, PT2CACHE_MISS when not. */
int pt2cache_exists(pt2cache_client* client, const char* ns, const void* key, size_t key_len);

/* PT2CACHE_OK when an entry existed and was removed, PT2CACHE_MISS when not. */
int pt2cache_del(pt2cache_client* client, const char* ns, const void* key, size_t key_len);

/* Round trip of one PING; on PT2CACHE_OK stores it in `*rtt_us` unless
 * `rtt_us` is NULL. */
int pt2cache_ping(pt2cache_client* client, uint64_t* rtt_us);

/* A one-line description of the last failed call on `client`, or "" after a
 * successful one. Valid until the next call on `client`. Never NULL. */
const char* pt2cache_last_error(const pt2cache_client* client);

/* Releases a value returned by pt2cache_get; NULL is ignored. */
void pt2cache_free(void* value);

#ifdef __cplusplus
}
#endif

#endif /* PT2CACHE_H */
