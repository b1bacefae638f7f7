// Immutable, shared byte buffers: a memory-tier hit hands out the stored
// buffer itself, never a copy.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace pt2cache::daemon::store {

// A read-only view into a buffer that the view keeps alive. Copying a `Blob`
// copies a pointer, not the bytes.
class Blob {
public:
    Blob() = default;

    // Takes ownership of `bytes`; the view covers all of it.
    static Blob adopt(std::vector<std::byte>&& bytes) {
        auto owner = std::make_shared<const std::vector<std::byte>>(std::move(bytes));
        std::span<const std::byte> view(owner->data(), owner->size());
        return Blob(std::move(owner), view);
    }

    // Copies `bytes` into a new buffer: one allocation (the count and the
    // bytes together), and no zeroing before the copy.
    static Blob copy_of(std::span<const std::byte> bytes) {
        std::shared_ptr<std::byte[]> owner =
            std::make_shared_for_overwrite<std::byte[]>(bytes.size());
        if (!bytes.empty()) {
            std::memcpy(owner.get(), bytes.data(), bytes.size());
        }
        std::span<const std::byte> view(owner.get(), bytes.size());
        return Blob(std::move(owner), view);
    }

    static Blob copy_of(std::string_view text) {
        return copy_of(std::as_bytes(std::span(text.data(), text.size())));
    }

    // A view of `view`, which must lie inside what `owner` keeps alive.
    Blob(std::shared_ptr<const void> owner, std::span<const std::byte> view)
        : m_owner(std::move(owner))
        , m_view(view) {}

    std::span<const std::byte> bytes() const { return m_view; }
    std::string_view text() const {
        return {reinterpret_cast<const char*>(m_view.data()), m_view.size()};
    }
    std::size_t size() const { return m_view.size(); }
    bool empty() const { return m_view.empty(); }

    // A view of `length` bytes starting at `offset` of this view, sharing the
    // same buffer. The range must lie inside this view.
    Blob slice(std::size_t offset, std::size_t length) const {
        return Blob(m_owner, m_view.subspan(offset, length));
    }

    // True when both views share one buffer (used by tests of zero-copy hits).
    bool shares_buffer_with(const Blob& other) const {
        return without_charge().m_owner == other.without_charge().m_owner;
    }

    // A view of the same bytes that also keeps `charge` alive until its last
    // copy is gone (ReadBudget: bytes given back by the charge's destructor).
    // Copies made of the result carry the charge; without_charge() gives the
    // plain view, for a holder that must not keep it.
    Blob with_charge(std::shared_ptr<const void> charge) const {
        const Blob plain = without_charge();
        std::shared_ptr<const void> owner(plain.m_view.data(),
                                          Charged{plain.m_owner, std::move(charge)});
        return Blob(std::move(owner), m_view);
    }
    Blob without_charge() const {
        if (const Charged* charged = std::get_deleter<Charged>(m_owner)) {
            return Blob(charged->owner, m_view);
        }
        return *this;
    }

    // A reference that lock() turns back into the Blob while some copy of it
    // still lives. It keeps the reference counts allocated, and the bytes too
    // when they share that allocation (make_shared): see BlobBuilder.
    struct Weak {
        std::weak_ptr<const void> owner;
        std::span<const std::byte> view;
    };
    // Of this view as it is: lock() gives back its charge (with_charge) too.
    Weak weak() const { return Weak{m_owner, m_view}; }
    static std::optional<Blob> lock(const Weak& weak) {
        auto owner = weak.owner.lock();
        if (!owner) {
            return std::nullopt;
        }
        return Blob(std::move(owner), weak.view);
    }

private:
    // The deleter of a charged view's owner: it owns nothing itself, and
    // lets the buffer and the charge go with the last copy (dispose), not
    // with the last weak reference too.
    struct Charged {
        std::shared_ptr<const void> owner;
        std::shared_ptr<const void> charge;
        void operator()(const void*) {
            charge.reset();
            owner.reset();
        }
    };

    std::shared_ptr<const void> m_owner;
    std::span<const std::byte> m_view;
};

// A new buffer of `size` bytes, not zeroed, to be filled and then shared as a
// Blob: a disk read or a decompression writes every byte anyway, and zeroing
// a 1 MiB value first cost about a tenth of serving it. The bytes are an
// allocation of their own, not one with the reference counts (as
// make_shared's): a Blob::Weak of a value read from disk (SharedReads) must
// not keep its bytes allocated once the last Blob is gone.
class BlobBuilder {
public:
    explicit BlobBuilder(std::size_t size)
        : m_owner(new std::byte[size])
        , m_size(size) {}

    std::span<std::byte> bytes() { return {m_owner.get(), m_size}; }

    // The first `used` bytes (at most the size), as a Blob; the builder is
    // empty afterwards.
    Blob finish(std::size_t used) && {
        const std::span<const std::byte> view(m_owner.get(), std::min(used, m_size));
        m_size = 0;
        return Blob(std::move(m_owner), view);
    }

private:
    std::shared_ptr<std::byte[]> m_owner;
    std::size_t m_size;
};

} // namespace pt2cache::daemon::store
