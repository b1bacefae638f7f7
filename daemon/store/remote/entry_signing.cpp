// SPDX-License-Identifier: MIT
#include "daemon/store/remote/entry_signing.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

#include "proto/hex.hpp"

#include <fmt/format.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

namespace pt2cache::daemon::store {

namespace {

constexpr std::string_view k_mac_domain{"pt2cache-sig-v1\0", 16};
constexpr std::string_view k_key_id_domain{"pt2cache-key-id-v1\0", 19};
constexpr std::string_view k_signature_version = "v1:";
constexpr std::size_t k_key_id_digits = 8;
constexpr std::size_t k_max_file_size = 64 << 10;

std::string to_hex(const unsigned char* data, std::size_t size) {
    return proto::to_hex(std::string_view(reinterpret_cast<const char*>(data), size));
}

std::string_view trim(std::string_view text) {
    const auto first = text.find_first_not_of(" \t\r");
    if (first == std::string_view::npos) {
        return {};
    }
    return text.substr(first, text.find_last_not_of(" \t\r") - first + 1);
}

std::string key_id(const std::vector<unsigned char>& secret) {
    EVP_MD_CTX* context = EVP_MD_CTX_new();
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    const bool ok =
        context != nullptr && EVP_DigestInit_ex(context, EVP_sha256(), nullptr) == 1 &&
        EVP_DigestUpdate(context, k_key_id_domain.data(), k_key_id_domain.size()) == 1 &&
        EVP_DigestUpdate(context, secret.data(), secret.size()) == 1 &&
        EVP_DigestFinal_ex(context, digest, &size) == 1;
    EVP_MD_CTX_free(context);
    if (!ok) {
        throw std::runtime_error("SHA-256 failed");
    }
    return to_hex(digest, k_key_id_digits / 2);
}

EVP_MAC* hmac() {
    static EVP_MAC* const fetched = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    if (fetched == nullptr) {
        throw std::runtime_error("OpenSSL has no HMAC");
    }
    return fetched;
}

} // namespace

std::string signature_key(std::string_view redis_key) {
    std::string key = "pt2sig:{";
    key += redis_key;
    key += '}';
    return key;
}

bool signature_shares_slot(std::string_view redis_key) {
    return redis_key.find('}') == std::string_view::npos;
}

tl::expected<EntrySigner, std::string> EntrySigner::parse(std::string_view text,
                                                          std::string_view origin) {
    std::vector<Key> keys;
    std::size_t line_number = 0;
    while (!text.empty()) {
        const auto end = text.find('\n');
        const auto line = trim(text.substr(0, end));
        text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
        ++line_number;
        if (line.empty() || line.front() == '#') {
            continue;
        }
        const auto bad = [&](std::string_view why) {
            return tl::make_unexpected(fmt::format("{} line {}: {} (expected one key per line: "
                                                   "{} to {} hex digits, e.g. from `openssl "
                                                   "rand -hex 32`)",
                                                   origin, line_number, why, 2 * k_min_key_bytes,
                                                   2 * k_max_key_bytes));
        };
        if (line.size() % 2 != 0 || line.size() < 2 * k_min_key_bytes ||
            line.size() > 2 * k_max_key_bytes) {
            return bad(fmt::format("{} characters", line.size()));
        }
        Key key;
        for (std::size_t i = 0; i < line.size(); i += 2) {
            const int high = proto::hex_value(line[i]);
            const int low = proto::hex_value(line[i + 1]);
            if (high < 0 || low < 0) {
                return bad("not a hex digit");
            }
            key.secret.push_back(static_cast<unsigned char>(high * 16 + low));
        }
        if (keys.size() == k_max_keys) {
            return bad(fmt::format("more than {} keys", k_max_keys));
        }
        key.id = key_id(key.secret);
        keys.push_back(std::move(key));
    }
    if (keys.empty()) {
        return tl::make_unexpected(fmt::format("{}: no key (one key per line: {} to {} hex digits, "
                                               "e.g. from `openssl rand -hex 32`)",
                                               origin, 2 * k_min_key_bytes, 2 * k_max_key_bytes));
    }
    return EntrySigner(std::move(keys));
}

tl::expected<EntrySigner, std::string> EntrySigner::load(const std::filesystem::path& file) {
    const auto name = file.string();
    const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return tl::make_unexpected(
            fmt::format("cannot open the signing key file {}: {}", name, std::strerror(errno)));
    }
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat status {};
    if (::fstat(fd, &status) != 0) {
        return tl::make_unexpected(
            fmt::format("cannot inspect the signing key file {}: {}", name, std::strerror(errno)));
    }
    if (!S_ISREG(status.st_mode)) {
        return tl::make_unexpected(fmt::format("signing key file {}: not a regular file", name));
    }
    if (status.st_uid != ::geteuid()) {
        return tl::make_unexpected(
            fmt::format("refusing the signing key file {}: owned by uid {}, not by uid {} (this "
                        "daemon's user)",
                        name, status.st_uid, ::geteuid()));
    }
    if ((status.st_mode & 077) != 0) {
        return tl::make_unexpected(
            fmt::format("refusing the signing key file {}: mode {:04o} lets others read or change "
                        "it; make it 0600 (chmod 600 {})",
                        name, status.st_mode & 07777, name));
    }
    if (static_cast<std::uint64_t>(status.st_size) > k_max_file_size) {
        return tl::make_unexpected(
            fmt::format("signing key file {}: larger than {} bytes", name, k_max_file_size));
    }
    std::string text(static_cast<std::size_t>(status.st_size), '\0');
    std::size_t got = 0;
    while (got < text.size()) {
        const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return tl::make_unexpected(fmt::format("cannot read the signing key file {}: {}", name,
                                                   n < 0 ? std::strerror(errno) : "truncated"));
        }
        got += static_cast<std::size_t>(n);
    }
    auto signer = parse(text, "signing key file " + name);
    OPENSSL_cleanse(text.data(), text.size());
    return signer;
}

