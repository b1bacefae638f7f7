#include "daemon/server.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <memory>
#include <thread>
#include <unistd.h>
#include <vector>

#include "daemon/connection.hpp"
#include "daemon/log.hpp"
#include "daemon/metrics_http.hpp"
#include "daemon/socket_setup.hpp"
#include "daemon/store_factory.hpp"
#include "daemon/watchdog.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <systemd/sd-daemon.h>

namespace pt2cache::daemon {

namespace fs = std::filesystem;

void Context::touch() {
    last_activity_ms.store(store::now_ms(), std::memory_order_relaxed);
}

ConnectionRegistry::Admission ConnectionRegistry::add(const std::shared_ptr<Connection>& connection,
                                                      pid_t pid, unsigned max_total,
                                                      unsigned max_per_process) {
    std::lock_guard lock(m_mutex);
    if (m_connections.size() >= max_total) {
        return Admission::over_total;
    }
    auto& from_process = m_per_process[pid];
    if (from_process >= max_per_process) {
        if (from_process == 0) {
            m_per_process.erase(pid);
        }
        return Admission::over_process;
    }
    ++from_process;
    m_connections.emplace(connection.get(), Entry{connection, pid});
    return Admission::admitted;
}

void ConnectionRegistry::remove(const Connection* connection) {
    std::lock_guard lock(m_mutex);
    const auto found = m_connections.find(connection);
    if (found == m_connections.end()) {
        return;
    }
    const auto process = m_per_process.find(found->second.pid);
    if (process != m_per_process.end() && --process->second == 0) {
        m_per_process.erase(process);
    }
    m_connections.erase(found);
}

void ConnectionRegistry::shutdown_reads() {
    std::lock_guard lock(m_mutex);
    for (auto& [_, entry] : m_connections) {
        if (auto connection = entry.connection.lock()) {
            connection->shutdown_read();
        }
    }
}

std::size_t ConnectionRegistry::size() const {
    std::lock_guard lock(m_mutex);
    return m_connections.size();
}

namespace {

constexpr auto k_drain_deadline = std::chrono::seconds(10);

class Server {
public:
    Server(config::Loaded loaded, config::LoadOptions reload_options)
        : m_loaded(std::move(loaded))
        , m_reload_options(std::move(reload_options))
        , m_io(1)
        , m_loops(make_loops(m_loaded.config.io_threads))
        , m_blocking(m_loaded.config.blocking_threads)
        , m_hashing(k_hashing_threads)
        , m_acceptor(m_io)
        , m_signals(m_io, SIGINT, SIGTERM, SIGHUP)
        , m_idle_timer(m_io)
        , m_bundle_timer(m_io)
        , m_drain_timer(m_io)
        , m_watchdog(m_io, loop_pointers()) {
        for (auto& loop : m_loops) {
            m_loop_guards.push_back(asio::make_work_guard(*loop));
        }
    }

    int run();

private:
    // The loops of the I/O threads after the first, one each.
    static std::vector<std::unique_ptr<asio::io_context>> make_loops(unsigned io_threads) {
        std::vector<std::unique_ptr<asio::io_context>> loops;
        for (unsigned i = 1; i < io_threads; ++i) {
            loops.push_back(std::make_unique<asio::io_context>(1));
        }
        return loops;
    }
    std::vector<asio::io_context*> loop_pointers() const {
        std::vector<asio::io_context*> out;
        for (const auto& loop : m_loops) {
            out.push_back(loop.get());
        }
        return out;
    }
    // Takes the socket's and the cache directory's locks (Fatal when held).
    void lock_instance(bool inherited);
    void listen(std::optional<int> inherited);
    awaitable<void> accept_loop();
    void refuse(Connection& connection, ConnectionRegistry::Admission why);
    void wait_for_signal();
    void reload();
    void apply_reload(const tl::expected<config::Loaded, config::ConfigError>& loaded);
    void stop(std::string_view why);
    void arm_idle_timer();
    void arm_bundle_sweep();
    void set_bundle_timeout(unsigned seconds);

