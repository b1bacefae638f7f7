// SPDX-License-Identifier: MIT
// SmallStore's environment: opening (and refusing) small.mdb, recovery,
// usage, growing the map and compaction.
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <lmdb.h>
#include <mutex>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>
#include <vector>

#include "daemon/store/disk/disk_small_lmdb.hpp"
#include "daemon/store/disk/disk_small_store.hpp"
#include "daemon/store/disk/fault_guard.hpp"
#include "daemon/store/disk/posix_file.hpp"
#include "daemon/store/log.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace pt2cache::daemon::store {

using namespace small_lmdb;

namespace {

// What compaction copies between two commits of its copy: far below LMDB's
// bound on one write transaction's dirty pages (MDB_IDL_UM_MAX: 131,072).
constexpr std::size_t k_copy_batch_bytes = std::size_t{16} << 20U;

// The smallest map open_env tries when a larger one does not fit.
constexpr std::uint64_t k_min_map_size = std::uint64_t{64} << 20U;

// LMDB creates its lock file with ftruncate, which leaves it sparse, and
// writes it through a shared mapping: on a full filesystem the first write
// to a page without a block is a SIGBUS. The file's blocks are allocated
// here first, so that a full filesystem is an open error instead. LMDB keeps
// a lock file larger than it needs (it takes more reader slots).
constexpr off_t k_lock_file_bytes = (k_max_readers + 4) * 64 + 4096;

tl::expected<void, std::string> allocate_lock_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        return tl::make_unexpected(fmt::format("cannot open {}: {}", path, errno_text(errno)));
    }
    const int rc = ::posix_fallocate(fd, 0, k_lock_file_bytes);
    ::close(fd);
    if (rc != 0) {
        return tl::make_unexpected(fmt::format("cannot allocate {}: {}", path, errno_text(rc)));
    }
    return {};
}

} // namespace

// LMDB's assertions end the guarded call instead of aborting the daemon: the
// store is then quarantined.
void small_lmdb::leave_on_assert(MDB_env* /*env*/, const char* message) {
    logger().error("LMDB: {}", message);
    leave_guarded();
}

void small_lmdb::keep_abandoned(const void* what) {
    static std::mutex mutex;
    static auto* kept = new std::vector<const void*>(); // never freed
    std::lock_guard lock(mutex);
    kept->push_back(what);
}

SmallStore::SmallStore(std::string path, std::uint64_t map_size)
    : m_path(std::move(path))
    , m_map_size(map_size) {}

SmallStore::~SmallStore() = default;

tl::expected<std::unique_ptr<SmallStore>, std::string>
SmallStore::open(const std::string& path, std::uint64_t map_size, bool& recovered) {
    recovered = false;
    install_fault_handlers();
    std::unique_ptr<SmallStore> store(new SmallStore(path, map_size));
    std::unique_lock lock(store->m_env_mutex);
    bool refused = false;
    auto opened = store->open_env(refused);
    if (!opened && refused) {
        // The lock file may be what LMDB refused: it holds nothing durable.
        store->close_env_locked();
        ::unlink((path + "-lock").c_str());
        opened = store->open_env(refused);
    }
    if (!opened && refused) {
        logger().error("small-entry store {} is unusable ({}): moved to {}.broken, starting a "
                       "fresh one",
                       path, opened.error(), path);
        store->close_env_locked();
        ::rename(path.c_str(), (path + ".broken").c_str());
        ::unlink((path + "-lock").c_str());
        recovered = true;
        opened = store->open_env(refused);
    }
    if (!opened) {
        return tl::make_unexpected(opened.error());
    }
    return store;
}

void SmallStore::set_on_quarantine(std::function<void(const QuarantinedStore&)> on_quarantine) {
    m_on_quarantine = std::move(on_quarantine);
}

void SmallStore::set_during_copy(std::function<void()> during_copy) {
    m_during_copy = std::move(during_copy);
}

