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
#include <span>
#include <string>

#include "client/client.hpp"
#include "client/pt2cache.h"

struct pt2cache_client {
    explicit pt2cache_client(pt2cache::client::Options options)
        : client(std::move(options)) {}

    pt2cache::client::Client client;
    std::string last_error;
};

namespace {

using pt2cache::client::Error;
using pt2cache::client::ErrorKind;

int error_code(pt2cache_client& c, const Error& error) {
    c.last_error = error.message;
    switch (error.kind) {
    case ErrorKind::unreachable:
        return PT2CACHE_E_UNREACHABLE;
    case ErrorKind::timeout:
        return PT2CACHE_E_TIMEOUT;
    case ErrorKind::protocol:
        return PT2CACHE_E_PROTOCOL;
    case ErrorKind::server:
        return PT2CACHE_E_SERVER;
    }
    return PT2CACHE_E_INTERNAL;
}

int invalid(pt2cache_client* c, const char* what) {
    if (c != nullptr) {
        c->last_error = what;
    }
    return PT2CACHE_E_INVALID;
}

// Runs `body` with the client, turning exceptions into PT2CACHE_E_INTERNAL.
template <typename Body>
int guarded(pt2cache_client* c, Body&& body) noexcept {
    try {
        c->last_error.clear();
        return body(*c);
    } catch (const std::bad_alloc&) {
        c->last_error = "out of memory";
    } catch (const std::exception& e) {
        try {
            c->last_error = e.what();
        } catch (...) {
        }
    } catch (...) {
        c->last_error = "unknown exception";
    }
    return PT2CACHE_E_INTERNAL;
}

std::string_view key_view(const void* key, size_t key_len) {
    return {static_cast<const char*>(key), key_len};
}

int found(pt2cache_client& c, const tl::expected<bool, Error>& result) {
    if (!result) {
        return error_code(c, result.error());
    }
    return *result ? PT2CACHE_OK : PT2CACHE_MISS;
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
    if (value != nullptr) {
        *value = nullptr;
    }
    if (value_len != nullptr) {
        *value_len = 0;
    }
    if (client == nullptr || ns == nullptr || key == nullptr || value == nullptr ||
        value_len == nullptr) {
        return invalid(client, "pt2cache_get: NULL argument");
    }
    return guarded(client, [&](pt2cache_client& c) {
        auto result = c.client.get(ns, key_view(key, key_len));
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

int pt2cache_put(pt2cache_client* client, const char* ns, const void* key, size_t key_len,
                 const void* value, size_t value_len, uint64_t ttl_ms, int flags) {
    if (client == nullptr || ns == nullptr || key == nullptr ||
        (value == nullptr && value_len != 0)) {
        return invalid(client, "pt2cache_put: NULL argument");
    }
    return guarded(client, [&](pt2cache_client& c) {
        pt2cache::client::PutOptions options;
        options.ttl = std::chrono::milliseconds(
            static_cast<std::int64_t>(std::min<uint64_t>(ttl_ms, INT64_MAX)));
        options.only_if_absent = (flags & PT2CACHE_ONLY_IF_ABSENT) != 0;
        const auto* bytes = static_cast<const std::byte*>(value);
        return found(c, c.client.put(ns, key_view(key, key_len),
                                     std::span<const std::byte>(bytes, value_len), options));
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
