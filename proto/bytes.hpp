// Bounds-checked little-endian reading and writing over byte spans, for the
// codec in docs/protocol.md. No I/O: a reader that runs out of bytes reports
// underflow, it never reads past its span.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

namespace pt2cache::proto {

static_assert(std::endian::native == std::endian::little,
              "the codec writes integers with memcpy and assumes a little-endian host");

class ByteReader {
public:
    explicit ByteReader(std::span<const std::byte> bytes)
        : m_bytes(bytes) {}

    // False once any read ran past the end; later reads return zero values.
    bool ok() const { return m_ok; }
    std::size_t remaining() const { return m_bytes.size() - m_pos; }
    bool at_end() const { return m_ok && m_pos == m_bytes.size(); }

    template <typename T>
    T integer() requires std::is_unsigned_v<T> {
        T value{};
        if (take(sizeof(T))) {
            std::memcpy(&value, m_bytes.data() + m_pos - sizeof(T), sizeof(T));
        }
        return value;
    }

    std::span<const std::byte> bytes(std::size_t count) {
        if (!take(count)) {
            return {};
        }
        return m_bytes.subspan(m_pos - count, count);
    }

    std::string_view text(std::size_t count) {
        auto span = bytes(count);
        return {reinterpret_cast<const char*>(span.data()), span.size()};
    }

    std::string_view str8() { return text(integer<std::uint8_t>()); }
    std::string_view str16() { return text(integer<std::uint16_t>()); }

    std::span<const std::byte> rest() { return bytes(remaining()); }

private:
    bool take(std::size_t count) {
        if (!m_ok || count > remaining()) {
            m_ok = false;
            return false;
        }
        m_pos += count;
        return true;
    }

    std::span<const std::byte> m_bytes;
    std::size_t m_pos = 0;
    bool m_ok = true;
};

// Appends to a byte vector. String lengths are checked by the caller against
// the protocol limits before they get here.
class ByteWriter {
public:
    explicit ByteWriter(std::vector<std::byte>& out)
        : m_out(out) {}

    template <typename T>
    ByteWriter& integer(T value) requires std::is_unsigned_v<T> {
        const auto* p = reinterpret_cast<const std::byte*>(&value);
        m_out.insert(m_out.end(), p, p + sizeof(T));
        return *this;
    }

    ByteWriter& bytes(std::span<const std::byte> bytes) {
        m_out.insert(m_out.end(), bytes.begin(), bytes.end());
        return *this;
    }

    ByteWriter& text(std::string_view text) {
        return bytes(std::as_bytes(std::span(text.data(), text.size())));
    }

    // Length-prefixed strings. Callers check protocol limits first; a longer
    // string is cut to what its length field can say, so the frame stays
    // well-formed.
    ByteWriter& str8(std::string_view s) {
        s = s.substr(0, std::numeric_limits<std::uint8_t>::max());
        integer(static_cast<std::uint8_t>(s.size()));
        return text(s);
    }

    ByteWriter& str16(std::string_view s) {
        s = s.substr(0, std::numeric_limits<std::uint16_t>::max());
        integer(static_cast<std::uint16_t>(s.size()));
        return text(s);
    }

private:
    std::vector<std::byte>& m_out;
};

inline std::span<const std::byte> as_bytes(std::string_view text) {
    return std::as_bytes(std::span(text.data(), text.size()));
}

inline std::string_view as_text(std::span<const std::byte> bytes) {
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

} // namespace pt2cache::proto