void SmallStore::set_after_copy(std::function<void()> after_copy) {
    m_after_copy = std::move(after_copy);
}

std::uint64_t SmallStore::generation() const {
    std::shared_lock lock(m_env_mutex);
    return m_generation;
}

void SmallStore::set_aside(std::uint64_t generation, std::string_view why) {
    quarantine(generation, false, why);
}

void SmallStore::set_aside_if_detached() {
    std::uint64_t generation = 0;
    {
        std::shared_lock lock(m_env_mutex);
        int fd = -1;
        struct stat opened {};
        if (!m_env || mdb_env_get_fd(m_env->env, &fd) != 0 || ::fstat(fd, &opened) != 0) {
            return;
        }
        struct stat named {};
        if (::stat(m_path.c_str(), &named) == 0 && named.st_ino == opened.st_ino &&
            named.st_dev == opened.st_dev) {
            return;
        }
        generation = m_generation;
    }
    quarantine(generation, false, "the file was removed or replaced under the daemon");
}

void SmallStore::quarantine(std::uint64_t generation, bool faulted, std::string_view why) {
    QuarantinedStore quarantined{m_path + ".broken", 0, 0};
    {
        std::unique_lock lock(m_env_mutex);
        if (!m_env || m_generation != generation) {
            return; // another thread replaced it already
        }
        quarantined.txnid = m_env->last_txnid.load();
        if (faulted) {
            // LMDB was interrupted inside a transaction: the environment is
            // never used or closed again (its memory and mapping stay).
            keep_abandoned(m_env.release());
        } else {
            close_env_locked(); // no transaction is left open on it
        }
        logger().error("small-entry store {} is corrupt ({}): moved to {}.broken, starting a "
                       "fresh one",
                       m_path, why, m_path);
        ::rename(m_path.c_str(), (m_path + ".broken").c_str());
        ::unlink((m_path + "-lock").c_str());
        bool refused = false;
        if (auto opened = open_env(refused); !opened) {
            logger().error("small-entry store {}: {}", m_path, opened.error());
        }
        quarantined.generation = m_generation;
        m_quarantines.fetch_add(1, std::memory_order_release);
    }
    if (m_on_quarantine) {
        m_on_quarantine(quarantined);
    }
}

void SmallStore::reopen_if_closed() {
    std::unique_lock lock(m_env_mutex);
    const auto now = std::chrono::steady_clock::now();
    if (m_env || now < m_next_reopen) {
        return;
    }
    m_next_reopen = now + k_reopen_interval;
    // The cache directory itself may have been deleted under the daemon.
    std::error_code ignored;
    std::filesystem::create_directories(std::filesystem::path(m_path).parent_path(), ignored);
    bool refused = false;
    if (auto opened = open_env(refused); !opened) {
        logger().error("small-entry store {} is still closed: {}", m_path, opened.error());
        return;
    }
    logger().warn("small-entry store {} reopened", m_path);
}

void SmallStore::close_env_locked() {
    m_env.reset();
}

tl::expected<std::unique_ptr<SmallStore::Env>, std::string> SmallStore::new_env() const {
    auto env = std::make_unique<Env>();
    if (const int rc = mdb_env_create(&env->env); rc != 0) {
        env->env = nullptr;
        return tl::make_unexpected(fmt::format("mdb_env_create: {}", mdb_text(rc)));
    }
    mdb_env_set_assert(env->env, leave_on_assert);
    mdb_env_set_maxdbs(env->env, 4);
    mdb_env_set_mapsize(env->env, m_map_size.load());
    return env;
}

