// SPDX-License-Identifier: MIT
#include "proto/autotune.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "proto/python_json.hpp"

#include <fmt/format.h>
#include <openssl/evp.h>

namespace pt2cache::proto::autotune {

std::optional<std::int64_t> as_int64(const nlohmann::ordered_json& value) {
    if (value.is_number_unsigned()) {
        const auto number = value.get<std::uint64_t>();
        if (number > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
            return std::nullopt;
        }
        return static_cast<std::int64_t>(number);
    }
    if (value.is_number_integer()) {
        return value.get<std::int64_t>();
    }
    return std::nullopt;
}

namespace {

using Json = nlohmann::ordered_json;

std::string type_name(const Json& value) {
    return value.is_number_integer() ? "integer" : value.type_name();
}

tl::unexpected<std::string> field_error(std::string_view field, std::string_view want,
                                        const Json& got) {
    return tl::unexpected(
        fmt::format("best-config field \"{}\" must be {}, not {}", field, want, type_name(got)));
}

// A number as Python holds it: an exact integer (sign and magnitude) or a float.
struct Number {
    bool is_float = false;
    double real = 0;
    bool negative = false;
    std::uint64_t magnitude = 0;
};

std::optional<Number> as_number(const Json& value) {
    Number number;
    if (value.is_boolean()) {
        number.magnitude = value.get<bool>() ? 1 : 0; // bool is a subclass of int
    } else if (value.is_number_unsigned()) {
        number.magnitude = value.get<std::uint64_t>();
    } else if (value.is_number_integer()) {
        const auto signed_value = value.get<std::int64_t>();
        number.negative = signed_value < 0;
        number.magnitude = number.negative ? 0 - static_cast<std::uint64_t>(signed_value)
                                           : static_cast<std::uint64_t>(signed_value);
    } else if (value.is_number_float()) {
        number.is_float = true;
        number.real = value.get<double>();
    } else {
        return std::nullopt;
    }
    return number;
}

bool numbers_equal(const Number& a, const Number& b) {
    if (a.is_float && b.is_float) {
        return a.real == b.real;
    }
    if (!a.is_float && !b.is_float) {
        return a.negative == b.negative && a.magnitude == b.magnitude;
    }
    // An int equals a float only when the float is that exact integer.
    const Number& f = a.is_float ? a : b;
    const Number& i = a.is_float ? b : a;
    if (!std::isfinite(f.real) || std::trunc(f.real) != f.real) {
        return false;
    }
    const double size = std::fabs(f.real);
    if (size >= 18446744073709551616.0) { // 2^64: no int here is that large
        return false;
    }
    const auto f_magnitude = static_cast<std::uint64_t>(size);
    if (f_magnitude == 0) {
        return i.magnitude == 0;
    }
    return (f.real < 0) == i.negative && f_magnitude == i.magnitude;
}

// Python's == between the objects json.loads makes.
bool python_equal(const Json& a, const Json& b) {
    const auto number_a = as_number(a);
    const auto number_b = as_number(b);
    if (number_a || number_b) {
        return number_a && number_b && numbers_equal(*number_a, *number_b);
    }
    if (a.type() != b.type()) {
        return false;
    }
    if (a.is_array()) {
        return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), python_equal);
    }
    if (a.is_object()) {
        if (a.size() != b.size()) {
            return false;
        }
        for (const auto& [key, value] : a.items()) {
            const auto found = b.find(key);
            if (found == b.end() || !python_equal(value, *found)) {
                return false;
            }
        }
        return true;
    }
    return a == b; // null, strings
}

// bool(obj) for what json.loads makes.
bool python_truthy(const Json& value) {
    if (const auto number = as_number(value)) {
        return number->is_float ? number->real != 0 : number->magnitude != 0;
    }
    if (value.is_string()) {
        return !value.get_ref<const std::string&>().empty();
    }
    if (value.is_array() || value.is_object()) {
        return !value.empty();
    }
    return false; // null
}

// dict.pop(key, default).
Json pop(Json& object, std::string_view key, Json fallback = nullptr) {
    const auto found = object.find(key);
    if (found == object.end()) {
        return fallback;
    }
    Json value = std::move(*found);
    object.erase(found);
    return value;
}

const Json& get_or_null(const Json& object, std::string_view key) {
    static const Json null_value;
    const auto found = object.find(key);
    return found == object.end() ? null_value : *found;
}

} // namespace

Json BestConfig::to_ordered_json() const {
    Json data = Json::object();
    for (const auto& [key, value] : kwargs) {
        data[key] = value;
    }
    data["num_warps"] = num_warps;
    data["num_stages"] = num_stages;
    data["configs_hash"] = configs_hash;
    data["found_by_coordesc"] = found_by_coordesc;
    data["time_taken_ms"] = time_taken_ms;
    data["triton_cache_hash"] = triton_cache_hash ? Json(*triton_cache_hash) : Json(nullptr);
    if (python_truthy(extra_options)) {
        data["extra_options"] = extra_options;
    }
    if (num_consumer_groups) {
        data["num_consumer_groups"] = *num_consumer_groups;
    }
    if (num_buffers_warp_spec) {
        data["num_buffers_warp_spec"] = *num_buffers_warp_spec;
    }
    return data;
}

