// SPDX-License-Identifier: MIT
//
// libpt2cache: the C++ client of pt2cached's native protocol
// (docs/protocol.md), over blocking POSIX Unix sockets.
//
// A cache must never make a compiler fail. Every call returns either a result
// or an Error, never throws for I/O, and callers treat ANY Error as a miss (GET,
// EXISTS) or as "not stored" (PUT, DEL): log it if you like, then carry on
// compiling. When the daemon is absent or dies, the connection is dropped and
// for `Options::retry_after` every call fails fast with ErrorKind::unreachable
// without touching the network; after that the next call reconnects
// transparently.
//
// This header is installed as <pt2cache/client.hpp> and includes no other
// header of the project. C callers use <pt2cache/pt2cache.h>.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

#include <tl/expected.hpp>

namespace pt2cache::proto {
enum class Op : std::uint8_t; // proto/frame.hpp; named here only by private members
} // namespace pt2cache::proto

namespace pt2cache::client {

struct Options {
    // Empty: config::default_socket_path(config::process_environment()), that
    // is $XDG_RUNTIME_DIR/pt2cache/pt2cached.sock or
    // /tmp/pt2cache-$UID/pt2cached.sock.
    std::string socket_path;
    // Bounds connect() plus the HELLO handshake.
    std::chrono::milliseconds connect_timeout{1000};
    // Bounds each call once connected, from its first byte written to its
    // last byte read.
    std::chrono::milliseconds io_timeout{10000};
    // After a failure that drops the connection, calls fail fast with
    // ErrorKind::unreachable until this much time has passed, then reconnect.
    std::chrono::milliseconds retry_after{2000};
    // Sent in HELLO; the daemon logs it.
    std::string client_name = "libpt2cache";
};

enum class ErrorKind {
    unreachable, // no daemon, connection refused or lost, or fail-fast after a failure
    timeout,     // connect_timeout or io_timeout passed
    protocol,    // the daemon sent something this client cannot accept
    server,      // the daemon answered an error status (see Error::status)
};

// The wire status codes of docs/protocol.md, "Status codes" (same values as
// proto::Status, repeated here so that this header stands alone).
enum class Status : std::uint8_t {
    ok = 0x00,
    miss = 0x01,
    not_stored = 0x02,
    malformed = 0x10,
    version_mismatch = 0x11,
    unknown_op = 0x12,
    key_too_long = 0x13,
    value_too_large = 0x14,
    bad_namespace = 0x15,
    handshake_required = 0x16,
    storage_error = 0x17,
    unknown_token = 0x18,
    internal = 0x19,
    busy = 0x1A, // no room in the daemon's in-flight budget; try again
};

// "OK", "MISS", "KEY_TOO_LONG"...
std::string_view status_name(Status status);

struct Error {
    ErrorKind kind;
    // For ErrorKind::server, the status the daemon answered. Arguments that
    // would be refused (bad namespace, empty or too long key, too large value)
    // are checked before anything is sent and reported as the server error the
    // daemon would answer, without dropping the connection.
    Status status = Status::internal;
    std::string message; // one line, names the socket or the daemon's message
};

// "unreachable", "timeout", "protocol" or "server".
std::string_view kind_name(ErrorKind kind);

struct PutOptions {
    std::chrono::milliseconds ttl{0}; // 0: no expiry
    bool only_if_absent = false;      // store only if no live entry exists
    // A token of Client::bundle_begin: the entry joins that bundle
    // (docs/protocol.md, "Bundles").
    std::optional<std::uint64_t> bundle_token;
};

// What BUNDLE_BEGIN answers.
struct BundleBegin {
    std::uint64_t token = 0;         // for get, put and bundle_end, from any process
    bool hit = false;                // the bundle existed and was restored
    std::uint32_t entries = 0;       // best-configs restored into the local tiers
    std::uint64_t time_saved_ms = 0; // the sum of their time_taken_ms
};

using Bytes = std::vector<std::byte>;

// What HASH_FILES answers for one path (docs/protocol.md, "Hashing files"); the
// same values as proto::FileStatus, repeated so that this header stands alone.
enum class FileStatus : std::uint8_t {
    ok = 0,
    not_found = 1,
    not_regular = 2,
    too_large = 3,
    unreadable = 4,
    skipped = 5,
};

struct FileHash {
    FileStatus status = FileStatus::unreadable;
    std::uint64_t size = 0;
    // XXH3-128 of the content, canonical (big-endian) byte order.
    std::array<std::byte, 16> hash{};
};

// CXX_LOOKUP (docs/protocol.md, "Compile-cache lookup"): what the daemon
// found for a pt2cache-cxx common key. Same values as proto::cxx::LookupOutcome.
enum class CxxOutcome : std::uint8_t {
    no_manifest = 0,
    no_match = 1,
    hit = 2,
    undecided = 3, // the daemon could not hash every input: match the manifest yourself
};

struct CxxRule {
    std::string placeholder; // e.g. "@PT2_SRCDIR@"
    std::string directory;   // absolute
};

struct CxxLookup {
    CxxOutcome outcome = CxxOutcome::no_manifest;
    Bytes body; // the reply body: manifest() and result() are parts of it
    std::size_t manifest_offset = 0;
    std::size_t manifest_size = 0;
    std::size_t result_offset = 0;