tl::expected<void, std::string> SmallStore::open_env(bool& refused) {
    refused = false;
    auto created = new_env();
    if (!created) {
        return tl::make_unexpected(created.error());
    }
    auto env = std::move(*created);
    mdb_env_set_maxreaders(env->env, k_max_readers);
    if (auto allocated = allocate_lock_file(m_path + "-lock"); !allocated) {
        return allocated;
    }
    // Guarded too: a lock file that loses its blocks after all (another
    // process truncates it) would fault in the writes below, not corrupt
    // the store.
    int rc = 0;
    auto open_files = [&] { rc = mdb_env_open(env->env, m_path.c_str(), k_env_flags, 0600); };
    if (!run_guarded(open_files)) {
        keep_abandoned(env.release()); // interrupted inside LMDB: never closed
        return tl::make_unexpected(
            fmt::format("cannot open {}: LMDB faulted writing its lock file", m_path));
    }
    if (rc == ENOMEM && m_map_size.load() / 2 >= k_min_map_size) {
        // The map does not fit the address space (ulimit -v): a smaller one
        // holds fewer entries (a full map evicts) rather than none, which
        // would put small entries in files beside the store's.
        const std::uint64_t smaller = m_map_size.load() / 2;
        logger().warn("{}: a map of {} bytes does not fit the address space: trying {}", m_path,
                      m_map_size.load(), smaller);
        m_map_size.store(smaller);
        env.reset();
        return open_env(refused);
    }
    if (rc != 0) {
        refused = is_refusal(rc);
        return tl::make_unexpected(fmt::format("cannot open {}: {}", m_path, mdb_text(rc)));
    }
    // A file shorter than its meta page says would fault (SIGBUS) on access.
    MDB_envinfo info{};
    MDB_stat stat{};
    mdb_env_info(env->env, &info);
    mdb_env_stat(env->env, &stat);
    env->page_size = stat.ms_psize;
    struct stat file {};
    if (::stat(m_path.c_str(), &file) != 0) {
        return tl::make_unexpected(fmt::format("cannot stat {}: {}", m_path, errno_text(errno)));
    }
    const std::uint64_t needed =
        (static_cast<std::uint64_t>(info.me_last_pgno) + 1) * stat.ms_psize;
    if (info.me_last_pgno > 1 && static_cast<std::uint64_t>(file.st_size) < needed) {
        refused = true;
        return tl::make_unexpected(
            fmt::format("truncated: {} bytes, its pages need {}", file.st_size, needed));
    }
    // Opening reads the main tree: a corrupt page faults (fault_guard.hpp).
    tl::expected<void, std::string> opened;
    auto open_databases = [&] { opened = open_databases_locked(*env, refused); };
    if (!run_guarded(open_databases)) {
        refused = true;
        abandon_open_cursors();
        keep_abandoned(env.release()); // mid-transaction: never closed (see quarantine())
        return tl::make_unexpected("LMDB faulted on its pages: the file is corrupt");
    }
    if (!opened) {
        return opened;
    }
    m_env = std::move(env);
    ++m_generation;
    refresh_usage_locked();
    return {};
}

