// SPDX-License-Identifier: MIT
//
// The C API of client/pt2cache.h over client::Client. No exception escapes:
// each entry point catches everything and answers PT2CACHE_E_INTERNAL.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <span>
#include <string>

#include "client/capi_internal.hpp"
#include "client/client.hpp"
#include "client/pt2cache.h"

namespace {

using pt2cache::client::Error;
using pt2cache::client::capi::error_code;
using pt2cache::client::capi::guarded;
using pt2cache::client::capi::invalid;

std::string_view key_view(const void* key, size_t key_len) {
    return {static_cast<const char*>(key), key_len};
}

int found(pt2cache_client& c, const tl::expected<bool, Error>& result) {
    if (!result) {
        return error_code(c, result.error());
    }
    return *result ? PT2CACHE_OK : PT2CACHE_MISS;
}

int get_value(pt2cache_client* client, const char* ns, const void* key, size_t key_len,
              std::optional<uint64_t> bundle_token, void** value, size_t* value_len,
              const char* name) {
    if (value != nullptr) {
        *value = nullptr;
    }
    if (value_len != nullptr) {
        *value_len = 0;
    }
    if (client == nullptr || ns == nullptr || key == nullptr || value == nullptr ||
        value_len == nullptr) {
        return invalid(client, std::string(name) + ": NULL argument");
    }
    return guarded(client, [&](pt2cache_client& c) {
        auto result = c.client.get(ns, key_view(key, key_len), bundle_token);
        if (!result) {
            return error_code(c, result.error());
        }
        if (!*result) {
            return PT2CACHE_MISS;
        }
        const auto& bytes = **result;
        void* copy = std::malloc(bytes.empty() ? 1 : bytes.size());
        if (copy == nullptr) {
            c.last_error = "out of memory";
            return PT2CACHE_E_INTERNAL;
        }
        if (!bytes.empty()) {
            std::memcpy(copy, bytes.data(), bytes.size());
        }
        *value = copy;
        *value_len = bytes.size();
        return PT2CACHE_OK;
    });
}

int put_value(pt2cache_client* client, const char* ns, const void* key, size_t key_len,
              const void* value, size_t value_len, uint64_t ttl_ms, int flags,
              std::optional<uint64_t> bundle_token, const char* name) {
    if (client == nullptr || ns == nullptr || key == nullptr ||
        (value == nullptr && value_len != 0)) {
        return invalid(client, std::string(name) + ": NULL argument");
    }
    return guarded(client, [&](pt2cache_client& c) {
        pt2cache::client::PutOptions options;
        options.ttl = std::chrono::milliseconds(
            static_cast<std::int64_t>(std::min<uint64_t>(ttl_ms, INT64_MAX)));
        options.only_if_absent = (flags & PT2CACHE_ONLY_IF_ABSENT) != 0;
        options.bundle_token = bundle_token;
        const auto* bytes = static_cast<const std::byte*>(value);
        return found(c, c.client.put(ns, key_view(key, key_len),
                                     std::span<const std::byte>(bytes, value_len), options));
    });
}

} // namespace

extern "C" {

pt2cache_client* pt2cache_open(const char* socket_path) {
    try {
        pt2cache::client::Options options;
        if (socket_path != nullptr) {
            options.socket_path = socket_path;
        }
        return new pt2cache_client(std::move(options));
    } catch (...) {
        return nullptr;
    }
}

void pt2cache_close(pt2cache_client* client) {
    delete client;
}

int pt2cache_get(pt2cache_client* client, const char* ns, const void* key, size_t key_len,
                 void** value, size_t* value_len) {
    return get_value(client, ns, key, key_len, std::nullopt, value, value_len, "pt2cache_get");
}

int pt2cache_put(pt2cache_client* client, const char* ns, const void* key, size_t key_len,
                 const void* value, size_t value_len, uint64_t ttl_ms, int flags) {
    return put_value(client, ns, key, key_len, value, value_len, ttl_ms, flags, std::nullopt,
                     "pt2cache_put");
}

int pt2cache_get_bundled(pt2cache_client* client, const char* ns, const void* key, size_t key_len,
                         uint64_t bundle_token, void** value, size_t* value_len) {
    return get_value(client, ns, key, key_len, bundle_token, value, value_len,
                     "pt2cache_get_bundled");
}

int pt2cache_put_bundled(pt2cache_client* client, const char* ns, const void* key, size_t key_len,
                         const void* value, size_t value_len, uint64_t ttl_ms, int flags,
                         uint64_t bundle_token) {
    return put_value(client, ns, key, key_len, value, value_len, ttl_ms, flags, bundle_token,
                     "pt2cache_put_bundled");
}

int pt2cache_bundle_begin(pt2cache_client* client, const char* code_hash, const char* backend_hash,
                          uint64_t* token, int* hit, uint32_t* entries, uint64_t* time_saved_ms) {
    if (token != nullptr) {
        *token = 0;
    }
    if (client == nullptr || code_hash == nullptr || token == nullptr) {
        return invalid(client, "pt2cache_bundle_begin: NULL argument");
    }
    return guarded(client, [&](pt2cache_client& c) {
        auto begun = c.client.bundle_begin(code_hash, backend_hash == nullptr ? "" : backend_hash);
        if (!begun) {
            return error_code(c, begun.error());
        }
        *token = begun->token;
        if (hit != nullptr) {
            *hit = begun->hit ? 1 : 0;
        }
        if (entries != nullptr) {
            *entries = begun->entries;
        }
        if (time_saved_ms != nullptr) {
            *time_saved_ms = begun->time_saved_ms;
        }
        return PT2CACHE_OK;
    });
}

int pt2cache_bundle_end(pt2cache_client* client, uint64_t token, uint32_t* entries) {
    if (client == nullptr) {
        return invalid(client, "pt2cache_bundle_end: NULL client");
    }
    return guarded(client, [&](pt2cache_client& c) {
        auto stored = c.client.bundle_end(token);
        if (!stored) {
            return error_code(c, stored.error());
        }
        if (entries != nullptr) {
            *entries = *stored;
        }
        return PT2CACHE_OK;
    });
}

int pt2cache_exists(pt2cache_client* client, const char* ns, const void* key, size_t key_len) {
    if (client == nullptr || ns == nullptr || key == nullptr) {
        return invalid(client, "pt2cache_exists: NULL argument");
    }
    return guarded(client, [&](pt2cache_client& c) {
        return found(c, c.client.exists(ns, key_view(key, key_len)));
    });
}

int pt2cache_del(pt2cache_client* client, const char* ns, const void* key, size_t key_len) {
    if (client == nullptr || ns == nullptr || key == nullptr) {
        return invalid(client, "pt2cache_del: NULL argument");
    }
    return guarded(client, [&](pt2cache_client& c) {
        return found(c, c.client.remove(ns, key_view(key, key_len)));
    });
}

int pt2cache_ping(pt2cache_client* client, uint64_t* rtt_us) {
    if (client == nullptr) {
        return invalid(client, "pt2cache_ping: NULL client");
    }
    return guarded(client, [&](pt2cache_client& c) {
        auto result = c.client.ping();
        if (!result) {
            return error_code(c, result.error());
        }
        if (rtt_us != nullptr) {
            *rtt_us = static_cast<uint64_t>(result->count());
        }
        return PT2CACHE_OK;
    });
}

const char* pt2cache_last_error(const pt2cache_client* client) {
    if (client == nullptr) {
        return "NULL pt2cache_client";
    }
    return client->last_error.c_str();
}

void pt2cache_free(void* value) {
    std::free(value);
}

} // extern "C"