    std::span<const std::byte> manifest() const {
        return std::span(body).subspan(manifest_offset, manifest_size);
    }
    std::span<const std::byte> result() const { return std::span(body).subspan(result_offset); }
};

struct ListEntry {
    std::string key;
    std::uint64_t size = 0;
    std::uint64_t mtime_ms = 0; // milliseconds since the Unix epoch
};

struct ListPage {
    std::vector<ListEntry> entries;
    std::string next_cursor; // empty: the listing is complete
};

// An entry as SCAN lists it (docs/protocol.md, "Export and import").
struct ScanEntry {
    std::string ns;
    std::string key;
    std::uint64_t size = 0;
    std::uint64_t created_ms = 0; // milliseconds since the Unix epoch
    std::uint64_t expires_ms = 0; // 0: never
};

struct ScanPage {
    std::vector<ScanEntry> entries;
    std::string next_cursor; // empty: the scan is complete
};

// What DUMP answers.
struct DumpedEntry {
    std::uint64_t created_ms = 0;
    std::uint64_t expires_ms = 0; // 0: never
    Bytes value;
};

// One connection to pt2cached, opened on the first call. Not thread-safe: use
// one Client per thread, or lock around it. After fork() the child drops the
// inherited connection and opens its own.
class Client {
public:
    explicit Client(Options options = {});
    ~Client();
    Client(Client&& other) noexcept;
    Client& operator=(Client&& other) noexcept;
    Client(const Client&) = delete;
    Client& operator=(const Client&) = delete;

    // Connects and performs the HELLO handshake unless already connected.
    // Other calls do this themselves; calling it is optional. A daemon that
    // speaks another protocol version gives ErrorKind::protocol with a message
    // naming both versions.
    tl::expected<void, Error> connect();

    // The value, or std::nullopt on a miss (including an expired entry). With
    // `bundle_token`, a hit joins that bundle (docs/protocol.md, "Bundles").
    tl::expected<std::optional<Bytes>, Error>
    get(std::string_view ns, std::string_view key,
        std::optional<std::uint64_t> bundle_token = std::nullopt);

    // GETs of all `keys`, pipelined on the one connection (io_timeout bounds
    // the wait for each reply); result i answers keys[i]. Any failure fails
    // the whole call.
    tl::expected<std::vector<std::optional<Bytes>>, Error>
    get_many(std::string_view ns, std::span<const std::string> keys);

    // True when stored; false when `options.only_if_absent` found a live
    // entry (NOT_STORED). The value is sent straight from `value`, uncopied.
    tl::expected<bool, Error> put(std::string_view ns, std::string_view key,
                                  std::span<const std::byte> value, PutOptions options = {});

    // True when a live entry exists.
    tl::expected<bool, Error> exists(std::string_view ns, std::string_view key);

    // True when an entry existed and was removed.
    tl::expected<bool, Error> remove(std::string_view ns, std::string_view key);

    // The STATS reply, a JSON object (schema: docs/operations.md).
    tl::expected<std::string, Error> stats_json();
    // STATS with `flags` (proto::stats_flag: zero, prometheus): the reply body.
    tl::expected<std::string, Error> stats(std::uint8_t flags);

    // One page of the entries of `ns` on disk. Start with an empty `cursor`,
    // then pass the previous page's next_cursor until it comes back empty.
    // `limit` is capped at 10,000 by the daemon.
    tl::expected<ListPage, Error> list(std::string_view ns, std::string_view cursor = {},
                                       std::uint32_t limit = 1000);

    // Export and import (docs/protocol.md, "Export and import";
    // export_operations.cpp). One page of the disk tier's entries in
    // `namespaces` (empty: all; at most 64) created at or after `since_ms`
    // (0: all); start with an empty cursor, then pass next_cursor until it
    // comes back empty. A page may be empty before the end.
    tl::expected<ScanPage, Error> scan(std::string_view cursor, std::uint32_t limit,
                                       std::uint64_t since_ms,
                                       std::span<const std::string> namespaces = {});
    // The entry in the daemon's local tiers, without side effects there.
    tl::expected<std::optional<DumpedEntry>, Error> dump(std::string_view ns, std::string_view key);
    // Stores an entry with its times in the local tiers. False (NOT_STORED)
    // when, without `replace`, a live entry at least as recent exists, or it
    // could not be stored there (expired, namespace not cached locally).
    tl::expected<bool, Error> restore(std::string_view ns, std::string_view key,
                                      std::uint64_t created_ms, std::uint64_t expires_ms,
                                      std::span<const std::byte> value, bool replace);

    // Removes every entry of `ns`; returns how many were removed.
    tl::expected<std::uint64_t, Error> clear(std::string_view ns);