tl::expected<void, std::string> SmallStore::open_databases_locked(Env& opening, bool& refused) {
    Env* const env = &opening;
    int rc = 0;
    Txn txn(env->env, false, rc);
    if (rc != 0) {
        refused = is_refusal(rc);
        return tl::make_unexpected(fmt::format("mdb_txn_begin: {}", mdb_text(rc)));
    }
    for (const auto& [name, dbi] : {std::pair{"entries", &env->entries},
                                    std::pair{"meta", &env->meta}, std::pair{"info", &env->info}}) {
        rc = mdb_dbi_open(txn.get(), name, MDB_CREATE, dbi);
        if (rc != 0) {
            refused = is_refusal(rc) || rc == MDB_INCOMPATIBLE;
            return tl::make_unexpected(fmt::format("database {}: {}", name, mdb_text(rc)));
        }
    }
    MDB_val key = val_of("format");
    MDB_val value{};
    rc = mdb_get(txn.get(), env->info, &key, &value);
    if (rc == MDB_NOTFOUND) {
        MDB_stat entries{};
        mdb_stat(txn.get(), env->entries, &entries);
        if (entries.ms_entries != 0) {
            refused = true;
            return tl::make_unexpected("entries without a format record");
        }
        const std::array<unsigned char, 4> version = {k_format_version, 0, 0, 0};
        value = MDB_val{version.size(), const_cast<unsigned char*>(version.data())};
        rc = mdb_put(txn.get(), env->info, &key, &value, 0);
    } else if (rc == 0) {
        std::uint32_t version = 0;
        if (value.mv_size == 4) {
            std::memcpy(&version, value.mv_data, 4); // little-endian hosts only (x86-64, arm64)
        }
        if (version != k_format_version) {
            refused = true;
            return tl::make_unexpected(
                fmt::format("format {} (this daemon reads {})", version, k_format_version));
        }
    }
    if (rc != 0) {
        refused = is_refusal(rc);
        return tl::make_unexpected(fmt::format("format record: {}", mdb_text(rc)));
    }
    rc = txn.commit();
    if (rc != 0) {
        refused = is_refusal(rc);
        return tl::make_unexpected(fmt::format("commit: {}", mdb_text(rc)));
    }
    return {};
}

void SmallStore::refresh_usage_locked() {
    if (!m_env) {
        return;
    }
    int rc = 0;
    Txn txn(m_env->env, true, rc);
    if (rc != 0) {
        return;
    }
    std::uint64_t pages = 2; // the meta pages
    for (const MDB_dbi dbi : {MDB_dbi{0}, MDB_dbi{1}, m_env->entries, m_env->meta, m_env->info}) {
        MDB_stat stat{};
        if (mdb_stat(txn.get(), dbi, &stat) == 0) {
            pages += stat.ms_branch_pages + stat.ms_leaf_pages + stat.ms_overflow_pages;
        }
    }
    m_used_bytes.store(pages * m_env->page_size, std::memory_order_relaxed);
    m_env->last_txnid.store(mdb_txn_id(txn.get()));
    int fd = -1;
    struct stat file {};
    if (mdb_env_get_fd(m_env->env, &fd) == 0 && ::fstat(fd, &file) == 0) {
        m_file_bytes.store(static_cast<std::uint64_t>(file.st_blocks) * 512,
                           std::memory_order_relaxed);
    }
}

void SmallStore::grow_map() {
    std::unique_lock lock(m_env_mutex);
    if (!m_env) {
        return;
    }
    // No transaction is active: every one runs under the shared lock.
    const std::uint64_t grown = m_map_size.load() + m_map_size.load() / 2;
    if (mdb_env_set_mapsize(m_env->env, grown) == 0) {
        m_map_size.store(grown);
        logger().warn("{}: map grown to {} bytes to make room for deletes", m_path, grown);
    }
}

tl::expected<std::unique_ptr<SmallStore::Env>, std::string>
SmallStore::create_copy(const std::string& path) {
    ::unlink(path.c_str());
    auto copy = new_env();
    if (!copy) {
        return copy;
    }
    // Compaction's thread is its only user (no lock file), and syncs it once.
    const int rc =
        mdb_env_open((*copy)->env, path.c_str(), MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOSYNC, 0600);
    if (rc != 0) {
        return tl::make_unexpected(fmt::format("cannot create {}: {}", path, mdb_text(rc)));
    }
    return copy;
}

