// A connection's input buffer and its batched output: requests are parsed in
// place from `InputBuffer`, and every reply of one batch goes out in one
// gathered write from `OutputBatch` (large values are referenced, not copied).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include "daemon/asio.hpp"
#include "daemon/store/blob.hpp"

#include <boost/container/small_vector.hpp>

namespace pt2cache::daemon {

class InputBuffer {
public:
    // What every connection may hold without taking from the daemon's
    // in-flight budget. A pipeline of 16 SETs of 1 KiB (17 KB) arrives in one
    // read: with 16 KiB it took two, and its replies went out in two sends.
    static constexpr std::size_t k_base = 32 * 1024;

    explicit InputBuffer(std::size_t initial = k_base)
        : m_bytes(initial) {}

    std::size_t capacity() const { return m_bytes.size(); }

    std::span<const std::byte> readable() const {
        return std::span(m_bytes).subspan(m_begin, m_end - m_begin);
    }
    std::size_t size() const { return m_end - m_begin; }
    void consume(std::size_t count) {
        m_begin += count;
        if (m_begin == m_end) {
            m_begin = m_end = 0;
            // A connection that once received a large frame does not keep
            // that much memory for the rest of its life.
            if (m_bytes.size() > k_keep) {
                m_bytes.resize(k_keep);
                m_bytes.shrink_to_fit();
            }
        }
    }

    // Moves what is still to be read to the front and gives back the
    // capacity beyond it (at least what every connection keeps): before a
    // wait for the client to read, a large request already consumed must not
    // keep its memory because the next one has begun to arrive behind it.
    void shrink_to_content() {
        if (m_bytes.size() <= k_keep || size() > m_bytes.size() / 2) {
            return;
        }
        std::memmove(m_bytes.data(), m_bytes.data() + m_begin, size());
        m_end = size();
        m_begin = 0;
        m_bytes.resize(std::max(m_end, k_keep));
        m_bytes.shrink_to_fit();
    }

    // Room for at least `count` more bytes at the end, compacting or growing.
    asio::mutable_buffer prepare(std::size_t count) {
        if (m_bytes.size() - m_end < count) {
            if (m_begin > 0) {
                std::memmove(m_bytes.data(), m_bytes.data() + m_begin, m_end - m_begin);
                m_end -= m_begin;
                m_begin = 0;
            }
            if (m_bytes.size() - m_end < count) {
                m_bytes.resize(m_end + count);
            }
        }
        return asio::buffer(m_bytes.data() + m_end, m_bytes.size() - m_end);
    }
    void commit(std::size_t count) { m_end += count; }

private:
    // An idle connection keeps no more than a new one (a fixed, small cost).
    static constexpr std::size_t k_keep = k_base;

    std::vector<std::byte> m_bytes;
    std::size_t m_begin = 0;
    std::size_t m_end = 0;
};

class OutputBatch {
public:
    // Small reply bytes are appended here directly.
    std::vector<std::byte>& bytes() { return m_bytes; }

    // A value sent by reference after the bytes appended so far.
    void append_blob(store::Blob blob) {
        if (blob.empty()) {
            return;
        }
        m_blob_bytes += blob.size();
        m_blobs.push_back(Segment{m_bytes.size(), std::move(blob)});
    }

    bool empty() const { return m_bytes.empty() && m_blobs.empty(); }
    // Whether a value is sent by reference (else `bytes()` is the batch).
    bool has_blobs() const { return !m_blobs.empty(); }

    // Bytes a write of this batch sends.
    std::size_t size() const { return m_bytes.size() + m_blob_bytes; }

    void clear() {
        m_bytes.clear();
        m_blobs.clear();
        m_blob_bytes = 0;
        // Large replies (PING echoes, STATS, LIST pages) leave no lasting cost.
        if (m_bytes.capacity() > k_keep) {
            m_bytes.shrink_to_fit();
        }
    }

    // The gathered buffers for one write; valid until the next change. A
    // batch of a few values needs no allocation for them.
    using Buffers = boost::container::small_vector<asio::const_buffer, 8>;
    Buffers buffers() const {
        Buffers out;
        out.reserve(m_blobs.size() * 2 + 1);
        std::size_t at = 0;
        for (const auto& segment : m_blobs) {
            if (segment.offset > at) {
                out.emplace_back(m_bytes.data() + at, segment.offset - at);
            }
            out.emplace_back(segment.blob.bytes().data(), segment.blob.size());
            at = segment.offset;
        }
        if (m_bytes.size() > at) {
            out.emplace_back(m_bytes.data() + at, m_bytes.size() - at);
        }
        return out;
    }

private:
    static constexpr std::size_t k_keep = 16 * 1024;

    struct Segment {
        std::size_t offset; // position in m_bytes where the blob goes
        store::Blob blob;
    };
    std::vector<std::byte> m_bytes;
    std::vector<Segment> m_blobs;
    std::size_t m_blob_bytes = 0;
};

} // namespace pt2cache::daemon
