// SPDX-License-Identifier: MIT
//
// What the C API's translation units (capi.cpp, capi_autotune.cpp) share: the
// handle behind pt2cache_client and the mapping of errors to return codes.
// Not installed.
#pragma once

#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <string_view>

#include "client/client.hpp"
#include "client/pt2cache.h"

struct pt2cache_client {
    explicit pt2cache_client(pt2cache::client::Options options)
        : client(std::move(options)) {}

    pt2cache::client::Client client;
    std::string last_error;
};

namespace pt2cache::client::capi {

inline int error_code(pt2cache_client& c, const Error& error) {
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

inline int invalid(pt2cache_client* c, std::string_view what) {
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

// A malloc'd copy of `size` bytes at `data` with a NUL after them (so never
// NULL, even when empty), or nullptr when out of memory.
inline char* malloc_copy(const void* data, std::size_t size) {
    auto* copy = static_cast<char*>(std::malloc(size + 1));
    if (copy == nullptr) {
        return nullptr;
    }
    if (size != 0) {
        std::memcpy(copy, data, size);
    }
    copy[size] = '\0';
    return copy;
}

} // namespace pt2cache::client::capi
