// SPDX-License-Identifier: MIT
//
// RedisTier's flusher threads: the probe that (re)connects and detects a
// cluster, and the writes behind the queue (redis_tier.hpp).
#include <algorithm>
#include <thread>

#include "daemon/store/log.hpp"
#include "daemon/store/remote/redis_tier.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace pt2cache::daemon::store {

namespace {

void add(std::atomic<std::uint64_t>& counter) {
    counter.fetch_add(1, std::memory_order_relaxed);
}

// Connectivity failures a queued write survives (it waits in the queue while
// Redis is unreachable; these are failures of writes tried while it seemed up).
constexpr unsigned k_write_attempts = 3;
// A queued delete refused with a transient error (-BUSY, -LOADING ...) is
// tried again after a pause, for five minutes of such refusals (a Redis
// loading a large dump answers -LOADING that long; counted by refusals, two
// flushers gave up after 31 s: a review).
constexpr std::chrono::minutes k_delete_refusal_window{5};
constexpr Milliseconds k_refusal_pause{100};

} // namespace

void RedisTier::probe() {
    const auto admission = m_breaker.admit();
    if (admission == Admission::refused) {
        return;
    }
    switch (m_mode.load()) {
    case Mode::unknown:
        detect_mode(admission);
        return;
    case Mode::cluster: {
        // Connected once a node answers CLUSTER SLOTS.
        auto refreshed = m_cluster->refresh(&m_abort);
        if (refreshed) {
            m_breaker.success(admission);
            on_success();
        } else if (refreshed.error().kind == RedisErrorKind::aborted ||
                   refreshed.error().kind == RedisErrorKind::exhausted) {
            m_breaker.release(admission); // stopping, or the other flusher is asking

        } else {
            // The cluster counted the protocol errors of the nodes it asked.
            count_failure(refreshed.error(), true);
            if (refreshed.error().kind == RedisErrorKind::reply) {
                // E.g. remote.cluster = true on a Redis that is not a cluster:
                // no connectivity failure, so say why the tier stays connecting.
                if (const auto suppressed = m_topology_log.take()) {
                    remote_logger().warn("Redis cluster topology not loaded: {}",
                                         refreshed.error().message);
                }
            }
            on_failure(refreshed.error(), admission);
        }
        return;
    }
    case Mode::single: {
        const RedisCommand command{{"PING"}, {RedisReply::Type::status}};
        // Failures are counted and logged by execute.
        (void)execute(m_write_pool, std::span(&command, 1), admission, &m_abort);
        return;
    }
    }
}

void RedisTier::detect_mode(Admission admission) {
    const RedisCommand command{{"INFO", "cluster"}, {RedisReply::Type::string}};
    auto replies = execute(m_write_pool, std::span(&command, 1), admission, &m_abort);
    if (!replies) {
        return; // counted, logged and fed to the breaker by execute; probed again
    }
    const RedisReply& reply = *replies->front();
    const bool cluster = reply.type == RedisReply::Type::string &&
                         reply.text().find("cluster_enabled:1") != std::string_view::npos;
    if (reply.type == RedisReply::Type::error) {
        // A refusal (an ACL without INFO, a proxy without it) decides; a
        // Redis still loading, busy or without its master does not yet.
        const auto text = reply.text();
        if (!text.starts_with("NOPERM") && !text.starts_with("ERR")) {
            if (const auto left_out = m_topology_log.take()) {
                remote_logger().warn("Redis at {} answered INFO cluster with {:?}: asking again{}",
                                     m_options.endpoint.describe(), text, left_out_note(*left_out));
            }
            return; // the mode stays unknown: the next probe asks again
        }
        remote_logger().warn("Redis at {} refused INFO cluster ({}): not using cluster mode "
                             "(set remote.cluster = true if it is a cluster)",
                             m_options.endpoint.describe(), text);
    }
    if (cluster) {
        remote_logger().info("Redis at {} is a cluster node: cluster mode",
                             m_options.endpoint.describe());
        // Keys route by the topology from now on (loaded by a flusher next).
        m_write_pool.drop_idle();
        m_cluster->request_refresh();
    }
    m_mode = cluster ? Mode::cluster : Mode::single;
    on_success();
}

