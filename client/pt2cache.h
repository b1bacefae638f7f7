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
#define PT2CACHE_E_INVALID (-5)     /* a NULL argument, or JSON that is not a config */
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

/* ---- Bundles of autotune best-configs (docs/protocol.md, "Bundles") ---- */

/* Starts, or on a hit restores, the bundle of one compiled module:
 * `code_hash` is Inductor's hash of the comment-stripped module code (not
 * empty), `backend_hash` Triton's backend hash (NULL: ""). On PT2CACHE_OK
 * stores the token in `*token` and, unless NULL, whether the bundle existed
 * (its best-configs are then in the daemon's local tiers) in `*hit`, how many
 * were restored in `*entries` and the sum of their time_taken_ms in
 * `*time_saved_ms`. The token works from any process until
 * pt2cache_bundle_end, or until it has not been used for a while. A daemon
 * without bundles gives PT2CACHE_E_SERVER. */
int pt2cache_bundle_begin(pt2cache_client* client, const char* code_hash, const char* backend_hash,
                          uint64_t* token, int* hit, uint32_t* entries, uint64_t* time_saved_ms);

/* Closes `token`, storing the bundle if it collected entries and did not
 * exist; on PT2CACHE_OK stores how many entries were stored in `*entries`
 * unless NULL. An unknown, expired or ended token is PT2CACHE_E_SERVER. */
int pt2cache_bundle_end(pt2cache_client* client, uint64_t token, uint32_t* entries);

/* pt2cache_get and pt2cache_put whose entry joins the bundle of
 * `bundle_token` (a get only when it hits). */
int pt2cache_get_bundled(pt2cache_client* client, const char* ns, const void* key, size_t key_len,
                         uint64_t bundle_token, void** value, size_t* value_len);
int pt2cache_put_bundled(pt2cache_client* client, const char* ns, const void* key, size_t key_len,
                         const void* value, size_t value_len, uint64_t ttl_ms, int flags,
                         uint64_t bundle_token);

/* ---- Autotune best-configs, as Inductor's AutotuneCache ---- */

/* Configs travel as JSON objects:
 *   {"kwargs": {"XBLOCK": 64, "R0_BLOCK": 8}, "num_warps": 4, "num_stages": 1,
 *    "num_consumer_groups": 0, "num_buffers_warp_spec": 0,
 *    "found_by_coordesc": false, "extra_options": {...}}
 * where any member may be left out (no kwargs, num_warps 4, num_stages 3,
 * extra_options null, the others 0 or false). extra_options is a third-party
 * backend's tuned options (Triton's Config.extra_options): saved with the
 * best-config when truthy, and returned with the config read back.
 * Candidate lists are JSON arrays of them. */

/* Flags of pt2cache_autotune_params. */
#define PT2CACHE_AUTOTUNE_COORDESC 1  /* Inductor's coordinate_descent_tuning */
#define PT2CACHE_AUTOTUNE_NO_LOCAL 2  /* autotune_local_cache off */
#define PT2CACHE_AUTOTUNE_NO_REMOTE 4 /* autotune_remote_cache off */
#define PT2CACHE_AUTOTUNE_WARP_SPEC 8 /* Triton's HAS_WARP_SPEC */
#define PT2CACHE_AUTOTUNE_BUNDLE 16   /* join the bundle of `bundle_token` */

/* One kernel's cache, as AutotuneCache.create(inductor_meta, filename,
 * configs_hash) sees it. Zero-initialise, then set what applies. */
typedef struct pt2cache_autotune_params {
    const void* torch_key; /* the raw digest bytes of torch_key() */
    size_t torch_key_len;
    const char* backend_hash;  /* triton_hash_with_backend(); NULL: no remote entry */
    const char* cache_key_tag; /* torch.compiler.config.cache_key_tag; NULL: "" */
    const char* configs_hash;  /* hash_configs(candidates): pt2cache_autotune_configs_hash */
    const char* filename;      /* the kernel's source file; only its basename counts */
    uint64_t bundle_token;     /* with PT2CACHE_AUTOTUNE_BUNDLE */
    int flags;                 /* PT2CACHE_AUTOTUNE_* */
} pt2cache_autotune_params;

/* Inductor's hash_configs() of a JSON array of candidate configs: on
 * PT2CACHE_OK, 64 lowercase hex digits and a NUL in `hash` (65 bytes). */
int pt2cache_autotune_configs_hash(pt2cache_client* client, const char* candidates_json,
                                   char hash[65]);

/* AutotuneCache.read_best: the stored best-config (the local entry, else the
 * remote one) and the candidate it selects (_load_cached_autotuning). On
 * PT2CACHE_OK `*config_json` is that config as a malloc'd NUL-terminated JSON
 * object, to release with pt2cache_free; otherwise it is NULL. As in torch
 * 2.15, it may be the stored config itself: found by coordinate descent
 * ("found_by_coordesc": true), or matching no single candidate (a config
 * Inductor added while tuning). PT2CACHE_MISS when nothing is stored or
 * nothing can be selected; a negative code when a lookup failed (a miss
 * too). */
int pt2cache_autotune_read_best(pt2cache_client* client, const pt2cache_autotune_params* params,
                                const char* candidates_json, char** config_json);

/* AutotuneCache.save: records `config_json` with `time_taken_ns`,
 * `found_by_coordesc` and `triton_cache_hash` (NULL: null) in the local entry
 * (joining the bundle with PT2CACHE_AUTOTUNE_BUNDLE) and the remote entry,
 * byte for byte as Inductor writes them. A negative code says a write failed;
 * nothing else is affected. */
int pt2cache_autotune_save(pt2cache_client* client, const pt2cache_autotune_params* params,
                           const char* config_json, uint64_t time_taken_ns, int found_by_coordesc,
                           const char* triton_cache_hash);

/* A one-line description of the last failed call on `client`, or "" after a
 * successful one. Valid until the next call on `client`. Never NULL. */
const char* pt2cache_last_error(const pt2cache_client* client);

/* Releases a value returned by pt2cache_get, pt2cache_get_bundled or
 * pt2cache_autotune_read_best; NULL is ignored. */
void pt2cache_free(void* value);

#ifdef __cplusplus
}
#endif

#endif /* PT2CACHE_H */