std::string BestConfig::to_json() const {
    return python_json_dumps(to_ordered_json());
}

tl::expected<BestConfig, std::string> BestConfig::from_json(std::string_view text) {
    auto value = parse_json(text);
    if (value.is_discarded()) {
        return tl::unexpected(std::string("a best-config must be JSON"));
    }
    return from_value(value);
}

tl::expected<BestConfig, std::string> BestConfig::from_value(const Json& value) {
    if (!value.is_object()) {
        return tl::unexpected(
            fmt::format("a best-config is a JSON object, not {}", type_name(value)));
    }
    BestConfig config;
    bool has_warps = false;
    bool has_stages = false;
    bool has_hash = false;
    for (const auto& [key, item] : value.items()) {
        if (key == "num_warps" || key == "num_stages" || key == "time_taken_ms" ||
            key == "num_consumer_groups" || key == "num_buffers_warp_spec") {
            const auto number = as_int64(item);
            if (!number && item.is_number_integer()) {
                return tl::unexpected(fmt::format("best-config field \"{}\" is out of range", key));
            }
            if (!number) {
                return field_error(key, "a 64-bit integer", item);
            }
            if (key == "num_warps") {
                config.num_warps = *number, has_warps = true;
            } else if (key == "num_stages") {
                config.num_stages = *number, has_stages = true;
            } else if (key == "time_taken_ms") {
                config.time_taken_ms = *number;
            } else if (key == "num_consumer_groups") {
                config.num_consumer_groups = *number;
            } else {
                config.num_buffers_warp_spec = *number;
            }
        } else if (key == "configs_hash") {
            if (!item.is_string()) {
                return field_error(key, "a string", item);
            }
            config.configs_hash = item.get<std::string>(), has_hash = true;
        } else if (key == "found_by_coordesc") {
            if (!item.is_boolean()) {
                return field_error(key, "a boolean", item);
            }
            config.found_by_coordesc = item.get<bool>();
        } else if (key == "triton_cache_hash") {
            if (!item.is_string() && !item.is_null()) {
                return field_error(key, "a string or null", item);
            }
            if (item.is_string()) {
                config.triton_cache_hash = item.get<std::string>();
            }
        } else if (key == "extra_options") {
            config.extra_options = item;
        } else {
            config.kwargs.emplace_back(key, item);
        }
    }
    for (const auto& [present, name] :
         {std::pair{has_warps, "num_warps"}, std::pair{has_stages, "num_stages"},
          std::pair{has_hash, "configs_hash"}}) {
        if (!present) {
            return tl::unexpected(fmt::format("best-config field \"{}\" is missing", name));
        }
    }
    return config;
}

BestConfig make_best_config(const TritonConfig& config, std::string configs_hash,
                            std::uint64_t time_taken_ns, bool found_by_coordesc,
                            std::optional<std::string> triton_cache_hash, bool has_warp_spec) {
    BestConfig best;
    best.kwargs = config.kwargs;
    best.num_warps = config.num_warps;
    best.num_stages = config.num_stages;
    best.configs_hash = std::move(configs_hash);
    best.found_by_coordesc = found_by_coordesc;
    best.time_taken_ms = static_cast<std::int64_t>(time_taken_ns / 1'000'000); // ns // 1000000
    best.triton_cache_hash = std::move(triton_cache_hash);
    best.extra_options = config.extra_options;
    if (has_warp_spec) {
        best.num_consumer_groups = config.num_consumer_groups;
        best.num_buffers_warp_spec = config.num_buffers_warp_spec;
    }
    return best;
}

std::string sha256_hex(std::string_view data) {
    std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
    unsigned int length = 0;
    // EVP_Digest fails only when libcrypto cannot allocate; a short digest
    // would then show as a key no entry matches.
    EVP_Digest(data.data(), data.size(), digest.data(), &length, EVP_sha256(), nullptr);
    return to_hex(std::string_view(reinterpret_cast<const char*>(digest.data()), length));
}

std::string prepare_key(std::string_view filename, std::string_view cache_key_tag) {
    const auto slash = filename.rfind('/');
    const auto basename = slash == filename.npos ? filename : filename.substr(slash + 1);
    return sha256_hex(fmt::format("{}:{}", basename, cache_key_tag));
}

std::string local_key(std::string_view prepared, std::string_view torch_key) {
    std::string input(prepared);
    input += torch_key;
    return sha256_hex(input) + std::string(k_local_suffix);
}