    // Starts (or, on a hit, restores) the bundle of autotune best-configs of
    // one compiled module: `code_hash` is Inductor's hash of the
    // comment-stripped module code, `backend_hash` Triton's backend hash. On a
    // hit the daemon has written every best-config into its local tiers.
    // Either way, gets and puts with the token join the bundle until
    // bundle_end. A daemon without the BUNDLE capability gives
    // Error{server, unknown_op} without anything being sent.
    tl::expected<BundleBegin, Error> bundle_begin(std::string_view code_hash,
                                                  std::string_view backend_hash);

    // Closes `token`: stores the bundle if it collected entries and did not
    // exist; returns how many entries were stored (0 when none were). An
    // unknown, expired or already ended token is Error{server, unknown_token}.
    tl::expected<std::uint32_t, Error> bundle_end(std::uint64_t token);

    // Content hashes of `paths` (absolute, at most 4,096 of at most 4,096
    // bytes each), read by the daemon through its (path, stat) → hash cache;
    // result i answers paths[i]. A daemon without the HASH_FILES capability
    // gives Error{server, unknown_op} without anything being sent.
    tl::expected<std::vector<FileHash>, Error> hash_files(std::span<const std::string> paths);

    // A pt2cache-cxx lookup in one request: the manifest of `common_key`,
    // its inputs hashed with `rules` expanding their placeholders, and the
    // result of the first matching variant. A daemon without the CXX_LOOKUP
    // capability gives Error{server, unknown_op} without anything being sent.
    tl::expected<CxxLookup, Error> cxx_lookup(std::string_view common_key,
                                              std::span<const CxxRule> rules);

    // The round-trip time of one PING (connecting first if needed, which is
    // not counted).
    tl::expected<std::chrono::microseconds, Error> ping();

    // The socket this client connects to (Options::socket_path or the default).
    const std::string& socket_path() const;

    // Whether a connection is open now.
    bool connected() const { return m_fd >= 0; }

    // What the daemon announced in HELLO; meaningful once connected.
    std::uint64_t max_value() const { return m_max_value; }
    std::uint32_t capabilities() const { return m_capabilities; }
    const std::string& server_name() const { return m_server_name; }

private:
    struct Reply {
        Status status;
        Bytes body;
    };
    // A `max_body` meaning "up to the max_value the daemon announced".
    static constexpr std::uint64_t k_up_to_max_value = ~std::uint64_t{0};

    // Clears m_out for the next request frame and returns its id.
    std::uint32_t begin_request();
    // Connects if needed (or fails fast), sends the request frame in m_out
    // with `tail` gathered behind it (uncopied), and reads its reply, whose
    // OK body may be at most `max_body` bytes. Error statuses come back as
    // Error{server}.
    tl::expected<Reply, Error> round_trip(proto::Op op, std::uint32_t id,
                                          std::span<const std::byte> tail = {},
                                          std::uint64_t max_body = 0);

    tl::expected<void, Error> ensure_connected();
    tl::expected<void, Error> handshake(std::chrono::steady_clock::time_point deadline);
    tl::expected<void, Error> send(std::span<const std::byte> head, std::span<const std::byte> tail,
                                   std::chrono::steady_clock::time_point deadline);
    tl::expected<void, Error> receive(std::span<std::byte> out,
                                      std::chrono::steady_clock::time_point deadline);
    // Reads a reply body of `length` bytes into `body`.
    tl::expected<void, Error> receive_body(Bytes& body, std::uint64_t length,
                                           std::chrono::steady_clock::time_point deadline);
    // The error for a refusal line ("-ERR max number of clients reached")
    // whose first bytes are `head`.
    Error refusal(std::span<const std::byte> head);
    tl::expected<Reply, Error> read_reply(proto::Op op, std::uint32_t id, std::uint64_t max_body,
                                          std::chrono::steady_clock::time_point deadline);
    tl::expected<void, Error> check_key(std::string_view ns, std::string_view key) const;
    tl::expected<bool, Error> key_op(proto::Op op, std::string_view ns, std::string_view key);
    // Connects, then fails unless the daemon offers bundles.
    tl::expected<void, Error> check_bundles();

    // Closes the connection, keeping the retry time.
    void drop();
    // Records a failure that leaves the connection unusable: drops it and
    // makes calls fail fast until retry_after has passed. Returns `error`.
    Error fail(Error error);

    Options m_options;
    int m_fd = -1;
    pid_t m_pid = 0; // the process that opened m_fd
    std::uint32_t m_next_id = 1;
    Bytes m_out; // the request being sent
    std::chrono::steady_clock::time_point m_retry_at{};
    std::string m_last_failure; // why the last connection was dropped
    std::uint64_t m_max_value = 0;
    std::uint32_t m_capabilities = 0;
    std::string m_server_name;
    // Received bytes; m_in[m_in_pos, m_in_end) are not consumed yet.
    Bytes m_in;
    std::size_t m_in_pos = 0;
    std::size_t m_in_end = 0;
};

} // namespace pt2cache::client