void RedisTier::write(WriteItem item) {
    std::vector<RedisCommand> commands;
    std::array<std::string, 2> companion;
    std::string ttl;
    if (item.erase) {
        commands.push_back({{"DEL", item.key}, {RedisReply::Type::integer}});
        if (m_options.signer) {
            companion[0] = signature_key(item.key);
            commands.push_back({{"DEL", companion[0]}, {RedisReply::Type::integer}});
        }
    } else {
        RedisCommand command{{"SET", item.key, item.value.text()}, {RedisReply::Type::status}};
        if (item.ttl_ms > 0) {
            // Whole seconds as Inductor sends them (EX); otherwise milliseconds.
            const bool seconds = item.ttl_ms % 1000 == 0;
            ttl = std::to_string(seconds ? item.ttl_ms / 1000 : item.ttl_ms);
            command.args.push_back(seconds ? "EX" : "PX");
            command.args.push_back(ttl);
        }
        commands.push_back(std::move(command));
        if (m_options.signer) {
            add_signature(commands, companion);
        }
    }
    const Route route = item.erase ? Route::erase : Route::write;
    auto replies = companion_elsewhere(item.key)
                       ? run_each({item.key, companion[0]}, commands, route, &m_abort)
                       : run_keyed(item.key, commands, route, &m_abort);
    if (!replies && replies.error().kind == RedisErrorKind::suspended) {
        // Suspended meanwhile (in a cluster: the key's node): the entry waits
        // for the end of the cool-down; in a cluster behind the other nodes'
        // entries, which go on (at the head, the flusher took it again and
        // again, and no node's writes went out).
        const bool cluster = cluster_active();
        if (!m_queue.requeue(std::move(item), cluster)) {
            add(m_counters.queue_drops);
        }
        if (cluster) {
            // Not retried in a tight loop when only its node's entries are left.
            std::this_thread::sleep_for(Milliseconds(5));
        }
        update_gauges();
        return;
    }
    if (replies) {
        const auto refused = std::find_if(replies->begin(), replies->end(), [&](const auto& reply) {
            return item.erase ? reply->type != RedisReply::Type::integer : !reply->is_ok();
        });
        if (refused == replies->end()) {
            add(m_counters.written);
            m_queue.finished(item.key);
        } else {
            add(m_counters.errors);
            log_refused_write(item, (*refused)->text());
            const auto now = SteadyClock::now();
            const bool transient = item.erase && (*refused)->is_transient_error();
            if (transient && item.refused_since == SteadyClock::time_point{}) {
                item.refused_since = now;
            }
            if (transient && now - item.refused_since < k_delete_refusal_window) {
                // Dropped, Redis kept the deleted value for good (a review:
                // -BUSY while a script ran).
                if (!m_queue.requeue(std::move(item), true)) {
                    add(m_counters.queue_drops);
                }
                std::this_thread::sleep_for(k_refusal_pause);
            } else if (item.erase) {
                // Sent again, it would be refused again: Redis keeps the value.
                add(m_counters.queue_drops);
                remote_logger().warn("DEL {:?} given up after Redis refused it: {}", item.key,
                                     (*refused)->text());
                m_queue.finished(item.key);
            } else {
                (void)m_queue.abandon(item); // the delete it carries goes on
            }
        }
    } else if (replies.error().kind == RedisErrorKind::aborted) {
        add(m_counters.shutdown_drops);
        m_queue.finished(item.key);
    } else if ((item.erase || item.attempts + 1 < k_write_attempts) &&
               replies.error().connectivity()) {
        // A delete is tried until Redis takes it (requeue keeps a delete
        // even without room; only drop_oldest may still drop it).
        ++item.attempts;
        if (!m_queue.requeue(std::move(item))) {
            add(m_counters.queue_drops);
        }
    } else {
        add(m_counters.queue_drops);
        remote_logger().debug("{} {:?} given up: {}", item.erase ? "DEL" : "SET", item.key,
                              replies.error().message);
        if (item.erase) {
            m_queue.finished(item.key); // not a failure that waiting mends
        } else {
            // The delete it carries goes on. Whether Redis ran the SET is not
            // known (a timeout after sending it): the delete may then remove
            // it from Redis, a miss there, never the value deleted before.
            (void)m_queue.abandon(item);
        }
    }
    update_gauges();
}

void RedisTier::log_refused_write(const WriteItem& item, std::string_view reason) {
    // A full Redis (-OOM) refuses every write: one line per 10 s is enough.
    const auto suppressed = m_refusal_log.take();
    if (!suppressed) {
        return;
    }
    remote_logger().warn("Redis refused {} {:?} ({} bytes): {}{}", item.erase ? "DEL" : "SET",
                         item.key, item.value.size(), reason,
                         *suppressed == 0
                             ? std::string()
                             : fmt::format(" ({} more refusals not logged)", *suppressed));
}

void RedisTier::flusher_loop() {
    while (!m_abort) {
        const auto now = SteadyClock::now();
        const auto breaker = m_breaker.snapshot();
        if (breaker.state == CircuitBreaker::State::open && now < breaker.open_until) {
            if (m_stopping) {
                break; // suspended: the rest is dropped at the shutdown deadline
            }
            m_queue.wait(breaker.open_until);
            continue;
        }
        if (breaker.state == CircuitBreaker::State::half_open) {
            // Another thread's probe is out. (Not m_queue.wait: it returns at
            // once after close.)
            std::this_thread::sleep_for(Milliseconds(20));
            continue;
        }
        // While Redis is not known to work, the flushers test it (so that the
        // tier resumes without waiting for traffic) and the queued writes
        // wait: an outage drops only what no longer fits the queue.
        if (!m_stopping && state() != RemoteState::connected) {
            probe();
            if (state() != RemoteState::connected) {
                m_queue.wait(SteadyClock::now() + m_options.probe_interval);
            }
            continue;
        }
        if (cluster_active() && m_cluster->refresh_due()) {
            (void)m_cluster->refresh(&m_abort); // on failure the old slot map stays
        }
        auto item = m_queue.pop(m_stopping ? now : now + Milliseconds(1000));
        if (!item) {
            if (m_stopping && m_queue.size() == 0) {
                break;
            }
            continue;
        }
        update_gauges();
        write(std::move(*item));
    }
    --m_running;
    m_queue.notify();
}

} // namespace pt2cache::daemon::store