EntrySigner::Mac EntrySigner::mac(const Key& key, std::string_view redis_key,
                                  std::string_view value) {
    unsigned char length[8];
    std::uint64_t size = redis_key.size();
    for (int i = 7; i >= 0; --i) {
        length[i] = static_cast<unsigned char>(size & 0xFF);
        size >>= 8;
    }
    char digest_name[] = "SHA256";
    const OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0),
        OSSL_PARAM_construct_end(),
    };
    EVP_MAC_CTX* context = EVP_MAC_CTX_new(hmac());
    Mac result{};
    std::size_t written = 0;
    const auto update = [&](const void* data, std::size_t size) {
        return EVP_MAC_update(context, static_cast<const unsigned char*>(data), size) == 1;
    };
    const bool ok = context != nullptr &&
                    EVP_MAC_init(context, key.secret.data(), key.secret.size(), params) == 1 &&
                    update(k_mac_domain.data(), k_mac_domain.size()) &&
                    update(length, sizeof(length)) && update(redis_key.data(), redis_key.size()) &&
                    update(value.data(), value.size()) &&
                    EVP_MAC_final(context, result.data(), &written, result.size()) == 1 &&
                    written == result.size();
    EVP_MAC_CTX_free(context);
    if (!ok) {
        throw std::runtime_error("HMAC-SHA256 failed");
    }
    return result;
}

std::string EntrySigner::sign(std::string_view redis_key, std::string_view value) const {
    const Key& key = m_keys.front();
    const auto digest = mac(key, redis_key, value);
    return fmt::format("{}{}:{}", k_signature_version, key.id,
                       to_hex(digest.data(), digest.size()));
}

bool EntrySigner::verify(std::string_view redis_key, std::string_view value,
                         std::string_view signature) const {
    if (signature.size() != k_signature_size || !signature.starts_with(k_signature_version) ||
        signature[k_signature_version.size() + k_key_id_digits] != ':') {
        return false;
    }
    const auto id = signature.substr(k_signature_version.size(), k_key_id_digits);
    const auto given = signature.substr(k_signature_version.size() + k_key_id_digits + 1);
    for (const auto& key : m_keys) {
        if (key.id != id) {
            continue;
        }
        const auto digest = mac(key, redis_key, value);
        const auto expected = to_hex(digest.data(), digest.size());
        // Two keys could share an id (1 in 2^32): try each that does.
        if (CRYPTO_memcmp(expected.data(), given.data(), expected.size()) == 0) {
            return true;
        }
    }
    return false;
}

} // namespace pt2cache::daemon::store