int SmallStore::copy_trees(Env& source, MDB_txn* read, Env& copy) {
    int rc = 0;
    std::optional<Txn> txn;
    txn.emplace(copy.env, false, rc);
    if (rc != 0) {
        return rc;
    }
    for (const auto& [name, dbi] : {std::pair{"entries", &copy.entries},
                                    std::pair{"meta", &copy.meta}, std::pair{"info", &copy.info}}) {
        if (rc = mdb_dbi_open(txn->get(), name, MDB_CREATE, dbi); rc != 0) {
            return rc;
        }
    }
    std::size_t batch = 0;
    for (const auto& [from, to] :
         {std::pair{source.entries, copy.entries}, std::pair{source.meta, copy.meta},
          std::pair{source.info, copy.info}}) {
        Cursor cursor(read, from, rc);
        MDB_val key{};
        MDB_val value{};
        for (rc = rc != 0 ? rc : mdb_cursor_get(cursor.get(), &key, &value, MDB_FIRST); rc == 0;
             rc = mdb_cursor_get(cursor.get(), &key, &value, MDB_NEXT)) {
            // In key order: each key goes after the last, into full pages.
            if (rc = mdb_put(txn->get(), to, &key, &value, MDB_APPEND); rc != 0) {
                // Keys out of order, or of a size no key of the store has.
                const bool bad_source = rc == MDB_KEYEXIST || rc == MDB_BAD_VALSIZE;
                return bad_source ? MDB_CORRUPTED : rc;
            }
            if (m_during_copy) {
                std::exchange(m_during_copy, {})();
            }
            batch += key.mv_size + value.mv_size;
            if (batch >= k_copy_batch_bytes) {
                if (rc = txn->commit(); rc != 0) {
                    return rc;
                }
                txn.emplace(copy.env, false, rc);
                if (rc != 0) {
                    return rc;
                }
                batch = 0;
            }
        }
        if (rc != MDB_NOTFOUND) {
            return rc;
        }
    }
    return txn->commit();
}

tl::expected<void, std::string> SmallStore::compact() {
    std::lock_guard write_lock(m_write_mutex);
    const std::string copy_path = m_path + ".compact";
    auto copy = create_copy(copy_path);
    if (!copy) {
        ::unlink(copy_path.c_str());
        return tl::make_unexpected(copy.error());
    }
    // The copy walks each tree with a cursor on this thread, in one guarded
    // read transaction (writes wait until it is done, reads go on), and
    // appends what it reads to the copy. A truncated or corrupt file, also
    // one another process changes during the copy, faults inside the guard:
    // the store is quarantined, as after any fault. (LMDB's own mdb_env_copy2
    // walks with a thread of its own, which a fault in the walk would leave
    // waiting on a stack frame the guard jumped out of.)
    std::uint64_t copied = 0; // the generation of the environment copied
    int rc = 0;
    auto walked = in_txn(
        true,
        [&](Env& env, MDB_txn* txn) {
            copied = m_generation; // in_txn holds the lock
            return copy_trees(env, txn, **copy);
        },
        &rc);
    if (walked) {
        if (rc = mdb_env_sync((*copy)->env, 1); rc != 0) {
            walked = tl::make_unexpected(fmt::format("sync {}: {}", copy_path, mdb_text(rc)));
        }
    }
    if (!walked && rc == k_fault) {
        // Interrupted inside a write transaction of the copy: never closed.
        keep_abandoned(copy->release());
    }
    copy->reset();
    if (!walked) {
        ::unlink(copy_path.c_str());
        return walked;
    }
    if (m_after_copy) {
        m_after_copy();
    }
    std::unique_lock lock(m_env_mutex);
    if (m_generation != copied) {
        // Quarantined meanwhile (a read faulted, or found the tree corrupt):
        // the copy is of the old one.
        ::unlink(copy_path.c_str());
        return tl::make_unexpected("the store was replaced while it was copied");
    }
    close_env_locked();
    if (::rename(copy_path.c_str(), m_path.c_str()) != 0) {
        const int error = errno;
        ::unlink(copy_path.c_str());
        bool refused = false;
        if (auto reopened = open_env(refused); !reopened) {
            return reopened;
        }
        return tl::make_unexpected(
            fmt::format("cannot rename {}: {}", copy_path, errno_text(error)));
    }
    bool refused = false;
    return open_env(refused);
}

} // namespace pt2cache::daemon::store
