// SPDX-License-Identifier: MIT
#pragma once

#include <cstddef>
#include <fcntl.h>
#include <span>
#include <string>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace pt2cache::client::cxx {

// A read-only mapping of a whole file.
class MappedFile {
public:
    explicit MappedFile(const std::string& path) {
        // O_NONBLOCK: a FIFO must not hold the open (fstat refuses it).
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) {
            return;
        }
        struct stat st {};
        if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
            m_size = static_cast<std::size_t>(st.st_size);
            m_mode = st.st_mode;
            if (m_size == 0) {
                m_ok = true;
            } else {
                void* data = ::mmap(nullptr, m_size, PROT_READ, MAP_PRIVATE, fd, 0);
                if (data != MAP_FAILED) {
                    m_data = data;
                    m_ok = true;
                }
            }
        }
        ::close(fd);
    }
    ~MappedFile() {
        if (m_data != nullptr) {
            ::munmap(m_data, m_size);
        }
    }
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    bool ok() const { return m_ok; }
    mode_t mode() const { return m_mode; }
    std::span<const std::byte> bytes() const {
        return {static_cast<const std::byte*>(m_data), m_data != nullptr ? m_size : 0};
    }

private:
    void* m_data = nullptr;
    std::size_t m_size = 0;
    mode_t m_mode = 0;
    bool m_ok = false;
};

} // namespace pt2cache::client::cxx