    config::Loaded m_loaded;
    config::LoadOptions m_reload_options;
    std::uint64_t m_reload_generation = 0; // of the last SIGHUP (loop thread only)
    Context m_context;
    ConnectionRegistry m_registry;
    // The first I/O thread's loop: the listener, signals and timers, and its
    // share of the connections. Each further I/O thread runs its own loop
    // (m_loops), so a connection lives on one thread and its requests never
    // hop between threads.
    asio::io_context m_io;
    std::vector<std::unique_ptr<asio::io_context>> m_loops;
    std::vector<asio::executor_work_guard<asio::io_context::executor_type>> m_loop_guards;
    std::size_t m_next_loop = 0;
    asio::thread_pool m_blocking;
    // HASH_FILES' own workers: a request may hash for up to 2 s, and a few
    // such requests on m_blocking kept every disk get and put waiting (a
    // review: 2 s for a 100 KiB GET).
    static constexpr std::size_t k_hashing_threads = 2;
    asio::thread_pool m_hashing;
    UnixAcceptor m_acceptor;
    asio::signal_set m_signals;
    asio::steady_timer m_idle_timer;
    asio::steady_timer m_bundle_timer;
    std::atomic<unsigned> m_bundle_timeout_s{600};
    asio::steady_timer m_drain_timer;
    Watchdog m_watchdog;
    std::unique_ptr<InstanceLock> m_lock;         // the socket's
    std::unique_ptr<InstanceLock> m_cache_lock;   // the cache directory's
    std::unique_ptr<MetricsHttpServer> m_metrics; // metrics.listen, when set
    fs::path m_bound_path;                        // unlinked at exit when we created it
    std::uint64_t m_next_id = 0;
    std::chrono::steady_clock::time_point m_last_refusal_log{};
};

int Server::run() {
    const auto started = std::chrono::steady_clock::now();
    auto& log = logger("daemon");
    const auto& config = m_loaded.config;
    for (const auto& warning : m_loaded.warnings) {
        log.warn("{}", warning);
    }

    m_context.config = config;
    // A bare file name means the current directory; keep it absolute from here.
    m_context.config.socket_path = fs::absolute(config.socket_path).string();
    m_context.max_value = config.max_value_size;
    m_context.inflight.set_limit(config.max_inflight_bytes);
    m_context.max_reply_bytes = config.max_reply_bytes;
    m_context.reads->set_limit(config.max_reply_bytes);
    std::string fit_warning;
    m_context.config.max_connections = fit_connection_limit(config.max_connections, fit_warning);
    if (!fit_warning.empty()) {
        log.warn("{}", fit_warning);
    }
    m_context.blocking = &m_blocking;
    m_context.hashing = &m_hashing;
    // Before the store touches the cache directory (its startup scan may
    // compact small.mdb): a second daemon on the same socket or the same
    // cache is refused here, with nothing of the first one's touched.
    const std::optional<int> inherited = inherited_listener();
    lock_instance(inherited.has_value());
    m_context.store = make_store(m_context.config, m_context.stats, m_context.reads);
    set_bundle_timeout(config.bundle_idle_timeout_s);
    m_context.touch();

    // Before the cache socket: a bad metrics.listen leaves nothing behind.
    if (!config.metrics_listen.empty()) {
        auto address = config::parse_listen_address(config.metrics_listen);
        if (!address) {
            throw Fatal(fmt::format("metrics.listen: {}", address.error()), 2);
        }
        m_metrics = std::make_unique<MetricsHttpServer>(m_context, *address);
        m_metrics->start();
    }
    listen(inherited);
    asio::co_spawn(m_io, accept_loop(), asio::detached);
    wait_for_signal();
    arm_idle_timer();
    arm_bundle_sweep();

    const auto ready_us = std::chrono::duration_cast<std::chrono::microseconds>(
                              std::chrono::steady_clock::now() - started)
                              .count();
    log.info("ready on {} (cache {}, {} io threads, {} workers) in {:.1f} ms",
             m_context.config.socket_path, config.cache_dir, config.io_threads,
             config.blocking_threads, ready_us / 1000.0);
    ::sd_notifyf(0, "READY=1\nSTATUS=serving on %s\nMAINPID=%ld", config.socket_path.c_str(),
                 static_cast<long>(::getpid()));
    m_watchdog.start();

    std::vector<std::thread> threads;
    for (auto& loop : m_loops) {
        threads.emplace_back([&loop] { loop->run(); });
    }
    m_io.run();
    // Stopped: the other loops end once their connections are gone.
    m_loop_guards.clear();
    for (auto& thread : threads) {
        thread.join();
    }
    m_metrics.reset();
    m_blocking.join();
    m_hashing.join();
    // The queued writes go to disk first (DiskTier's destructor), then the
    // socket and the locks: a daemon started meanwhile is refused until
    // they are written, rather than reading the cache beside them.
    m_context.store.reset();
    if (!m_bound_path.empty()) {
        ::unlink(m_bound_path.c_str());
    }
    m_cache_lock.reset();
    m_lock.reset();
    if (const auto abandoned = m_context.stats.daemon().writes_abandoned.load()) {
        log.error("stopped: {} acknowledged puts were not written to disk", abandoned);
        return 1;
    }
    log.info("stopped");
    return 0;
}

void Server::lock_instance(bool inherited) {
    const fs::path socket_path = m_context.config.socket_path; // absolute
    // A socket passed by systemd is locked too, so that a daemon started by
    // hand cannot replace it; its directory is systemd's to check.
    if (!inherited) {
        prepare_socket_directory(socket_path.parent_path());
    }
    m_lock = std::make_unique<InstanceLock>(
        fs::path(socket_path).concat(".lock"),
        fmt::format("pt2cached is already running on {}", socket_path.string()), inherited);
    if (m_context.config.disk_max_size > 0) {
        const fs::path root = m_context.config.cache_dir;
        std::error_code ec;
        fs::create_directories(root, ec);
        if (ec) {
            throw Fatal(
                fmt::format("cannot create cache directory {}: {}", root.string(), ec.message()));
        }
        m_cache_lock = std::make_unique<InstanceLock>(
            root / "pt2cached.lock",
            fmt::format("cache directory {} is in use by another pt2cached", root.string()));
    }
}

void Server::listen(std::optional<int> inherited) {
    const fs::path socket_path = m_context.config.socket_path; // absolute
    std::optional<int> fd = inherited;
    if (fd) {
        logger("daemon").info("using the socket passed by systemd");
    } else {
        fd = bind_listener(socket_path);
        m_bound_path = socket_path;
    }
    m_acceptor.assign(asio::local::stream_protocol(), *fd);
}

awaitable<void> Server::accept_loop() {
    auto executor = co_await asio::this_coro::executor;
    asio::steady_timer backoff(executor);
    while (!m_context.stopping) {
        boost::system::error_code ec;
        // Connections go to the loops in turn.
        const std::size_t pick = m_next_loop++ % (m_loops.size() + 1);
        asio::io_context& loop = pick == 0 ? m_io : *m_loops[pick - 1];
        auto socket =
            co_await m_acceptor.async_accept(loop, asio::redirect_error(use_awaitable, ec));
        if (ec) {
            if (m_context.stopping || ec == asio::error::operation_aborted) {
                co_return;
            }
            // Out of descriptors, say: back off instead of spinning.
            logger("daemon").warn("accept failed: {}", ec.message());
            backoff.expires_after(std::chrono::milliseconds(100));
            co_await backoff.async_wait(asio::redirect_error(use_awaitable, ec));
            continue;
        }
        auto connection = std::make_shared<Connection>(std::move(socket), m_context, ++m_next_id);
        const auto admission =
            m_registry.add(connection, connection->peer_pid(), m_context.config.max_connections,
                           m_context.config.max_connections_per_process);
        if (admission != ConnectionRegistry::Admission::admitted) {
            refuse(*connection, admission);
            continue;
        }
        asio::co_spawn(
            connection->executor(),
            [this, connection]() -> awaitable<void> {
                co_await connection->run();
                // Out of the registry first: its shutdown_reads(), on
                // another thread, must not reach a closed descriptor.
                m_registry.remove(connection.get());
                connection->close();
            },
            asio::detached);
    }
}

void Server::refuse(Connection& connection, ConnectionRegistry::Admission why) {
    m_context.stats.daemon().connections_over_limit++;
    const bool total = why == ConnectionRegistry::Admission::over_total;
    // Rate-limited: a flood of connections must not become a flood of logs.
    const auto now = std::chrono::steady_clock::now();
    if (now - m_last_refusal_log >= std::chrono::seconds(1)) {
        m_last_refusal_log = now;
        logger("daemon").warn(
            "refused a connection from pid {}: {} (daemon.{} = {}); "
            "{} refused so far",
            connection.peer_pid(), total ? "too many connections" : "too many from that process",
            total ? "max_connections" : "max_connections_per_process",
            total ? m_context.config.max_connections : m_context.config.max_connections_per_process,
            m_context.stats.daemon().connections_over_limit.load());
    }
    // Redis's own refusal: RESP clients show it as an error, and the native
    // clients recognise a leading '-' as a refusal (docs/protocol.md).
    connection.refuse(total ? "ERR max number of clients reached"
                            : "ERR max number of clients per process reached");
}

void Server::wait_for_signal() {
    m_signals.async_wait([this](const boost::system::error_code& ec, int signal) {
        if (ec) {
            return;
        }
        if (signal == SIGHUP) {
            reload();
            wait_for_signal();
            return;
        }
        stop(signal == SIGINT ? "SIGINT" : "SIGTERM");
    });
}

void Server::reload() {
    // Reading the file may block (a network file system): on a worker, not
    // on the loop that serves clients; applied back on the loop, unless a
    // later SIGHUP's load is on its way.
    const auto generation = ++m_reload_generation;
    asio::post(m_blocking, [this, generation] {
        auto loaded = std::make_shared<tl::expected<config::Loaded, config::ConfigError>>(
            config::load(m_reload_options, config::process_environment()));
        asio::post(m_io, [this, generation, loaded] {
            if (generation == m_reload_generation) {
                apply_reload(*loaded);
            }
        });
    });
}

void Server::apply_reload(const tl::expected<config::Loaded, config::ConfigError>& loaded) {
    auto& log = logger("daemon");
    if (!loaded) {
        log.error("SIGHUP: configuration not reloaded: {}", loaded.error().message);
        return;
    }
    const auto& fresh = loaded->config;
    const auto& old = m_context.config;
    // What the running tiers and threads were built with changes on restart only.
    const std::pair<bool, std::string_view> fixed[] = {
        {fs::absolute(fresh.socket_path).string() != old.socket_path, "daemon.socket"},
        {fresh.io_threads != old.io_threads, "daemon.io_threads"},
        {fresh.blocking_threads != old.blocking_threads, "daemon.blocking_threads"},
        {fresh.cache_dir != old.cache_dir, "disk.cache_dir"},
        {fresh.disk_max_size != old.disk_max_size, "disk.max_size"},
        {fresh.compress_threshold != old.compress_threshold, "disk.compress_threshold"},
        {fresh.compress_level != old.compress_level, "disk.compress_level"},
        {fresh.disk_small_entry_max != old.disk_small_entry_max, "disk.small_entry_max"},
        {fresh.disk_write_mode != old.disk_write_mode ||
             fresh.disk_write_queue_size != old.disk_write_queue_size,
         "disk.write_mode/write_queue_size"},
        {fresh.memory_max_size != old.memory_max_size, "memory.max_size"},
        {fresh.idle_exit_s != old.idle_exit_s, "daemon.idle_exit_s"},
        {fresh.max_connections != m_loaded.config.max_connections ||
             fresh.max_connections_per_process != old.max_connections_per_process,
         "daemon.max_connections/max_connections_per_process"},
        {fresh.resp_password != old.resp_password, "resp.password"},
        {fresh.metrics_listen != old.metrics_listen, "metrics.listen"},
        // The Redis pool and its queue were built from these.
        {fresh.redis_host != old.redis_host || fresh.redis_port != old.redis_port ||
             fresh.redis_unix_socket != old.redis_unix_socket || fresh.redis_db != old.redis_db,
         "remote.url/host/port/unix_socket/db"},
        {fresh.redis_username != old.redis_username || fresh.redis_password != old.redis_password,
         "remote.username/password"},
        {fresh.remote_connect_timeout_ms != old.remote_connect_timeout_ms ||
             fresh.remote_op_timeout_ms != old.remote_op_timeout_ms,
         "remote.connect_timeout_ms/op_timeout_ms"},
        {fresh.remote_pool_size != old.remote_pool_size, "remote.pool_size"},
        {fresh.write_behind_queue_bytes != old.write_behind_queue_bytes,
         "remote.write_behind_queue_bytes"},
        {fresh.remote_max_value_size != old.remote_max_value_size, "remote.max_value_size"},
        {fresh.redis_expire_s != old.redis_expire_s, "remote.expire_s"},
        {fresh.remote_cluster != old.remote_cluster ||
             fresh.remote_cluster_nodes != old.remote_cluster_nodes ||
             fresh.remote_read_from_replicas != old.remote_read_from_replicas,
         "remote.cluster/cluster_nodes/read_from_replicas"},
        {fresh.redis_tls != old.redis_tls || fresh.redis_tls_ca_file != old.redis_tls_ca_file ||
             fresh.redis_tls_cert_file != old.redis_tls_cert_file ||
             fresh.redis_tls_key_file != old.redis_tls_key_file ||
             fresh.redis_tls_server_name != old.redis_tls_server_name ||
             fresh.redis_tls_verify != old.redis_tls_verify,
         "remote.tls*"},
        {fresh.remote_signing_key_file != old.remote_signing_key_file, "remote.signing_key_file"},
        {fresh.remote_enabled && m_context.store->remote_tier() == nullptr,
         "remote caching (no remote tier was started)"},
    };
    for (const auto& [changed, name] : fixed) {
        if (changed) {
            log.warn("SIGHUP: {} changed in the configuration but takes effect only on restart",
                     name);
        }
    }
    set_log_level(fresh.log_level);
    m_context.max_value = fresh.max_value_size;
    m_context.inflight.set_limit(fresh.max_inflight_bytes);
    m_context.max_reply_bytes = fresh.max_reply_bytes;
    m_context.reads->set_limit(fresh.max_reply_bytes);
    m_context.store->set_policy(store_policy(fresh));
    set_bundle_timeout(fresh.bundle_idle_timeout_s);
    for (const auto& warning : loaded->warnings) {
        log.warn("{}", warning);
    }
    log.info("configuration reloaded from {}",
             loaded->config_file.empty() ? "defaults and environment" : loaded->config_file);
}

void Server::stop(std::string_view why) {
    if (m_context.stopping.exchange(true)) {
        return;
    }
    logger("daemon").info("{}: stopping; finishing requests in flight", why);
    ::sd_notify(0, "STOPPING=1");
    boost::system::error_code ignored;
    m_acceptor.close(ignored);
    m_signals.cancel(ignored);
    if (m_metrics) {
        m_metrics->stop();
    }
    m_idle_timer.cancel();
    m_bundle_timer.cancel();
    m_watchdog.stop();
    m_registry.shutdown_reads();
    m_drain_timer.expires_after(k_drain_deadline);
    m_drain_timer.async_wait([this](const boost::system::error_code& ec) {
        if (!ec) {
            logger("daemon").warn("{} connections still busy after {} s; exiting anyway",
                                  m_registry.size(), k_drain_deadline.count());
            // Workers join before exit: a remote GET still receiving must stop.
            if (auto* remote = m_context.store ? m_context.store->remote_tier() : nullptr) {
                remote->abandon_requests();
            }
            m_io.stop();
            for (auto& loop : m_loops) {
                loop->stop();
            }
        }
    });
    // The drain timer must not keep the daemon up once the connections are
    // gone: poll the registry and cancel it then.
    asio::co_spawn(
        m_io,
        [this]() -> awaitable<void> {
            asio::steady_timer poll(co_await asio::this_coro::executor);
            while (m_registry.size() > 0) {
                poll.expires_after(std::chrono::milliseconds(5));
                co_await poll.async_wait(use_awaitable);
                m_registry.shutdown_reads();
            }
            m_drain_timer.cancel();
        },
        asio::detached);
}

void Server::arm_idle_timer() {
    const auto idle_s = m_context.config.idle_exit_s;
    if (idle_s == 0) {
        return;
    }
    m_idle_timer.expires_after(std::chrono::seconds(1));
    m_idle_timer.async_wait([this, idle_s](const boost::system::error_code& ec) {
        if (ec || m_context.stopping) {
            return;
        }
        const auto idle_ms = store::now_ms() - m_context.last_activity_ms.load();
        if (m_registry.size() == 0 && idle_ms >= static_cast<std::int64_t>(idle_s) * 1000) {
            stop(fmt::format("idle for {} s", idle_s));
            return;
        }
        arm_idle_timer();
    });
}

void Server::set_bundle_timeout(unsigned seconds) {
    m_bundle_timeout_s = seconds;
    m_context.bundles.set_idle_timeout(std::chrono::seconds(seconds));
}

// Tokens expire on their next use anyway; the sweep frees abandoned bundles.
void Server::arm_bundle_sweep() {
    m_bundle_timer.expires_after(std::chrono::seconds(std::min(m_bundle_timeout_s.load(), 10u)));
    m_bundle_timer.async_wait([this](const boost::system::error_code& ec) {
        if (ec || m_context.stopping) {
            return;
        }
        if (const auto expired = m_context.bundles.expire()) {
            logger("bundle").info("{} bundles expired after {} s without use", expired,
                                  m_bundle_timeout_s.load());
        }
        arm_bundle_sweep();
    });
}

} // namespace

int run_server(config::Loaded loaded, config::LoadOptions reload_options) {
    std::signal(SIGPIPE, SIG_IGN);
    Server server(std::move(loaded), std::move(reload_options));
    return server.run();
}

} // namespace pt2cache::daemon
