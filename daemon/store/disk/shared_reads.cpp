// SPDX-License-Identifier: MIT
#include "daemon/store/disk/shared_reads.hpp"

namespace pt2cache::daemon::store {

std::optional<Blob> SharedReads::find(const Hash128& id, std::uint64_t file_size,
                                      std::uint64_t checksum) {
    std::optional<Blob> found;
    std::lock_guard lock(m_mutex);
    const auto it = m_remembered.find(id);
    if (it == m_remembered.end()) {
        return found;
    }
    const Remembered& remembered = it->second;
    if (remembered.file_size == file_size && remembered.checksum == checksum) {
        found = Blob::lock(remembered.value);
    }
    if (!found) {
        m_remembered.erase(it); // released, or another version of the entry
    }
    return found;
}

void SharedReads::remember(const Hash128& id, std::uint64_t file_size, std::uint64_t checksum,
                           const Blob& value) {
    std::lock_guard lock(m_mutex);
    if (m_remembered.size() >= k_max_remembered && !m_remembered.contains(id)) {
        absl::erase_if(m_remembered,
                       [](const auto& item) { return item.second.value.owner.expired(); });
        if (m_remembered.size() >= k_max_remembered) {
            return;
        }
    }
    m_remembered.insert_or_assign(id, Remembered{file_size, checksum, value.weak()});
}

std::size_t SharedReads::size() const {
    std::lock_guard lock(m_mutex);
    return m_remembered.size();
}

} // namespace pt2cache::daemon::store
