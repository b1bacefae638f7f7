// SPDX-License-Identifier: MIT
//
// The autotune part of the C API (client/pt2cache.h) over
// client::AutotuneCache. No exception escapes.
#include <string>

#include "client/autotune.hpp"
#include "client/capi_internal.hpp"
#include "client/pt2cache.h"

namespace {

using pt2cache::client::AutotuneCache;
using pt2cache::client::AutotuneSettings;
using pt2cache::client::capi::error_code;
using pt2cache::client::capi::guarded;
using pt2cache::client::capi::invalid;

// The settings `params` describe, or an error message.
tl::expected<AutotuneSettings, std::string> settings_of(const pt2cache_autotune_params& params) {
    if (params.configs_hash == nullptr || params.filename == nullptr ||
        (params.torch_key == nullptr && params.torch_key_len != 0)) {
        return tl::unexpected(
            std::string("pt2cache_autotune_params needs configs_hash, filename and torch_key set"));
    }
    AutotuneSettings settings;
    settings.torch_key.assign(static_cast<const char*>(params.torch_key), params.torch_key_len);
    settings.backend_hash = params.backend_hash == nullptr ? "" : params.backend_hash;
    settings.cache_key_tag = params.cache_key_tag == nullptr ? "" : params.cache_key_tag;
    settings.configs_hash = params.configs_hash;
    settings.filename = params.filename;
    settings.coordinate_descent_tuning = (params.flags & PT2CACHE_AUTOTUNE_COORDESC) != 0;
    settings.local_cache = (params.flags & PT2CACHE_AUTOTUNE_NO_LOCAL) == 0;
    // As Inductor: no backend hash, no remote cache.
    settings.remote_cache =
        (params.flags & PT2CACHE_AUTOTUNE_NO_REMOTE) == 0 && params.backend_hash != nullptr;
    settings.has_warp_spec = (params.flags & PT2CACHE_AUTOTUNE_WARP_SPEC) != 0;
    if ((params.flags & PT2CACHE_AUTOTUNE_BUNDLE) != 0) {
        settings.bundle_token = params.bundle_token;
    }
    return settings;
}

} // namespace

extern "C" {

int pt2cache_autotune_configs_hash(pt2cache_client* client, const char* candidates_json,
                                   char hash[65]) {
    if (client == nullptr || candidates_json == nullptr || hash == nullptr) {
        return invalid(client, "pt2cache_autotune_configs_hash: NULL argument");
    }
    return guarded(client, [&](pt2cache_client& c) {
        auto candidates = pt2cache::client::configs_from_json(candidates_json);
        if (!candidates) {
            return invalid(&c, candidates.error());
        }
        const std::string digest = pt2cache::client::configs_hash(*candidates);
        digest.copy(hash, 64);
        hash[64] = '\0';
        return PT2CACHE_OK;
    });
}

int pt2cache_autotune_read_best(pt2cache_client* client, const pt2cache_autotune_params* params,
                                const char* candidates_json, char** config_json) {
    if (config_json != nullptr) {
        *config_json = nullptr;
    }
    if (client == nullptr || params == nullptr || candidates_json == nullptr ||
        config_json == nullptr) {
        return invalid(client, "pt2cache_autotune_read_best: NULL argument");
    }
    return guarded(client, [&](pt2cache_client& c) {
        auto settings = settings_of(*params);
        if (!settings) {
            return invalid(&c, settings.error());
        }
        auto candidates = pt2cache::client::configs_from_json(candidates_json);
        if (!candidates) {
            return invalid(&c, candidates.error());
        }
        AutotuneCache cache(c.client, std::move(*settings));
        const auto chosen = cache.read_best(*candidates);
        if (!chosen) {
            if (const auto& error = cache.last_error()) {
                return error_code(c, *error);
            }
            return PT2CACHE_MISS;
        }
        const std::string json = pt2cache::client::config_to_json(*chosen);
        char* copy = pt2cache::client::capi::malloc_copy(json.data(), json.size());
        if (copy == nullptr) {
            c.last_error = "out of memory";
            return PT2CACHE_E_INTERNAL;
        }
        *config_json = copy;
        return PT2CACHE_OK;
    });
}

int pt2cache_autotune_save(pt2cache_client* client, const pt2cache_autotune_params* params,
                           const char* config_json, uint64_t time_taken_ns, int found_by_coordesc,
                           const char* triton_cache_hash) {
    if (client == nullptr || params == nullptr || config_json == nullptr) {
        return invalid(client, "pt2cache_autotune_save: NULL argument");
    }
    return guarded(client, [&](pt2cache_client& c) {
        auto settings = settings_of(*params);
        if (!settings) {
            return invalid(&c, settings.error());
        }
        auto config = pt2cache::client::config_from_json(config_json);
        if (!config) {
            return invalid(&c, config.error());
        }
        AutotuneCache cache(c.client, std::move(*settings));
        std::optional<std::string> hash;
        if (triton_cache_hash != nullptr) {
            hash = triton_cache_hash;
        }
        auto saved = cache.save(*config, time_taken_ns, found_by_coordesc != 0, std::move(hash));
        if (!saved) {
            return error_code(c, saved.error());
        }
        return PT2CACHE_OK;
    });
}

} // extern "C"