bool is_local_key(std::string_view key) {
    if (key.size() != 64 + k_local_suffix.size() || !key.ends_with(k_local_suffix)) {
        return false;
    }
    return std::all_of(key.begin(), key.begin() + 64,
                       [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string remote_key(std::string_view torch_key_hex, std::string_view backend_hash,
                       std::string_view configs_hash) {
    return sha256_hex(
        fmt::format("{}{}{}{}", torch_key_hex, backend_hash, configs_hash, k_remote_salt));
}

std::string remote_entry_key(std::string_view remote_key, std::string_view prepared) {
    return fmt::format("{}::{}", remote_key, prepared);
}

std::string bundle_key(std::string_view code_hash, std::string_view backend_hash) {
    return sha256_hex(fmt::format("{}{}{}", code_hash, backend_hash, k_bundle_salt));
}

// torch/_inductor/runtime/triton_heuristics.py (pytorch/pytorch@00131b6b):
//
//     def hash_configs(configs: list[Config]):
//         hasher = hashlib.sha256()
//         for cfg in configs:
//             hasher.update(
//                 f"{sorted(cfg.kwargs.items())} {cfg.num_warps} {cfg.num_stages}\n".encode()
//             )
//         return hasher.hexdigest()
//
// `sorted(kwargs.items())` prints as a list of tuples: [('R0_BLOCK', 64), ('XBLOCK', 8)].
std::string configs_hash(const std::vector<TritonConfig>& configs) {
    std::string text;
    for (const auto& config : configs) {
        std::vector<const Kwargs::value_type*> items;
        items.reserve(config.kwargs.size());
        for (const auto& item : config.kwargs) {
            items.push_back(&item);
        }
        // Python orders str by code point, which is UTF-8's byte order.
        std::stable_sort(items.begin(), items.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
        text += '[';
        bool first = true;
        for (const auto* item : items) {
            text += first ? "(" : ", (";
            first = false;
            text += python_repr(Json(item->first));
            text += ", ";
            text += python_repr(item->second);
            text += ')';
        }
        text += fmt::format("] {} {}\n", config.num_warps, config.num_stages);
    }
    return sha256_hex(text);
}

std::optional<TritonConfig> select(const Json& best_config, std::string_view configs_hash,
                                   const std::vector<TritonConfig>& candidates,
                                   bool coordinate_descent_tuning, bool has_warp_spec) {
    // AutotuneCache._read returns only dicts.
    if (!best_config.is_object()) {
        return std::nullopt;
    }
    Json best = best_config; // _load_cached_autotuning pops from its argument
    const Json stored_hash = pop(best, "configs_hash");
    if (!stored_hash.is_string() || stored_hash.get_ref<const std::string&>() != configs_hash) {
        return std::nullopt;
    }
    pop(best, "time_taken_ms");
    pop(best, "triton_cache_hash");
    const Json extra_options = pop(best, "extra_options");

    // `coordinate_descent_tuning and best_config.pop("found_by_coordesc", False)`:
    // the pop happens only with coordinate descent on.
    const bool found_by_coordesc =
        coordinate_descent_tuning && python_truthy(pop(best, "found_by_coordesc", false));
    if (!found_by_coordesc) {
        const TritonConfig* match = nullptr;
        bool several = false;
        for (const auto& candidate : candidates) {
            const bool kwargs_match = std::all_of(
                candidate.kwargs.begin(), candidate.kwargs.end(), [&](const auto& item) {
                    return python_equal(item.second, get_or_null(best, item.first));
                });
            if (kwargs_match &&
                python_equal(Json(candidate.num_warps), get_or_null(best, "num_warps")) &&
                python_equal(Json(candidate.num_stages), get_or_null(best, "num_stages"))) {
                several = match != nullptr;
                match = &candidate;
                if (several) {
                    break;
                }
            }
        }
        if (match && !several) {
            TritonConfig chosen = *match;
            chosen.extra_options = extra_options;
            return chosen;
        }
    }

    // _reconstruct_triton_config: the stored config itself (found by
    // coordinate descent, or a config the candidates lack, such as one
    // Inductor added while tuning).
    pop(best, "found_by_coordesc");
    if (!best.contains("num_warps") || !best.contains("num_stages")) {
        return std::nullopt; // KeyError in Inductor
    }
    const auto num_warps = as_int64(pop(best, "num_warps"));
    const auto num_stages = as_int64(pop(best, "num_stages"));
    if (!num_warps || !num_stages) {
        return std::nullopt;
    }
    TritonConfig config;
    config.num_warps = *num_warps;
    config.num_stages = *num_stages;
    if (has_warp_spec) {
        const auto groups = as_int64(pop(best, "num_consumer_groups", 0));
        const auto buffers = as_int64(pop(best, "num_buffers_warp_spec", 0));
        if (!groups || !buffers) {
            return std::nullopt;
        }
        config.num_consumer_groups = *groups;
        config.num_buffers_warp_spec = *buffers;
    }
    for (auto& [key, value] : best.items()) {
        config.kwargs.emplace_back(key, std::move(value));
    }
    config.found_by_coordesc = found_by_coordesc;
    config.extra_options = extra_options;
    return config;
}

std::optional<TritonConfig> select_from_text(std::string_view best_config_json,
                                             std::string_view configs_hash,
                                             const std::vector<TritonConfig>& candidates,
                                             bool coordinate_descent_tuning, bool has_warp_spec) {
    const auto value = parse_json(best_config_json);
    if (value.is_discarded()) {
        return std::nullopt;
    }
    return select(value, configs_hash, candidates, coordinate_descent_tuning, has_warp_spec);
}

} // namespace pt2cache::proto::autotune
